package stage

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire/stagewire"
)

// TestPipelineWindows: a sequence asking for the rows after each of its
// last n positions (a speculative window) gets, through 2 and 3 stages,
// the logits and greedy tokens one-token decoding of the whole model
// gets after each of those positions, bit for bit; a Trim after it (a
// rejected draft) leaves every stage holding exactly the kept positions,
// and the decoding after it is the whole model's again. A pipeline with
// a stage on a node that predates windows refuses them.
func TestPipelineWindows(t *testing.T) {
	f := fortunes(t)
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	m, err := model.Load(f, be)
	if err != nil {
		t.Fatal(err)
	}
	// ref is one-token decoding: the logits after each token of seq.
	ref := func(seq []uint32) [][]float32 {
		s, err := m.NewSession(model.SessionOptions{Context: 128})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var out [][]float32
		for _, tok := range seq {
			l, err := s.Eval(context.Background(), []uint32{tok})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, slices.Clone(l))
		}
		return out
	}
	prompt := []uint32{1, 319, 767, 17042, 2039, 964, 263, 2594}
	draft := []uint32{29871, 450, 4799, 338}        // a window after the prompt
	again := []uint32{17042, 2039, 964, 263, 29871} // another after a trim to 10
	want1 := ref(append(slices.Clone(prompt), draft...))
	want2 := ref(append(append(slices.Clone(prompt), draft[:2]...), again...))

	head, b, c := nodeID(1), nodeID(2), nodeID(3)
	for _, places := range [][]Placement{
		{{Peer: head, Range: model.LayerRange{Lo: 0, Hi: 2}}, {Peer: b, Range: model.LayerRange{Lo: 2, Hi: 4}}},
		{{Peer: head, Range: model.LayerRange{Lo: 0, Hi: 1}}, {Peer: b, Range: model.LayerRange{Lo: 1, Hi: 3}}, {Peer: c, Range: model.LayerRange{Lo: 3, Hi: 4}}},
	} {
		pn := newPipeNet(t, f, b, c)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		p, err := Start(ctx, PipelineConfig{File: f, Digest: fortunesDigest, Self: head, Stages: places,
			Context: 128, Batch: 32, Seqs: 16, Backend: be, Dial: pipeDialer{pn, head}})
		if err != nil {
			t.Fatal(err)
		}
		// Request 1 asks for logits rows, request 2 (the same tokens)
		// for token rows, in one step.
		check := func(res []Result, want [][]float32, from int) {
			t.Helper()
			if len(res) != 2 {
				t.Fatalf("%d results", len(res))
			}
			lr, tr := res[0], res[1]
			if len(lr.Rows) != len(want)-from || len(tr.Tokens) != len(want)-from {
				t.Fatalf("%d logits rows and %d token rows, want %d", len(lr.Rows), len(tr.Tokens), len(want)-from)
			}
			for j, w := range want[from:] {
				for k := range w {
					if math.Float32bits(lr.Rows[j][k]) != math.Float32bits(w[k]) {
						t.Fatalf("%d stages: row %d logit %d is %v, one-token decoding's %v", len(places), j, k, lr.Rows[j][k], w[k])
					}
				}
				if tr.Tokens[j] != argmax(w) {
					t.Fatalf("%d stages: row %d token %d, one-token decoding's %d", len(places), j, tr.Tokens[j], argmax(w))
				}
			}
			if !slices.Equal(lr.Logits, lr.Rows[len(lr.Rows)-1]) || tr.Token != tr.Tokens[len(tr.Tokens)-1] || lr.Pos != from+len(want)-from {
				t.Fatalf("the last row is not the result's Token/Logits, or pos %d", lr.Pos)
			}
		}
		// The prompt's last 2 positions and the drafts: 6 rows.
		seq := append(slices.Clone(prompt), draft...)
		res, err := p.Step(ctx, []Seq{{Request: 1, Tokens: seq, Out: stagewire.OutLogits, Rows: 6},
			{Request: 2, Tokens: seq, Out: stagewire.OutToken, Rows: 6}})
		if err != nil {
			t.Fatal(err)
		}
		check(res, want1, len(seq)-6)
		// Two drafts stand: both requests keep 10 positions, on every stage.
		for _, r := range []uint64{1, 2} {
			if err := p.Trim(ctx, r, 10); err != nil {
				t.Fatal(err)
			}
		}
		waitHeld(t, pn, p, map[uint64]int{1: 10, 2: 10})
		res, err = p.Step(ctx, []Seq{{Request: 1, Tokens: again, Out: stagewire.OutLogits, Rows: len(again)},
			{Request: 2, Tokens: again, Out: stagewire.OutToken, Rows: len(again)}})
		if err != nil {
			t.Fatal(err)
		}
		check(res, want2, 10)
		waitHeld(t, pn, p, map[uint64]int{1: 15, 2: 15})
		// More rows than the stages compute in a step are refused
		// before anything runs.
		if _, err := p.Step(ctx, []Seq{{Request: 1, Tokens: seq, Out: stagewire.OutToken, Rows: 12},
			{Request: 2, Tokens: seq[:5], Out: stagewire.OutToken, Rows: 5}}); err == nil {
			t.Fatal("a step of 17 rows on stages of 16")
		}
		waitHeld(t, pn, p, map[uint64]int{1: 15, 2: 15})
		if !p.Windows() {
			t.Error("a pipeline of current nodes says it does not answer windows")
		}
		cancel()
		p.Close(context.Background())
	}
	// A stage on a node that predates windows would answer one row: a
	// window is refused before any stage runs it, and one-row steps
	// still go.
	pn := newPipeNet(t, f, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := Start(ctx, PipelineConfig{File: f, Digest: fortunesDigest, Self: head, Context: 128, Batch: 32, Seqs: 16, Backend: be, Dial: pipeDialer{pn, head},
		Stages: []Placement{{Peer: head, Range: model.LayerRange{Lo: 0, Hi: 2}}, {Peer: b, Range: model.LayerRange{Lo: 2, Hi: 4}, Windowless: true}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if p.Windows() {
		t.Error("a pipeline with a windowless stage says it answers windows")
	}
	seq := append(slices.Clone(prompt), draft...)
	if _, err := p.Step(ctx, []Seq{{Request: 1, Tokens: seq, Out: stagewire.OutToken, Rows: 3}}); err == nil || !strings.Contains(err.Error(), "does not answer windows") {
		t.Fatalf("a window on a windowless stage: %v", err)
	}
	if _, ok := p.sessions[1]; ok {
		t.Fatal("the refused window opened the request on the head")
	}
	res, err := p.Step(ctx, []Seq{{Request: 1, Tokens: seq, Out: stagewire.OutToken, Rows: 1}})
	if err != nil || len(res) != 1 || res[0].Token != argmax(want1[len(want1)-1]) {
		t.Fatalf("a one-row step on a windowless stage: %+v, %v", res, err)
	}
}

// waitHeld waits until the head and every stage of pn hold want[r]
// positions of each request r.
func waitHeld(t *testing.T, pn *pipeNet, p *Pipeline, want map[uint64]int) {
	t.Helper()
	for r, n := range want {
		if got := p.sessions[r].Len(); got != n {
			t.Fatalf("the head holds %d positions of request %d, want %d", got, r, n)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		bad := ""
		for id, srv := range pn.servers {
			for r, n := range want {
				if got, ok := held(srv, r); ok && got != n {
					bad = identity.EndpointID(id).Short()
				}
			}
		}
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s does not hold %v positions", bad, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// held is the positions srv's stage holds of request (-1: not the
// request); false when srv runs no stage. The servers of these tests run
// one stage each.
func held(srv *Server, request uint64) (int, bool) {
	srv.mu.Lock()
	var st *stage
	for _, s := range srv.stages {
		st = s
	}
	srv.mu.Unlock()
	if st == nil {
		return 0, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if sess := st.sessions[request]; sess != nil {
		return sess.Len(), true
	}
	return -1, true
}

func argmax(x []float32) uint32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return uint32(best)
}

// TestPipelineLoadRows: a pipeline's output rows per step are set apart
// from its sequences where the last stage's node takes LoadStage.Rows —
// a window of 9 rows on stages sized for 2 requests, its tokens one-token
// decoding's — and stay at Seqs where it does not (an older node, sent
// LoadStage without the field, as it was before it). The last stage
// refuses a step of more rows than it was loaded for, and a LoadStage of
// more rows than a step's positions.
func TestPipelineLoadRows(t *testing.T) {
	f := fortunes(t)
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	m, err := model.Load(f, be)
	if err != nil {
		t.Fatal(err)
	}
	seq := []uint32{1, 319, 767, 17042, 2039, 964, 263, 2594, 29871, 450, 4799, 338}
	var want []uint32 // the greedy token after each position of seq
	s, err := m.NewSession(model.SessionOptions{Context: 128})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range seq {
		next, err := s.EvalArgMax(context.Background(), []uint32{tok})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, next)
	}
	s.Close()
	head, b, c := nodeID(1), nodeID(2), nodeID(3)
	for _, loadRows := range []bool{true, false} {
		pn := newPipeNet(t, f, b, c)
		places := []Placement{{Peer: head, Range: model.LayerRange{Lo: 0, Hi: 1}},
			{Peer: b, Range: model.LayerRange{Lo: 1, Hi: 3}, LoadRows: true},
			{Peer: c, Range: model.LayerRange{Lo: 3, Hi: 4}, LoadRows: loadRows}}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		p, err := Start(ctx, PipelineConfig{File: f, Digest: fortunesDigest, Self: head, Stages: places,
			Context: 128, Batch: 16, Seqs: 2, Rows: 9, Backend: be, Dial: pipeDialer{pn, head}})
		if err != nil {
			t.Fatal(err)
		}
		// What each stage was sent: rows only to the last, and only
		// where its node takes them.
		wantRows := map[identity.EndpointID]uint16{b: 0, c: 0}
		if loadRows {
			wantRows[c] = 9
		}
		for id, srv := range pn.servers {
			srv.mu.Lock()
			for _, st := range srv.stages {
				if st.ls.Rows != wantRows[id] {
					t.Errorf("load rows %v: node %s's stage was sent rows %d, want %d", loadRows, id.Short(), st.ls.Rows, wantRows[id])
				}
			}
			srv.mu.Unlock()
		}
		if !loadRows {
			if p.Rows() != 2 {
				t.Fatalf("an older last stage: %d rows per step, want its seqs (2)", p.Rows())
			}
			if _, err := p.Step(ctx, []Seq{{Request: 1, Tokens: seq, Out: stagewire.OutToken, Rows: 3}}); err == nil {
				t.Fatal("a window of 3 rows through a last stage of 2")
			}
			res, err := p.Step(ctx, []Seq{{Request: 1, Tokens: seq, Out: stagewire.OutToken, Rows: 2}})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res[0].Tokens, want[len(seq)-2:]) {
				t.Fatalf("a window of 2 rows: %v, one-token decoding %v", res[0].Tokens, want[len(seq)-2:])
			}
		} else {
			if p.Rows() != 9 {
				t.Fatalf("%d rows per step, want 9", p.Rows())
			}
			res, err := p.Step(ctx, []Seq{{Request: 1, Tokens: seq, Out: stagewire.OutToken, Rows: 9}})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res[0].Tokens, want[len(seq)-9:]) {
				t.Fatalf("a window of 9 rows: %v, one-token decoding %v", res[0].Tokens, want[len(seq)-9:])
			}
			// The last stage itself holds the step to its rows: an
			// Activation of 10 sent past the head's check is refused.
			l := p.links[len(p.links)-1]
			act := &stagewire.Activation{Stage: l.id, DType: stagewire.DTypeF32, Width: uint32(m.Config().Embd),
				Seqs: []stagewire.ActSeq{{Request: 9, Count: 10, Out: stagewire.OutToken, Rows: 10}}, F32: make([]float32, 10*m.Config().Embd)}
			srv := pn.servers[c]
			if e := srv.activate(ctx, &stream{peer: b}, act); e == nil || e.Code != stagewire.CodeBadInput {
				t.Fatalf("a step of 10 rows on a last stage of 9: %v", e)
			}
		}
		cancel()
		p.Close(context.Background())
	}
	// More rows than a step's positions: the pipeline refuses to start,
	// and a stage refuses the LoadStage.
	pn := newPipeNet(t, f, b)
	places := []Placement{{Peer: head, Range: model.LayerRange{Lo: 0, Hi: 2}}, {Peer: b, Range: model.LayerRange{Lo: 2, Hi: 4}, LoadRows: true}}
	if _, err := Start(context.Background(), PipelineConfig{File: f, Digest: fortunesDigest, Self: head, Stages: places,
		Context: 128, Batch: 8, Seqs: 2, Rows: 9, Backend: be, Dial: pipeDialer{pn, head}}); err == nil {
		t.Fatal("a pipeline of 9 rows per step of 8 positions started")
	}
	ls := &stagewire.LoadStage{Stage: 5, Model: fortunesDigest, Lo: 2, Hi: 4, Context: 128, Batch: 8, Seqs: 2, Rows: 9,
		Out: stagewire.DTypeF32, Prev: head, Head: head}
	if e := pn.servers[b].load(context.Background(), &stream{peer: head}, ls); e == nil || e.Code != stagewire.CodeBadInput {
		t.Fatalf("a LoadStage of 9 rows per step of 8 positions: %v", e)
	}
}
