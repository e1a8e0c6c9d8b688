package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/discovery"
	"github.com/meshnode/meshnode/discovery/mdns"
	"github.com/meshnode/meshnode/discovery/token"
	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/host"
	"github.com/meshnode/meshnode/hw/meters"
	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/console"
	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/control/owner"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/metrics"
	"github.com/meshnode/meshnode/node/modelfetch"
	"github.com/meshnode/meshnode/node/modelshare"
	"github.com/meshnode/meshnode/node/sdnotify"
	"github.com/meshnode/meshnode/node/stage"
	"github.com/meshnode/meshnode/node/steward"
	"github.com/meshnode/meshnode/node/steward/grant"
	"github.com/meshnode/meshnode/node/steward/journal"
	"github.com/meshnode/meshnode/node/wire/nodev1"
	"github.com/meshnode/meshnode/node/wire/stagewire"
)

// Node is the meshnode daemon: identity, meters, models, steward, mesh,
// discovery and the HTTP API, started in that order and stopped in
// reverse.
type Node struct {
	cfg Config
	log *slog.Logger

	// Hooks for tests: the meter selection, the mesh's timing, a wrapper
	// around each model loaded at start, and one around the mesh tunnel
	// API's listener.
	meterConfig meters.Config
	meshTuning  func(*mesh.Config)
	wrapModel   func(localModel) localModel
	wrapTunnel  func(net.Listener) net.Listener
	// revocationPoll is how often the revocation file is looked at
	// (defaultRevocationPoll), and ownershipPoll the ownership
	// certificate (defaultOwnershipPoll).
	revocationPoll time.Duration
	ownershipPoll  time.Duration
	// splitRetry is the first wait before a split model that found no
	// plan tries again (default 1s).
	splitRetry time.Duration
	// splitDial, if set, wraps the dialer a split model's head opens its
	// stages' streams with (tests slow the links).
	splitDial func(stage.Dialer) stage.Dialer
	// clock, if set, is the time the serves' client time limits read
	// (t_max_prompt_ms, t_max_predict_ms); time.Now otherwise.
	clock func() time.Time
	// memProbe measures this node's memory bandwidth in bytes/s, at
	// start, when it serves stages (default: membw.Measure).
	memProbe func(context.Context) (float64, error)
	// claimHook, when set, rewrites each model's load entry this node
	// gossips (a test's node that under-claims its energy).
	claimHook func(*nodev1.MeshnodeModelLoad)
	// pullHook, when set, sees each pull event as it happens here, before
	// it is sent: a test's check of what the node holds at that moment,
	// which the client, reading the events later, cannot make.
	pullHook func(control.PullEvent)
	// placeByRTT turns energy-aware placement off: a request for a model
	// this node hosts is served here, one for a model only peers host goes
	// to the first by admission state and RTT (the benchmark's reference).
	placeByRTT bool

	mu        sync.Mutex
	ready     chan struct{}
	key       *identity.Key
	meters    *meters.Selection
	models    modelSet
	inventory []*nodev1.OwnerControlInventoryEntry // guarded by mu
	steward   *steward.Steward
	hardware  *hw.Facts
	ownership *nodev1.SignedNodeOwnership // guarded by mu
	// trust is the owners it trusts: set by loadOwnership before the mesh
	// starts, and again whenever its ownership certificate changes
	// (watchOwnership).
	trust    atomic.Pointer[owner.Trust]
	ctl      *control.Server // owner control, once started
	receipts *receiptLog     // the steward's receipt log
	metrics  *metrics.Metrics
	// ownMu orders the reloads of the ownership certificate, whose file
	// was last seen as ownStamp.
	ownMu    sync.Mutex
	ownStamp fileStamp
	mesh     *mesh.Node
	// stageSrv serves peers' stages (nil when stages.serve is off), and
	// stageDigests are the weights digests it loads stages of (guarded
	// by mu).
	stageSrv     *stage.Server
	stageDigests [][32]byte
	// splits are the models served split across peers, and splitCtx
	// the context they are placed under once the mesh runs (both
	// guarded by mu).
	splits   []*splitModel
	splitCtx context.Context
	invite   string
	httpAddr net.Addr
	// fetch is the fetcher of pulls into the models dir (fetcher()).
	fetchOnce sync.Once
	fetch     *modelfetch.Fetcher
	// share serves the models dir's files to peers while serveFiles is
	// on (startFileShare).
	share      *modelshare.Server
	serveFiles atomic.Bool
	startedAt  time.Time
	// place is the node's part in mesh-wide placement.
	place *placed
}

