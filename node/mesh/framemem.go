package mesh

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/sync/semaphore"

	"github.com/meshnode/meshnode/node/wire"
)

// errNoFrameMemory refuses a frame that could never be given its memory,
// however long it waited.
var errNoFrameMemory = errors.New("mesh: frame larger than its memory budget")

// decodeCharge is what decoding one frame is charged: the most node/wire
// lets any frame take decoded (it refuses, before allocating, a frame whose
// estimate exceeds MaxDecodedBytes). The per-frame estimate is not exported,
// so every decode is charged the bound and, with the decoding share equal to
// it, frames are decoded one at a time node-wide, each in milliseconds.
const decodeCharge = wire.MaxDecodedBytes

// frameMemory is the node's budget for the frames peers send it (see
// Limits.FrameMemory): bodies being read and frames being decoded.
type frameMemory struct {
	bodies    *budget // bodies being read, from every connection
	strangers *budget // the part of bodies that connections not yet admitted hold together
	decoding  *budget // frames being decoded
}

func newFrameMemory(l Limits) frameMemory {
	bodies := l.FrameMemory - decodeCharge
	return frameMemory{
		bodies:    newBudget("frame memory", bodies),
		strangers: newBudget("frame memory of connections not yet admitted", bodies/2),
		decoding:  newBudget("decoding memory", decodeCharge),
	}
}

// budget is a weighted semaphore of bytes that keeps what it has handed
// out, and how many wait for more, on view.
type budget struct {
	what    string
	size    int64
	sem     *semaphore.Weighted
	held    atomic.Int64
	waiting atomic.Int32
}

func newBudget(what string, size int64) *budget {
	return &budget{what: what, size: size, sem: semaphore.NewWeighted(size)}
}

// acquire takes n bytes, waiting in turn (first come, first served) until
// they are free or ctx ends. n must not exceed the size.
func (b *budget) acquire(ctx context.Context, n int64) error {
	if !b.sem.TryAcquire(n) {
		b.waiting.Add(1)
		err := b.sem.Acquire(ctx, n)
		b.waiting.Add(-1)
		if err != nil {
			return fmt.Errorf("mesh: waiting for %d bytes of %s: %w", n, b.what, err)
		}
	}
	b.held.Add(n)
	return nil
}

func (b *budget) release(n int64) {
	b.held.Add(-n)
	b.sem.Release(n)
}

// take acquires n bytes from every budget in from, in order, or none: one
// that n can never fit is refused at once.
func take(ctx context.Context, n int64, from ...*budget) error {
	for _, b := range from {
		if n > b.size {
			return fmt.Errorf("%w: %d bytes, %s is %d", errNoFrameMemory, n, b.what, b.size)
		}
	}
	for i, b := range from {
		if err := b.acquire(ctx, n); err != nil {
			for _, got := range from[:i] {
				got.release(n)
			}
			return err
		}
	}
	return nil
}

// frameLease is the memory one frame holds: its body from reading until
// release, and its decoding once decodeWithin is called.
type frameLease struct {
	body     []*budget
	bodyN    int64
	decoding *budget
}

// release gives the frame's memory back; a second call does nothing.
func (l *frameLease) release() {
	for _, b := range l.body {
		b.release(l.bodyN)
	}
	if l.decoding != nil {
		l.decoding.release(decodeCharge)
	}
	*l = frameLease{}
}

// decodeWithin takes the decoding charge for the frame, waiting within ctx.
// The body stays held: it is live until decoding ends.
func (n *Node) decodeWithin(ctx context.Context, l *frameLease) error {
	if err := take(ctx, decodeCharge, n.mem.decoding); err != nil {
		return err
	}
	l.decoding = n.mem.decoding
	return nil
}

// readBody reads one frame from s, as wire.ReadFrame does, but takes the
// body's declared length from the node's frame memory before allocating or
// reading it: an admitted peer draws on its own share as well, a
// connection not yet admitted on its own share and on the strangers'. It
// waits for memory within ctx, and refuses at once a frame that could
// never fit. The lease holds the memory until released. It returns io.EOF,
// unwrapped, when the stream ends cleanly before a frame begins.
func (n *Node) readBody(ctx context.Context, pc *peerConn, s *quic.Stream) ([]byte, *frameLease, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("mesh: reading frame: %w", err)
	}
	defer bindReadDeadline(ctx, s)()
	var hdr [4]byte
	if got, err := io.ReadFull(s, hdr[:]); err != nil {
		if got == 0 && err == io.EOF && ctx.Err() == nil {
			return nil, nil, io.EOF
		}
		return nil, nil, readFailed(ctx, "length prefix", got, len(hdr), err)
	}
	size := binary.LittleEndian.Uint32(hdr[:])
	if size > wire.MaxControlFrameBytes {
		return nil, nil, &wire.FrameError{Kind: wire.ErrOversize, Field: "length prefix",
			Reason: fmt.Sprintf("declares %d bytes, limit %d", size, wire.MaxControlFrameBytes)}
	}
	from := []*budget{pc.peer.mem, n.mem.bodies}
	if !n.isAdmitted(pc.peer) {
		from = []*budget{pc.mem, n.mem.strangers, n.mem.bodies}
	}
	if err := take(ctx, int64(size), from...); err != nil {
		return nil, nil, err
	}
	l := &frameLease{body: from, bodyN: int64(size)}
	body := make([]byte, size)
	if got, err := io.ReadFull(s, body); err != nil {
		l.release()
		return nil, nil, readFailed(ctx, "body", got, int(size), err)
	}
	return body, l, nil
}

// readFailed classifies a failed read as wire does: the end of ctx, a
// stream that ended inside the frame (a protocol violation), or another
// stream error.
func readFailed(ctx context.Context, part string, got, want int, err error) error {
	cause := ctx.Err()
	if cause == nil && errors.Is(err, os.ErrDeadlineExceeded) {
		cause = context.DeadlineExceeded // the deadline can fire a moment before ctx says so
	}
	if cause != nil {
		return fmt.Errorf("mesh: reading %s: %w: %w", part, cause, err)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &wire.FrameError{Kind: wire.ErrTruncated, Field: part,
			Reason: fmt.Sprintf("stream ended after %d of %d bytes", got, want), Err: io.ErrUnexpectedEOF}
	}
	return fmt.Errorf("mesh: reading %s: %w", part, err)
}

// bindReadDeadline makes ctx govern reads from s until the returned
// release is called: its deadline becomes the stream's, and its
// cancellation moves the deadline to the past, unblocking a pending Read.
func bindReadDeadline(ctx context.Context, s *quic.Stream) (release func()) {
	if dl, ok := ctx.Deadline(); ok {
		s.SetReadDeadline(dl)
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		s.SetReadDeadline(time.Unix(1, 0))
		close(fired)
	})
	return func() {
		if !stop() {
			<-fired // let the cancelling set finish before clearing it
		}
		s.SetReadDeadline(time.Time{})
	}
}
