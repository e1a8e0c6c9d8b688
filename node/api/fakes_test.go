package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/chat/toolcall"
	"github.com/meshnode/meshnode/node/identity"
)

// fakeModel "generates" a fixed list of pieces, one per emit, honouring
// max tokens and cancellation; block, when set, makes it wait for ctx or a
// release before producing anything.
type fakeModel struct {
	pieces []string
	err    error
	midErr error // returned after the pieces, as a generation failing mid-stream
	block  chan struct{}
	// prepare, when set, is the preparation's check: its error refuses
	// the request before it takes a slot.
	prepare func(g *Generation) error
	// finish is the finish reason when every piece was emitted ("" is
	// "stop"), and stopSeq the stop string it names as having ended it.
	finish, stopSeq string
	// tools, when set, is the tool-call format the model writes; nil: it
	// takes no tools.
	tools *toolcall.Format

	// pause, when set, holds a generation before its piece pauseAt
	// (after the pieces before it went out, as Progress counts them)
	// until it is closed, after a send on paused.
	pause, paused chan struct{}
	pauseAt       int

	mu      sync.Mutex
	calls   []*Generation
	embeds  []*Embedding
	reranks []*Rerank
	started chan struct{}
}

func (f *fakeModel) Prepare(ctx context.Context, g *Generation) (Prepared, error) {
	f.mu.Lock()
	f.calls = append(f.calls, g)
	prepare := f.prepare
	f.mu.Unlock()
	if prepare != nil {
		if err := prepare(g); err != nil {
			return nil, err
		}
	}
	return &fakeRun{f: f, g: g}, nil
}

func (f *fakeModel) ToolFormat() (toolcall.Format, bool) {
	if f.tools == nil {
		return 0, false
	}
	return *f.tools, true
}

// Embed implements EmbeddingModel: input i's vector is [i, its length
// in bytes or tokens, Dimensions − 2 zeros], at least 2 long.
func (f *fakeModel) Embed(ctx context.Context, e *Embedding) (*EmbeddingResult, error) {
	f.mu.Lock()
	f.embeds = append(f.embeds, e)
	f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	res := &EmbeddingResult{}
	for i, in := range e.Inputs {
		n := len(in.Text)
		if in.IsTokens {
			n = len(in.Tokens)
		}
		v := make([]float32, max(2, e.Dimensions))
		v[0], v[1] = float32(i), float32(n)
		res.Vectors = append(res.Vectors, v)
		res.PromptTokens += n
	}
	return res, nil
}

// Rerank implements RerankModel: a document's score is how many of the
// query's bytes it holds, less a thousandth of its length, so that ties
// are rare and the order is known.
func (f *fakeModel) Rerank(ctx context.Context, q *Rerank) (*RerankResult, error) {
	f.mu.Lock()
	f.reranks = append(f.reranks, q)
	f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	res := &RerankResult{}
	for _, d := range q.Documents {
		var s float64
		for i := 0; i < len(q.Query); i++ {
			if strings.IndexByte(d, q.Query[i]) >= 0 {
				s++
			}
		}
		res.Scores = append(res.Scores, s-float64(len(d))/1000)
		res.PromptTokens += len(q.Query) + len(d)
	}
	return res, nil
}

// The fake's vocabulary: <unk>, <s> and </s> (control tokens), then a
// token for each byte, its id the byte + 3.
const fakeVocab = 3 + 256

// Tokenize implements TokenizingModel over the fake vocabulary: BOS 1
// where addSpecial, "</s>" as token 2 where parseSpecial, each other
// byte its own token.
func (f *fakeModel) Tokenize(text string, addSpecial, parseSpecial bool) ([]uint32, error) {
	var ids []uint32
	if addSpecial {
		ids = append(ids, 1)
	}
	for i := 0; i < len(text); i++ {
		if parseSpecial && strings.HasPrefix(text[i:], "</s>") {
			ids = append(ids, 2)
			i += len("</s>") - 1
			continue
		}
		ids = append(ids, uint32(text[i])+3)
	}
	return ids, nil
}

// Piece implements TokenizingModel.
func (f *fakeModel) Piece(id uint32) ([]byte, error) {
	switch {
	case id >= fakeVocab:
		return nil, fmt.Errorf("token %d is outside the vocabulary of %d", id, fakeVocab)
	case id < 3:
		return []byte([]string{"<unk>", "<s>", "</s>"}[id]), nil
	}
	return []byte{byte(id - 3)}, nil
}