// New returns a node for cfg; Serve runs it. cfg is resolved here.
func New(cfg Config, logger *slog.Logger) (*Node, error) {
	if err := cfg.Resolve(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Node{
		cfg:         cfg,
		log:         logger,
		ready:       make(chan struct{}),
		metrics:     metrics.New(Version),
		meterConfig: meters.Config{Meter: cfg.Energy.Meter, EstimatorWatts: cfg.Energy.EstimatorWatts},
		place:       newPlaced(),
	}, nil
}

// Ready is closed once the node serves (the API is listening).
func (n *Node) Ready() <-chan struct{} { return n.ready }

// HTTPAddr is the API's bound address, once ready.
func (n *Node) HTTPAddr() net.Addr {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.httpAddr
}

// Serve runs the node until ctx is cancelled, then shuts down: the API
// stops accepting, peers are told the node is leaving (they drop it from
// their tables at once; new tunnels from them are refused, and they go to
// other hosts), requests in flight, local or relayed through the mesh in
// either direction, get up to the drain timeout, and then everything
// started is stopped in reverse order. A clean shutdown returns nil.
func (n *Node) Serve(ctx context.Context) (err error) {
	var stack closers
	defer func() {
		if cerr := stack.closeAll(n.log); err == nil {
			err = cerr
		}
	}()
	n.startedAt = time.Now()

	// 0. Nothing the node is about to trust may be another user's to change.
	if err := n.checkPermissions(); err != nil {
		return err
	}

	// 1. Identity.
	key, created, err := identity.LoadOrCreateKey(n.cfg.StateDir)
	if err != nil {
		return err
	}
	n.key = key
	if created {
		n.log.Info("created node key", "dir", n.cfg.StateDir)
	}
	n.log.Info("identity", "endpoint_id", key.ID().String(), "did", key.DIDKey())
	if err := n.loadOwnership(); err != nil {
		return err
	}

	// 2. Meters.
	sel, err := meters.Select(ctx, n.meterConfig, n.log)
	if err != nil {
		return fmt.Errorf("meters: %w", err)
	}
	n.meters = sel
	stack.push("meters", sel.Close)
	n.log.Info("energy meter", "selected", sel.Report.Selected, "why", sel.Report.Why)
	facts, err := host.Gather(host.Options{})
	if err != nil {
		n.log.Debug("some hardware facts are unknown", "err", err)
	}
	if n.cfg.Stages.StageServe() {
		// Peers rank the nodes that run their stages by it: measured
		// once here, before anything serves, in a few tens of ms.
		facts.Memory.BandwidthGBps = n.measureBandwidth(ctx) / 1e9
	}
	n.hardware = &facts

	// 3. Engines: the configured models (or the built-in default), and an
	// inventory of the models dir for gossip.
	if err := n.loadModels(&stack); err != nil {
		return err
	}
	inv, err := scanInventory(ctx, n.cfg.ModelsDir, n.log)
	if err != nil {
		n.log.Warn("the models dir cannot be inventoried; advertising loaded models only", "err", err)
	}
	n.setInventory(inv)

	// 4. Steward.
	var backends []steward.Backend
	for _, in := range n.models.all() {
		backends = append(backends, backendOf(in.m))
	}
	st, err := n.openSteward(backends, &stack)
	if err != nil {
		return err
	}
	n.steward = st
	for _, in := range n.models.all() {
		if err := n.recordWeights(in.m); err != nil {
			return err
		}
	}

	// 5. The HTTP listener (bound before the mesh so that its
	// announcement knows the port), 6. the mesh and the listener its
	// tunnels arrive on, 7. discovery.
	httpLn, err := net.Listen("tcp", n.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	stack.push("api listener", ignoreClosed(httpLn.Close))
	n.mu.Lock()
	n.httpAddr = httpLn.Addr()
	n.mu.Unlock()

	mn, err := n.newMesh(httpLn.Addr())
	if err != nil {
		return err
	}
	n.mesh = mn
	// Tunnels come to the API in-process, never through a socket, so only
	// a peer the mesh admitted, under the API's mesh access policy, reaches
	// the handler that serves them without the API key.
	tunnelLn, err := mn.ListenHTTP()
	if err != nil {
		return fmt.Errorf("api: mesh tunnel listener: %w", err)
	}
	stack.push("tunnel listener", ignoreClosed(tunnelLn.Close))
	if n.wrapTunnel != nil {
		tunnelLn = n.wrapTunnel(tunnelLn)
	}
	self := mn.EndpointAddr()
	if n.invite, err = token.Encode(self); err != nil {
		return fmt.Errorf("invite token: %w", err)
	}

	stack.push("mesh", mn.Close) // for a mesh that never served; Serve's end stops one that did

	// Everything stops when ctx ends but what requests in flight still
	// need: the meters, and the mesh that carries the requests relayed to
	// and from this node (it has left by then: see below). They run on
	// late, which ends once the API has let those requests finish, or on
	// any early return.
	ctx, stopAll := context.WithCancel(ctx)
	late, stopLate := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer func() {
		stopAll()
		stopLate()
		wg.Wait()
	}()
	run := func(name string, serve func(context.Context) error, c context.Context) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := serve(c); err != nil && !errors.Is(err, context.Canceled) {
				n.log.Error(name+" stopped", "err", err)
			}
		}()
	}
	run("meters", sel.Serve, late)
	if err := n.startStages(ctx, &stack, run); err != nil {
		return err
	}
	run("mesh", mn.Serve, late)
	// Ready means a join works: the mesh must be serving before the node
	// says so (to systemd, its log, or a test that joins at once).
	select {
	case <-mn.Started():
	case <-ctx.Done():
		return nil // shut down before it was ready: the deferred stops apply
	}
	if err := n.startDiscovery(ctx, run); err != nil {
		return err
	}
	ctl, err := n.startControl(ctx, &stack, run)
	if err != nil {
		return err
	}
	access := n.newMeshAccess()
	n.startFileShare(ctx, access, run)
	run("grant revocations", n.watchRevocations, ctx)
	run("ownership certificate", n.watchOwnership, ctx)

	// 8. The API, and the web console on its listener.
	files, err := console.NewFiles()
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	events := console.NewEvents(0, 0)
	run("console events", events.Serve, ctx)
	srv := api.New(api.Config{
		Version:        Version,
		APIKey:         n.cfg.APIKey,
		MaxBodyBytes:   n.cfg.API.MaxBodyBytes,
		Concurrency:    n.cfg.API.Concurrency,
		QueueDepth:     n.cfg.API.QueueDepth,
		QueueWait:      n.cfg.API.QueueWait.Duration,
		LoadChanged:    n.place.loadChanged,
		AllowedHosts:   n.allowedHosts(),
		AllowedOrigins: n.cfg.API.AllowedOrigins,
		MeshAccess:     access,
		Routes: map[string]http.Handler{
			control.HTTPPrefix + "/": ctl.HTTPHandler(),
			"GET /api/events":        events,
			"GET /metrics":           n.metrics.Handler(),
		},
		Public:   map[string]http.Handler{console.Prefix: files},
		Observer: requestObservers{events, requestMetrics{n}},
	}, key.ID(), &registry{n: n}, meshRelay{m: mn, n: n}, &apiNode{n: n}, n.log, nil)
	n.metrics.SetSources(metricSources(srv, mn))
	n.place.api.Store(srv)
	run("placement load", n.pushLoads, ctx)
	drain := n.cfg.DrainTimeout.Duration
	apiLn, tunnelAPILn := watchClose(httpLn), watchClose(tunnelLn)
	apiDone, tunnelDone := make(chan error, 1), make(chan error, 1)
	go func() { apiDone <- srv.Serve(ctx, apiLn, drain) }()
	go func() { tunnelDone <- srv.ServeMesh(ctx, tunnelAPILn, drain) }()

	n.announceReady(self)
	close(n.ready)

	// Shutdown: both API servers stop accepting at ctx's end (closing
	// their listeners is the first thing they do) and drain what is in
	// flight, up to drain each, at the same time. Once neither accepts,
	// the mesh says PeerLeaving and takes no new tunnel, while the
	// connections carrying those in flight stay up; then the late parts go.
	apiEnded, tunnelEnded := false, false
	var terr error
	select {
	case <-ctx.Done():
	case err = <-apiDone:
		apiEnded = true
	case terr = <-tunnelDone:
		tunnelEnded = true
	}
	switch {
	case ctx.Err() != nil:
		// A shutdown, whichever won the select: an API server that
		// stopped did so for ctx's end.
		n.log.Info("shutting down: finishing requests in flight", "drain_timeout", drain)
	case tunnelEnded:
		// Without it every tunnel to this node is refused: stop, so that
		// the service manager restarts the whole node.
		err = fmt.Errorf("the mesh tunnel API stopped: %v", cmp.Or(terr, errors.New("no error given")))
		terr = nil // said in err
	}
	stopAll()
	<-apiLn.closed
	<-tunnelAPILn.closed
	if lerr := mn.Leave(context.WithoutCancel(ctx)); lerr != nil {
		// It is not serving (not yet, or it failed): its Serve, if it
		// runs, says PeerLeaving when late ends.
		n.log.Debug("mesh: not leaving before the drain", "err", lerr)
	}
	if !apiEnded {
		if aerr := <-apiDone; err == nil {
			err = aerr
		}
	}
	if !tunnelEnded {
		terr = <-tunnelDone
	}
	if terr != nil && !errors.Is(terr, net.ErrClosed) {
		n.log.Error("mesh tunnel api stopped", "err", terr)
	}
	stopLate()
	wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	n.log.Info("stopped")
	return err
}

