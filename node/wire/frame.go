package wire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/protobuf/proto"
)

// frameHeaderLen is the size of the u32 little-endian length prefix.
const frameHeaderLen = 4

// readChunk is how much of a body ReadFrame reads before growing its
// buffer again, so that memory follows the bytes that actually arrive
// rather than a length a peer merely declared.
const readChunk = 64 << 10

// Deterministic output makes frames reproducible (golden files, the map in
// PeerAnnouncement); UseCachedSize reuses the Size computed for the cap check.
var marshalOptions = proto.MarshalOptions{Deterministic: true, UseCachedSize: true}

// AppendFrame appends m as one frame, [u32 LE length][protobuf], to dst. A
// message over MaxControlFrameBytes is refused with ErrOversize and dst is
// returned unchanged, so nothing of it can reach the wire.
func AppendFrame(dst []byte, m proto.Message) ([]byte, error) {
	size := proto.Size(m)
	if size > MaxControlFrameBytes {
		return dst, &FrameError{Kind: ErrOversize, Message: messageName(m),
			Reason: fmt.Sprintf("encodes to %d bytes, limit %d", size, MaxControlFrameBytes)}
	}
	start := len(dst)
	out := binary.LittleEndian.AppendUint32(dst, uint32(size))
	out, err := marshalOptions.MarshalAppend(out, m)
	if err != nil {
		return dst, &FrameError{Kind: ErrInvalidMessage, Message: messageName(m), Reason: "cannot encode", Err: err}
	}
	if got := len(out) - start - frameHeaderLen; got != size {
		// Only a message mutated concurrently gets here.
		return dst, &FrameError{Kind: ErrInvalidMessage, Message: messageName(m),
			Reason: fmt.Sprintf("encoded %d bytes after sizing %d; modified while encoding?", got, size)}
	}
	return out, nil
}

// AppendRawFrame appends body, already encoded, as one frame to dst, under
// the same limit as AppendFrame.
func AppendRawFrame(dst, body []byte) ([]byte, error) {
	if len(body) > MaxControlFrameBytes {
		return dst, &FrameError{Kind: ErrOversize, Field: "body",
			Reason: fmt.Sprintf("%d bytes, limit %d", len(body), MaxControlFrameBytes)}
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(body)))
	return append(dst, body...), nil
}

// AppendStreamOpen appends what opens a protobuf stream of type t: the type
// byte, then m as a frame. t must be Framed; on any error dst is returned
// unchanged.
func AppendStreamOpen(dst []byte, t StreamType, m proto.Message) ([]byte, error) {
	if !t.Framed() {
		return dst, &FrameError{Kind: ErrWrongStreamType, Field: "stream type",
			Reason: fmt.Sprintf("%v does not open with a protobuf frame", t)}
	}
	out, err := AppendFrame(append(dst, byte(t)), m)
	if err != nil {
		return dst, err
	}
	return out, nil
}

// ParseFrame parses one frame at the start of b and returns its body, which
// aliases b, and the number of bytes the frame took.
func ParseFrame(b []byte) (body []byte, n int, err error) {
	if len(b) < frameHeaderLen {
		return nil, 0, &FrameError{Kind: ErrTruncated, Field: "length prefix",
			Reason: fmt.Sprintf("%d of %d bytes", len(b), frameHeaderLen)}
	}
	size := binary.LittleEndian.Uint32(b)
	if size > MaxControlFrameBytes {
		return nil, 0, declaredOversize(size)
	}
	n = frameHeaderLen + int(size)
	if len(b) < n {
		return nil, 0, &FrameError{Kind: ErrTruncated, Field: "body",
			Reason: fmt.Sprintf("%d of %d bytes", len(b)-frameHeaderLen, size)}
	}
	return b[frameHeaderLen:n:n], n, nil
}

