package stage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/digest"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire/stagewire"
)

var fortunesDigest = [32]byte{0xf0, 0x47}

// fortunes opens the committed built-in model (4 blocks).
func fortunes(t testing.TB) *gguf.File {
	t.Helper()
	f, err := gguf.Open(filepath.Join("..", "..", "models", "meshnode-fortunes-q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// models is a hand-written Models: files by digest.
type models map[[32]byte]*gguf.File

func (ms models) Open(d [32]byte) (*gguf.File, error) {
	if f, ok := ms[d]; ok {
		return f, nil
	}
	return nil, fmt.Errorf("%w: %x", ErrNoModel, d[:4])
}

// pipeNet is an in-process network of Servers joined by net.Pipe: a
// stream opened by from to peer is served by peer's Server as from's.
type pipeNet struct {
	ctx     context.Context
	servers map[identity.EndpointID]*Server
	wg      sync.WaitGroup
}

type pipeDialer struct {
	net  *pipeNet
	from identity.EndpointID
}

func (d pipeDialer) Open(ctx context.Context, peer identity.EndpointID) (io.ReadWriteCloser, error) {
	srv, ok := d.net.servers[peer]
	if !ok {
		return nil, fmt.Errorf("no route to %s", peer.Short())
	}
	a, b := net.Pipe()
	d.net.wg.Add(1)
	go func() {
		defer d.net.wg.Done()
		srv.ServeStream(d.net.ctx, d.from, b)
		b.Close()
	}()
	return a, nil
}

func nodeID(b byte) identity.EndpointID { return identity.EndpointID{b} }

// newPipeNet serves a Server on each of ids, every one holding the
// fortunes model under fortunesDigest.
func newPipeNet(t *testing.T, f *gguf.File, ids ...identity.EndpointID) *pipeNet {
	ctx, cancel := context.WithCancel(context.Background())
	pn := &pipeNet{ctx: ctx, servers: map[identity.EndpointID]*Server{}}
	be := cpu.New(cpu.Options{Threads: 2})
	for _, id := range ids {
		pn.servers[id] = &Server{Models: models{fortunesDigest: f}, Backend: be, Dial: pipeDialer{pn, id}}
	}
	t.Cleanup(func() {
		cancel()
		for _, s := range pn.servers {
			s.Stop()
		}
		pn.wg.Wait()
		be.Close()
	})
	return pn
}

// stepper is one run's step and trim: a Pipeline's, or the whole model's.
type stepper struct {
	step func([]Seq) ([]Result, error)
	trim func(request uint64, n int) error
}

// whole is the unsplit model, stepped as a Pipeline is.
func whole(t *testing.T, f *gguf.File) stepper {
	be := cpu.New(cpu.Options{Threads: 2})
	t.Cleanup(func() { be.Close() })
	m, err := model.Load(f, be)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.NewBatch(model.BatchOptions{Tokens: 32, Seqs: 4})
	if err != nil {
		t.Fatal(err)
	}
	sessions := map[uint64]*model.Session{}
	return stepper{
		step: func(seqs []Seq) ([]Result, error) {
			ms := make([]model.Seq, len(seqs))
			for i, q := range seqs {
				if sessions[q.Request] == nil {
					if sessions[q.Request], err = m.NewSession(model.SessionOptions{Context: 128, Batch: 32}); err != nil {
						return nil, err
					}
				}
				ms[i] = model.Seq{Session: sessions[q.Request], Tokens: q.Tokens, Logits: stagewire.ActSeq{Out: q.Out}.OutRows()}
			}
			if err := b.Step(context.Background(), ms); err != nil {
				return nil, err
			}
			var out []Result
			for i, q := range seqs {
				switch q.Out {
				case stagewire.OutToken:
					out = append(out, Result{Request: q.Request, Pos: sessions[q.Request].Len(), Token: b.ArgMax(i)})
				case stagewire.OutLogits:
					out = append(out, Result{Request: q.Request, Pos: sessions[q.Request].Len(), Logits: slices.Clone(b.Logits(i))})
				}
			}
			return out, nil
		},
		trim: func(r uint64, n int) error { sessions[r].Truncate(n); return nil },
	}
}

func pipelineStepper(p *Pipeline) stepper {
	ctx := context.Background()
	return stepper{
		step: func(seqs []Seq) ([]Result, error) { return p.Step(ctx, seqs) },
		trim: func(r uint64, n int) error { return p.Trim(ctx, r, n) },
	}
}

// script runs two requests through shared steps: a prompt with the
// other's first chunk (no output), then the rest of that prompt beside a
// decode step, decode steps, a rewind of both, and more decoding. It
// returns every result. out says what the decoding steps ask for.
func script(s stepper, out stagewire.Output) ([]Result, error) {
	promptA := []uint32{1, 319, 767, 17042, 2039, 964, 263, 2594}
	promptB := []uint32{1, 450, 4799, 338, 29871}
	var all []Result
	next := func(r Result) uint32 {
		if r.Logits == nil {
			return r.Token
		}
		best := 0
		for i, v := range r.Logits {
			if v > r.Logits[best] {
				best = i
			}
		}
		return uint32(best)
	}
	run := func(seqs []Seq) ([]uint32, error) {
		res, err := s.step(seqs)
		if err != nil {
			return nil, err
		}
		all = append(all, res...)
		var toks []uint32
		for _, r := range res {
			toks = append(toks, next(r))
		}
		return toks, nil
	}
	t, err := run([]Seq{{1, promptA, out, 0}, {2, promptB[:3], stagewire.OutNone, 0}})
	if err != nil {
		return nil, err
	}
	a := t[0]
	if t, err = run([]Seq{{2, promptB[3:], out, 0}, {1, []uint32{a}, out, 0}}); err != nil {
		return nil, err
	}
	b, a := t[0], t[1]
	lenA, lenB := len(promptA)+1, len(promptB)
	for range 3 {
		if t, err = run([]Seq{{1, []uint32{a}, out, 0}, {2, []uint32{b}, out, 0}}); err != nil {
			return nil, err
		}
		a, b, lenA, lenB = t[0], t[1], lenA+1, lenB+1
	}
	if err := s.trim(1, lenA-2); err != nil {
		return nil, err
	}
	if err := s.trim(2, lenB-1); err != nil {
		return nil, err
	}
	for range 2 {
		if t, err = run([]Seq{{2, []uint32{b ^ 1}, out, 0}, {1, []uint32{a ^ 1}, out, 0}}); err != nil {
			return nil, err
		}
		b, a = t[0], t[1]
	}
	return all, nil
}

func sameResults(t *testing.T, got, want []Result) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d results, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Request != w.Request || g.Pos != w.Pos || g.Token != w.Token || len(g.Logits) != len(w.Logits) {
			t.Fatalf("result %d: request %d pos %d token %d (%d logits), want %d %d %d (%d)", i, g.Request, g.Pos, g.Token, len(g.Logits), w.Request, w.Pos, w.Token, len(w.Logits))
		}
		for j := range w.Logits {
			if math.Float32bits(g.Logits[j]) != math.Float32bits(w.Logits[j]) {
				t.Fatalf("result %d: logit %d is %v, the single-node run's %v", i, j, g.Logits[j], w.Logits[j])
			}
		}
	}
}

func startPipeline(t *testing.T, f *gguf.File, dial Dialer, self identity.EndpointID, places []Placement, dtype stagewire.DType) *Pipeline {
	t.Helper()
	be := cpu.New(cpu.Options{Threads: 2})
	t.Cleanup(func() { be.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := Start(ctx, PipelineConfig{File: f, Digest: fortunesDigest, Self: self, Stages: places,
		Context: 128, Batch: 32, Seqs: 4, DType: dtype, Backend: be, Dial: dial})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// TestPipelineBitExact: the built-in model in 2 and 3 stages, driven
// through Servers over in-process streams, gives the single-node run's
// logits bit for bit and its greedy tokens, through batched prefill,
// decoding and trims.
func TestPipelineBitExact(t *testing.T) {
	f := fortunes(t)
	head, b, c := nodeID(1), nodeID(2), nodeID(3)
	for _, places := range [][]Placement{
		{{Peer: head, Range: model.LayerRange{Lo: 0, Hi: 2}}, {Peer: b, Range: model.LayerRange{Lo: 2, Hi: 4}}},
		{{Peer: head, Range: model.LayerRange{Lo: 0, Hi: 1}}, {Peer: b, Range: model.LayerRange{Lo: 1, Hi: 3}}, {Peer: c, Range: model.LayerRange{Lo: 3, Hi: 4}}},
	} {
		for _, out := range []stagewire.Output{stagewire.OutLogits, stagewire.OutToken} {
			t.Run(fmt.Sprintf("%d-stages/out-%d", len(places), out), func(t *testing.T) {
				want, err := script(whole(t, f), out)
				if err != nil {
					t.Fatal(err)
				}
				pn := newPipeNet(t, f, b, c)
				p := startPipeline(t, f, pipeDialer{pn, head}, head, places, stagewire.DTypeF32)
				got, err := script(pipelineStepper(p), out)
				if err != nil {
					t.Fatal(err)
				}
				sameResults(t, got, want)
			})
		}
	}
}

// TestPipelineF16: f16 hidden rows run, and move the logits (within the
// bound of gguf/model's TestStagesF16Close).
func TestPipelineF16(t *testing.T) {
	f := fortunes(t)
	head, b := nodeID(1), nodeID(2)
	want, err := script(whole(t, f), stagewire.OutLogits)
	if err != nil {
		t.Fatal(err)
	}
	pn := newPipeNet(t, f, b)
	p := startPipeline(t, f, pipeDialer{pn, head}, head, []Placement{{Peer: head, Range: model.LayerRange{Lo: 0, Hi: 2}}, {Peer: b, Range: model.LayerRange{Lo: 2, Hi: 4}}}, stagewire.DTypeF16)
	// The first step only: later tokens may differ once f16 flips a tie.
	got, err := p.Step(context.Background(), []Seq{{1, []uint32{1, 319, 767, 17042, 2039, 964, 263, 2594}, stagewire.OutLogits, 0}})
	if err != nil {
		t.Fatal(err)
	}
	worst, top := 0.0, 0.0
	for j, w := range want[0].Logits {
		top = max(top, math.Abs(float64(w)))
		worst = max(worst, math.Abs(float64(got[0].Logits[j]-w)))
	}
	if worst == 0 || worst > 0.05*top {
		t.Errorf("f16 moved the logits by %g (scale %g)", worst, top)
	}
}

// rawStream is a test's end of a stage stream: send a message, read the
// answer.
type rawStream struct {
	t  *testing.T
	rw io.ReadWriteCloser
}

func dialRaw(t *testing.T, pn *pipeNet, from, to identity.EndpointID) *rawStream {
	rw, err := pipeDialer{pn, from}.Open(context.Background(), to)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rw.Close() })
	return &rawStream{t, rw}
}

func (r *rawStream) send(m stagewire.Message) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := stagewire.Write(ctx, r.rw, m); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawStream) read() stagewire.Message {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan struct{})
	var m stagewire.Message
	var err error
	go func() { m, _, err = stagewire.Read(ctx, r.rw, nil); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		r.rw.Close() // net.Pipe has deadlines, but a stuck test should not hang
		<-done
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return m
}

// wantCode reads an Error with code.
func (r *rawStream) wantCode(what string, code stagewire.Code) {
	r.t.Helper()
	m := r.read()
	e, ok := m.(*stagewire.Error)
	if !ok || !errors.Is(e, code) {
		r.t.Fatalf("%s: got %v %+v, want an Error %v", what, m.Kind(), m, code)
	}
}

// TestServerShadowWithinBudget: a last stage's head shadow (on a CPU that
// builds one) is built and counted in the memory a Ready reports where
// the budget holds it, and not built — the stage loads all the same,
// without it — where the budget holds the weights and KV caches but not
// the shadow.
func TestServerShadowWithinBudget(t *testing.T) {
	f := fortunes(t)
	head, node := nodeID(1), nodeID(2)
	ls := &stagewire.LoadStage{Stage: 1, Model: fortunesDigest, Lo: 2, Hi: 4, Context: 64, Batch: 16, Seqs: 2,
		Out: stagewire.DTypeF32, Prev: head, Head: head}
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	probe, err := model.LoadStage(f, be, model.LayerRange{Lo: 2, Hi: 4})
	if err != nil {
		t.Fatal(err)
	}
	shadow := probe.ShadowBytes()
	if shadow == 0 {
		t.Skip("this CPU builds no head shadow (greedyhead needs AVX512-VNNI)")
	}
	without := probe.WeightBytes() + 2*probe.KVBytes(64, model.KVF16)
	for _, tc := range []struct {
		budget, want int64
	}{
		{0, without + shadow},                // no budget: all of it counted
		{without + shadow, without + shadow}, // room for the shadow
		{without + shadow - 1, without},      // none: dropped, not refused
	} {
		pn := newPipeNet(t, f, node)
		pn.servers[node].Budget = tc.budget
		h := dialRaw(t, pn, head, node)
		h.send(ls)
		ready, ok := h.read().(*stagewire.Ready)
		if !ok || int64(ready.Memory) != tc.want {
			t.Errorf("budget %d: Ready %+v, want memory %d (weights and KV %d, shadow %d)", tc.budget, ready, tc.want, without, shadow)
		}
	}
}

// TestServerRefusals: a Server loads only for the head a LoadStage names,
// only models it has, ranges that fit them and within its budget; takes
// Activations only from a stage's prev, at the positions a request holds,
// of the kind the stage runs; stops a stage only for its head; lists its
// stages; and drops a stage whose head's stream ends.
func TestServerRefusals(t *testing.T) {
	f := fortunes(t)
	head, node, stranger := nodeID(1), nodeID(2), nodeID(9)
	pn := newPipeNet(t, f, node)
	srv := pn.servers[node]
	ls := func(id uint64, lo, hi uint32) *stagewire.LoadStage {
		return &stagewire.LoadStage{Stage: id, Model: fortunesDigest, Lo: lo, Hi: hi, Context: 64, Batch: 16, Seqs: 2,
			Out: stagewire.DTypeF32, Prev: head, Head: head}
	}
	h := dialRaw(t, pn, head, node)

	other := dialRaw(t, pn, stranger, node)
	other.send(ls(1, 2, 4))
	other.wantCode("LoadStage from a node that is not its head", stagewire.CodeRefused)

	bad := ls(1, 2, 4)
	bad.Model = [32]byte{9}
	h.send(bad)
	h.wantCode("an unknown digest", stagewire.CodeNoModel)
	h.send(ls(1, 2, 9))
	h.wantCode("layers past the model", stagewire.CodeBadRange)
	h.send(ls(1, 1, 3)) // not the last, yet no next stage
	h.wantCode("a middle stage without a next", stagewire.CodeBadRange)
	srv.Budget = 1000
	h.send(ls(1, 2, 4))
	h.wantCode("over the budget", stagewire.CodeNoMemory)
	srv.Budget = 0

	h.send(ls(1, 2, 4))
	ready, ok := h.read().(*stagewire.Ready)
	if !ok || ready.Stage != 1 || ready.Lo != 2 || ready.Hi != 4 || ready.Memory == 0 {
		t.Fatalf("Ready %+v", ready)
	}
	h.send(ls(1, 2, 4))
	h.wantCode("a stage id in use", stagewire.CodeBusy)

	c, err := model.ParseConfig(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	embd := uint32(c.Embd)
	rows := func(n int) []float32 { return make([]float32, n*int(embd)) }
	act := func(start, count uint32) *stagewire.Activation {
		return &stagewire.Activation{Stage: 1, DType: stagewire.DTypeF32, Width: embd,
			Seqs: []stagewire.ActSeq{{Request: 5, Start: start, Count: count, Out: stagewire.OutToken}}, F32: rows(int(count))}
	}
	other.send(act(0, 1))
	other.wantCode("an Activation from a node that is not the prev", stagewire.CodeRefused)
	h.send(act(3, 1))
	h.wantCode("a new request not at 0", stagewire.CodePosition)
	h.send(&stagewire.Activation{Stage: 1, DType: stagewire.DTypeTokens, Seqs: []stagewire.ActSeq{{Request: 5, Count: 1}}, Tokens: []uint32{1}})
	h.wantCode("token ids into a later stage", stagewire.CodeBadInput)
	wide := act(0, 1)
	wide.Width, wide.F32 = 8, make([]float32, 8)
	h.send(wide)
	h.wantCode("rows of the wrong width", stagewire.CodeBadInput)
	window := act(0, 3)
	window.Seqs[0].Rows = 3
	h.send(window)
	h.wantCode("a window of more rows than the stage's seqs", stagewire.CodeBadInput)
	h.send(act(0, 65))
	h.wantCode("past the context", stagewire.CodeContext)
	h.send(act(0, 2))
	if nt, ok := h.read().(*stagewire.NextToken); !ok || len(nt.Tokens) != 1 || nt.Tokens[0].Request != 5 || nt.Tokens[0].Pos != 2 {
		t.Fatalf("after a good step: %+v", nt)
	}
	h.send(act(1, 1))
	h.wantCode("a step behind the request", stagewire.CodePosition)
	h.send(&stagewire.Trim{Stage: 1, Request: 5, Length: 1})
	h.send(act(1, 1))
	if _, ok := h.read().(*stagewire.NextToken); !ok {
		t.Fatal("no answer after a trim to 1")
	}
	h.send(&stagewire.Activation{Stage: 7, DType: stagewire.DTypeF32, Width: embd, Seqs: []stagewire.ActSeq{{Request: 5, Count: 1}}, F32: rows(1)})
	h.wantCode("an unknown stage", stagewire.CodeUnknownStage)

	other.send(&stagewire.Trim{Stage: 1, Request: 5, Length: 0})
	other.wantCode("a Trim from a node that is not the prev", stagewire.CodeRefused)
	other.send(&stagewire.Stop{Stage: 1})
	other.wantCode("Stop from a node that is not the head", stagewire.CodeRefused)
	other.send(&stagewire.InventoryRequest{})
	if inv, ok := other.read().(*stagewire.Inventory); !ok || len(inv.Stages) != 1 || inv.Stages[0].Stage != 1 || inv.Stages[0].Memory != ready.Memory {
		t.Fatalf("inventory %+v", inv)
	}
	h.rw.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		other.send(&stagewire.InventoryRequest{})
		if inv := other.read().(*stagewire.Inventory); len(inv.Stages) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stage outlived its head's stream")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if srv.used != 0 {
		t.Errorf("%d bytes still counted after the stage was dropped", srv.used)
	}
}

// TestFiles: a model is found by the weights digest the GGUF engine
// gives it, opened once; an unknown digest is ErrNoModel.
func TestFiles(t *testing.T) {
	path := filepath.Join("..", "..", "models", "meshnode-fortunes-q8_0.gguf")
	res, err := digest.Files(filepath.Dir(path), filepath.Base(path))
	if err != nil {
		t.Fatal(err)
	}
	fs := &Files{Paths: []string{filepath.Join(t.TempDir(), "missing.gguf"), path}}
	defer fs.Close()
	if _, err := fs.Open(res.Digest); err == nil {
		t.Fatal("a missing file in the list was not reported")
	}
	fs.Paths = fs.Paths[1:]
	f1, err := fs.Open(res.Digest)
	if err != nil {
		t.Fatal(err)
	}
	f2, err := fs.Open(res.Digest)
	if err != nil || f1 != f2 {
		t.Fatalf("second Open: %p %p %v", f1, f2, err)
	}
	if _, err := fs.Open([32]byte{1}); !errors.Is(err, ErrNoModel) {
		t.Errorf("unknown digest: %v", err)
	}
}

// TestBatchFitsAFrame: a pipeline, and a stage, whose step could not
// travel in one frame are refused before anything runs.
func TestBatchFitsAFrame(t *testing.T) {
	f := fortunes(t)
	head, b := nodeID(1), nodeID(2)
	pn := newPipeNet(t, f, b)
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	c, err := model.ParseConfig(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	places := []Placement{{Peer: head, Range: model.LayerRange{Lo: 0, Hi: 2}}, {Peer: b, Range: model.LayerRange{Lo: 2, Hi: 4}}}
	// The most positions of f32 rows that fit, when each may be its own
	// sequence, plus one.
	over := 1
	for over <= stagewire.MaxPositions(stagewire.DTypeF32, c.Embd, over) {
		over++
	}
	_, err = Start(context.Background(), PipelineConfig{File: f, Digest: fortunesDigest, Self: head, Stages: places,
		Context: 64, Batch: over, Seqs: 1, Backend: be, Dial: pipeDialer{pn, head}})
	if err == nil || !strings.Contains(err.Error(), "does not fit one frame") {
		t.Fatalf("a pipeline stepping %d positions of %d floats: %v", over, c.Embd, err)
	}
	h := dialRaw(t, pn, head, b)
	h.send(&stagewire.LoadStage{Stage: 1, Model: fortunesDigest, Lo: 1, Hi: 2, Context: 64, Batch: uint32(over), Seqs: 1,
		Out: stagewire.DTypeF32, Next: b, NextStage: 2, Prev: head, Head: head})
	h.wantCode("a stage whose step cannot fit a frame", stagewire.CodeBadInput)
}

// silentDialer is pipeDialer whose streams, once silent is set, swallow
// what is written to them, as a connection to a node that died without a
// word accepts writes until it times out.
type silentDialer struct {
	pipeDialer
	silent  *atomic.Bool
	mu      sync.Mutex
	streams map[identity.EndpointID][]io.Closer
}

type silentStream struct {
	io.ReadWriteCloser
	silent *atomic.Bool
}

func (s silentStream) Write(b []byte) (int, error) {
	if s.silent.Load() {
		return len(b), nil
	}
	return s.ReadWriteCloser.Write(b)
}

func (d *silentDialer) Open(ctx context.Context, peer identity.EndpointID) (io.ReadWriteCloser, error) {
	rw, err := d.pipeDialer.Open(ctx, peer)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.streams[peer] = append(d.streams[peer], rw)
	d.mu.Unlock()
	return silentStream{rw, d.silent}, nil
}

// TestPipelineSuspectsSilentStage: a step that waits for an answer past
// SuspectAfter names every other stage's node to Suspect, and goes on
// waiting: a live pipeline answers as before; when a stage's node has gone
// silent, the check (here: closing its streams, as the mesh closes the
// connection of a peer that does not answer a probe) ends the step with
// ErrStageLost, long before the step's own deadline.
func TestPipelineSuspectsSilentStage(t *testing.T) {
	f := fortunes(t)
	head, b := nodeID(1), nodeID(2)
	pn := newPipeNet(t, f, b)
	d := &silentDialer{pipeDialer: pipeDialer{pn, head}, silent: new(atomic.Bool), streams: map[identity.EndpointID][]io.Closer{}}
	var mu sync.Mutex
	suspected := map[identity.EndpointID]int{}
	suspect := func(id identity.EndpointID) {
		mu.Lock()
		suspected[id]++
		mu.Unlock()
		if d.silent.Load() {
			d.mu.Lock()
			for _, c := range d.streams[id] {
				c.Close()
			}
			d.mu.Unlock()
		}
	}
	be := cpu.New(cpu.Options{Threads: 2})
	t.Cleanup(func() { be.Close() })
	p, err := Start(context.Background(), PipelineConfig{File: f, Digest: fortunesDigest, Self: head,
		Stages:  []Placement{{Peer: head, Range: model.LayerRange{Lo: 0, Hi: 2}}, {Peer: b, Range: model.LayerRange{Lo: 2, Hi: 4}}},
		Context: 128, Batch: 32, Seqs: 4, Backend: be, Dial: d, Suspect: suspect, SuspectAfter: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	// Alive: suspicion changes nothing.
	for i := range 4 {
		if _, err := p.Step(context.Background(), []Seq{{1, []uint32{1, 450 + uint32(i)}, stagewire.OutToken, 0}}); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	d.silent.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = p.Step(ctx, []Seq{{1, []uint32{263}, stagewire.OutToken, 0}})
	if !errors.Is(err, ErrStageLost) {
		t.Fatalf("a step to a silent stage: %v, want ErrStageLost", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if suspected[b] == 0 || len(suspected) != 1 {
		t.Fatalf("suspected %v, want the stage's node %s", suspected, b.Short())
	}
}