func (n *Node) announceReady(self mesh.EndpointAddr) {
	n.log.Info("meshnode serving",
		"api", "http://"+n.httpAddr.String()+"/v1", "models", n.models.names(),
		"quic", n.mesh.LocalAddr().String(), "addrs", self.Addrs)
	n.log.Info("web console: " + consoleURL(n.httpAddr))
	n.log.Info("invite others with: meshnode --join " + n.invite)
	if err := os.WriteFile(filepath.Join(n.cfg.StateDir, "invite.token"), []byte(n.invite+"\n"), 0o600); err != nil {
		n.log.Warn("could not write the invite token to the state dir", "err", err)
	}
	if sent, err := sdnotify.Notify(sdnotify.Ready); err != nil {
		n.log.Warn("systemd readiness notification failed", "err", err)
	} else if sent {
		n.log.Debug("told systemd the node is ready")
	}
}

// consoleURL is where a browser on this machine opens the web console:
// on loopback when the API listens on every address.
func consoleURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String() + console.Prefix
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip.To4() == nil {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port) + console.Prefix
}

// allowedHosts are the names the API answers to besides IP addresses,
// localhost and the hostname: api.allowed_hosts, and the name http_addr
// binds when it is one.
func (n *Node) allowedHosts() []string {
	hosts := n.cfg.API.AllowedHosts
	if h, _, err := net.SplitHostPort(n.cfg.HTTPAddr); err == nil && h != "" && net.ParseIP(h) == nil {
		hosts = append(slices.Clone(hosts), h)
	}
	return hosts
}

