package control

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/control/owner"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func seededKey(t testing.TB, b byte) *identity.Key {
	t.Helper()
	k, err := identity.KeyFromSeed(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// The cast of the tests: the owner, a stranger owning other nodes, and
// endpoints by seed.
const (
	seedOwner    = 1
	seedStranger = 2
	seedNodeA    = 10 // the owner's first node, used as a client
	seedNodeB    = 11 // the node under control
	seedIntruder = 12
)

func cert(t testing.TB, by *identity.Key, ep identity.EndpointID, issued time.Time, ttl time.Duration) *nodev1.SignedNodeOwnership {
	t.Helper()
	c, err := owner.Issue(by, owner.Options{Endpoint: ep, IssuedAt: issued, ExpiresAt: issued.Add(ttl)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// meshNode serves a real mesh node on loopback until the test ends.
func meshNode(t testing.TB, key *identity.Key) *mesh.Node {
	t.Helper()
	n, err := mesh.New(mesh.Config{
		ListenAddr: "127.0.0.1:0",
		Version:    "test",
		Timeouts:   mesh.Timeouts{Handshake: 2 * time.Second, Idle: 5 * time.Second, KeepAlive: time.Second},
	}, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("mesh Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("mesh node did not stop")
		}
	})
	return n
}

// fakeApplier accepts everything but configs whose config_toml says
// "reject", and applies live unless the config names a plugin (staged).
type fakeApplier struct {
	mu      sync.Mutex
	applied []*nodev1.NodeConfigSnapshot
	block   chan struct{} // when set, Activate waits on it
}

func (a *fakeApplier) Validate(cfg *nodev1.NodeConfigSnapshot) []*nodev1.ConfigDiagnostic {
	if cfg.GetConfigToml() == "reject" {
		return []*nodev1.ConfigDiagnostic{{
			Code:     nodev1.ConfigDiagnosticCode_CONFIG_DIAGNOSTIC_CODE_INVALID_VALUE,
			Severity: nodev1.ConfigDiagnosticSeverity_CONFIG_DIAGNOSTIC_SEVERITY_ERROR,
			Source:   nodev1.ConfigDiagnosticSource_CONFIG_DIAGNOSTIC_SOURCE_VALIDATION,
			Path:     proto.String("config_toml"),
			Message:  "config_toml must not say reject",
		}}
	}
	return nil
}

func (a *fakeApplier) Activate(ctx context.Context, cfg *nodev1.NodeConfigSnapshot) (nodev1.ConfigApplyMode, []*nodev1.ConfigDiagnostic) {
	a.mu.Lock()
	block := a.block
	a.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
		}
	}
	a.mu.Lock()
	a.applied = append(a.applied, cfg)
	a.mu.Unlock()
	if len(cfg.GetPlugins()) > 0 {
		return nodev1.ConfigApplyMode_CONFIG_APPLY_MODE_STAGED, nil
	}
	return nodev1.ConfigApplyMode_CONFIG_APPLY_MODE_LIVE, nil
}

// fakeScanner returns entries (unsorted, as a directory listing might)
// or err. With gate set, each scan announces itself on started and waits
// for gate.
type fakeScanner struct {
	mu        sync.Mutex
	entries   []*nodev1.OwnerControlInventoryEntry
	err       error
	scans     int
	published [][]*nodev1.OwnerControlInventoryEntry
	started   chan struct{}
	gate      chan struct{}
}

func (f *fakeScanner) Scan(ctx context.Context) ([]*nodev1.OwnerControlInventoryEntry, error) {
	f.mu.Lock()
	f.scans++
	entries, err, started, gate := f.entries, f.err, f.started, f.gate
	f.mu.Unlock()
	if started != nil {
		started <- struct{}{}
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return entries, err
}

// set changes the scanner's behaviour under its lock.
func (f *fakeScanner) set(change func(*fakeScanner)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f)
}

func (f *fakeScanner) Publish(entries []*nodev1.OwnerControlInventoryEntry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.published = append(f.published, entries)
}

func (f *fakeScanner) counts() (scans, published int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.scans, len(f.published)
}

func inventoryEntries(refs ...string) []*nodev1.OwnerControlInventoryEntry {
	var out []*nodev1.OwnerControlInventoryEntry
	for i, r := range refs {
		out = append(out, &nodev1.OwnerControlInventoryEntry{
			CanonicalModelRef: r,
			TotalSizeBytes:    uint64(1000 * (i + 1)),
			Metadata:          &nodev1.CompactModelMetadata{ModelKey: r, Architecture: "llama", QuantizationType: "Q8_0", ContextLength: 2048},
		})
	}
	return out
}

// rig is node B serving owner control on a real mesh node, with the
// owner's first node A as the client.
type rig struct {
	t       *testing.T
	ownerK  *identity.Key
	nodeA   *identity.Key
	nodeB   *identity.Key
	meshB   *mesh.Node
	server  *Server
	store   *FileStore
	applier *fakeApplier
	scanner *fakeScanner
	runtime *fakeRuntime
	recon   *Reconciler
	now     time.Time
}

type rigOption func(*Config)

func newRig(t *testing.T, opts ...rigOption) *rig {
	t.Helper()
	r := &rig{t: t, ownerK: seededKey(t, seedOwner), nodeA: seededKey(t, seedNodeA), nodeB: seededKey(t, seedNodeB),
		applier: &fakeApplier{}, now: t0.Add(time.Hour),
		scanner: &fakeScanner{entries: inventoryEntries("zeta", "alpha", "mid")}}
	var err error
	r.store, err = OpenFileStore(filepath.Join(t.TempDir(), "owner-config"), &nodev1.NodeConfigSnapshot{Version: 1}, r.applier)
	if err != nil {
		t.Fatal(err)
	}
	r.runtime = newFakeRuntime("alpha", "zeta")
	r.recon = NewReconciler(r.runtime, ReconcilerConfig{
		DrainTimeout: 200 * time.Millisecond, RetryMin: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond,
		EnsureCheck: 20 * time.Millisecond, CancelGrace: 100 * time.Millisecond, IntentIDs: counterIDs(),
	})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- r.recon.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-served })
	waitFor(t, "reconciler serving", func() bool {
		r.recon.mu.Lock()
		defer r.recon.mu.Unlock()
		return r.recon.base != nil
	})

	cfg := Config{
		Self:      r.nodeB.ID(),
		Hostname:  "node-b",
		Trust:     owner.NewTrust(owner.KeyOf(r.ownerK)),
		Store:     r.store,
		Scanner:   r.scanner,
		Lifecycle: r.recon,
		Now:       func() time.Time { return r.now },
	}
	for _, o := range opts {
		o(&cfg)
	}
	r.server, err = NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.server.Close)
	r.meshB = meshNode(t, r.nodeB)
	r.meshB.HandleControl(r.server.ServeConn)
	return r
}