// TokenizerInfo implements TokenizingModel.
func (f *fakeModel) TokenizerInfo() (TokenizerInfo, error) {
	bos, eos := "<s>", "</s>"
	return TokenizerInfo{Class: "fake", BOSToken: &bos, EOSToken: &eos, ModelMaxLength: 256, VocabSize: fakeVocab}, nil
}

// Render implements TemplateModel: "role: content" lines, then
// "assistant:", with "[tools: n]" first where the request has tools.
func (f *fakeModel) Render(ctx context.Context, g *Generation) (string, int, error) {
	var b strings.Builder
	if len(g.Tools) > 0 {
		fmt.Fprintf(&b, "[tools: %d]\n", len(g.Tools))
	}
	for _, m := range g.Messages {
		fmt.Fprintf(&b, "%s: %s\n", m.Role, m.Content)
	}
	b.WriteString("assistant:" + g.Prefill)
	ids, err := f.Tokenize(b.String(), true, true)
	return b.String(), len(ids), err
}

// generateOnly is a model that makes no embeddings.
type generateOnly struct{ Model }

// fakeRun is a fakeModel's prepared generation.
type fakeRun struct {
	f *fakeModel
	g *Generation
}

// fakeLogprobs is the fake's record of its i-th piece, a token of its
// own: bytes the piece's, log-probability −(i+1)/2, and top alternatives
// the piece and then bytes {'a'+j} at −(i+1)/2 − j.
func fakeLogprobs(i int, piece string, top int) []TokenLogprob {
	lp := -float64(i+1) / 2
	t := TokenLogprob{Bytes: []byte(piece), Logprob: lp}
	for j := range top {
		b := []byte(piece)
		if j > 0 {
			b = []byte{byte('a' + j)}
		}
		t.Top = append(t.Top, TopLogprob{Bytes: b, Logprob: lp - float64(j)})
	}
	return []TokenLogprob{t}
}