// newMesh builds the QUIC mesh listener, pinned to bind_ip when set.
func (n *Node) newMesh(httpAddr net.Addr) (*mesh.Node, error) {
	listen := n.cfg.QUICAddr
	if n.cfg.BindIP != "" {
		_, port, _ := net.SplitHostPort(listen)
		listen = net.JoinHostPort(n.cfg.BindIP, port)
	}
	httpPort := uint32(0)
	if ta, ok := httpAddr.(*net.TCPAddr); ok {
		httpPort = uint32(ta.Port)
	}
	mc := mesh.Config{
		ListenAddr: listen,
		MeshID:     n.cfg.MeshID,
		Version:    Version,
		Self:       func() *nodev1.PeerAnnouncement { return n.announcement(httpPort) },
		// A peer that leaves drains as this node would: its connections
		// stay for the tunnels in flight that long at most.
		Timeouts: mesh.Timeouts{LeaveDrain: n.cfg.DrainTimeout.Duration},
	}
	if n.cfg.LANOnly {
		// Every address, however learned (gossip, a token, a redial), not
		// only those the joiner offers.
		mc.AllowAddr = func(ap netip.AddrPort) bool { return discovery.IsLAN(ap.Addr()) }
	}
	if n.meshTuning != nil {
		n.meshTuning(&mc)
	}
	mn, err := mesh.New(mc, n.key, n.log)
	if err != nil {
		return nil, fmt.Errorf("mesh: %w", err)
	}
	return mn, nil
}

