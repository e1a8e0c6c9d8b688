package node

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/internal/netsim"
	"github.com/meshnode/meshnode/internal/racebuild"
	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/stage"
	"github.com/meshnode/meshnode/node/stageplan"
	"github.com/meshnode/meshnode/node/wire/nodev1"
	"github.com/meshnode/meshnode/node/wire/stagewire"
)

// splitBudget is a memory budget under which the built-in model fits no
// single node but half of it, with either its embeddings or its head,
// fits one.
func splitBudget(t *testing.T, headroom int64) ByteSize {
	t.Helper()
	f, err := gguf.Open(fortunesPath(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mc, err := model.ParseConfig(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	c := stageCosts(f, mc, splitContext)
	half := int64(0)
	for _, b := range c.Layers[:len(c.Layers)/2] {
		half += b + c.KVPerLayer
	}
	return ByteSize(max(c.Embed, c.Head) + half + headroom + 4096)
}

const splitContext = 256

// stageHost starts a node that serves only the reference engine and
// offers stages of the built-in model, which is in its models dir, under
// budget.
func stageHost(t *testing.T, budget ByteSize, join ...string) (*Node, func() error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(fortunesPath(t), filepath.Join(dir, BuiltinModelFile)); err != nil {
		t.Fatal(err)
	}
	return startNode(t, Config{ModelsDir: dir, Models: []string{ReferenceModel}, MemoryBudget: budget,
		Stages: StagesConfig{Headroom: 64 << 10}, Join: join})
}

// completion posts a greedy completion and returns the status, the
// Retry-After header and the text.
func completion(t *testing.T, n *Node, prompt string, maxTokens int) (int, string, string) {
	t.Helper()
	code, retry, text, _ := completionReceipt(t, n, prompt, maxTokens)
	return code, retry, text
}

// completionReceipt is completion with the answer's receipt envelope.
func completionReceipt(t *testing.T, n *Node, prompt string, maxTokens int) (int, string, string, []byte) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": fortunesModel, "prompt": prompt, "max_tokens": maxTokens, "temperature": 0})
	resp := post(t, n, "/v1/completions", string(body))
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var answer struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
		Usage struct {
			Energy streamEnergy `json:"energy"`
		} `json:"usage"`
	}
	json.Unmarshal(b, &answer)
	env, _ := hex.DecodeString(answer.Usage.Energy.EnvelopeHex)
	text := ""
	if len(answer.Choices) == 1 {
		text = answer.Choices[0].Text
	} else if resp.StatusCode == http.StatusOK {
		t.Fatalf("200 without a choice: %s", b)
	}
	if resp.StatusCode != http.StatusOK {
		t.Logf("%d: %s", resp.StatusCode, b)
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), text, env
}

func splitStatus(n *Node) *SplitStatus {
	for _, m := range n.Status().Models {
		if m.Name == fortunesModel && m.Split != nil {
			return m.Split
		}
	}
	return nil
}

// TestSplitServeAndRecover: three nodes on loopback QUIC, each with a
// memory budget the built-in model does not fit. The head plans it over
// the two peers that offer it, serves it through its first stage, and
// answers as a single node does, token for token (greedy), to a request
// sent to it or relayed by a peer. A stage node that stops in the middle
// of a generation ends that request with 503 and Retry-After; the head
// places the model again on the other peer, and the next request is
// answered as before.
func TestSplitServeAndRecover(t *testing.T) {
	const prompt, maxTokens = "Love is", 24
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	single, stopSingle := startNode(t, Config{Model: []ModelConfig{{Path: fortunesPath(t), Context: splitContext, Split: SplitNever}}})
	code, _, want := completion(t, single, prompt, maxTokens)
	if code != http.StatusOK || want == "" {
		t.Fatalf("the single node answered %d %q", code, want)
	}
	stopSingle()

	headroom := int64(64 << 10)
	budget := splitBudget(t, headroom)
	b, stopB := stageHost(t, budget)
	c, stopC := stageHost(t, budget)
	gate := newStreamGate()
	a, _ := startNodeWith(t, Config{Model: []ModelConfig{{Path: fortunesPath(t), Context: splitContext}}, MemoryBudget: budget,
		Stages: StagesConfig{Headroom: ByteSize(headroom)}, Join: []string{b.invite, c.invite}},
		func(n *Node) {
			n.splitRetry = 50e6 // 50ms
			n.wrapModel = func(m localModel) localModel { return gatedModel{m, gate} }
		})
	if a.splitModel(fortunesModel) == nil {
		t.Fatalf("the head serves %v whole under a budget of %d", a.models.names(), budget)
	}
	waitFor(t, "the split model to be placed", func() bool {
		s := splitStatus(a)
		return s != nil && s.State == "serving"
	})
	plan := splitStatus(a)
	t.Logf("plan %+v", plan)
	if len(plan.Stages) != 2 || plan.Stages[0].Node != a.key.ID().String() || !strings.HasPrefix(plan.Stages[0].Layers, "0-") {
		t.Fatalf("plan %+v: want two stages, the first on the head", plan)
	}
	first := plan.Stages[1].Node
	// /api/status shows the plan.
	r, err := http.Get("http://" + a.HTTPAddr().String() + "/api/status")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if !strings.Contains(string(raw), `"split":{"state":"serving","stages":[{"node":"`+a.key.ID().String()+`","layers":"0-`) {
		t.Errorf("/api/status shows no plan: %s", raw)
	}

	// The gate holds generations after their first token until opened:
	// open it for the requests that are to run through.
	close(gate.open)
	code, _, text, env := completionReceipt(t, a, prompt, maxTokens)
	if code != http.StatusOK || text != want {
		t.Fatalf("split: %d %q, want %q", code, text, want)
	}
	// The receipt carries each stage's signed report: the head's under
	// its key, the other's under its node's.
	sealed, err := receipt.Open(env, a.key.Public())
	if err != nil {
		t.Fatal(err)
	}
	peerKey := b.key
	if first == c.key.ID().String() {
		peerKey = c.key
	}
	if st := sealed.Receipt.Stages; len(st) != 2 || !st[0].SignedBy(a.key.Public()) || !st[1].SignedBy(peerKey.Public()) || st[1].Lo != 2 || st[1].Hi != 4 {
		t.Fatalf("receipt stages %+v", st)
	}
	waitFor(t, "b to see the head serve the model", func() bool { return len(b.mesh.PeersHosting(fortunesModel)) == 1 })
	if code, _, got := completion(t, b, prompt, maxTokens); code != http.StatusOK || got != want {
		t.Fatalf("relayed by a peer: %d %q, want %q", code, got, want)
	}

	// A stage node stops while a generation is held after its first
	// token.
	*gate = *newStreamGate()
	type answer struct {
		code        int
		retry, text string
	}
	done := make(chan answer, 1)
	go func() {
		code, retry, text := completion(t, a, prompt, maxTokens)
		done <- answer{code, retry, text}
	}()
	<-gate.started
	stop, other := stopB, c
	if first == c.key.ID().String() {
		stop, other = stopC, b
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	close(gate.open)
	got := <-done
	if got.code != http.StatusServiceUnavailable || got.retry == "" {
		t.Fatalf("the request across the lost stage: %d, Retry-After %q, %q; want 503 with Retry-After", got.code, got.retry, got.text)
	}
	waitFor(t, "the model to be placed again without the lost node", func() bool {
		s := splitStatus(a)
		return s != nil && s.State == "serving"
	})
	plan = splitStatus(a)
	t.Logf("new plan %+v", plan)
	if len(plan.Stages) != 2 || plan.Stages[1].Node != other.key.ID().String() {
		t.Fatalf("new plan %+v, want its second stage on %s", plan, other.key.ID().Short())
	}
	if code, _, got := completion(t, a, prompt, maxTokens); code != http.StatusOK || got != want {
		t.Fatalf("after recovery: %d %q, want %q", code, got, want)
	}

	// A stage that ends while its node stays in the mesh (as when its
	// process fails): the step that reaches it fails, the request ends
	// with 503, and the model is placed again, here on the same node, the
	// only one left that fits.
	*gate = *newStreamGate()
	go func() {
		code, retry, text := completion(t, a, prompt, maxTokens)
		done <- answer{code, retry, text}
	}()
	<-gate.started
	other.stageSrv.Stop()
	close(gate.open)
	if got := <-done; got.code != http.StatusServiceUnavailable || got.retry == "" {
		t.Fatalf("the request across the ended stage: %d, Retry-After %q, %q; want 503 with Retry-After", got.code, got.retry, got.text)
	}
	waitFor(t, "the model to be placed again", func() bool {
		s := splitStatus(a)
		return s != nil && s.State == "serving"
	})
	if code, _, got := completion(t, a, prompt, maxTokens); code != http.StatusOK || got != want {
		t.Fatalf("after the second recovery: %d %q, want %q", code, got, want)
	}

	// Owner control unloads it, which frees its stages, and loads it
	// again, split as at start.
	in, _ := a.models.get(fortunesModel)
	rt := &ownerRuntime{n: a}
	if err := rt.Unload(context.Background(), in.id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the peer's stage to be freed", func() bool { return other.stageSrv.Used() == 0 })
	if a.splitModel(fortunesModel) != nil {
		t.Fatal("an unloaded split model is still listed")
	}
	if _, err := rt.Load(context.Background(), fortunesPath(t), ""); err == nil {
		t.Fatal("owner control loaded a model by path")
	}
	dir := a.cfg.ModelsDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fortunesPath(t), filepath.Join(dir, BuiltinModelFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Load(context.Background(), fortunesModel, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reloaded model to be placed", func() bool {
		s := splitStatus(a)
		return s != nil && s.State == "serving"
	})
	if code, _, got := completion(t, a, prompt, maxTokens); code != http.StatusOK || got != want {
		t.Fatalf("after reloading: %d %q, want %q", code, got, want)
	}
}

// TestStageOffer: the memory and digests a node gossips in its
// meshnode-stage/1 features read back; entries that are not ours, or
// malformed, are ignored.
func TestStageOffer(t *testing.T) {
	d := [32]byte{1, 2, 3}
	a := &nodev1.PeerAnnouncement{Subprotocols: []*nodev1.MeshSubprotocol{
		{Name: "other", Major: 1, Features: []string{"free-bytes=1"}},
		{Name: stagewire.Name, Major: stagewire.Major, Features: []string{stagewire.FeatureF16, "free-bytes=12345", "mem-bandwidth=2500000000", "mem-bandwidth=x",
			"model=" + hex.EncodeToString(d[:]), "model=zz", "model=abcd", "free-bytes=-1"}},
	}}
	o, ok := stageOfferOf(a)
	if !ok || o.free != 12345 || o.bandwidth != 2.5e9 || len(o.models) != 1 || o.models[0] != d || o.rows {
		t.Errorf("offer %+v, %v", o, ok)
	}
	// A node whose stages answer windows says so; a speculating head
	// plans only over such nodes.
	a.Subprotocols[1].Features = append(a.Subprotocols[1].Features, stagewire.FeatureRows)
	if o, ok := stageOfferOf(a); !ok || !o.rows {
		t.Errorf("offer %+v with %s: rows not seen", o, stagewire.FeatureRows)
	}
	if _, ok := stageOfferOf(&nodev1.PeerAnnouncement{Subprotocols: []*nodev1.MeshSubprotocol{stagewire.Advertisement()}}); ok {
		t.Error("an advertisement without free-bytes is an offer")
	}
	if _, ok := stageOfferOf(&nodev1.PeerAnnouncement{}); ok {
		t.Error("no advertisement is an offer")
	}
}

// TestWantSplit: under split = "auto" a model is split only when it fits
// no single node under the budget, this one first; "always" and pins
// split it, "never" and no budget do not.
func TestWantSplit(t *testing.T) {
	budget := splitBudget(t, 64<<10)
	path := fortunesPath(t)
	for _, tc := range []struct {
		name   string
		budget ByteSize
		used   int64
		m      ModelConfig
		want   bool
	}{
		{"no budget", 0, 0, ModelConfig{Split: SplitAuto}, false},
		{"fits alone", 1 << 30, 0, ModelConfig{Split: SplitAuto}, false},
		{"fits no single node", budget, 0, ModelConfig{Split: SplitAuto}, true},
		{"others hold the budget", 1 << 30, 1<<30 - int64(budget), ModelConfig{Split: SplitAuto}, true},
		{"never", budget, 0, ModelConfig{Split: SplitNever}, false},
		{"always", 1 << 30, 0, ModelConfig{Split: SplitAlways}, true},
		{"pins", 1 << 30, 0, ModelConfig{Split: SplitAuto, Pins: []string{"self:0-2"}}, true},
	} {
		n := &Node{cfg: Config{MemoryBudget: tc.budget, Stages: StagesConfig{Headroom: 64 << 10}}}
		tc.m.Path, tc.m.Context = path, splitContext
		got, err := n.wantSplit(modelSpec{ModelConfig: tc.m}, tc.used)
		if err != nil || got != tc.want {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

// TestSplitHostsBandwidth: two peers that offer the model with the same
// RTT and memory, one faster: the faster one gets the stage, whichever
// order gossip lists them in.
func TestSplitHostsBandwidth(t *testing.T) {
	d := [32]byte{7}
	offer := func(id byte, bw string) mesh.Peer {
		var eid identity.EndpointID
		eid[0] = id
		return mesh.Peer{ID: eid, RTT: 2 * time.Millisecond, Announcement: &nodev1.PeerAnnouncement{Subprotocols: []*nodev1.MeshSubprotocol{
			{Name: stagewire.Name, Major: stagewire.Major, Features: []string{"free-bytes=1000", "mem-bandwidth=" + bw, "model=" + hex.EncodeToString(d[:])}},
		}}}
	}
	slow, fast := offer(1, "10000000000"), offer(2, "20000000000")
	m := stageplan.Model{Layers: []int64{100, 100, 100, 100}}
	self := stageplan.Host{ID: "self", Free: 300}
	for _, peers := range [][]mesh.Peer{{slow, fast}, {fast, slow}} {
		hosts := splitHosts(peers, d, false)
		if len(hosts) != 2 || hosts[0].Bandwidth == 0 {
			t.Fatalf("hosts %+v", hosts)
		}
		plan, err := stageplan.Make(m, self, hosts, stageplan.Options{Force: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Stages) != 2 || plan.Stages[1].Host != fast.ID.String() {
			t.Errorf("plan %v: want the second stage on the faster peer %s", plan, fast.ID.Short())
		}
	}
}

// TestSplitPlanWindows: a node whose stages predate windows (it does not
// advertise stagewire.FeatureRows) gets a model's stage only where the
// model does not speculate and fits no other way, even where it is the
// faster peer.
func TestSplitPlanWindows(t *testing.T) {
	d := [32]byte{7}
	offer := func(id byte, free, bw string, windows bool) mesh.Peer {
		var eid identity.EndpointID
		eid[0] = id
		f := []string{"free-bytes=" + free, "mem-bandwidth=" + bw, "model=" + hex.EncodeToString(d[:])}
		if windows {
			f = append(f, stagewire.FeatureRows, stagewire.FeatureLoadRows)
		}
		return mesh.Peer{ID: eid, RTT: 2 * time.Millisecond, Announcement: &nodev1.PeerAnnouncement{Subprotocols: []*nodev1.MeshSubprotocol{
			{Name: stagewire.Name, Major: stagewire.Major, Features: f}}}}
	}
	m := stageplan.Model{Layers: []int64{100, 100, 100, 100}}
	self := stageplan.Host{ID: "self", Free: 200}
	old, current := offer(1, "1000", "40000000000", false), offer(2, "1000", "10000000000", true)
	small := offer(3, "150", "10000000000", true)
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name       string
		peers      []mesh.Peer
		speculates bool
		want       string // the second stage's host; "" none fits
	}{
		{"both fit", []mesh.Peer{old, current}, false, current.ID.String()},
		{"both fit, speculating", []mesh.Peer{current, old}, true, current.ID.String()},
		{"only the old node fits", []mesh.Peer{old, small}, false, old.ID.String()},
		{"only the old node fits, speculating", []mesh.Peer{old, small}, true, ""},
	} {
		plan, err := planSplitOver(m, self, tc.peers, d, tc.speculates, nil, stageplan.Options{Force: true}, stageplan.Plan{}, now)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%s: plan %v, want none", tc.name, plan)
		case tc.want != "" && (err != nil || len(plan.Stages) != 2 || plan.Stages[1].Host != tc.want):
			t.Errorf("%s: plan %v, %v; want the second stage on %s", tc.name, plan, err, tc.want)
		}
	}
}

// TestSplitPins: three nodes; the owner pins the head's second stage to
// the peer that does not run it, and the plan moves there while the
// model serves, answering as before; pins that keep that peer on another
// range move the plan to three stages. A bad pin is refused with
// stageplan.ErrPin and changes nothing; unpinning lets the planner place
// the stage again; a model not served split is ErrNotSplit.
func TestSplitPins(t *testing.T) {
	const prompt, maxTokens = "Love is", 8
	headroom := int64(64 << 10)
	budget := splitBudget(t, headroom)
	b, _ := stageHost(t, budget)
	c, _ := stageHost(t, budget)
	a, _ := startNodeWith(t, Config{Model: []ModelConfig{{Path: fortunesPath(t), Context: splitContext}}, MemoryBudget: budget,
		Stages: StagesConfig{Headroom: ByteSize(headroom)}, Join: []string{b.invite, c.invite}},
		func(n *Node) { n.splitRetry = 50e6 })
	waitFor(t, "the split model to be placed", func() bool {
		s := splitStatus(a)
		return s != nil && s.State == "serving"
	})
	waitFor(t, "both peers to offer the model", func() bool {
		return len(splitHosts(a.mesh.Peers(), a.splitModel(fortunesModel).digest, false)) == 2
	})
	code, _, want := completion(t, a, prompt, maxTokens)
	if code != http.StatusOK {
		t.Fatalf("before pinning: %d", code)
	}
	before := splitStatus(a)
	other := b
	if before.Stages[1].Node == b.key.ID().String() {
		other = c
	}
	ctx := context.Background()

	// Bad pins: refused, and the plan stays.
	for _, pins := range [][]string{
		{other.key.ID().String() + ":0-2"},  // layer 0 is this node's
		{other.key.ID().String() + ":2-99"}, // past the model
		{strings.Repeat("ab", 32) + ":2-4"}, // no such peer
		{"not-a-pin"},                       // unreadable
	} {
		_, err := a.SetSplitPins(ctx, fortunesModel, pins)
		if !errors.Is(err, stageplan.ErrPin) {
			t.Errorf("pins %v: %v, want ErrPin", pins, err)
		}
	}
	if got := splitStatus(a); !slices.Equal(got.Stages, before.Stages) || len(got.Pins) != 0 {
		t.Fatalf("bad pins changed the plan: %+v, was %+v", got, before)
	}
	if _, err := a.SetSplitPins(ctx, "no-such-model", nil); !errors.Is(err, ErrNotSplit) {
		t.Errorf("unknown model: %v, want ErrNotSplit", err)
	}

	// Through owner control's facade: refused without the node's
	// credential, or with a bad pin; then the pin moves the plan.
	pin := other.key.ID().String() + ":2-4"
	anon := control.NewHTTPClient("http://"+a.HTTPAddr().String(), control.HTTPAuth{}, nil, control.ClientTimeouts{})
	if _, err := anon.SplitPins(ctx, fortunesModel, []string{pin}); !errors.Is(err, control.ErrUnauthorized) {
		t.Fatalf("pins without the credential: %v, want UNAUTHORIZED", err)
	}
	owner := facadeOf(t, a)
	if _, err := owner.SplitPins(ctx, fortunesModel, []string{other.key.ID().String() + ":1-4"}); !errors.Is(err, control.ErrBadRequest) || !strings.Contains(err.Error(), "bad pin") {
		t.Fatalf("a bad pin through the facade: %v, want BAD_REQUEST naming the pin", err)
	}
	if got := splitStatus(a); !slices.Equal(got.Stages, before.Stages) {
		t.Fatalf("refused pins changed the plan: %+v", got)
	}
	plan, err := owner.SplitPins(ctx, fortunesModel, []string{pin})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Stages) != 2 || plan.Stages[1].Node != other.key.ID().String() {
		t.Fatalf("the facade's plan %+v", plan)
	}
	st := *splitStatus(a)
	if len(st.Stages) != 2 || st.Stages[1].Node != other.key.ID().String() || st.Stages[1].Layers != "2-4" || !slices.Equal(st.Pins, []string{pin}) {
		t.Fatalf("pinned plan %+v, want the second stage on %s", st, other.key.ID().Short())
	}
	if got := splitStatus(a); got.State != "serving" || got.Stages[1].Node != other.key.ID().String() {
		t.Fatalf("/api/status plan %+v", got)
	}
	if code, _, got := completion(t, a, prompt, maxTokens); code != http.StatusOK || got != want {
		t.Fatalf("after pinning: %d %q, want %q", code, got, want)
	}

	// Pins that keep a peer of the plan on another range: the old plan
	// is stopped before the new one loads (the peer's budget holds its
	// stage), and the model serves in three stages.
	first := before.Stages[1].Node
	waitFor(t, "the peer the stage left to gossip its memory free", func() bool {
		for _, h := range splitHosts(a.mesh.Peers(), a.splitModel(fortunesModel).digest, false) {
			if h.ID == first {
				return h.Free > int64(budget)/2
			}
		}
		return false
	})
	three := []string{other.key.ID().String() + ":2-3", first + ":3-4"}
	if st, err = a.SetSplitPins(ctx, fortunesModel, three); err != nil {
		t.Fatal(err)
	}
	if len(st.Stages) != 3 || st.Stages[1].Node != other.key.ID().String() || st.Stages[2].Node != first {
		t.Fatalf("three-stage plan %+v", st)
	}
	if code, _, got := completion(t, a, prompt, maxTokens); code != http.StatusOK || got != want {
		t.Fatalf("in three stages: %d %q, want %q", code, got, want)
	}

	// Unpinned: the planner places the stage; the pins shown are none.
	if st, err = a.SetSplitPins(ctx, fortunesModel, nil); err != nil {
		t.Fatal(err)
	}
	if len(st.Stages) != 2 || len(st.Pins) != 0 || st.State != "serving" {
		t.Fatalf("unpinned plan %+v", st)
	}
}

// TestSplitPinsWaiting: while a split model waits for a plan (no peer
// offers it), new pins are planned at once: pins the planner refuses,
// or under which nothing fits, are answered with the planner's error,
// and the model keeps waiting under the pins it had.
func TestSplitPinsWaiting(t *testing.T) {
	headroom := int64(64 << 10)
	a, _ := startNodeWith(t, Config{Model: []ModelConfig{{Path: fortunesPath(t), Context: splitContext}}, MemoryBudget: splitBudget(t, headroom),
		Stages: StagesConfig{Headroom: ByteSize(headroom)}}, func(n *Node) { n.splitRetry = 50e6 })
	waitFor(t, "the split model to wait for a plan", func() bool {
		s := splitStatus(a)
		return s != nil && strings.HasPrefix(s.State, "waiting for a plan")
	})
	ctx := context.Background()
	if _, err := a.SetSplitPins(ctx, fortunesModel, []string{strings.Repeat("cd", 32) + ":2-4"}); !errors.Is(err, stageplan.ErrPin) {
		t.Errorf("a pin on no peer: %v, want ErrPin", err)
	}
	_, err := a.SetSplitPins(ctx, fortunesModel, []string{"self:0-1"})
	var nofit *stageplan.NoFitError
	if !errors.As(err, &nofit) {
		t.Errorf("pins under which nothing fits: %v, want a NoFitError", err)
	}
	if s := splitStatus(a); len(s.Pins) != 0 || len(s.Stages) != 0 {
		t.Errorf("refused pins changed the model: %+v", s)
	}
}

// splitOnStageHost starts a stage host and a head that serves the
// built-in model split across the two, with draft (none: ""), waits for
// it to be placed, and checks its windows hold the draft's most drafts
// (spec.DefaultMaxWindow, as a prediction's do without a draft) and the
// last token.
func splitOnStageHost(t *testing.T, draft string) (head, stages *Node, sm *splitModel) {
	t.Helper()
	b, _ := stageHost(t, 0)
	a, _ := startNodeWith(t, Config{Model: []ModelConfig{{Path: fortunesPath(t), Context: splitContext, Split: SplitAlways, Draft: draft}},
		Join: []string{b.invite}}, func(n *Node) { n.splitRetry = 50e6 })
	waitFor(t, "the split model to be placed", func() bool {
		s := splitStatus(a)
		return s != nil && s.State == "serving"
	})
	sm = a.splitModel(fortunesModel)
	if rows := sm.eng.Rows(); rows != spec.DefaultMaxWindow+1 {
		t.Errorf("windows of %d rows, want %d", rows, spec.DefaultMaxWindow+1)
	}
	return a, b, sm
}

// TestSplitPrediction: a split model without a draft, whose stages
// answer windows, drafts from a chat's predicted output through its
// stages and answers as without it: given its own answer, most tokens
// are accepted predicted tokens. A model placed on a node that predates
// windows refuses a prediction, naming the field.
func TestSplitPrediction(t *testing.T) {
	// A window holds spec.DefaultMaxWindow drafts and the last token.
	a, b, sm := splitOnStageHost(t, "")
	chat := func(extra string) (int, string, int, string) {
		t.Helper()
		resp := post(t, a, "/v1/chat/completions", `{"model":"`+fortunesModel+`","max_tokens":24,"messages":[{"role":"user","content":"Love is"}]`+extra+`}`)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var v struct {
			Choices []struct{ Message struct{ Content string } }
			Usage   struct {
				CompletionTokens int `json:"completion_tokens"`
				Details          struct {
					Accepted int `json:"accepted_prediction_tokens"`
				} `json:"completion_tokens_details"`
			}
		}
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, "", 0, string(raw)
		}
		if err := json.Unmarshal(raw, &v); err != nil || len(v.Choices) != 1 {
			t.Fatalf("split chat: %d %s", resp.StatusCode, raw)
		}
		// Accepted, or -1 where under half the tokens were.
		accepted := v.Usage.Details.Accepted
		if 2*accepted < v.Usage.CompletionTokens {
			accepted = -1
		}
		return resp.StatusCode, v.Choices[0].Message.Content, accepted, string(raw)
	}
	code, plain, _, raw := chat("")
	if code != http.StatusOK || plain == "" {
		t.Fatalf("split chat: %d %s", code, raw)
	}
	predicted, _ := json.Marshal(plain)
	withPrediction := `,"prediction":{"type":"content","content":` + string(predicted) + `}`
	if code, got, accepted, _ := chat(withPrediction); code != http.StatusOK || got != plain || accepted <= 0 {
		t.Errorf("split chat with its answer predicted: %d %q, %d predicted tokens accepted (-1: under half the tokens); without the prediction %q", code, got, accepted, plain)
	}
	// The same model placed with its stage on a node that predates
	// windows (as it is where no other fits).
	f, err := gguf.Open(fortunesPath(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := stage.Start(context.Background(), stage.PipelineConfig{File: f, Digest: sm.digest, Self: a.key.ID(),
		Stages:  []stage.Placement{{Peer: a.key.ID(), Range: model.LayerRange{Lo: 0, Hi: 2}}, {Peer: b.key.ID(), Range: model.LayerRange{Lo: 2, Hi: 4}, Windowless: true}},
		Context: sm.ctx, Backend: sm.be, Dial: a.headDialer()})
	if err != nil {
		t.Fatal(err)
	}
	sm.eng.Set(p)
	if code, _, _, raw := chat(withPrediction); code != http.StatusBadRequest || !strings.Contains(raw, `"param":"prediction"`) {
		t.Errorf("a prediction on a windowless pipeline: %d %s, want 400 naming prediction", code, raw)
	}
	if code, got, _, raw := chat(""); code != http.StatusOK || got != plain {
		t.Errorf("a chat on the windowless pipeline: %d %q (%s), want %q", code, got, raw, plain)
	}
}

// TestSplitSpeculates: a split model configured with prompt lookup
// speculates through its stages (the head drafts and verifies, the
// stage trims): its greedy text is the single node's, and its receipt
// counts the drafts.
func TestSplitSpeculates(t *testing.T) {
	const prompt, maxTokens = "A man walks into a bar, and a man who has a little to be a man who walks into a bar", 32
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	single, stopSingle := startNode(t, Config{Model: []ModelConfig{{Path: fortunesPath(t), Context: splitContext, Split: SplitNever}}})
	code, _, want := completion(t, single, prompt, maxTokens)
	if code != http.StatusOK || want == "" {
		t.Fatalf("the single node answered %d %q", code, want)
	}
	stopSingle()
	// The stage node takes LoadStage.Rows: a window holds the draft's
	// default 8 drafts and the last token, though the stages hold the
	// KV of splitSeqs requests.
	a, _, sm := splitOnStageHost(t, DraftLookup)
	// Placed, the head prices speculation on the pipeline: greedy windows
	// are sized by the prices, and new sampled requests name them.
	waitFor(t, "the pipeline's prices to be measured", func() bool {
		_, measured := sm.draft.Prices()
		return measured
	})
	p, _ := sm.draft.Prices()
	if name := sm.Draft(); name != "" && name != spec.PricedDraft(spec.DraftLookup, p.Sampled()) {
		t.Errorf("sampled requests name the draft %q, want the prices measured (%+v) or none", name, p)
	}
	// /api/status shows them.
	wantSpec := SpecStatus{Prices: DraftPricesMeasured, MeasuredAt: measuredAt(sm).UTC().Format(time.RFC3339), Cost: p.Cost, Row: p.Row, CatchUp: p.CatchUp, First: p.First, SampledCost: p.SampledCost, SampledRow: p.SampledRow, SampledFirst: p.SampledFirst, SampledCatchUp: p.SampledCatchUp, SampledDraft: sm.Draft()}
	if ms := a.Status().Models; len(ms) != 1 || ms[0].Speculation == nil || *ms[0].Speculation != wantSpec {
		t.Errorf("status models %+v, want one whose speculation is %+v", ms, wantSpec)
	}
	code, _, text, env := completionReceipt(t, a, prompt, maxTokens)
	if code != http.StatusOK || text != want {
		t.Fatalf("split, speculating: %d %q, want %q", code, text, want)
	}
	sealed, err := receipt.Open(env, a.key.Public())
	if err != nil {
		t.Fatal(err)
	}
	// Drafts are proposed: lookup pays on this model at the prices a
	// pipeline measures. Under the race detector, with its whole suite
	// loading the cores, the steps measured can say no window pays (once
	// a serve here proposed none): the head then rightly decodes
	// plainly, and a 32-token serve may not reach a probe; its text is
	// checked above.
	r := sealed.Receipt
	if r.SpecAccepted > r.SpecProposed || len(r.Stages) != 2 {
		t.Fatalf("receipt: %d of %d drafts accepted, %d stages", r.SpecAccepted, r.SpecProposed, len(r.Stages))
	}
	if r.SpecProposed == 0 {
		if pays := sm.draft.Window(true).Speculates(); !racebuild.Enabled || pays {
			t.Fatalf("receipt: no drafts proposed (measured prices %+v: windows pay %v)", p, pays)
		}
		t.Logf("under the race detector the pipeline's measured prices (%+v) say no window pays: no drafts proposed", p)
	}
}

// TestSplitMeasuresAgainOnDrift: once the head's links to its stages
// slow down after the pipeline was priced (here by 15 ms a frame, as
// place of a route that changed), the serves' steps drift from the
// measured ones and the head measures the pipeline again.
func TestSplitMeasuresAgainOnDrift(t *testing.T) {
	const prompt, maxTokens = "A man walks into a bar, and a man who has a little to be a man who walks into a bar", 32
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	var slow atomic.Int64
	b, _ := stageHost(t, 0)
	a, _ := startNodeWith(t, Config{Model: []ModelConfig{{Path: fortunesPath(t), Context: splitContext, Split: SplitAlways, Draft: DraftLookup}},
		Join: []string{b.invite}}, func(n *Node) {
		n.splitRetry = 50e6
		n.splitDial = func(d stage.Dialer) stage.Dialer { return slowDialer{d, &slow} }
	})
	sm := a.splitModel(fortunesModel)
	waitFor(t, "the split model to be placed and priced", func() bool {
		s := splitStatus(a)
		return s != nil && s.State == "serving" && !measuredAt(sm).IsZero()
	})
	first, _ := sm.draft.Prices()
	firstAt := measuredAt(sm)
	slow.Store(int64(15 * time.Millisecond))
	for i := 0; measuredAt(sm).Equal(firstAt); i++ {
		if i == 20 {
			t.Fatalf("20 requests over links 15 ms slower, and the pipeline was not measured again (prices %+v)", first)
		}
		if code, _, text := completion(t, a, prompt, maxTokens); code != http.StatusOK || text == "" {
			t.Fatalf("request %d: %d %q", i, code, text)
		}
	}
	// What the new prices are is the machine's (a 2-core machine's
	// measurements swing): TestMeasureAgainOnDrift (splitengine) pins the
	// new base on a fake clock.
	again, _ := sm.draft.Prices()
	t.Logf("measured steps %.2f; again %.2f", first.Steps, again.Steps)
}

// measuredAt is when sm's draft was last priced (zero: not yet).
func measuredAt(sm *splitModel) time.Time {
	_, at := sm.draft.Pricing()
	return at
}

// slowDialer's streams deliver each write *lat later: a slower link.
type slowDialer struct {
	stage.Dialer
	lat *atomic.Int64
}

func (d slowDialer) Open(ctx context.Context, peer identity.EndpointID) (io.ReadWriteCloser, error) {
	c, err := d.Dialer.Open(ctx, peer)
	if err != nil {
		return nil, err
	}
	return netsim.Delay(c, func() time.Duration { return time.Duration(d.lat.Load()) }), nil
}
