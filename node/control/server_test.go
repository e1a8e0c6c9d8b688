package control_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/control/controltest"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// TestConfigCommands: get, apply (live, staged, no-op, rejected,
// conflicting) and watch, between two real nodes.
func TestConfigCommands(t *testing.T) {
	r := newRig(t)
	c := r.owned()
	ctx := context.Background()

	snap, err := c.GetConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h0, _ := control.ConfigHash(&nodev1.NodeConfigSnapshot{Version: 1})
	if snap.GetRevision() != 0 || !bytes.Equal(snap.GetConfigHash(), h0[:]) || snap.GetHostname() != "node-b" ||
		!bytes.Equal(snap.GetNodeId(), bytesOf(r.Key.ID())) {
		t.Fatalf("initial snapshot: %v", snap)
	}

	w, err := c.WatchConfig(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	first, err := w.Next(ctx)
	if err != nil || !bytes.Equal(first.GetAccepted().GetTargetNodeId(), bytesOf(r.Key.ID())) {
		t.Fatalf("watch acceptance: %v, %v", first, err)
	}

	cfg := &nodev1.NodeConfigSnapshot{Version: 1, Models: []*nodev1.NodeModelEntry{{Model: "alpha"}}}
	res, err := c.ApplyConfig(ctx, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h1, _ := control.ConfigHash(cfg)
	if !res.GetSuccess() || res.GetCurrentRevision() != 1 || res.GetApplyMode() != nodev1.ConfigApplyMode_CONFIG_APPLY_MODE_LIVE ||
		!bytes.Equal(res.GetConfigHash(), h1[:]) {
		t.Fatalf("apply: %v", res)
	}
	up, err := w.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if u := up.GetUpdate(); u.GetRevision() != 1 || !bytes.Equal(u.GetConfigHash(), h1[:]) || !proto.Equal(u.GetConfig(), cfg) {
		t.Fatalf("watch update: %v", up)
	}

	// A stale revision conflicts and reports the current one.
	_, err = c.ApplyConfig(ctx, 0, &nodev1.NodeConfigSnapshot{Version: 2})
	var e *control.Error
	if !errors.As(err, &e) || e.Code != control.ErrRevisionConflict.Code || e.CurrentRevision != 1 {
		t.Fatalf("stale apply: %v", err)
	}
	// The same config again is a no-op at the same revision.
	if res, err = c.ApplyConfig(ctx, 1, cfg); err != nil || !res.GetSuccess() || res.GetCurrentRevision() != 1 ||
		res.GetApplyMode() != nodev1.ConfigApplyMode_CONFIG_APPLY_MODE_NOOP {
		t.Fatalf("identical apply: %v, %v", res, err)
	}
	// A rejected config changes nothing and says why.
	res, err = c.ApplyConfig(ctx, 1, &nodev1.NodeConfigSnapshot{ConfigToml: proto.String("reject")})
	if err != nil || res.GetSuccess() || res.GetCurrentRevision() != 1 || len(res.GetDiagnostics()) != 1 ||
		!strings.Contains(res.GetError(), "must not say reject") {
		t.Fatalf("rejected apply: %v, %v", res, err)
	}
	// A config needing a restart is staged.
	staged := &nodev1.NodeConfigSnapshot{Plugins: []*nodev1.NodePluginEntry{{Name: "p"}}}
	if res, err = c.ApplyConfig(ctx, 1, staged); err != nil || res.GetApplyMode() != nodev1.ConfigApplyMode_CONFIG_APPLY_MODE_STAGED ||
		res.GetCurrentRevision() != 2 {
		t.Fatalf("staged apply: %v, %v", res, err)
	}
	if up, err = w.Next(ctx); err != nil || up.GetUpdate().GetRevision() != 2 {
		t.Fatalf("second update: %v, %v", up, err)
	}
	if snap, err = c.GetConfig(ctx); err != nil || snap.GetRevision() != 2 || !proto.Equal(snap.GetConfig(), staged) {
		t.Fatalf("after applies: %v, %v", snap, err)
	}

	// A watch that asks for the snapshot starts from it.
	w2, err := c.WatchConfig(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if first, err = w2.Next(ctx); err != nil || first.GetSnapshot().GetRevision() != 2 {
		t.Fatalf("snapshot watch: %v, %v", first, err)
	}
}

// TestUnknownFieldsWarned: a config from a newer client is kept whole
// (its hash covers the unknown fields) and the owner is warned.
func TestUnknownFieldsWarned(t *testing.T) {
	r := newRig(t)
	c := r.owned()
	cfg := &nodev1.NodeConfigSnapshot{Models: []*nodev1.NodeModelEntry{{Model: "alpha"}}}
	cfg.Models[0].ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7))
	res, err := c.ApplyConfig(context.Background(), 0, cfg)
	if err != nil || !res.GetSuccess() {
		t.Fatalf("apply: %v, %v", res, err)
	}
	if d := res.GetDiagnostics(); len(d) != 1 || d[0].GetCode() != nodev1.ConfigDiagnosticCode_CONFIG_DIAGNOSTIC_CODE_UNKNOWN_FIELD {
		t.Fatalf("diagnostics: %v", d)
	}
	want, _ := control.ConfigHash(cfg)
	if !bytes.Equal(res.GetConfigHash(), want[:]) {
		t.Fatal("the stored config lost its unknown fields")
	}
}

// TestRefreshInventory: entries sorted, EXECUTED, with the legacy
// snapshot, and published to the node.
func TestRefreshInventory(t *testing.T) {
	r := newRig(t)
	resp, err := r.owned().RefreshInventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	inv := resp.GetInventory()
	var refs []string
	for _, e := range inv.GetEntries() {
		refs = append(refs, e.GetCanonicalModelRef())
	}
	if strings.Join(refs, ",") != "alpha,mid,zeta" || inv.GetDisposition() != dispExecuted {
		t.Fatalf("inventory %v %v", refs, inv.GetDisposition())
	}
	if resp.GetSnapshot().GetRevision() != 0 || len(resp.GetSnapshot().GetConfigHash()) != 32 {
		t.Fatalf("legacy snapshot: %v", resp.GetSnapshot())
	}
	if scans, published := r.Scanner.Counts(); scans != 1 || published != 1 {
		t.Fatalf("%d scans, %d published", scans, published)
	}
}

// TestRefreshCoalesces: callers arriving during a scan join it and get
// the same snapshot; a failed scan fails every caller and publishes
// nothing, so the last good projection stays.
func TestRefreshCoalesces(t *testing.T) {
	r := newRig(t)
	c := r.owned()
	r.Scanner.Set(func(f *controltest.Scanner) { f.Started, f.Gate = make(chan struct{}, 1), make(chan struct{}) })
	const callers = 5
	type result struct {
		resp *nodev1.OwnerControlRefreshInventoryResponse
		err  error
	}
	run := func() []result {
		results := make(chan result, callers)
		go func() {
			resp, err := c.RefreshInventory(context.Background())
			results <- result{resp, err}
		}()
		<-r.Scanner.Started
		for range callers - 1 {
			go func() {
				resp, err := c.RefreshInventory(context.Background())
				results <- result{resp, err}
			}()
		}
		waitFor(t, "callers to join the scan", func() bool { return control.InventoryWaiting(r.Server) == callers })
		r.Scanner.Gate <- struct{}{}
		var out []result
		for range callers {
			out = append(out, <-results)
		}
		return out
	}

	executed, coalesced := 0, 0
	var first []*nodev1.OwnerControlInventoryEntry
	for _, res := range run() {
		if res.err != nil {
			t.Fatal(res.err)
		}
		inv := res.resp.GetInventory()
		switch inv.GetDisposition() {
		case dispExecuted:
			executed++
		case dispCoalesced:
			coalesced++
		}
		if first == nil {
			first = inv.GetEntries()
		} else if !equalEntries(first, inv.GetEntries()) {
			t.Fatal("joiners got a different snapshot")
		}
	}
	if executed != 1 || coalesced != callers-1 {
		t.Fatalf("%d executed, %d coalesced", executed, coalesced)
	}
	if scans, published := r.Scanner.Counts(); scans != 1 || published != 1 {
		t.Fatalf("%d scans, %d published, want 1 each", scans, published)
	}

	r.Scanner.Set(func(f *controltest.Scanner) { f.Err = errors.New("models dir unreadable") })
	for _, res := range run() {
		if !errors.Is(res.err, control.ErrUnavailable) || !strings.Contains(res.err.Error(), "models dir unreadable") {
			t.Fatalf("failed scan gave %v", res.err)
		}
	}
	if scans, published := r.Scanner.Counts(); scans != 2 || published != 1 {
		t.Fatalf("after a failed scan: %d scans, %d published; the failure must not be published", scans, published)
	}
}

func equalEntries(a, b []*nodev1.OwnerControlInventoryEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// TestScanRules: a scan past its deadline fails, and so does one that
// lists a ref twice or a blank one.
func TestScanRules(t *testing.T) {
	t.Run("deadline", func(t *testing.T) {
		r := newRig(t, func(c *control.Config) { c.Timeouts.Scan = 50 * time.Millisecond })
		r.Scanner.Set(func(f *controltest.Scanner) { f.Gate = make(chan struct{}) }) // never opened
		_, err := r.owned().RefreshInventory(context.Background())
		if !errors.Is(err, control.ErrUnavailable) || !strings.Contains(err.Error(), "did not finish within 50ms") {
			t.Fatalf("slow scan: %v", err)
		}
	})
	for name, refs := range map[string][]string{"duplicate": {"a", "b", "a"}, "blank": {"a", " "}} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t)
			r.Scanner.Set(func(f *controltest.Scanner) { f.Entries = controltest.Entries(refs...) })
			if _, err := r.owned().RefreshInventory(context.Background()); !errors.Is(err, control.ErrUnavailable) {
				t.Fatalf("bad inventory: %v", err)
			}
			if _, published := r.Scanner.Counts(); published != 0 {
				t.Fatal("a bad inventory was published")
			}
		})
	}
}