// ParseStreamOpen parses the start of a protobuf stream held in b: the type
// byte, which must be want, then one frame. It returns the frame's body,
// aliasing b, and the number of bytes both took.
func ParseStreamOpen(b []byte, want StreamType) (body []byte, n int, err error) {
	if len(b) == 0 {
		return nil, 0, &FrameError{Kind: ErrTruncated, Field: "stream type", Reason: "no bytes"}
	}
	if got := StreamType(b[0]); got != want {
		return nil, 0, &FrameError{Kind: ErrWrongStreamType, Field: "stream type",
			Reason: fmt.Sprintf("got %v, want %v", got, want)}
	}
	body, n, err = ParseFrame(b[1:])
	if err != nil {
		return nil, 0, err
	}
	return body, n + 1, nil
}

// ReadStreamType reads the byte that opens an accepted stream. A byte that
// is not Dispatchable (unknown, or the reserved 0x0b/0x0c) is returned with
// ErrWrongStreamType; deciding which dispatchable types it serves, and to
// whom, is the caller's business.
//
// ctx bounds the read as for ReadFrame.
func ReadStreamType(ctx context.Context, r io.Reader) (StreamType, error) {
	var b [1]byte
	if err := readFull(ctx, r, b[:], "stream type"); err != nil {
		return 0, err
	}
	t := StreamType(b[0])
	if !t.Dispatchable() {
		reason := "unknown"
		if t.Reserved() {
			reason = "reserved, never dispatched"
		}
		return t, &FrameError{Kind: ErrWrongStreamType, Field: "stream type",
			Reason: fmt.Sprintf("%v: %s", t, reason)}
	}
	return t, nil
}

// ReadFrame reads one frame from r and appends its body to dst (pass nil,
// or buf[:0] to reuse a buffer). It returns io.EOF, unwrapped, when r ends
// cleanly before a frame begins, and ErrTruncated when it ends inside one.
// A declared length over MaxControlFrameBytes fails with ErrOversize after
// reading only the 4-byte prefix and before allocating anything for the
// body.
//
// ctx bounds the read. When r has SetReadDeadline (quic-go streams,
// net.Conn), ReadFrame sets it from ctx's deadline, moves it to the past if
// ctx is cancelled, and clears it on return; the error then wraps ctx.Err().
// Any other reader cannot be interrupted inside Read, so ctx is only
// checked between reads.
func ReadFrame(ctx context.Context, r io.Reader, dst []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return dst, fmt.Errorf("wire: reading frame: %w", err)
	}
	if d, ok := r.(interface{ SetReadDeadline(time.Time) error }); ok {
		defer bindDeadline(ctx, d.SetReadDeadline)()
	}
	var hdr [frameHeaderLen]byte
	if n, err := io.ReadFull(r, hdr[:]); err != nil {
		if n == 0 && err == io.EOF && ctx.Err() == nil {
			return dst, io.EOF
		}
		return dst, readError(ctx, "length prefix", n, frameHeaderLen, err)
	}
	size := binary.LittleEndian.Uint32(hdr[:])
	if size > MaxControlFrameBytes {
		return dst, declaredOversize(size)
	}
	start := len(dst)
	for got := 0; got < int(size); {
		if err := ctx.Err(); err != nil {
			return dst[:start], fmt.Errorf("wire: reading frame body: %w", err)
		}
		// Grow geometrically, never past the declared size.
		step := min(int(size)-got, max(got, readChunk))
		buf := growLen(dst, step)
		n, err := io.ReadFull(r, buf[len(dst):])
		dst, got = buf[:len(dst)+n], got+n
		if err != nil {
			return dst[:start], readError(ctx, "body", got, int(size), err)
		}
	}
	return dst, nil
}

// WriteFrame writes m to w as one frame in a single Write. A message over
// MaxControlFrameBytes fails with ErrOversize before anything is written.
// ctx bounds the write through SetWriteDeadline when w has it.
func WriteFrame(ctx context.Context, w io.Writer, m proto.Message) error {
	b, err := AppendFrame(nil, m)
	if err != nil {
		return err
	}
	return writeAll(ctx, w, b)
}

