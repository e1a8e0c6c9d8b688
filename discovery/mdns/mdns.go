package mdns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/meshnode/meshnode/discovery/token"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
)

// Service is the DNS-SD service type mesh-llm nodes announce (upstream's,
// "_tcp" although the mesh runs over QUIC).
const Service = "_mesh-llm._tcp"

// Hints are the capability hints a node announces; they change while it
// runs.
type Hints struct {
	VRAM    uint64   // GPU memory in bytes; 0 leaves it out
	Serving []string // models served now; as many as fit are announced
}

// Config configures an MDNS. ID, Listen and Found are required.
type Config struct {
	// ID is this node's identity (mesh.Node.ID). Announcements carrying
	// it are this node's own and are ignored.
	ID identity.EndpointID
	// Listen is the mesh's bound UDP address (mesh.Node.LocalAddr). A
	// specific IP (--bind-ip) pins mDNS to the interface holding it and
	// is the only address announced; an unspecified one announces the
	// current addresses of every chosen interface (see Choose).
	Listen netip.AddrPort
	// MeshID, when set, is announced, and only nodes announcing the same
	// id are joined (or, announcing none, the same token fingerprint).
	MeshID string
	// Version is announced as is (cut to MaxVersion).
	Version string
	// Token is the invite token this node's mesh is known by: the one it
	// joined with, or its own. Only its fingerprint is announced.
	Token string
	// Hints, if set, is called before each announcement.
	Hints func() Hints
	// Found receives each node of this mesh seen on the LAN, once per
	// browse; normally discovery.Joiner.Offer. It must not block.
	Found func(mesh.EndpointAddr)

	// Interval is the time between browses (10s); the first ones come
	// sooner (1s, 2s, 4s, ...) so that nodes started together meet fast.
	// Each wait is varied by ±10%.
	Interval time.Duration
	// Window is how long a browse listens for answers (1s).
	Window time.Duration
	// Interfaces lists the host's interfaces (SystemInterfaces); it is
	// read before each browse, so interfaces that come and go are
	// followed.
	Interfaces func() ([]Interface, error)
	// Logger; nil discards.
	Logger *slog.Logger
}

// MDNS announces this node on the LAN and browses for the others,
// handing those of its mesh to Config.Found. Build it with New and run it
// with Serve.
type MDNS struct {
	cfg      Config
	log      *slog.Logger
	tokenFP  string
	instance string
	zone     zone

	// Serve's state, touched by its goroutine only.
	responders map[string]*responder // by link name
	announced  []string              // the TXT now in the zone
	warned     map[string]bool       // conditions already logged at warn
}