// TestLifecycleCommands: the four intents over the wire.
func TestLifecycleCommands(t *testing.T) {
	r := newRig(t)
	c := r.owned()
	ctx := context.Background()
	ref := func(s string) *nodev1.OwnerControlModelRef { return &nodev1.OwnerControlModelRef{CanonicalModelRef: s} }

	a, err := c.Lifecycle(ctx, control.Intent{Kind: control.IntentLoad, Model: ref("alpha"), Profile: "fast"})
	if err != nil || a.IntentID != "intent-1" || a.State != control.StateLoading || a.Target.GetCanonicalModelRef() != "alpha" {
		t.Fatalf("load: %+v, %v", a, err)
	}
	waitFor(t, "alpha loaded", func() bool { inst, _ := r.Runtime.State("alpha"); return inst != "" })
	inst, _ := r.Runtime.State("alpha")

	a, err = c.Lifecycle(ctx, control.Intent{Kind: control.IntentEnsure, Model: ref("alpha")})
	if err != nil || a.State != control.StateLoaded || a.Target.GetInstanceId() != inst {
		t.Fatalf("ensure of a loaded model: %+v, %v", a, err)
	}
	a, err = c.Lifecycle(ctx, control.Intent{Kind: control.IntentDrain, Model: &nodev1.OwnerControlModelRef{InstanceId: &inst}, DrainTimeout: time.Second})
	if err != nil || a.State != control.StateDraining || a.Target.GetCanonicalModelRef() != "alpha" {
		t.Fatalf("drain by instance: %+v, %v", a, err)
	}
	waitFor(t, "alpha drained", func() bool { inst, _ := r.Runtime.State("alpha"); return inst == "" })

	if a, err = c.Lifecycle(ctx, control.Intent{Kind: control.IntentUnload, Model: ref("zeta")}); err != nil || a.State != control.StateUnloaded {
		t.Fatalf("unload of an unloaded model: %+v, %v", a, err)
	}
	_, err = c.Lifecycle(ctx, control.Intent{Kind: control.IntentLoad, Model: ref("nonesuch")})
	wantCode(t, err, control.ErrBadRequest)
}

