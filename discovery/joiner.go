package discovery

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
)

// Mesh is what a Joiner needs of the node's mesh; *mesh.Node is one.
type Mesh interface {
	// Dial joins the node at addr, or confirms it is joined.
	Dial(ctx context.Context, addr mesh.EndpointAddr) (mesh.Peer, error)
	// Peer reports whether id is an admitted peer.
	Peer(id identity.EndpointID) (mesh.Peer, bool)
}

// JoinerConfig tunes a Joiner. Zero fields take the defaults shown.
type JoinerConfig struct {
	// LANOnly dials only LAN addresses (see IsLAN): a peer is offered or
	// kept with its other addresses removed, and dropped if none is left.
	LANOnly bool
	// MinBackoff is the wait after a first failed dial (1s); each further
	// failure doubles it, up to MaxBackoff (1m). Each wait is varied by
	// up to ±20% so that nodes restarted together do not dial in step.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// Check is how often a joined peer is checked to be still admitted (5s).
	Check time.Duration
	// DialTimeout bounds one dial: handshake and first gossip (15s).
	DialTimeout time.Duration
	// Forget drops a sighting (Offer) not renewed for this long (1m).
	Forget time.Duration
	// MaxTargets bounds the sightings held at once (256): a LAN flooded
	// with fake announcements costs bounded memory. Kept peers do not
	// count against it.
	MaxTargets int
	// MaxDials bounds the dials in flight at once (4).
	MaxDials int
	// Logger; nil discards.
	Logger *slog.Logger
}

func (c JoinerConfig) withDefaults() JoinerConfig {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.MinBackoff, time.Second)
	def(&c.MaxBackoff, time.Minute)
	def(&c.Check, 5*time.Second)
	def(&c.DialTimeout, 15*time.Second)
	def(&c.Forget, time.Minute)
	c.MaxBackoff = max(c.MaxBackoff, c.MinBackoff)
	if c.MaxTargets <= 0 {
		c.MaxTargets = 256
	}
	if c.MaxDials <= 0 {
		c.MaxDials = 4
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// maxTargetAddrs bounds the addresses remembered for one peer.
const maxTargetAddrs = 16

// Joiner dials peers into the mesh: peers it must keep (from invite
// tokens) until the node stops, and peers offered by discovery while they
// keep being seen. It dials a peer only when the mesh does not hold it
// admitted, one dial per peer at a time, backing off per peer on failure.
// Build it with NewJoiner; Keep and Offer are safe for concurrent use,
// before or during Serve.
type Joiner struct {
	m    Mesh
	cfg  JoinerConfig
	log  *slog.Logger
	kick chan struct{}

	mu      sync.Mutex
	targets map[identity.EndpointID]*target
	dialing int
}

type target struct {
	addr     mesh.EndpointAddr
	keep     bool      // from a token: never forgotten
	seen     time.Time // last offered
	next     time.Time // earliest next check or dial
	failures int
	busy     bool // a check or dial is in flight
}

// NewJoiner returns a Joiner dialling through m.
func NewJoiner(m Mesh, cfg JoinerConfig) *Joiner {
	cfg = cfg.withDefaults()
	return &Joiner{
		m:       m,
		cfg:     cfg,
		log:     cfg.Logger,
		kick:    make(chan struct{}, 1),
		targets: make(map[identity.EndpointID]*target),
	}
}

// Keep makes the Joiner hold addr's node joined for as long as it runs:
// dialled at once, and redialled with backoff whenever it is not admitted.
// This is what `--join TOKEN` asks for.
func (j *Joiner) Keep(addr mesh.EndpointAddr) {
	j.add(addr, true)
}

// Offer hands over a node discovery has just seen. It is dialled unless
// the mesh already holds it, and forgotten when not offered again for
// JoinerConfig.Forget.
func (j *Joiner) Offer(addr mesh.EndpointAddr) {
	j.add(addr, false)
}

func (j *Joiner) add(addr mesh.EndpointAddr, keep bool) {
	if j.cfg.LANOnly {
		all := addr.Addrs
		addr.Addrs = slices.DeleteFunc(slices.Clone(all), func(ap netip.AddrPort) bool { return !IsLAN(ap.Addr()) })
		if len(addr.Addrs) == 0 {
			lvl := slog.LevelDebug
			if keep {
				lvl = slog.LevelWarn
			}
			j.log.Log(context.Background(), lvl, "discovery: LAN-only mode skips a peer with no LAN address",
				"peer", addr.ID.Short(), "addrs", all)
			return
		}
	}
	if len(addr.Addrs) == 0 {
		return
	}
	now := time.Now()
	j.mu.Lock()
	t := j.targets[addr.ID]
	switch {
	case t != nil:
		merged := mergeAddrs(addr.Addrs, t.addr.Addrs)
		if !slices.Equal(merged, t.addr.Addrs) {
			t.next = now // news: try it now rather than after the backoff
		}
		t.addr.Addrs = merged
	case !keep && j.offeredLocked() >= j.cfg.MaxTargets:
		j.mu.Unlock()
		j.log.Debug("discovery: too many sighted peers; ignoring one", "peer", addr.ID.Short())
		return
	default:
		addr.Addrs = mergeAddrs(addr.Addrs)
		t = &target{addr: addr, next: now}
		j.targets[addr.ID] = t
	}
	t.keep = t.keep || keep
	t.seen = now
	j.mu.Unlock()
	select {
	case j.kick <- struct{}{}:
	default:
	}
}

func (j *Joiner) offeredLocked() int {
	n := 0
	for _, t := range j.targets {
		if !t.keep {
			n++
		}
	}
	return n
}

// Serve runs the Joiner until ctx ends, then waits for its dials and
// returns nil.
func (j *Joiner) Serve(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-j.kick:
		case <-timer.C:
		}
		for _, t := range j.due(time.Now()) {
			wg.Go(func() { j.visit(ctx, t) })
		}
		timer.Reset(j.wait(time.Now()))
	}
}

