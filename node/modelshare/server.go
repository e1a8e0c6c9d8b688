package modelshare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire/filewire"
)

// Bucket is a token bucket of bytes: Rate a second, up to Burst saved.
// One Bucket paces every transfer a node serves. It is safe for
// concurrent use.
type Bucket struct {
	rate  float64 // bytes per second
	burst float64
	now   func() time.Time
	sleep func(context.Context, time.Duration) error

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// NewBucket returns a bucket of rate bytes a second (≤ 0: unlimited)
// holding at most burst bytes, full. now and sleep are its clock (nil:
// the real one).
func NewBucket(rate, burst int64, now func() time.Time, sleep func(context.Context, time.Duration) error) *Bucket {
	if now == nil {
		now = time.Now
	}
	if sleep == nil {
		sleep = sleepCtx
	}
	return &Bucket{rate: float64(rate), burst: float64(max(burst, 1)), now: now, sleep: sleep, tokens: float64(max(burst, 1)), last: now()}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Wait takes n bytes from the bucket, waiting until it holds them. n may
// exceed the burst: the bucket then goes into debt, and later takers wait
// it off, so the long-run rate holds either way.
func (b *Bucket) Wait(ctx context.Context, n int) error {
	if b == nil || b.rate <= 0 {
		return ctx.Err()
	}
	b.mu.Lock()
	t := b.now()
	b.tokens = min(b.burst, b.tokens+t.Sub(b.last).Seconds()*b.rate)
	b.last = t
	b.tokens -= float64(n)
	wait := time.Duration(-b.tokens / b.rate * float64(time.Second))
	b.mu.Unlock()
	if wait <= 0 {
		return nil
	}
	return b.sleep(ctx, wait)
}

// Server serves meshnode-file/1 streams.
type Server struct {
	Catalog *Catalog
	// Allow says whether peer may be served (the node's mesh access
	// policy), and why not.
	Allow func(peer identity.EndpointID) error
	// Serving reports whether the node serves files now (serve_files).
	Serving func() bool
	// Limit paces the bytes every transfer sends; nil: unpaced.
	Limit *Bucket
	// ReadTimeout bounds the wait for a request (10s); WriteTimeout each
	// write of the file's bytes, against a peer that stops reading (30s).
	ReadTimeout, WriteTimeout time.Duration
	Logger                    *slog.Logger
}

// Stream is what a Server serves: a SUBPROTOCOL stream.
type Stream interface {
	io.ReadWriter
	SetWriteDeadline(time.Time) error
}

// chunk is how many bytes go per paced write.
const chunk = 256 << 10

// ServeStream answers the one request on s from peer. The caller closes s.
func (s *Server) ServeStream(ctx context.Context, peer identity.EndpointID, st Stream) {
	log := s.log().With("peer", peer.Short())
	rt := s.ReadTimeout
	if rt <= 0 {
		rt = 10 * time.Second
	}
	rctx, cancel := context.WithTimeout(ctx, rt)
	req, err := filewire.Read(rctx, st)
	cancel()
	if err != nil {
		log.Debug("file request unreadable", "err", err)
		s.reply(ctx, st, &filewire.Error{Code: filewire.CodeBad, Text: trim(err.Error())})
		return
	}
	if s.Serving != nil && !s.Serving() {
		s.reply(ctx, st, &filewire.Error{Code: filewire.CodeRefused, Text: "this node serves no model files to its peers (serve_files = false)"})
		return
	}
	if s.Allow != nil {
		if err := s.Allow(peer); err != nil {
			log.Info("file request refused by the mesh access policy", "err", err)
			s.reply(ctx, st, &filewire.Error{Code: filewire.CodeRefused, Text: trim(err.Error())})
			return
		}
	}
	switch m := req.(type) {
	case *filewire.List:
		files, err := s.Catalog.List(ctx)
		if err != nil {
			s.reply(ctx, st, &filewire.Error{Code: filewire.CodeInternal, Text: trim(err.Error())})
			return
		}
		if len(files) > filewire.MaxFiles {
			files = files[:filewire.MaxFiles]
		}
		s.reply(ctx, st, &filewire.Listing{Files: files})
	case *filewire.Get:
		s.serveGet(ctx, peer, st, m, log)
	default:
		s.reply(ctx, st, &filewire.Error{Code: filewire.CodeBad, Text: fmt.Sprintf("a %v is no request", req.Kind())})
	}
}

func (s *Server) serveGet(ctx context.Context, peer identity.EndpointID, st Stream, g *filewire.Get, log *slog.Logger) {
	f, file, err := s.Catalog.Open(ctx, g.Name, g.Weights)
	if err != nil {
		code := filewire.CodeInternal
		if errors.Is(err, ErrNotFound) {
			code = filewire.CodeNotFound
		}
		s.reply(ctx, st, &filewire.Error{Code: code, Text: trim(err.Error())})
		return
	}
	defer f.Close()
	if g.Offset > file.Size {
		s.reply(ctx, st, &filewire.Error{Code: filewire.CodeBad, Text: fmt.Sprintf("offset %d is past the end of %s (%d bytes)", g.Offset, file.Name, file.Size)})
		return
	}
	if err := s.reply(ctx, st, &filewire.Header{File: file, Offset: g.Offset}); err != nil {
		return
	}
	log.Info("serving a model file to a peer", "file", file.Name, "from", g.Offset, "size", file.Size)
	wt := s.WriteTimeout
	if wt <= 0 {
		wt = 30 * time.Second
	}
	buf := make([]byte, chunk)
	sent, off := int64(0), int64(g.Offset)
	for off < int64(file.Size) {
		n, err := f.ReadAt(buf[:min(int64(chunk), int64(file.Size)-off)], off)
		if n == 0 && err != nil {
			log.Warn("reading a model file for a peer", "file", file.Name, "err", err)
			return
		}
		if err := s.Limit.Wait(ctx, n); err != nil {
			return
		}
		st.SetWriteDeadline(time.Now().Add(wt))
		if _, err := st.Write(buf[:n]); err != nil {
			log.Info("a peer's file transfer ended early", "file", file.Name, "sent", sent, "err", err)
			return
		}
		off += int64(n)
		sent += int64(n)
	}
	st.SetWriteDeadline(time.Time{})
	log.Info("model file served to a peer", "file", file.Name, "bytes", sent)
}

// reply writes one message, bounded by the write timeout.
func (s *Server) reply(ctx context.Context, st Stream, m filewire.Message) error {
	wt := s.WriteTimeout
	if wt <= 0 {
		wt = 30 * time.Second
	}
	wctx, cancel := context.WithTimeout(ctx, wt)
	defer cancel()
	return filewire.Write(wctx, st, m)
}

func (s *Server) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// trim keeps an error's text within what an Error carries.
func trim(s string) string {
	if len(s) <= filewire.MaxErrorText {
		return s
	}
	s = s[:filewire.MaxErrorText]
	for len(s) > 0 && s[len(s)-1]&0xc0 == 0x80 {
		s = s[:len(s)-1]
	}
	if len(s) > 0 && s[len(s)-1] >= 0xc0 {
		s = s[:len(s)-1]
	}
	return s
}