// TestAuthorization: only the owner's endpoints, presenting certificates
// bound to themselves, valid now, for requests addressed to this node
// from themselves, get through.
func TestAuthorization(t *testing.T) {
	r := newRig(t)
	stranger, intruder := key(t, controltest.SeedStranger), key(t, controltest.SeedIntruder)
	nodeA, nodeB := r.nodeA.ID(), r.Key.ID()
	good := cert(t, r.Owner, nodeA, t0, 24*time.Hour)
	tests := []struct {
		name string
		as   *identity.Key
		c    *nodev1.SignedNodeOwnership
		req  *nodev1.OwnerControlEnvelope
		want *control.Error
	}{
		{"wrong owner", r.nodeA, cert(t, stranger, nodeA, t0, 24*time.Hour), getConfig(1, nodeA, nodeB), control.ErrUnauthorized},
		{"expired ownership", r.nodeA, cert(t, r.Owner, nodeA, t0.Add(-48*time.Hour), 24*time.Hour), getConfig(1, nodeA, nodeB), control.ErrUnauthorized},
		{"not yet valid", r.nodeA, cert(t, r.Owner, nodeA, t0.Add(2*time.Hour), 24*time.Hour), getConfig(1, nodeA, nodeB), control.ErrUnauthorized},
		{"handshake replayed by another identity", intruder, good, getConfig(1, intruder.ID(), nodeB), control.ErrInvalidHandshake},
		{"forged signature", r.nodeA, func() *nodev1.SignedNodeOwnership {
			c := proto.CloneOf(good)
			c.Signature[5] ^= 0x40
			return c
		}(), getConfig(1, nodeA, nodeB), control.ErrInvalidHandshake},
		{"wrong target", r.nodeA, good, getConfig(7, nodeA, nodeA), control.ErrTargetMismatch},
		{"requester is not the connection", r.nodeA, good, getConfig(7, intruder.ID(), nodeB), control.ErrUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := exchange(t, r.rawConn(tt.as), wire.HandshakeEnvelope(tt.c), tt.req)
			e := env.GetError()
			if e == nil || e.GetCode() != tt.want.Code {
				t.Fatalf("answer %v, want %s", env, control.CodeName(tt.want.Code))
			}
		})
	}
	// Through the typed client, an error reaches the caller as *control.Error.
	cl := r.dial(r.nodeA, cert(t, stranger, nodeA, t0, 24*time.Hour), control.ClientTimeouts{})
	_, err := cl.GetConfig(context.Background())
	wantCode(t, err, control.ErrUnauthorized)
	if env := exchange(t, r.rawConn(r.nodeA), wire.HandshakeEnvelope(good), getConfig(7, nodeA, nodeA)); env.GetError().GetRequestId() != 7 {
		t.Fatalf("a refused request's error must name it: %v", env)
	}
}