// due marks and returns the targets to check or dial now, as many as the
// dial limit allows, and forgets stale sightings.
func (j *Joiner) due(now time.Time) []*target {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []*target
	for id, t := range j.targets {
		switch {
		case t.busy:
		case !t.keep && now.Sub(t.seen) > j.cfg.Forget:
			delete(j.targets, id)
		case !t.next.After(now) && j.dialing < j.cfg.MaxDials:
			t.busy = true
			j.dialing++
			out = append(out, t)
		}
	}
	return out
}

// wait is how long until the next target is due (at most Check).
func (j *Joiner) wait(now time.Time) time.Duration {
	j.mu.Lock()
	defer j.mu.Unlock()
	d := j.cfg.Check
	full := j.dialing >= j.cfg.MaxDials
	for _, t := range j.targets {
		switch until := t.next.Sub(now); {
		case t.busy:
		case until <= 0 && full:
			// Due but waiting for a dial slot: the dial that frees one
			// kicks the loop.
		default:
			d = min(d, max(until, time.Millisecond))
		}
	}
	return d
}

// visit dials t unless the mesh already holds it, then schedules its next
// visit.
func (j *Joiner) visit(ctx context.Context, t *target) {
	j.mu.Lock()
	addr := t.addr
	addr.Addrs = slices.Clone(addr.Addrs)
	j.mu.Unlock()

	var err error
	if _, joined := j.m.Peer(addr.ID); !joined {
		dctx, cancel := context.WithTimeout(ctx, j.cfg.DialTimeout)
		_, err = j.m.Dial(dctx, addr)
		cancel()
	}

	j.mu.Lock()
	t.busy = false
	j.dialing--
	now := time.Now()
	switch {
	case err == nil:
		if t.failures > 0 {
			j.log.Info("discovery: joined peer", "peer", addr.ID.Short(), "after_failures", t.failures)
		}
		t.failures = 0
		t.next = now.Add(j.cfg.Check)
	case errors.Is(err, mesh.ErrSelf):
		// A token or sighting of this very node: nothing to join.
		delete(j.targets, addr.ID)
	case ctx.Err() != nil:
	default:
		t.failures++
		wait := jitter(backoff(j.cfg.MinBackoff, j.cfg.MaxBackoff, t.failures))
		t.next = now.Add(wait)
		lvl := slog.LevelDebug
		if t.keep && t.failures == 1 {
			lvl = slog.LevelInfo // once per outage, not once per retry
		}
		j.log.Log(ctx, lvl, "discovery: cannot join peer; will retry", "peer", addr.ID.Short(),
			"addrs", addr.Addrs, "err", err, "retry_in", wait.Round(time.Millisecond))
	}
	j.mu.Unlock()
	select {
	case j.kick <- struct{}{}:
	default:
	}
}

// backoff is the wait after the n-th consecutive failure (n ≥ 1): lo,
// doubling, capped at hi.
func backoff(lo, hi time.Duration, n int) time.Duration {
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}

// jitter varies d by up to ±20%.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// mergeAddrs returns the addresses of lists in order without duplicates,
// at most maxTargetAddrs of them.
func mergeAddrs(lists ...[]netip.AddrPort) []netip.AddrPort {
	var out []netip.AddrPort
	for _, l := range lists {
		for _, ap := range l {
			if !slices.Contains(out, ap) && len(out) < maxTargetAddrs {
				out = append(out, ap)
			}
		}
	}
	return out
}

// IsLAN reports whether a is a LAN address: private (RFC 1918, RFC 4193
// unique-local), link-local or loopback. LAN-only mode dials nothing else,
// so it never leaves the local network, whatever a token or a peer says.
// Carrier-grade NAT space (100.64.0.0/10, used by overlay VPNs) is not LAN.
func IsLAN(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLoopback()
}