// WriteStreamOpen writes the opening of a protobuf stream, the type byte
// and m's frame, in a single Write, under the rules of AppendStreamOpen and
// WriteFrame.
func WriteStreamOpen(ctx context.Context, w io.Writer, t StreamType, m proto.Message) error {
	b, err := AppendStreamOpen(nil, t, m)
	if err != nil {
		return err
	}
	return writeAll(ctx, w, b)
}

// WriteEncoded writes b, one or more frames already encoded (by
// AppendRawFrame, or a subprotocol's own codec on a SUBPROTOCOL stream),
// in a single Write, ctx bounding it as for WriteFrame.
func WriteEncoded(ctx context.Context, w io.Writer, b []byte) error {
	return writeAll(ctx, w, b)
}

func writeAll(ctx context.Context, w io.Writer, b []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("wire: writing frame: %w", err)
	}
	if d, ok := w.(interface{ SetWriteDeadline(time.Time) error }); ok {
		defer bindDeadline(ctx, d.SetWriteDeadline)()
	}
	if _, err := w.Write(b); err != nil {
		if cause := contextCause(ctx, err); cause != nil {
			return fmt.Errorf("wire: writing frame: %w: %w", cause, err)
		}
		return fmt.Errorf("wire: writing frame: %w", err)
	}
	return nil
}

func readFull(ctx context.Context, r io.Reader, b []byte, part string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("wire: reading %s: %w", part, err)
	}
	if d, ok := r.(interface{ SetReadDeadline(time.Time) error }); ok {
		defer bindDeadline(ctx, d.SetReadDeadline)()
	}
	if n, err := io.ReadFull(r, b); err != nil {
		return readError(ctx, part, n, len(b), err)
	}
	return nil
}

// bindDeadline makes ctx govern I/O through a stream's deadline setter until
// the returned release is called. Cancellation moves the deadline to the
// past, which unblocks a pending Read or Write at once.
func bindDeadline(ctx context.Context, set func(time.Time) error) (release func()) {
	if ctx.Done() == nil {
		return func() {}
	}
	// A failing setter means the stream is already closed; the I/O that
	// follows reports that better than we could here.
	if dl, ok := ctx.Deadline(); ok {
		_ = set(dl)
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = set(time.Unix(1, 0))
		close(fired)
	})
	return func() {
		if !stop() {
			<-fired // let the cancelling set finish before clearing it
		}
		_ = set(time.Time{})
	}
}

func readError(ctx context.Context, part string, got, want int, err error) error {
	if cause := contextCause(ctx, err); cause != nil {
		return fmt.Errorf("wire: reading %s: %w: %w", part, cause, err)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &FrameError{Kind: ErrTruncated, Field: part,
			Reason: fmt.Sprintf("stream ended after %d of %d bytes", got, want), Err: io.ErrUnexpectedEOF}
	}
	return fmt.Errorf("wire: reading %s: %w", part, err)
}

// contextCause returns the context error behind an I/O failure, if any. A
// deadline set from ctx can fire a moment before ctx itself reports it.
func contextCause(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	var timeout interface{ Timeout() bool }
	isTimeout := errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &timeout) && timeout.Timeout()
	if dl, ok := ctx.Deadline(); ok && isTimeout && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

func declaredOversize(size uint32) error {
	return &FrameError{Kind: ErrOversize, Field: "length prefix",
		Reason: fmt.Sprintf("declares %d bytes, limit %d", size, MaxControlFrameBytes)}
}

// growLen returns b extended by n bytes, reallocating only when b's
// capacity is short.
func growLen(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), len(b)+n)
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n]
}

func messageName(m proto.Message) string {
	return string(m.ProtoReflect().Descriptor().Name())
}
