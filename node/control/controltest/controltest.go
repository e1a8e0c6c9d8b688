// Package controltest holds hand-written fakes of the node's side of owner
// control (Applier, Scanner, Runtime) and Start, a real mesh node serving
// owner control on loopback over them, for tests of control's clients
// (meshcli) and of a daemon's wiring.
package controltest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/control/owner"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// Seeds of the fixed keys tests use, so that ids in golden output are
// stable.
const (
	SeedOwner    = 1  // the owner
	SeedStranger = 2  // someone else's owner key
	SeedClient   = 10 // the owner's client: a first node, or meshcli
	SeedNode     = 11 // the node under control
	SeedIntruder = 12 // a QUIC identity the owner never certified
)

// T0 is the tests' epoch: certificates are issued at it.
var T0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Key is a fixed key derived from seed.
func Key(t testing.TB, seed byte) *identity.Key {
	t.Helper()
	k, err := identity.KeyFromSeed(bytes.Repeat([]byte{seed}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Cert is by's certificate for ep, valid from issued for ttl.
func Cert(t testing.TB, by *identity.Key, ep identity.EndpointID, issued time.Time, ttl time.Duration) *nodev1.SignedNodeOwnership {
	t.Helper()
	c, err := owner.Issue(by, owner.Options{Endpoint: ep, IssuedAt: issued, ExpiresAt: issued.Add(ttl)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// CounterIDs names intents intent-1, intent-2, ...
func CounterIDs() func() string {
	var mu sync.Mutex
	n := 0
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		n++
		return fmt.Sprintf("intent-%d", n)
	}
}

// MeshNode serves a real mesh node on loopback until the test ends.
func MeshNode(t testing.TB, key *identity.Key) *mesh.Node {
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

// Applier accepts any config but one whose config_toml is "reject", and
// applies live unless the config names a plugin (staged).
type Applier struct {
	mu      sync.Mutex
	applied []*nodev1.NodeConfigSnapshot
	block   chan struct{}
}

// Block makes Activate wait until ch is closed.
func (a *Applier) Block(ch chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.block = ch
}

// Applied lists the configs activated.
func (a *Applier) Applied() []*nodev1.NodeConfigSnapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.applied)
}

// Validate implements control.Applier.
func (a *Applier) Validate(cfg *nodev1.NodeConfigSnapshot) []*nodev1.ConfigDiagnostic {
	if cfg.GetConfigToml() != "reject" {
		return nil
	}
	return []*nodev1.ConfigDiagnostic{{
		Code:     nodev1.ConfigDiagnosticCode_CONFIG_DIAGNOSTIC_CODE_INVALID_VALUE,
		Severity: nodev1.ConfigDiagnosticSeverity_CONFIG_DIAGNOSTIC_SEVERITY_ERROR,
		Source:   nodev1.ConfigDiagnosticSource_CONFIG_DIAGNOSTIC_SOURCE_VALIDATION,
		Path:     proto.String("config_toml"),
		Message:  "config_toml must not say reject",
	}}
}

// Activate implements control.Applier.
func (a *Applier) Activate(ctx context.Context, cfg *nodev1.NodeConfigSnapshot) (nodev1.ConfigApplyMode, []*nodev1.ConfigDiagnostic) {
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

// Entries are inventory entries for refs, in the order given.
func Entries(refs ...string) []*nodev1.OwnerControlInventoryEntry {
	var out []*nodev1.OwnerControlInventoryEntry
	for i, r := range refs {
		out = append(out, &nodev1.OwnerControlInventoryEntry{
			CanonicalModelRef: r,
			TotalSizeBytes:    uint64(1 << (20 + i)),
			Metadata: &nodev1.CompactModelMetadata{ModelKey: r, Architecture: "llama", QuantizationType: "Q8_0",
				ContextLength: 2048, ParameterSize: proto.String(fmt.Sprintf("%dM", 10*(i+1)))},
		})
	}
	return out
}

// Scanner returns Entries (as given: a directory listing's order) or Err.
// With Gate set, each scan first announces itself on Started (when set)
// and then waits for Gate.
type Scanner struct {
	mu        sync.Mutex
	Entries   []*nodev1.OwnerControlInventoryEntry
	Err       error
	Started   chan struct{}
	Gate      chan struct{}
	scans     int
	published [][]*nodev1.OwnerControlInventoryEntry
}

// Set changes the scanner under its lock.
func (f *Scanner) Set(change func(*Scanner)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f)
}

// Scan implements control.Scanner.
func (f *Scanner) Scan(ctx context.Context) ([]*nodev1.OwnerControlInventoryEntry, error) {
	f.mu.Lock()
	f.scans++
	entries, err, started, gate := f.Entries, f.Err, f.Started, f.Gate
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

// Publish implements control.Scanner.
func (f *Scanner) Publish(entries []*nodev1.OwnerControlInventoryEntry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.published = append(f.published, entries)
}

// Counts is how many scans ran and how many were published.
func (f *Scanner) Counts() (scans, published int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.scans, len(f.published)
}

// Runtime holds models on "disk"; loading one makes an instance named
// "REF#N". Loads of a model fail while FailLoads says so.
type Runtime struct {
	mu        sync.Mutex
	disk      []string
	instances map[string]string // canonical ref -> instance id
	failLoads map[string]int
	loads     map[string]int
	loadGate  chan struct{}
	drains    map[string]*Drain
	next      int
}

// NewRuntime has models on disk, none loaded.
func NewRuntime(models ...string) *Runtime {
	return &Runtime{disk: models, instances: map[string]string{}, failLoads: map[string]int{},
		loads: map[string]int{}, drains: map[string]*Drain{}}
}

// FailLoads makes the next n loads of ref fail.
func (f *Runtime) FailLoads(ref string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failLoads[ref] = n
}

// GateLoads makes loads wait until ch is closed.
func (f *Runtime) GateLoads(ch chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loadGate = ch
}

// SetDrain gives an instance admitted work: Drain returns d for it.
func (f *Runtime) SetDrain(inst string, d *Drain) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drains[inst] = d
}

// State is ref's instance ("" when not loaded) and how many loads it saw.
func (f *Runtime) State(ref string) (inst string, loads int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.instances[ref], f.loads[ref]
}

// Resolve implements control.Runtime.
func (f *Runtime) Resolve(ref *nodev1.OwnerControlModelRef) (control.Model, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id := ref.GetInstanceId(); id != "" {
		for m, inst := range f.instances {
			if inst == id {
				return control.Model{CanonicalRef: m, InstanceID: inst}, nil
			}
		}
		return control.Model{}, fmt.Errorf("%w: no instance %q", control.ErrUnknownModel, id)
	}
	m := ref.GetCanonicalModelRef()
	if !slices.Contains(f.disk, m) {
		return control.Model{}, fmt.Errorf("%w: %q", control.ErrUnknownModel, m)
	}
	return control.Model{CanonicalRef: m, InstanceID: f.instances[m]}, nil
}

// Load implements control.Runtime.
func (f *Runtime) Load(ctx context.Context, ref, profile string) (string, error) {
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
	f.next++
	inst := fmt.Sprintf("%s#%d", ref, f.next)
	f.instances[ref] = inst
	return inst, nil
}

// Unload implements control.Runtime.
func (f *Runtime) Unload(ctx context.Context, inst string) error {
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

// Drain implements control.Runtime: an instance with no SetDrain has no
// work in flight.
func (f *Runtime) Drain(inst string) (control.Drain, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.drains[inst]
	if d == nil {
		d = NewDrain(0)
		f.drains[inst] = d
	}
	return d, nil
}

// Drain is an instance's admitted work: n requests, each ended by Finish
// or all by Cancel.
type Drain struct {
	mu        sync.Mutex
	inFlight  int
	idle      chan struct{}
	cancelled bool
	resumed   bool
	stubborn  bool
}

// NewDrain has n requests in flight.
func NewDrain(n int) *Drain {
	d := &Drain{inFlight: n, idle: make(chan struct{})}
	if n == 0 {
		close(d.idle)
	}
	return d
}

// Idle implements control.Drain.
func (d *Drain) Idle() <-chan struct{} { return d.idle }

// Finish ends one request.
func (d *Drain) Finish() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inFlight--
	if d.inFlight == 0 {
		close(d.idle)
	}
}

// IgnoreCancel makes the work carry on after Cancel, as work stuck
// where cancellation does not reach would.
func (d *Drain) IgnoreCancel() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stubborn = true
}

// Cancel implements control.Drain.
func (d *Drain) Cancel() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cancelled = true
	if d.inFlight > 0 && !d.stubborn {
		d.inFlight = 0
		close(d.idle)
	}
}

// Resume implements control.Drain.
func (d *Drain) Resume() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.resumed = true
}

// Flags say whether the work was cancelled and the drain called off.
func (d *Drain) Flags() (cancelled, resumed bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cancelled, d.resumed
}

// WaitFor polls cond for up to five seconds.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// StartReconciler serves a reconciler over rt until the test ends.
func StartReconciler(t testing.TB, rt control.Runtime, cfg control.ReconcilerConfig) *control.Reconciler {
	t.Helper()
	if cfg.IntentIDs == nil {
		cfg.IntentIDs = CounterIDs()
	}
	r := control.NewReconciler(rt, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	WaitFor(t, "the reconciler serving", r.Serving)
	return r
}

// Options tune Start.
type Options struct {
	// Now is the server's clock (T0 plus an hour by default).
	Now func() time.Time
	// Reconciler tunes the reconciler; by default its delays are
	// milliseconds.
	Reconciler *control.ReconcilerConfig
	// Config adjusts the server's configuration before it is built.
	Config func(*control.Config)
}

// Node is a real mesh node serving owner control over the fakes. Its key
// is Key(SeedNode); it trusts Key(SeedOwner).
type Node struct {
	Owner      *identity.Key
	Key        *identity.Key
	Mesh       *mesh.Node
	Server     *control.Server
	Store      *control.FileStore
	Applier    *Applier
	Scanner    *Scanner
	Runtime    *Runtime
	Reconciler *control.Reconciler
	// Secret is the local control credential the REST facade requires.
	Secret string
}

// Secret is every test node's local control credential.
const Secret = "5ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7"

// Start builds and serves a Node until the test ends. Its config starts
// at revision 0 as {version: 1}; its disk holds alpha, mid and zeta, of
// which the runtime can load alpha and zeta.
func Start(t testing.TB, o Options) *Node {
	t.Helper()
	n := &Node{Owner: Key(t, SeedOwner), Key: Key(t, SeedNode), Applier: &Applier{},
		Scanner: &Scanner{Entries: Entries("zeta", "alpha", "mid")}, Runtime: NewRuntime("alpha", "zeta"), Secret: Secret}
	var err error
	n.Store, err = control.OpenFileStore(filepath.Join(t.TempDir(), "owner-config"), &nodev1.NodeConfigSnapshot{Version: 1}, n.Applier)
	if err != nil {
		t.Fatal(err)
	}
	rc := control.ReconcilerConfig{DrainTimeout: 200 * time.Millisecond, RetryMin: 5 * time.Millisecond,
		RetryMax: 20 * time.Millisecond, EnsureCheck: 20 * time.Millisecond, CancelGrace: 100 * time.Millisecond}
	if o.Reconciler != nil {
		rc = *o.Reconciler
	}
	n.Reconciler = StartReconciler(t, n.Runtime, rc)
	now := o.Now
	if now == nil {
		now = func() time.Time { return T0.Add(time.Hour) }
	}
	cfg := control.Config{
		Self:        n.Key.ID(),
		Hostname:    "node-b",
		Trust:       owner.NewTrust(owner.KeyOf(n.Owner)),
		Store:       n.Store,
		Scanner:     n.Scanner,
		Lifecycle:   n.Reconciler,
		Now:         now,
		LocalSecret: n.Secret,
	}
	if o.Config != nil {
		o.Config(&cfg)
	}
	if n.Server, err = control.NewServer(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Server.Close)
	n.Mesh = MeshNode(t, n.Key)
	n.Mesh.HandleControl(n.Server.ServeConn)
	return n
}

// Token is the node's control endpoint token.
func (n *Node) Token(t testing.TB) string {
	t.Helper()
	tok, err := control.EncodeEndpoint(n.Mesh.EndpointAddr())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Dial is a client of the node as key, presenting c.
func (n *Node) Dial(t testing.TB, key *identity.Key, c *nodev1.SignedNodeOwnership, timeouts control.ClientTimeouts) *control.Client {
	t.Helper()
	cl, err := control.Dial(context.Background(), n.Mesh.EndpointAddr(), control.ClientConfig{Key: key, Ownership: c, Timeouts: timeouts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// Owned is a client with a valid certificate from the owner, as
// Key(SeedClient).
func (n *Node) Owned(t testing.TB) *control.Client {
	t.Helper()
	k := Key(t, SeedClient)
	return n.Dial(t, k, Cert(t, n.Owner, k.ID(), T0, 24*time.Hour), control.ClientTimeouts{})
}

// HTTP serves the node's REST facade on loopback until the test ends.
func (n *Node) HTTP(t testing.TB) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(n.Server.HTTPHandler())
	t.Cleanup(srv.Close)
	return srv
}