func counterIDs() func() string {
	var mu sync.Mutex
	n := 0
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		n++
		return fmt.Sprintf("intent-%d", n)
	}
}

// dial connects to B as key, presenting c.
func (r *rig) dial(key *identity.Key, c *nodev1.SignedNodeOwnership, t ClientTimeouts) *Client {
	r.t.Helper()
	cl, err := Dial(context.Background(), r.meshB.EndpointAddr(), ClientConfig{Key: key, Ownership: c, Timeouts: t})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { cl.Close() })
	return cl
}

// owned is a client for node A with a valid certificate from the owner.
func (r *rig) owned() *Client {
	return r.dial(r.nodeA, cert(r.t, r.ownerK, r.nodeA.ID(), t0, 24*time.Hour), ClientTimeouts{})
}

// rawConn is a bare mesh-llm-control/1 connection to B as key, for
// sending what a well-behaved Client never would.
func (r *rig) rawConn(key *identity.Key) *quic.Conn {
	r.t.Helper()
	tlsConf, err := identity.ClientConfig(key, r.nodeB.ID(), identity.ALPNControl)
	if err != nil {
		r.t.Fatal(err)
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		r.t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := tr.Dial(ctx, net.UDPAddrFromAddrPort(r.meshB.LocalAddr()), tlsConf, &quic.Config{MaxIncomingStreams: -1})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		c.CloseWithError(0, "")
		tr.Close()
		udp.Close()
	})
	return c
}

