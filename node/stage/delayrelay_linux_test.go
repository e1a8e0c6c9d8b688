package stage

import (
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// delayRelay stands in for netem where the kernel has no sch_netem (this
// is common in VMs and containers without modules): a UDP relay that a
// node advertises instead of its own socket, which passes every datagram
// on, both ways, after a set delay. A connection between two nodes goes
// through exactly one relay (the one of the node that was dialled), so a
// delay of RTT/2 gives the pair that round-trip time.
//
// It delays in user space (sleeping, then spinning for the last
// spinWindow): on a loaded machine its delay jitters more than netem's
// would, the spinning takes CPU from the nodes' own work, and each
// datagram costs a copy and two context switches, which the figures with
// no added delay include as well.
type delayRelay struct {
	front  *net.UDPConn
	target *net.UDPAddr // the node's own socket
	local  net.IP       // the address back sockets bind
	delay  atomic.Int64 // nanoseconds, one way

	mu      sync.Mutex
	clients map[netip.AddrPort]*net.UDPConn
	closed  bool
	wg      sync.WaitGroup
}

// newDelayRelay listens on listen and relays to target.
func newDelayRelay(listen, target netip.AddrPort) (*delayRelay, error) {
	front, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(listen))
	if err != nil {
		return nil, err
	}
	r := &delayRelay{front: front, target: net.UDPAddrFromAddrPort(target), local: listen.Addr().AsSlice(),
		clients: map[netip.AddrPort]*net.UDPConn{}}
	r.wg.Add(1)
	go r.serve()
	return r, nil
}

func (r *delayRelay) addr() netip.AddrPort { return r.front.LocalAddr().(*net.UDPAddr).AddrPort() }

func (r *delayRelay) setDelay(d time.Duration) { r.delay.Store(int64(d)) }

// serve relays what clients send to the node, each client through its own
// back socket so that the node's answers can be told apart.
func (r *delayRelay) serve() {
	defer r.wg.Done()
	buf := make([]byte, 64<<10)
	queues := map[netip.AddrPort]*delayQueue{}
	defer func() {
		for _, q := range queues {
			q.close()
		}
	}()
	for {
		n, from, err := r.front.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		q := queues[from]
		if q == nil {
			back, err := net.DialUDP("udp", &net.UDPAddr{IP: r.local}, r.target)
			if err != nil {
				continue
			}
			r.mu.Lock()
			if r.closed {
				r.mu.Unlock()
				back.Close()
				return
			}
			r.clients[from] = back
			r.mu.Unlock()
			q = newDelayQueue(func(b []byte) { back.Write(b) })
			queues[from] = q
			r.wg.Add(1)
			go r.answers(back, from)
		}
		q.push(buf[:n], time.Duration(r.delay.Load()))
	}
}

// answers relays the node's datagrams on back to the client it serves.
func (r *delayRelay) answers(back *net.UDPConn, client netip.AddrPort) {
	defer r.wg.Done()
	q := newDelayQueue(func(b []byte) { r.front.WriteToUDPAddrPort(b, client) })
	defer q.close()
	buf := make([]byte, 64<<10)
	for {
		n, err := back.Read(buf)
		if err != nil {
			return
		}
		q.push(buf[:n], time.Duration(r.delay.Load()))
	}
}

func (r *delayRelay) close() {
	r.mu.Lock()
	r.closed = true
	for _, c := range r.clients {
		c.Close()
	}
	r.mu.Unlock()
	r.front.Close()
	r.wg.Wait()
}

// delayQueue sends datagrams in order, each once its time has come. The
// delay is the same for all (or changes rarely), so first in is first due.
type delayQueue struct {
	ch   chan delayed
	send func([]byte)
	done chan struct{}
}

// spinWindow is how long before a datagram is due its queue stops
// sleeping and spins.
const spinWindow = 2 * time.Millisecond

type delayed struct {
	at time.Time
	b  []byte
}

func newDelayQueue(send func([]byte)) *delayQueue {
	q := &delayQueue{ch: make(chan delayed, 4096), send: send, done: make(chan struct{})}
	go func() {
		defer close(q.done)
		for d := range q.ch {
			// Go's timers wake a millisecond or more late here (the
			// runtime's poller sleeps in whole milliseconds, and the
			// machine is loaded), which would add that to every hop:
			// sleep to within spinWindow of the time, then spin.
			if w := time.Until(d.at) - spinWindow; w > 0 {
				time.Sleep(w)
			}
			for time.Now().Before(d.at) {
				runtime.Gosched()
			}
			q.send(d.b)
		}
	}()
	return q
}

// push queues a copy of b; a full queue drops it, as a full qdisc would.
func (q *delayQueue) push(b []byte, d time.Duration) {
	select {
	case q.ch <- delayed{time.Now().Add(d), append([]byte(nil), b...)}:
	default:
	}
}

func (q *delayQueue) close() {
	close(q.ch)
	<-q.done
}