// New checks cfg and returns an MDNS ready to Serve.
func New(cfg Config) (*MDNS, error) {
	switch {
	case cfg.ID.IsZero():
		return nil, errors.New("mdns: no node id")
	case !cfg.Listen.IsValid() || cfg.Listen.Port() == 0:
		return nil, fmt.Errorf("mdns: listen address %v: want the mesh's bound address and port", cfg.Listen)
	case cfg.Found == nil:
		return nil, errors.New("mdns: no Found function")
	}
	if err := checkText("mesh_id", cfg.MeshID, MaxValue); err != nil {
		return nil, err
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.Window <= 0 {
		cfg.Window = time.Second
	}
	if cfg.Interfaces == nil {
		cfg.Interfaces = SystemInterfaces
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m := &MDNS{
		cfg:        cfg,
		log:        cfg.Logger,
		instance:   "meshnode-" + cfg.ID.Short(),
		responders: make(map[string]*responder),
		warned:     make(map[string]bool),
	}
	if cfg.Token != "" {
		m.tokenFP = token.Fingerprint(cfg.Token)
	}
	return m, nil
}

// Serve announces and browses until ctx ends, then withdraws and returns
// nil. It returns an error at once if the interface the mesh is pinned to
// cannot carry mDNS.
func (m *MDNS) Serve(ctx context.Context) error {
	defer m.stopResponders()
	if _, err := m.links(); err != nil {
		return err
	}
	m.log.Info("mdns: announcing and browsing", "service", Service, "instance", m.instance)
	for round := 0; ; round++ {
		links, err := m.links()
		if err != nil {
			m.warnOnce("links", "mdns: no interface to run on", "err", err)
		} else {
			delete(m.warned, "links")
		}
		m.announce(links)
		m.browse(ctx, links)
		wait := min(m.cfg.Interval, time.Second<<min(round, 16))
		t := time.NewTimer(time.Duration(float64(wait) * (0.9 + 0.2*rand.Float64())))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func (m *MDNS) links() ([]Link, error) {
	ifaces, err := m.cfg.Interfaces()
	if err != nil {
		return nil, err
	}
	return Choose(ifaces, m.cfg.Listen.Addr())
}

// announce brings the zone and the per-link responders in line with the
// current links and announcement.
func (m *MDNS) announce(links []Link) {
	ad := m.advert(links)
	txt, err := ad.TXT()
	if err != nil {
		m.warnOnce("txt", "mdns: cannot encode the announcement", "err", err)
		txt = nil
	} else {
		delete(m.warned, "txt")
	}
	// Only the addresses that fitted into ep_addr get A/AAAA records.
	fitted, _, _ := fitEndpoint(ad.Endpoint)
	var addrs []netip.Addr
	if txt != nil {
		for _, ap := range fitted.Addrs {
			addrs = append(addrs, ap.Addr())
		}
	}
	if len(addrs) == 0 {
		m.warnOnce("noaddr", "mdns: no LAN address to announce; browsing only", "links", len(links))
	} else {
		delete(m.warned, "noaddr")
	}
	if !slices.Equal(txt, m.announced) {
		if err := m.zone.set(m.instance, m.cfg.Listen.Port(), addrs, txt); err != nil {
			m.warnOnce("zone", "mdns: cannot announce", "err", err)
		} else {
			delete(m.warned, "zone")
			m.announced = txt
			m.log.Debug("mdns: announcement", "txt", txt)
		}
	}

	current := make(map[string]bool, len(links))
	for _, l := range links {
		key := fmt.Sprintf("%s#%d", l.Name, l.Index)
		current[key] = true
		if m.responders[key] != nil {
			continue
		}
		r, err := startResponder(l, &m.zone, m.log)
		if err != nil {
			// Another mDNS stack holding port 5353 exclusively, say. The
			// node can still find others; they cannot find it.
			m.warnOnce("responder:"+key, "mdns: cannot answer queries; peers on this link will not find this node", "link", l.Name, "err", err)
			continue
		}
		delete(m.warned, "responder:"+key)
		m.responders[key] = r
		m.log.Info("mdns: answering on link", "link", l.Name, "addrs", l.Addrs)
	}
	for key, r := range m.responders {
		if !current[key] {
			r.stop()
			delete(m.responders, key)
			m.log.Info("mdns: link gone", "link", key)
		}
	}
}

// advert is this node's announcement on links.
func (m *MDNS) advert(links []Link) Advert {
	ad := Advert{
		Version:  m.cfg.Version,
		MeshID:   m.cfg.MeshID,
		TokenFP:  m.tokenFP,
		Endpoint: mesh.EndpointAddr{ID: m.cfg.ID},
	}
	if m.cfg.Hints != nil {
		h := m.cfg.Hints()
		ad.VRAM, ad.Serving = h.VRAM, h.Serving
	}
	port := m.cfg.Listen.Port()
	var v4, v6 []netip.AddrPort
	for _, l := range links {
		for _, a := range l.Addrs {
			ap := netip.AddrPortFrom(a, port)
			if slices.Contains(v4, ap) || slices.Contains(v6, ap) {
				continue
			}
			if a.Is4() {
				v4 = append(v4, ap)
			} else {
				v6 = append(v6, ap)
			}
		}
	}
	ad.Endpoint.Addrs = append(v4, v6...) // IPv4 first: most often what a LAN peer can reach
	return ad
}

func (m *MDNS) stopResponders() {
	for key, r := range m.responders {
		r.stop()
		delete(m.responders, key)
	}
}

// browse queries every link on both families at once and hands what it
// finds to Found.
func (m *MDNS) browse(ctx context.Context, links []Link) {
	var (
		mu    sync.Mutex
		found []sighting
		wg    sync.WaitGroup
	)
	for _, l := range links {
		for _, v6 := range []bool{false, true} {
			if v6 && !l.IPv6 || !v6 && !l.IPv4 {
				continue
			}
			wg.Go(func() {
				s, err := query(ctx, l, v6, m.cfg.Window)
				if err != nil && ctx.Err() == nil {
					m.log.Debug("mdns: query", "link", l.Name, "ipv6", v6, "err", err)
				}
				mu.Lock()
				found = append(found, s...)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	for _, e := range m.endpoints(found) {
		m.cfg.Found(e)
	}
}

// endpoints turns sightings into the endpoints to hand on: this node's
// own announcements, other meshes' and malformed ones are left out, and
// one node seen several times (on several links or families) becomes one
// endpoint with every address it was seen at.
func (m *MDNS) endpoints(found []sighting) []mesh.EndpointAddr {
	var out []mesh.EndpointAddr
	index := make(map[identity.EndpointID]int)
	for _, s := range found {
		ad, err := ParseTXT(s.TXT)
		switch {
		case errors.Is(err, ErrNotMeshLLM):
			continue
		case err != nil:
			m.log.Debug("mdns: ignoring an announcement", "from", s.From, "instance", s.Instance, "err", err)
			continue
		case ad.Endpoint.ID == m.cfg.ID:
			continue
		case !sameMesh(m.cfg.MeshID, m.tokenFP, ad):
			m.log.Debug("mdns: ignoring a node of another mesh", "peer", ad.Endpoint.ID.Short(), "mesh_id", ad.MeshID)
			continue
		}
		addrs := ad.Endpoint.Addrs
		// The address the answer came from is on this link for certain;
		// it is tried after the ones the node names.
		if from := s.From.Addr(); s.Port != 0 && !from.IsLinkLocalUnicast() && !from.IsUnspecified() {
			addrs = append(addrs, netip.AddrPortFrom(from, s.Port))
		}
		if i, ok := index[ad.Endpoint.ID]; ok {
			out[i].Addrs = append(out[i].Addrs, addrs...)
			continue
		}
		index[ad.Endpoint.ID] = len(out)
		out = append(out, mesh.EndpointAddr{ID: ad.Endpoint.ID, Addrs: addrs})
	}
	for i := range out {
		out[i].Addrs = dedupe(out[i].Addrs)
	}
	return out
}

// sameMesh reports whether a node announcing ad belongs to the mesh of a
// node with meshID and token fingerprint fp. Without a mesh id every node
// does. With one, a node must announce the same id, or announce none and
// hold the same token.
func sameMesh(meshID, fp string, ad Advert) bool {
	switch {
	case meshID == "" || ad.MeshID == meshID:
		return true
	case ad.MeshID == "":
		return fp != "" && ad.TokenFP == fp
	}
	return false
}

func dedupe(aps []netip.AddrPort) []netip.AddrPort {
	var out []netip.AddrPort
	for _, ap := range aps {
		if ap.Port() != 0 && !slices.Contains(out, ap) && len(out) < mesh.MaxEndpointAddrAddrs {
			out = append(out, ap)
		}
	}
	return out
}

// warnOnce logs a condition at warn level the first time in a row it
// happens, at debug after.
func (m *MDNS) warnOnce(key, msg string, args ...any) {
	lvl := slog.LevelWarn
	if m.warned[key] {
		lvl = slog.LevelDebug
	}
	m.warned[key] = true
	m.log.Log(context.Background(), lvl, msg, args...)
}