func (r *fakeRun) Generate(ctx context.Context, emit func(Delta) error) (*Result, error) {
	f, g := r.f, r.g
	f.mu.Lock()
	block, started := f.block, f.started
	f.mu.Unlock()
	if started != nil {
		started <- struct{}{}
	}
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if f.err != nil {
		return nil, f.err
	}
	res := &Result{PromptTokens: 3, FinishReason: "stop", Energy: map[string]any{"energy_provenance": "Estimator", "estimated_uj": 1234}}
	if f.finish != "" {
		res.FinishReason = f.finish
	}
	res.StopSequence = f.stopSeq
	if pp := PromptProgressOf(ctx); pp != nil {
		// As an engine reports its 3-token prompt: one cached, a step,
		// then all of it.
		pp(PromptProgress{Total: 3, Cached: 1, Processed: 2})
		pp(PromptProgress{Total: 3, Cached: 1, Processed: 3})
	}
	progress := Progress(ctx)
	for i, p := range f.pieces {
		if g.MaxTokens > 0 && res.CompletionTokens == g.MaxTokens {
			res.FinishReason = "length"
			break
		}
		if f.pause != nil && i == f.pauseAt {
			f.paused <- struct{}{}
			select {
			case <-f.pause:
			case <-ctx.Done():
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		progress(p)
		d := Delta{Text: p}
		if g.Logprobs {
			d.Logprobs = fakeLogprobs(i, p, g.TopLogprobs)
		}
		if err := emit(d); err != nil {
			return nil, err
		}
		res.CompletionTokens++
	}
	if f.midErr != nil {
		return nil, f.midErr
	}
	return res, nil
}

// PromptTokens implements Prepared: the fake's prompts are 3 tokens.
func (r *fakeRun) PromptTokens() int { return 3 }

// unblock makes later generations run freely.
func (f *fakeModel) unblock() {
	f.mu.Lock()
	f.block, f.started = nil, nil
	f.mu.Unlock()
}

func (f *fakeModel) lastCall() *Generation {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[len(f.calls)-1]
}

type fakeRegistry struct {
	self   identity.EndpointID
	local  map[string]Model
	remote map[string][]identity.EndpointID
}

func (r *fakeRegistry) Local(name string) (Model, bool) {
	m, ok := r.local[name]
	return m, ok
}

func (r *fakeRegistry) List() []ModelInfo {
	var out []ModelInfo
	for name := range r.local {
		out = append(out, ModelInfo{ID: name, Local: true, Owner: r.self})
	}
	for name, hosts := range r.remote {
		out = append(out, ModelInfo{ID: name, Hosts: hosts, Owner: hosts[0]})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Local != out[j].Local {
			return out[i].Local
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// anyPeer is a mesh access policy that serves every peer.
type anyPeer struct{}

func (anyPeer) AllowPeer(identity.EndpointID) error { return nil }

// meshServer serves srv's mesh handler on loopback TCP as though each
// connection were a tunnel from peer: what ServeMesh makes of the mesh's
// listener, for tests whose mesh is a fake.
func meshServer(t *testing.T, srv *Server, peer identity.EndpointID) *httptest.Server {
	t.Helper()
	hs := httptest.NewUnstartedServer(srv.MeshHandler())
	hs.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, meshPeerKey{}, peer)
	}
	hs.Start()
	t.Cleanup(hs.Close)
	return hs
}

// fakeMesh routes tunnels to HTTP servers by peer id.
type fakeMesh struct {
	hosts   map[string][]identity.EndpointID
	targets map[identity.EndpointID]string // peer → host:port of its mesh handler
	mu      sync.Mutex
	dials   []identity.EndpointID
}

func (m *fakeMesh) HostsOf(model string) []identity.EndpointID { return m.hosts[model] }

func (m *fakeMesh) DialHTTP(ctx context.Context, peer identity.EndpointID) (net.Conn, error) {
	m.mu.Lock()
	m.dials = append(m.dials, peer)
	m.mu.Unlock()
	addr, ok := m.targets[peer]
	if !ok {
		return nil, fmt.Errorf("peer %s unreachable", peer.Short())
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

type fakeNode struct {
	held bool

	mu      sync.Mutex
	replays []*Replay
	replay  *ReplayResult // answered to every replay; nil: a 404
}

func (n *fakeNode) StewardDID() string { return "did:key:z6MkFake" }
func (n *fakeNode) Witness(ctx context.Context, body []byte) (bool, error) {
	if !strings.Contains(string(body), "envelope_hex") {
		return false, badRequest("envelope_hex", "envelope_hex is required")
	}
	return n.held, nil
}
func (n *fakeNode) Replay(ctx context.Context, r *Replay) (*ReplayResult, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.replays = append(n.replays, r)
	if n.replay == nil {
		return nil, Errorf(http.StatusNotFound, "not_found_error", "receipt_not_ours", "not this node's receipt")
	}
	return n.replay, nil
}
func (n *fakeNode) Status(ctx context.Context) any { return map[string]string{"node": "fake"} }
func (n *fakeNode) Invite() string                 { return "invite-token" }

func testID(b byte) identity.EndpointID {
	var id identity.EndpointID
	for i := range id {
		id[i] = b
	}
	return id
}

type harness struct {
	srv   *Server
	http  *httptest.Server
	model *fakeModel
	reg   *fakeRegistry
}

func newHarness(t *testing.T, cfg Config, mesh Mesh) *harness {
	t.Helper()
	model := &fakeModel{pieces: []string{"Hello", ",", " world", "!"}}
	reg := &fakeRegistry{self: testID(1), local: map[string]Model{"tiny": model}, remote: map[string][]identity.EndpointID{}}
	var m Mesh
	if mesh != nil {
		m = mesh
	}
	srv := New(cfg, testID(1), reg, m, &fakeNode{held: true}, nil, func() time.Time { return time.Unix(1700000000, 0) })
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &harness{srv: srv, http: hs, model: model, reg: reg}
}

func (h *harness) post(t *testing.T, path, body string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.http.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// sseEvent is one parsed Server-Sent Event.
type sseEvent struct {
	name string
	data string
}

// readSSE parses a stream strictly: every line is "event: ..." or
// "data: ...", events end with a blank line, nothing else is allowed, and
// the stream must end cleanly at an event boundary.
func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var events []sseEvent
	var cur sseEvent
	inEvent := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if !inEvent {
				t.Fatalf("SSE: blank line outside an event")
			}
			events = append(events, cur)
			cur, inEvent = sseEvent{}, false
		case strings.HasPrefix(line, "event: "):
			if inEvent {
				t.Fatalf("SSE: event name after data in one event: %q", line)
			}
			cur.name, inEvent = strings.TrimPrefix(line, "event: "), true
		case strings.HasPrefix(line, "data: "):
			if cur.data != "" {
				t.Fatalf("SSE: multi-line data not expected: %q", line)
			}
			cur.data, inEvent = strings.TrimPrefix(line, "data: "), true
		default:
			t.Fatalf("SSE: unexpected line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("SSE read: %v", err)
	}
	if inEvent {
		t.Fatalf("SSE: stream ended inside an event")
	}
	return events
}

var errBoom = errors.New("boom")

// responseJSON is a /v1/responses object as a client decodes it, its
// output items read as messages.
type responseJSON struct {
	responseObject
	Output []responseItem `json:"output"`
}