// startDiscovery starts the joiner for invite tokens and, unless
// discovery is "none", mDNS on the LAN.
func (n *Node) startDiscovery(ctx context.Context, run func(string, func(context.Context) error, context.Context)) error {
	joiner := discovery.NewJoiner(n.mesh, discovery.JoinerConfig{LANOnly: n.cfg.LANOnly, Logger: n.log})
	for _, t := range n.cfg.Join {
		a, err := token.Decode(t)
		if err != nil {
			return fmt.Errorf("join token %q: %w", short(t), err)
		}
		joiner.Keep(a)
	}
	run("joiner", joiner.Serve, ctx)
	if n.cfg.Discovery != "mdns" {
		return nil
	}
	tok := n.invite
	if len(n.cfg.Join) > 0 {
		tok = n.cfg.Join[0] // the mesh this node belongs to is the one it joined
	}
	md, err := mdns.New(mdns.Config{
		ID:      n.key.ID(),
		Listen:  n.mesh.LocalAddr(),
		MeshID:  n.cfg.MeshID,
		Version: Version,
		Token:   tok,
		Hints:   n.mdnsHints,
		Found:   joiner.Offer,
		Logger:  n.log,
	})
	if err != nil {
		return fmt.Errorf("mdns: %w", err)
	}
	run("mdns", md.Serve, ctx)
	return nil
}

func (n *Node) mdnsHints() mdns.Hints {
	return mdns.Hints{VRAM: vram(n.hardware), Serving: n.models.names()}
}

// JournalPath is the steward's decision journal in stateDir; its
// chain-head checkpoint is beside it (journal.HeadPath).
func JournalPath(stateDir string) string {
	return filepath.Join(stateDir, "journal", "steward.jsonl")
}

// openSteward opens the steward's decision journal (taking its lock),
// replays it, and starts the steward on it: a restarted node continues
// its receipt chain and its grants' spend where it stopped (mesh/1 §2.2).
func (n *Node) openSteward(backends []steward.Backend, stack *closers) (*steward.Steward, error) {
	path := JournalPath(n.cfg.StateDir)
	j, err := journal.Open(path, journal.Options{Logger: n.log, OnSync: n.metrics.ObserveSync})
	switch {
	case errors.Is(err, journal.ErrLocked):
		return nil, fmt.Errorf("%w: another meshnode is running on state dir %s", err, n.cfg.StateDir)
	case errors.Is(err, journal.ErrRolledBack), errors.Is(err, journal.ErrBadCheckpoint):
		return nil, fmt.Errorf("steward journal: %w; to accept it, run `meshnode journal accept-rollback --state-dir %s` as the user the node runs as", err, n.cfg.StateDir)
	case err != nil:
		return nil, fmt.Errorf("steward journal: %w", err)
	}
	stack.push("steward journal", j.Close)
	rev, err := grant.LoadRevocations(revocationsPath(n.cfg.StateDir))
	if err != nil {
		return nil, fmt.Errorf("grant revocations: %w", err)
	}
	rl := newReceiptLog(ReceiptLogPath(n.cfg.StateDir), n.cfg.Steward.ReceiptLogBytes, n.log)
	st, err := steward.New(steward.Config{Key: n.key, Meter: n.meters.Meter, Backends: backends, Durable: j, Revocations: rev,
		Archive: rl, Observer: sealMetrics{n.metrics}, Logger: n.log})
	if err != nil {
		return nil, err
	}
	// The journal's chain head says where the receipt log must end.
	if err := rl.open(st.Head()); err != nil {
		return nil, err
	}
	stack.push("receipt log", rl.Close)
	n.receipts = rl
	return st, nil
}

