// Package netsim gives tests and benchmarks a link with latency: a stream
// whose writes arrive later, as across a network, without its bandwidth
// limit. It is for tests only.
package netsim

import (
	"bytes"
	"io"
	"net"
	"sync"
	"time"
)

// Delayed is a stream whose every write arrives at the stream below after
// the latency at the time of the write. A write returns at once, as a
// socket's does, and the writes arrive in order.
type Delayed struct {
	io.ReadWriteCloser
	latency func() time.Duration
	writes  chan delayedWrite
	done    chan struct{}
	once    sync.Once
}

type delayedWrite struct {
	due  time.Time
	data []byte
}

// Delay returns c with each write delayed by latency() (read at each
// write, so that a test may change it).
func Delay(c io.ReadWriteCloser, latency func() time.Duration) *Delayed {
	l := &Delayed{ReadWriteCloser: c, latency: latency, writes: make(chan delayedWrite, 1024), done: make(chan struct{})}
	go func() {
		for {
			select {
			case w := <-l.writes:
				time.Sleep(time.Until(w.due))
				if _, err := c.Write(w.data); err != nil {
					return
				}
			case <-l.done:
				return
			}
		}
	}()
	return l
}

// Write queues a copy of b to arrive after the latency.
func (l *Delayed) Write(b []byte) (int, error) {
	select {
	case l.writes <- delayedWrite{time.Now().Add(l.latency()), bytes.Clone(b)}:
		return len(b), nil
	case <-l.done:
		return 0, net.ErrClosed
	}
}

// Close closes the stream below; writes still queued are dropped.
func (l *Delayed) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.ReadWriteCloser.Close()
}