// TestNoOwner: a node that trusts no owner refuses everyone.
func TestNoOwner(t *testing.T) {
	r := newRig(t, func(c *control.Config) { c.Trust = nil })
	_, err := r.owned().GetConfig(context.Background())
	wantCode(t, err, control.ErrUnauthorized)
}

// TestMalformedStreams: what a confused or hostile client sends is
// answered with a typed error, never a crash or a hang.
func TestMalformedStreams(t *testing.T) {
	r := newRig(t)
	nodeA, nodeB := r.nodeA.ID(), r.Key.ID()
	hs := wire.HandshakeEnvelope(cert(t, r.Owner, nodeA, t0, 24*time.Hour))
	unknown := func(id uint64) []byte {
		// A request with only field 10: a command from a newer client.
		var inner []byte
		inner = protowire.AppendTag(inner, 1, protowire.VarintType)
		inner = protowire.AppendVarint(inner, id)
		inner = protowire.AppendTag(inner, 10, protowire.BytesType)
		inner = protowire.AppendBytes(inner, []byte{0x0a, 0x20})
		var env []byte
		env = protowire.AppendTag(env, 1, protowire.VarintType)
		env = protowire.AppendVarint(env, 1)
		env = protowire.AppendTag(env, 3, protowire.BytesType)
		env = protowire.AppendBytes(env, inner)
		f, _ := wire.AppendRawFrame(nil, env)
		return f
	}
	oversize := binary.LittleEndian.AppendUint32(nil, wire.MaxControlFrameBytes+1)
	tests := []struct {
		name   string
		frames []any
		want   *control.Error
		id     uint64
	}{
		{"request before handshake", []any{getConfig(1, nodeA, nodeB)}, control.ErrInvalidHandshake, 0},
		{"garbage handshake", []any{[]byte{3, 0, 0, 0, 0xff, 0xff, 0xff}}, control.ErrInvalidHandshake, 0},
		{"oversize handshake", []any{oversize}, control.ErrInvalidHandshake, 0},
		{"zero request id", []any{hs, getConfig(0, nodeA, nodeB)}, control.ErrBadRequest, 0},
		{"two commands", []any{hs, wire.RequestEnvelope(&nodev1.OwnerControlRequest{RequestId: 4,
			GetConfig:   &nodev1.OwnerControlGetConfigRequest{RequesterNodeId: nodeA[:], TargetNodeId: nodeB[:]},
			WatchConfig: &nodev1.OwnerControlWatchConfigRequest{RequesterNodeId: nodeA[:], TargetNodeId: nodeB[:]}})}, control.ErrBadRequest, 4},
		{"unknown command", []any{hs, unknown(9)}, control.ErrUnknownCommand, 9},
		{"second handshake", []any{hs, hs}, control.ErrBadRequest, 0},
		{"oversize request", []any{hs, oversize}, control.ErrBadRequest, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := exchange(t, r.rawConn(r.nodeA), tt.frames...)
			if e := env.GetError(); e.GetCode() != tt.want.Code || e.GetRequestId() != tt.id {
				t.Fatalf("answer %v, want %s for request %d", env, control.CodeName(tt.want.Code), tt.id)
			}
		})
	}
}