// backendOf is the steward backend that serves m: named for the kernels it
// runs on and the model, "cuda:qwen2.5-0.5b" say, as receipts show it.
func backendOf(m localModel) steward.Backend {
	return steward.Backend{Name: m.Backend() + ":" + m.Name(), Engine: m.Engine()}
}

func (n *Node) setInventory(inv []*nodev1.OwnerControlInventoryEntry) {
	n.mu.Lock()
	n.inventory = inv
	n.mu.Unlock()
}

func (n *Node) inventorySnapshot() []*nodev1.OwnerControlInventoryEntry {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.inventory
}

// Status is GET /api/status.
func (n *Node) Status() Status {
	st := Status{
		NodeID:  n.key.ID().String(),
		DID:     n.key.DIDKey(),
		Version: Version,
		Uptime:  time.Since(n.startedAt).Round(time.Second).String(),
		Meter:   n.meters.Report,
		// The GPU's name, memory and, on a Mac, Metal's working set,
		// as gossip carries them.
		Hardware: n.hardware,
	}
	st.Grants = n.steward.Grants()
	head := n.steward.Head()
	st.Steward.Sequence = head.Next
	if head.Next > 0 {
		st.Steward.Last = head.Last.String()
	}
	st.NoModel = n.noModelHint()
	for _, in := range n.models.all() {
		ms := ModelStatus{Name: in.m.Name(), Instance: in.id, Context: in.m.ContextLength(), Slots: 1,
			SizeBytes: in.m.Size(), InFlight: in.gate.inFlight(), Backend: in.m.Backend(), Devices: engine.DevicesOf(in.m.Engine())}
		if sm, ok := in.m.(interface{ Slots() int }); ok {
			ms.Slots = sm.Slots()
		}
		if d, ok := draftOf(in.m); ok {
			ms.Draft = d.DraftName()
			ms.Speculation = specStatus(d)
		}
		if sm := n.splitModel(in.m.Name()); sm != nil {
			ms.Split = sm.status()
		}
		st.Models = append(st.Models, ms)
	}
	for _, p := range n.mesh.Peers() {
		ps := PeerStatus{ID: p.ID.String(), Models: p.Models(), Admission: AdmissionName(p.Admission())}
		if p.RTT > 0 {
			ps.RTTMillis = float64(p.RTT.Microseconds()) / 1000
		}
		for _, a := range p.Addrs {
			ps.Addrs = append(ps.Addrs, a.String())
		}
		peerFacts(&ps, p.Announcement)
		ps.Placement = n.peerPlacement(p)
		st.Peers = append(st.Peers, ps)
	}
	return st
}

// noModelHint says how to get a model while the node serves none, else "".
func (n *Node) noModelHint() string {
	if len(n.models.all()) > 0 {
		return ""
	}
	return n.cfg.NoModelHint()
}

// Status is the node's own report.
type Status struct {
	NodeID  string `json:"node_id"`
	DID     string `json:"did"`
	Version string `json:"version"`
	Uptime  string `json:"uptime"`
	Steward struct {
		Sequence uint64 `json:"next_sequence"`
		Last     string `json:"last_envelope,omitempty"`
	} `json:"steward"`
	Grants steward.GrantStatus `json:"grants"`
	Models []ModelStatus       `json:"models"`
	// NoModel, only while the node serves no model, says how to get one.
	NoModel string        `json:"no_model,omitempty"`
	Peers   []PeerStatus  `json:"peers"`
	Meter   meters.Report `json:"meter"`
	// Hardware is the machine as the node gossips it (hw.Facts): its
	// GPUs' names, memory, whether it is unified, Metal's working set.
	Hardware *hw.Facts `json:"hardware,omitempty"`
}