// exchange opens a stream on c, writes frames (envelopes, or raw bytes),
// and returns the first envelope the server answers with.
func exchange(t *testing.T, c *quic.Conn, frames ...any) *nodev1.OwnerControlEnvelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.CancelRead(0)
	for _, f := range frames {
		switch f := f.(type) {
		case *nodev1.OwnerControlEnvelope:
			err = wire.WriteFrame(ctx, st, f)
		case []byte:
			_, err = st.Write(f)
		default:
			t.Fatalf("frame of type %T", f)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	body, err := wire.ReadFrame(ctx, st, nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	env, err := wire.DecodeOwnerControlEnvelope(body)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// getConfig is a get_config request from requester to target.
func getConfig(id uint64, requester, target identity.EndpointID) *nodev1.OwnerControlEnvelope {
	return wire.RequestEnvelope(&nodev1.OwnerControlRequest{RequestId: id,
		GetConfig: &nodev1.OwnerControlGetConfigRequest{RequesterNodeId: requester[:], TargetNodeId: target[:]}})
}

func wantCode(t *testing.T, err error, want *Error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error %v, want %s", err, CodeName(want.Code))
	}
}

func bytesOf(id identity.EndpointID) []byte { return id[:] }

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// fakeRuntime holds models on "disk"; loading one makes an instance.
// Loads of a model fail while failLoads[model] > 0. Each instance counts
// its in-flight work.
type fakeRuntime struct {
	mu        sync.Mutex
	disk      []string
	instances map[string]string // canonical ref -> instance id
	failLoads map[string]int
	loads     map[string]int
	loadGate  chan struct{} // when set, Load waits on it
	drains    map[string]*fakeDrain
	nextInst  int
}

func newFakeRuntime(models ...string) *fakeRuntime {
	return &fakeRuntime{disk: models, instances: map[string]string{}, failLoads: map[string]int{},
		loads: map[string]int{}, drains: map[string]*fakeDrain{}}
}

func (f *fakeRuntime) Resolve(ref *nodev1.OwnerControlModelRef) (Model, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id := ref.GetInstanceId(); id != "" {
		for m, inst := range f.instances {
			if inst == id {
				return Model{CanonicalRef: m, InstanceID: inst}, nil
			}
		}
		return Model{}, fmt.Errorf("%w: no instance %q", ErrUnknownModel, id)
	}
	m := ref.GetCanonicalModelRef()
	if !slices.Contains(f.disk, m) {
		return Model{}, fmt.Errorf("%w: %q", ErrUnknownModel, m)
	}
	return Model{CanonicalRef: m, InstanceID: f.instances[m]}, nil
}

func (f *fakeRuntime) Load(ctx context.Context, ref, profile string) (string, error) {
	f.mu.Lock()
	gate := f.loadGate
	f.loads[ref]++
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failLoads[ref] > 0 {
		f.failLoads[ref]--
		return "", errors.New("out of memory")
	}
	f.nextInst++
	inst := fmt.Sprintf("%s#%d", ref, f.nextInst)
	f.instances[ref] = inst
	return inst, nil
}

func (f *fakeRuntime) Unload(ctx context.Context, inst string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for m, i := range f.instances {
		if i == inst {
			delete(f.instances, m)
			return nil
		}
	}
	return fmt.Errorf("no instance %q", inst)
}

func (f *fakeRuntime) Drain(inst string) (Drain, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.drains[inst]
	if d == nil {
		d = newFakeDrain(0)
		f.drains[inst] = d
	}
	d.draining = true
	return d, nil
}

func (f *fakeRuntime) state(ref string) (inst string, loads int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.instances[ref], f.loads[ref]
}

// fakeDrain is an instance's admitted work: inFlight requests, each done
// by finish() or all by Cancel.
type fakeDrain struct {
	mu        sync.Mutex
	inFlight  int
	idle      chan struct{}
	draining  bool
	cancelled bool
	resumed   bool
}

func newFakeDrain(inFlight int) *fakeDrain {
	d := &fakeDrain{inFlight: inFlight, idle: make(chan struct{})}
	if inFlight == 0 {
		close(d.idle)
	}
	return d
}

func (d *fakeDrain) Idle() <-chan struct{} { return d.idle }

func (d *fakeDrain) finish() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inFlight--
	if d.inFlight == 0 {
		close(d.idle)
	}
}

func (d *fakeDrain) Cancel() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cancelled = true
	if d.inFlight > 0 {
		d.inFlight = 0
		close(d.idle)
	}
}

func (d *fakeDrain) Resume() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.resumed, d.draining = true, false
}

func (d *fakeDrain) flags() (cancelled, resumed bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cancelled, d.resumed
}