// TestServerDeadlines: a client that sends nothing is cut off at the
// handshake and request deadlines.
func TestServerDeadlines(t *testing.T) {
	r := newRig(t, func(c *control.Config) {
		c.Timeouts.Handshake = 50 * time.Millisecond
		c.Timeouts.Request = 50 * time.Millisecond
	})
	hs := wire.HandshakeEnvelope(cert(t, r.Owner, r.nodeA.ID(), t0, 24*time.Hour))
	// A stream the client opens but never writes to does not exist for the
	// server yet, so the stalled handshake is a partial length prefix.
	for name, frames := range map[string][]any{"handshake": {[]byte{5, 0}}, "request": {hs}} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			env := exchange(t, r.rawConn(r.nodeA), frames...)
			if !strings.Contains(env.GetError().GetMessage(), "deadline exceeded") {
				t.Fatalf("answer %v, want a deadline error", env)
			}
			if time.Since(start) > 3*time.Second {
				t.Fatal("the server waited far past its deadline")
			}
		})
	}
}

// TestUnauthenticatedConnsClosed: a connection that presents no accepted
// handshake in time is closed, whether it stays silent or is refused; an
// owner's connection stays.
func TestUnauthenticatedConnsClosed(t *testing.T) {
	const window = 2 * time.Second // room for the owner and the refused stranger to be answered on a loaded machine
	r := newRig(t, func(c *control.Config) { c.Timeouts.Authenticate = window })
	owned := r.owned()
	if _, err := owned.GetConfig(context.Background()); err != nil {
		t.Fatal(err)
	}
	stranger := key(t, controltest.SeedStranger)
	silent := r.rawConn(stranger)
	refused := r.rawConn(stranger)
	env := exchange(t, refused, wire.HandshakeEnvelope(cert(t, stranger, stranger.ID(), t0, 24*time.Hour)), getConfig(1, stranger.ID(), r.Key.ID()))
	if env.GetError().GetCode() != control.ErrUnauthorized.Code {
		t.Fatalf("stranger's handshake: %v", env)
	}
	for name, c := range map[string]*quic.Conn{"silent": silent, "refused": refused} {
		select {
		case <-c.Context().Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("%s stranger's connection still open", name)
		}
		var ae *quic.ApplicationError
		if err := context.Cause(c.Context()); !errors.As(err, &ae) || !ae.Remote || ae.ErrorCode != mesh.CodeNotAdmitted {
			t.Fatalf("%s stranger's connection ended with %v, want code %#x from the node", name, err, mesh.CodeNotAdmitted)
		}
	}
	// Both strangers came after the owner: its window has long passed.
	if _, err := owned.GetConfig(context.Background()); err != nil {
		t.Fatalf("owner's connection after the window: %v", err)
	}
}

// TestClientDeadlines: a node slower than the protocol's bounds gives
// the client a deadline error, not a hang.
func TestClientDeadlines(t *testing.T) {
	r := newRig(t)
	block := make(chan struct{})
	defer close(block)
	r.Applier.Block(block)
	c := r.dial(r.nodeA, cert(t, r.Owner, r.nodeA.ID(), t0, 24*time.Hour), control.ClientTimeouts{Unary: 50 * time.Millisecond})
	_, err := c.ApplyConfig(context.Background(), 0, &nodev1.NodeConfigSnapshot{Version: 9})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow apply: %v", err)
	}
}

// TestStreamWorkerLimit: a connection gets at most MaxStreams workers; a
// further stream waits for a permit.
func TestStreamWorkerLimit(t *testing.T) {
	r := newRig(t, func(c *control.Config) { c.MaxStreams = 2 })
	c := r.dial(r.nodeA, cert(t, r.Owner, r.nodeA.ID(), t0, 24*time.Hour), control.ClientTimeouts{})
	ctx := context.Background()
	var watches []control.ConfigWatch
	for range 2 {
		w, err := c.WatchConfig(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		watches = append(watches, w)
	}
	// Only the third watch has a short wait: the two before it are
	// accepted however slow the machine.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := c.WatchConfig(short, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third stream with two workers busy: %v", err)
	}
	watches[0].Close()
	watches[1].Close()
	// The abandoned third stream and the closed watches free their
	// permits; the connection serves again.
	waitFor(t, "a permit", func() bool {
		w, err := c.WatchConfig(ctx, false)
		if err == nil {
			w.Close()
		}
		return err == nil
	})
}