// ModelStatus is one served model in Status.
type ModelStatus struct {
	Name      string `json:"name"`
	Instance  string `json:"instance"`
	Context   int    `json:"context"`
	SizeBytes int64  `json:"size_bytes"`
	InFlight  int    `json:"in_flight"`
	// Backend is where the forward pass runs ("cpu", "cuda", "metal"), and Devices
	// what its serves use: the meter grades them by Meter.Serves' line
	// for these devices.
	Backend string `json:"backend"`
	// Split is the plan of a model split across peers, nil for a model
	// served whole.
	Split   *SplitStatus `json:"split,omitempty"`
	Devices hw.Domain    `json:"devices"`

	// Slots is how many generations run at once, batched together.
	Slots int `json:"slots"`
	// Draft is the model's speculative proposer as configured: a draft
	// model's name or "lookup"; absent without one (docs/engine.md).
	Draft string `json:"draft,omitempty"`
	// Speculation is how the draft's windows are priced now; absent
	// without a draft.
	Speculation *SpecStatus `json:"speculation,omitempty"`
}

// SpecStatus is how a model's draft is priced (docs/engine.md, "Measured
// prices"): what an operator reads to see why its windows are as they
// are, or why sampled requests sample plainly.
type SpecStatus struct {
	// Prices is "measured" (timed on this machine at load, or on a split
	// model's pipeline, at MeasuredAt, RFC 3339) or "files" (the files'
	// sizes and a fixed row cost: draft_prices = "files", or not measured
	// yet, or the measurement failed; the log says why).
	Prices     string `json:"prices"`
	MeasuredAt string `json:"measured_at,omitempty"`
	// Cost is a drafted token's cost in target tokens, Row a verified
	// row's past the first, CatchUp a draft model's two-token step and
	// First what its first step of a round costs more than Cost (0: not
	// counted); SampledCost, SampledRow, SampledFirst and SampledCatchUp
	// are Cost, Row, First and CatchUp as a sampled serve pays them.
	Cost           float64 `json:"cost"`
	Row            float64 `json:"row"`
	CatchUp        float64 `json:"catch_up,omitempty"`
	First          float64 `json:"first,omitempty"`
	SampledCost    float64 `json:"sampled_cost"`
	SampledRow     float64 `json:"sampled_row"`
	SampledFirst   float64 `json:"sampled_first,omitempty"`
	SampledCatchUp float64 `json:"sampled_catch_up,omitempty"`
	// SampledDraft is what a new sampled request names as its draft (a
	// receipt's sampling.draft): the draft's id with the sampled prices
	// (lookup@c0.00v0.51; with a draft model's first-step and catch-up
	// extras, 0123…@c0.02v0.06f0.01u0.01), the id alone (files' prices), or "" where
	// the prices say sampled speculation cannot pay, so that such
	// requests sample plainly.
	SampledDraft string `json:"sampled_draft"`
}

// specStatus is d's SpecStatus.
func specStatus(d drafting) *SpecStatus {
	p, at := d.DraftPrices()
	s := &SpecStatus{Prices: DraftPricesFiles, Cost: p.Cost, Row: p.Row, CatchUp: p.CatchUp, First: p.First,
		SampledCost: p.SampledCost, SampledRow: p.SampledRow, SampledFirst: p.SampledFirst, SampledCatchUp: p.SampledCatchUp, SampledDraft: d.Draft()}
	if !at.IsZero() {
		s.Prices, s.MeasuredAt = DraftPricesMeasured, at.UTC().Format(time.RFC3339)
	}
	return s
}

// AdmissionName is a peer's inference admission state as /api/status
// shows it: the enum's name without its prefix, in lower case
// ("accepting", "accepting_deprioritized", "remote_paused", "all_paused",
// "unspecified").
func AdmissionName(a nodev1.InferenceAdmissionState) string {
	return strings.ToLower(strings.TrimPrefix(a.String(), "INFERENCE_ADMISSION_STATE_"))
}

// PeerStatus is one peer in Status.
type PeerStatus struct {
	ID        string   `json:"id"`
	Addrs     []string `json:"addrs"`
	RTTMillis float64  `json:"rtt_ms,omitempty"`
	Models    []string `json:"models"`
	Admission string   `json:"admission"`
	// What its gossip says of it: its role ("host", "worker", "client"),
	// whether it serves layer stages of split models, its hostname, GPUs
	// and memory.
	Role        string    `json:"role,omitempty"`
	Stages      bool      `json:"stages,omitempty"`
	Hostname    string    `json:"hostname,omitempty"`
	GPUs        []PeerGPU `json:"gpus,omitempty"`
	MemoryBytes uint64    `json:"memory_bytes,omitempty"`
	// Placement is, per model, what the peer advertises for placement and
	// what this node's claims check makes of it (docs/mesh.md#placement);
	// absent for a peer that advertises nothing.
	Placement []PeerPlacement `json:"placement,omitempty"`
}

// PeerGPU is one GPU a peer gossips.
type PeerGPU struct {
	Name      string `json:"name"`
	VRAMBytes uint64 `json:"vram_bytes,omitempty"`
}

// peerFacts fills ps with what announcement a says of its node.
func peerFacts(ps *PeerStatus, a *nodev1.PeerAnnouncement) {
	if a == nil {
		return
	}
	if a.GetRole() != nodev1.NodeRole_NODE_ROLE_UNSPECIFIED {
		ps.Role = strings.ToLower(a.GetRole().String())
	}
	for _, sp := range a.GetSubprotocols() {
		ps.Stages = ps.Stages || stagewire.Matches(sp.GetName(), sp.GetMajor())
	}
	h := a.GetHardware()
	ps.Hostname = cmp.Or(h.GetHostname(), a.GetHostname())
	ps.MemoryBytes = h.GetMemory().GetTotalBytes()
	for _, g := range h.GetGpus() {
		vram, _ := strconv.ParseUint(g.GetVramBytes(), 10, 64) // a decimal string on the wire; unreadable is unknown
		ps.GPUs = append(ps.GPUs, PeerGPU{Name: g.GetName(), VRAMBytes: vram})
	}
}

// PeerPlacement is one model's placement figures of a peer.
type PeerPlacement struct {
	Model                 string  `json:"model"`
	UJPerPromptToken      float64 `json:"uj_per_prompt_token"`
	UJPerOutputToken      float64 `json:"uj_per_output_token"`
	EnergyGrade           string  `json:"energy_grade"`
	Receipts              uint32  `json:"receipts"`
	OutputTokensPerSecond float64 `json:"output_tokens_per_second"`
	Slots                 uint32  `json:"slots"`
	FreeSlots             uint32  `json:"free_slots"`
	Queued                uint32  `json:"queued"`
	// Trust is what this node multiplies the peer's claims by: 1 unless
	// its receipts exceeded them beyond the tolerance.
	Trust float64 `json:"trust"`
	// InFlight is how many of this node's requests the peer is serving.
	InFlight int `json:"in_flight"`
}

// closers stops what Serve started, last first.
type closers []struct {
	name string
	fn   func() error
}

func (c *closers) push(name string, fn func() error) {
	*c = append(*c, struct {
		name string
		fn   func() error
	}{name, fn})
}

func (c closers) closeAll(log *slog.Logger) error {
	var errs []error
	for i := len(c) - 1; i >= 0; i-- {
		if err := c[i].fn(); err != nil {
			log.Warn("stopping "+c[i].name, "err", err)
			errs = append(errs, fmt.Errorf("%s: %w", c[i].name, err))
		}
	}
	return errors.Join(errs...)
}

// watchedListener says when it has been closed. The API server closes its
// listener first thing when it stops, and whenever its Serve returns: from
// then on the node takes no new request there.
type watchedListener struct {
	net.Listener
	once   sync.Once
	closed chan struct{}
}

func watchClose(l net.Listener) *watchedListener {
	return &watchedListener{Listener: l, closed: make(chan struct{})}
}

func (l *watchedListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.closed) })
	return err
}

func ignoreClosed(fn func() error) func() error {
	return func() error {
		if err := fn(); err != nil && !errors.Is(err, net.ErrClosed) {
			return err
		}
		return nil
	}
}

func short(s string) string {
	if len(s) > 16 {
		return s[:16] + "…"
	}
	return s
}