// TestOversizeResponse: a response over the frame limit is replaced by
// CONTROL_UNAVAILABLE.
func TestOversizeResponse(t *testing.T) {
	r := newRig(t)
	huge := &nodev1.NodeConfigSnapshot{ConfigToml: proto.String(strings.Repeat("x", wire.MaxControlFrameBytes-100))}
	if _, err := r.Store.Apply(context.Background(), 0, huge); err != nil {
		t.Fatal(err)
	}
	_, err := r.owned().GetConfig(context.Background())
	wantCode(t, err, control.ErrUnavailable)
	if !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("error %v does not say why", err)
	}
}

// TestControlNotServed: a node without owner control refuses the
// connection, which the client reports as CONTROL_UNAVAILABLE.
func TestControlNotServed(t *testing.T) {
	n := controltest.MeshNode(t, key(t, controltest.SeedNode))
	ownerK, a := key(t, controltest.SeedOwner), key(t, controltest.SeedClient)
	c, err := control.Dial(context.Background(), n.EndpointAddr(), control.ClientConfig{Key: a, Ownership: cert(t, ownerK, a.ID(), t0, time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.GetConfig(context.Background())
	wantCode(t, err, control.ErrUnavailable)
}

// TestOldPeer: a node that predates a command answers UNKNOWN_COMMAND,
// which the client reports as CONTROL_UNSUPPORTED; an old node's
// snapshot-only inventory answer is accepted as it is.
func TestOldPeer(t *testing.T) {
	ownerK, a, b := key(t, controltest.SeedOwner), key(t, controltest.SeedClient), key(t, controltest.SeedNode)
	n := controltest.MeshNode(t, b)
	old := &oldServer{self: b.ID()}
	n.HandleControl(old.serve)
	c, err := control.Dial(context.Background(), n.EndpointAddr(), control.ClientConfig{Key: a, Ownership: cert(t, ownerK, a.ID(), time.Now(), time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for _, k := range []control.IntentKind{control.IntentLoad, control.IntentUnload, control.IntentEnsure, control.IntentDrain} {
		_, err := c.Lifecycle(ctx, control.Intent{Kind: k, Model: &nodev1.OwnerControlModelRef{CanonicalModelRef: "m"}})
		wantCode(t, err, control.ErrUnsupported)
	}
	resp, err := c.RefreshInventory(ctx)
	if err != nil || resp.GetInventory() != nil || resp.GetSnapshot().GetRevision() != 4 {
		t.Fatalf("old inventory answer: %v, %v", resp, err)
	}
}

// oldServer speaks the protocol as a node from before the lifecycle
// commands and the rich inventory did.
type oldServer struct {
	self identity.EndpointID
}

func (o *oldServer) serve(ctx context.Context, conn *quic.Conn, peer identity.EndpointID) {
	for {
		st, err := conn.AcceptStream(ctx)
		if err != nil {
			return
		}
		go func() {
			defer st.Close()
			hs, _ := wire.ReadFrame(ctx, st, nil)
			if env, err := wire.DecodeOwnerControlEnvelope(hs); err != nil || env.GetHandshake() == nil {
				return
			}
			body, err := wire.ReadFrame(ctx, st, nil)
			if err != nil {
				return
			}
			env, err := wire.DecodeOwnerControlEnvelope(body)
			if err != nil {
				return
			}
			req := env.GetRequest()
			var out *nodev1.OwnerControlEnvelope
			switch wire.RequestCommand(req) {
			case wire.CommandRefreshInventory:
				out, _ = wire.ResponseEnvelope(&nodev1.OwnerControlResponse{RequestId: req.GetRequestId(),
					RefreshInventory: &nodev1.OwnerControlRefreshInventoryResponse{Snapshot: &nodev1.OwnerControlConfigSnapshot{
						NodeId: o.self[:], Revision: 4, ConfigHash: make([]byte, 32), Config: &nodev1.NodeConfigSnapshot{}}}})
			default:
				out = wire.ErrorEnvelope(control.ErrUnknownCommand.Code, "unknown command", req.GetRequestId())
			}
			_ = wire.WriteFrame(ctx, st, out)
		}()
	}
}
