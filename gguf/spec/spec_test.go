package spec_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/quant"
	"github.com/meshnode/meshnode/gguf/sample"
	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/gguf/spec/spectest"
)

// vocabSource is the committed model whose tokenizer the fixtures carry.
var vocabSource = sync.OnceValues(func() (*gguf.File, error) {
	return gguf.Open(filepath.Join("..", "..", "models", "meshnode-fortunes-q8_0.gguf"))
})

// modelPath finds a model file in the repository's models/ or
// $MESHNODE_MODELS (where the F16 and draft files are).
func modelPath(name string) (string, bool) {
	dirs := []string{filepath.Join("..", "..", "models")}
	if d := os.Getenv("MESHNODE_MODELS"); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
	}
	return "", false
}

// loaded is a model and its file.
type loaded struct {
	f *gguf.File
	m *model.Model
}

func fixture(t *testing.T, be *cpu.Backend, arch, ft string) loaded {
	t.Helper()
	src, err := vocabSource()
	if err != nil {
		t.Fatal(err)
	}
	f := modeltest.Parsed(t, modeltest.Fixture(arch, ft), src.Metadata)
	m, err := model.Load(f, be)
	if err != nil {
		t.Fatal(err)
	}
	return loaded{f, m}
}

func open(t *testing.T, be *cpu.Backend, path string) loaded {
	t.Helper()
	f, m := modeltest.Load(t, path, be)
	return loaded{f, m}
}

// plainGreedy decodes n tokens token by token, with the sampler's greedy
// pick (penalties included).
func plainGreedy(t *testing.T, m *model.Model, prompt []uint32, n int, p sample.Params) []uint32 {
	t.Helper()
	ctx := context.Background()
	s, err := m.NewSession(model.SessionOptions{Context: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	smp := sample.New(p)
	logits, err := s.Eval(ctx, prompt)
	if err != nil {
		t.Fatal(err)
	}
	var out []uint32
	for {
		out = append(out, smp.Sample(logits, out))
		if len(out) == n {
			return out
		}
		if logits, err = s.Eval(ctx, out[len(out)-1:]); err != nil {
			t.Fatal(err)
		}
	}
}

// speculate runs spec.Generate and checks that the session's cache holds
// exactly the prompt and the tokens before the last (rejected drafts
// trimmed).
func speculate(t *testing.T, m *model.Model, prompt []uint32, n int, p sample.Params, prop spec.Proposer, w *spec.Window) ([]uint32, spec.Stats) {
	t.Helper()
	ctx := context.Background()
	s, err := m.NewSession(model.SessionOptions{Context: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, err := m.NewBatch(model.BatchOptions{Tokens: 16, Seqs: 16})
	if err != nil {
		t.Fatal(err)
	}
	out, st, err := spec.Generate(ctx, b, s, prompt, n, p, prop, w)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(slices.Clone(prompt), out[:n-1]...); !slices.Equal(s.Tokens(), want) {
		t.Fatalf("the session holds %d tokens %v, want the prompt and the output but its last (%d): rejected drafts not trimmed", s.Len(), s.Tokens(), len(want))
	}
	return out, st
}

// TestGreedyExact: greedy speculative decoding gives plain greedy
// decoding's tokens, one for one, on every parity fixture — with the same
// weights in another quantisation as the draft, with prompt lookup, and
// with drafts that are mostly wrong —
// with and without penalties (which make verification read the logits
// rather than their argmax), and trims rejected drafts' KV.
func TestGreedyExact(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	const n = 20
	for _, arch := range modeltest.Archs {
		for i, ft := range modeltest.FileTypes {
			dft := modeltest.FileTypes[(i+1)%len(modeltest.FileTypes)]
			t.Run(arch+"-"+strings.ToLower(ft)+"-draft-"+strings.ToLower(dft), func(t *testing.T) {
				target, draft := fixture(t, be, arch, ft), fixture(t, be, arch, dft)
				if err := spec.CheckVocab(target.f.Metadata, draft.f.Metadata, target.m.Config().VocabSize, draft.m.Config().VocabSize); err != nil {
					t.Fatal(err)
				}
				prompt := spectest.Repeating(1000, 6)
				for _, p := range []sample.Params{{}, {RepeatPenalty: 1.3}} {
					want := plainGreedy(t, target.m, prompt, n, p)
					ds, err := draft.m.NewSession(model.SessionOptions{Context: 256})
					if err != nil {
						t.Fatal(err)
					}
					got, st := speculate(t, target.m, prompt, n, p, spec.NewModelProposer(ds, p, -1), spec.NewWindow(4, 0.25, 0))
					ds.Close()
					if !slices.Equal(got, want) {
						t.Fatalf("%+v, draft model: speculative %v, plain %v", p, got, want)
					}
					if st.Proposed == 0 {
						t.Fatalf("%+v: the draft proposed nothing: %+v", p, st)
					}
					got, st2 := speculate(t, target.m, prompt, n, p, spec.Lookup{}, spec.Fixed(4))
					if !slices.Equal(got, want) {
						t.Fatalf("%+v, prompt lookup: speculative %v, plain %v", p, got, want)
					}
					// Drafts mostly wrong, every round: rejections and
					// trims at every position of the window.
					got, st3 := speculate(t, target.m, prompt, n, p, spectest.JunkDrafts(target.m.Config().VocabSize), spec.Fixed(3))
					if !slices.Equal(got, want) || st3.Proposed == 0 {
						t.Fatalf("%+v, junk drafts: speculative %v, plain %v (%+v)", p, got, want, st3)
					}
					t.Logf("%+v: draft %+v, lookup %+v", p, st, st2)
				}
			})
		}
	}
}

// TestGreedyExactFortunes: the same on the trained built-in model, with
// the trained draft model (meshnode-fortunes-draft) and, where the F16
// file is present, F16 as the target with Q8_0 as its draft. The draft
// files are in $MESHNODE_MODELS (../shared/models).
func TestGreedyExactFortunes(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	cases, err := modeltest.ReadGreedyReference(filepath.Join("..", "..", "models", "reference-greedy.txt"))
	if err != nil || len(cases) == 0 {
		t.Fatalf("reference: %d cases, %v", len(cases), err)
	}
	pairs := [][2]string{
		{"meshnode-fortunes-q8_0.gguf", "meshnode-fortunes-draft-q8_0.gguf"},
		{"meshnode-fortunes-f16.gguf", "meshnode-fortunes-q8_0.gguf"},
	}
	ran := 0
	for _, pair := range pairs {
		tp, ok1 := modelPath(pair[0])
		dp, ok2 := modelPath(pair[1])
		if !ok1 || !ok2 {
			t.Logf("%s with %s: not found (set MESHNODE_MODELS)", pair[0], pair[1])
			continue
		}
		ran++
		t.Run(pair[0]+"+"+pair[1], func(t *testing.T) {
			target, draft := open(t, be, tp), open(t, be, dp)
			if err := spec.CheckVocab(target.f.Metadata, draft.f.Metadata, target.m.Config().VocabSize, draft.m.Config().VocabSize); err != nil {
				t.Fatal(err)
			}
			var prop, acc int
			for _, c := range cases[:3] {
				want := plainGreedy(t, target.m, c.Prompt, 40, sample.Params{})
				ds, err := draft.m.NewSession(model.SessionOptions{Context: 256})
				if err != nil {
					t.Fatal(err)
				}
				// Full windows every step, so that many drafts are verified.
				got, st := speculate(t, target.m, c.Prompt, 40, sample.Params{}, spec.NewModelProposer(ds, sample.Params{}, -1), spec.Fixed(4))
				ds.Close()
				if !slices.Equal(got, want) {
					t.Fatalf("prompt %v: speculative %v, plain %v", c.Prompt, got, want)
				}
				prop, acc = prop+st.Proposed, acc+st.Accepted
			}
			if prop == 0 {
				t.Fatal("the draft proposed nothing")
			}
			t.Logf("acceptance %d/%d", acc, prop)
		})
	}
	if ran == 0 {
		t.Skip("no draft model found; set MESHNODE_MODELS to ../shared/models")
	}
}

// TestCopyDraftSpeculates: the built-in model with its own weights in
// Q4_0 as the draft (modeltest.Requantize), sized and judged as the
// engine does (Drafter.Window: a copy's prior, c from the files' sizes;
// the calibrated rule): greedy output equals plain greedy decoding, and
// the rule drafts at least a quarter more than the fixed threshold of
// DefaultThreshold, which takes the draft's low confidence at its word
// (the copy is right when unsure too), with at least 85% of its drafts
// accepted. The draft costs c = 0.55 of the target here (the sizes'
// ratio), so windows stay short; the run is deterministic (no timing
// decides anything).
func TestCopyDraftSpeculates(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	src := filepath.Join("..", "..", "models", "meshnode-fortunes-q8_0.gguf")
	q4 := filepath.Join(t.TempDir(), "fortunes-q4_0.gguf")
	if err := modeltest.Requantize(src, q4, quant.Q4_0); err != nil {
		t.Fatal(err)
	}
	target, draft := open(t, be, src), open(t, be, q4)
	if !spec.SameShape(target.f, draft.f) {
		t.Fatal("the requantised copy is not the target's shape")
	}
	cost := float64(draft.f.Size()) / float64(target.f.Size())
	refs, err := modeltest.ReadGreedyReference(filepath.Join("..", "..", "models", "reference-greedy.txt"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	run := func(threshold float64) (drafted, accepted, rounds int) {
		for _, c := range refs {
			want := plainGreedy(t, target.m, c.Prompt, n, sample.Params{})
			ds, err := draft.m.NewSession(model.SessionOptions{Context: 256})
			if err != nil {
				t.Fatal(err)
			}
			w := spec.NewWindow(0, cost, 0).Expect(spec.CopyPrior)
			got, st := speculate(t, target.m, c.Prompt, n, sample.Params{}, spec.NewModelProposer(ds, sample.Params{}, threshold), w)
			ds.Close()
			if !slices.Equal(got, want) {
				t.Fatalf("threshold %v: speculative %v, plain %v", threshold, got, want)
			}
			drafted, accepted, rounds = drafted+st.Proposed, accepted+st.Accepted, rounds+st.Rounds
		}
		return drafted, accepted, rounds
	}
	d, a, r := run(0)
	t.Logf("calibrated: %d drafts in %d rounds, %d accepted", d, r, a)
	if float64(a) < 0.85*float64(d) {
		t.Errorf("calibrated: %d drafts, %d accepted; want 85%% accepted", d, a)
	}
	d0, a0, r0 := run(spec.DefaultThreshold)
	t.Logf("threshold %v: %d drafts in %d rounds, %d accepted", spec.DefaultThreshold, d0, r0, a0)
	if 4*d < 5*d0 {
		t.Errorf("the fixed threshold drafted %d, the calibrated rule %d: want a quarter more at least", d0, d)
	}
}

// TestCheckVocab: a draft whose vocabulary differs from the target's in
// size or in any token's text is refused, naming the difference.
func TestCheckVocab(t *testing.T) {
	src, err := vocabSource()
	if err != nil {
		t.Fatal(err)
	}
	tokens, _ := src.Metadata.Strings("tokenizer.ggml.tokens")
	md := func(toks []string) *gguf.Metadata {
		v, err := gguf.ValueOf(toks)
		if err != nil {
			t.Fatal(err)
		}
		m, err := gguf.NewMetadata([]gguf.KV{{Key: "tokenizer.ggml.tokens", Value: v}})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	n := len(tokens)
	if err := spec.CheckVocab(src.Metadata, md(tokens), n, n); err != nil {
		t.Fatalf("the same vocabulary: %v", err)
	}
	if err := spec.CheckVocab(src.Metadata, md(tokens), n, n-1); err == nil || !strings.Contains(err.Error(), "tokens") {
		t.Errorf("another output size: %v", err)
	}
	if err := spec.CheckVocab(src.Metadata, md(tokens[:n-1]), n, n); err == nil {
		t.Error("a shorter tokenizer was accepted")
	}
	other := slices.Clone(tokens)
	other[500] = "▁something-else"
	if err := spec.CheckVocab(src.Metadata, md(other), n, n); err == nil || !strings.Contains(err.Error(), "token 500") {
		t.Errorf("a token with other text: %v", err)
	}
}

// TestSameShape: a quantised copy of a model (the same fixture in another
// type, and the fixture requantised by modeltest.Requantize) has the
// target's shape; a model of another width or depth, or of another
// architecture, does not.
func TestSameShape(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	q8 := fixture(t, be, "llama", "Q8_0")
	if !spec.SameShape(q8.f, fixture(t, be, "llama", "Q4_0").f) {
		t.Error("the Q4_0 fixture is not the Q8_0 fixture's shape")
	}
	path := filepath.Join(t.TempDir(), "q8.gguf")
	if err := os.WriteFile(path, q8.f.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := modeltest.Requantize(path, path+".q4", quant.Q4_0); err != nil {
		t.Fatal(err)
	}
	rq := open(t, be, path+".q4")
	if !spec.SameShape(q8.f, rq.f) {
		t.Error("the requantised copy is not its source's shape")
	}
	if spec.SameShape(q8.f, fixture(t, be, "qwen3", "Q8_0").f) {
		t.Error("a qwen3 fixture has the llama fixture's shape")
	}
	src, err := vocabSource()
	if err != nil {
		t.Fatal(err)
	}
	narrow := modeltest.Fixture("llama", "Q8_0")
	narrow.Layers = 1
	f := modeltest.Parsed(t, narrow, src.Metadata)
	if spec.SameShape(q8.f, f) {
		t.Error("a one-layer fixture has the two-layer fixture's shape")
	}
}

// textDrafts are the tokens of drafts found in text (prompt lookup's, a
// prediction's), which carry no distribution.
func textDrafts(t *testing.T, d []spec.Draft) []uint32 {
	t.Helper()
	var out []uint32
	for _, x := range d {
		if x.Q != nil {
			t.Errorf("draft %d found in text has a distribution", x.Token)
		}
		out = append(out, x.Token)
	}
	return out
}

// TestLookup: prompt lookup proposes what followed the latest earlier
// occurrence of the longest suffix it finds, at most k tokens, and
// nothing where the suffix never occurred.
func TestLookup(t *testing.T) {
	ctx := context.Background()
	toks := func(d []spec.Draft) []uint32 { return textDrafts(t, d) }
	for _, tc := range []struct {
		seq  []uint32
		k    int
		want []uint32
	}{
		{[]uint32{1, 2, 3, 4, 1, 2}, 3, []uint32{3, 4, 1}},
		{[]uint32{1, 2, 3, 4, 1, 2}, 8, []uint32{3, 4, 1, 2}},
		// The longest suffix wins over a later, shorter match.
		{[]uint32{7, 8, 9, 5, 3, 9, 6, 7, 8, 9}, 2, []uint32{5, 3}},
		// The latest occurrence of the same suffix.
		{[]uint32{5, 1, 5, 2, 5}, 1, []uint32{2}},
		// Of two occurrences, the one whose match reaches further back
		// (20 21 22 before 1 2 3), not the later one (9 before it).
		{[]uint32{20, 21, 22, 1, 2, 3, 40, 9, 1, 2, 3, 50, 20, 21, 22, 1, 2, 3}, 2, []uint32{40, 9}},
		// Equal reaches: the later.
		{[]uint32{7, 1, 2, 3, 40, 8, 1, 2, 3, 50, 6, 1, 2, 3}, 1, []uint32{50}},
		{[]uint32{1, 2, 3}, 4, nil},
		{[]uint32{1}, 4, nil},
	} {
		d, err := spec.Lookup{}.Propose(ctx, tc.seq, 0, tc.k)
		if err != nil {
			t.Fatal(err)
		}
		if got := toks(d); !slices.Equal(got, tc.want) {
			t.Errorf("%v, k %d: %v, want %v", tc.seq, tc.k, got, tc.want)
		}
	}
	// Judged: the judge sees a confidence per draft — one band for the
	// first token after a match and another for the later ones, and
	// other bands for another match length — and ends the drafting.
	seq := []uint32{7, 8, 9, 5, 3, 4, 6, 7, 8, 9}
	var confs []float64
	d, err := spec.Lookup{}.ProposeJudged(ctx, seq, 0, 4, func(conf float64) (bool, bool) {
		confs = append(confs, conf)
		return true, len(confs) < 3
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := toks(d); !slices.Equal(got, []uint32{5, 3, 4}) {
		t.Errorf("judged to stop after 3: %v", got)
	}
	if len(confs) != 3 || confs[0] == confs[1] || confs[1] != confs[2] {
		t.Errorf("confidences %v: want the first apart, the later two alike", confs)
	}
	one := []uint32{5, 1, 5, 2, 5}
	d, _ = spec.Lookup{}.ProposeJudged(ctx, one, 0, 1, func(conf float64) (bool, bool) {
		if conf == confs[0] {
			t.Errorf("a one-token match counted in the three-token match's band %v", conf)
		}
		return false, false
	})
	if len(d) != 0 {
		t.Errorf("a draft the judge refused was proposed: %v", toks(d))
	}
	// A match reaching 8 tokens back is text being copied: every draft
	// after it in one band, above the three-token match's later drafts.
	copied := []uint32{30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 99, 30, 31, 32, 33, 34, 35, 36, 37}
	var copyConfs []float64
	d, _ = spec.Lookup{}.ProposeJudged(ctx, copied, 0, 3, func(conf float64) (bool, bool) {
		copyConfs = append(copyConfs, conf)
		return true, true
	})
	if got := toks(d); !slices.Equal(got, []uint32{38, 39, 40}) {
		t.Errorf("copied text: %v, want 38 39 40", got)
	}
	if len(copyConfs) != 3 || copyConfs[0] != copyConfs[2] || copyConfs[0] <= confs[1] {
		t.Errorf("copied text's confidences %v: want one band above %v", copyConfs, confs[1])
	}
}

// TestWindow: the window grows to its maximum while drafts stand, shrinks
// as they fall, and stops speculating when no size pays; and a costlier
// draft stops sooner.
func TestWindow(t *testing.T) {
	w := spec.NewWindow(6, 0.1, -1)
	for range 20 {
		w.Record(w.Size(), w.Size())
	}
	if k := w.Size(); k != 6 {
		t.Errorf("every draft accepted: window %d, want 6 (rate %.2f)", k, w.Rate())
	}
	// Half accepted: a smaller window.
	for range 20 {
		k := w.Size()
		w.Record(2*k, k)
	}
	if k := w.Size(); k < 1 || k >= 6 {
		t.Errorf("half accepted: window %d (rate %.2f)", k, w.Rate())
	}
	// None accepted: off (its probes: TestWindowProbes).
	w = spec.NewWindow(6, 0.25, -1)
	for i := 0; w.Size() > 0; i++ {
		if i == 10 {
			t.Fatalf("10 rounds with no draft accepted and still speculating (rate %.2f)", w.Rate())
		}
		w.Record(6, 0)
	}
	// A declined draft counts as a rejection where drafting costs
	// something, and not where it is free.
	free, paid := spec.NewWindow(4, 0, 0), spec.NewWindow(4, 0.2, 0)
	for range 5 {
		free.Declined()
		paid.Declined()
	}
	if free.Rate() != 0.7 || paid.Rate() >= 0.7 {
		t.Errorf("after declines: free proposer's rate %.2f (want the prior 0.70), paid one's %.2f", free.Rate(), paid.Rate())
	}
	// A fixed window drafts its size whatever happens.
	f := spec.Fixed(3)
	for range 50 {
		if k := f.Size(); k != 3 {
			t.Fatalf("a fixed window of 3 asked for %d", k)
		}
		f.Record(3, 0)
		f.Declined()
	}
	// At a rate of 0.7 a cheap draft pays, a draft as costly as the
	// target does not.
	cheap, dear := spec.NewWindow(4, 0.1, -1), spec.NewWindow(4, 1, -1)
	if cheap.Size() == 0 || dear.Size() != 0 {
		t.Errorf("at the prior rate %.2f: cheap draft window %d, dear draft window %d", cheap.Rate(), cheap.Size(), dear.Size())
	}
}

// TestSampledGenerateRepeats: a seeded sampled speculative generation on
// a real forward pass repeats exactly with the same draft — the replay of
// a serve that speculated — and differs under another seed.
func TestSampledGenerateRepeats(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	target, draft := fixture(t, be, "llama", "Q8_0"), fixture(t, be, "llama", "Q4_0")
	prompt := spectest.Repeating(1000, 5)
	run := func(seed uint64) ([]uint32, spec.Stats) {
		p := sample.Params{Temperature: 0.8, TopK: 40, Seed: seed}
		ds, err := draft.m.NewSession(model.SessionOptions{Context: 256})
		if err != nil {
			t.Fatal(err)
		}
		defer ds.Close()
		return speculate(t, target.m, prompt, 24, p, spec.NewModelProposer(ds, p, -1), spec.NewWindow(4, 0.25, 0))
	}
	a, st := run(3)
	b, _ := run(3)
	c, _ := run(4)
	if !slices.Equal(a, b) {
		t.Fatalf("the same seed: %v, then %v", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 3 and 4 gave the same %v", a)
	}
	if st.Proposed == 0 {
		t.Errorf("nothing was proposed: %+v", st)
	}
	t.Logf("%+v", st)
}

// TestDraftPrefill: a draft model that took in the prompt with the
// target's prefill evaluates only the tokens generated since in its first
// round, and drafts what a draft catching up in that round drafts; a
// window that expects no draft to pay leaves the draft idle.
func TestDraftPrefill(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	draft := fixture(t, be, "llama", "Q8_0")
	ctx := context.Background()
	prompt := spectest.Repeating(1000, 6)
	seq := append(slices.Clone(prompt), prompt[1])
	propose := func(prefill bool, w *spec.Window) (*spec.ModelProposer, int, []spec.Draft) {
		t.Helper()
		ds, err := draft.m.NewSession(model.SessionOptions{Context: 256})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ds.Close)
		mp := spec.NewModelProposer(ds, sample.Params{}, -1)
		if prefill {
			if err := spec.Prefill(ctx, mp, w, prompt); err != nil {
				t.Fatal(err)
			}
		}
		before := mp.Evaluated()
		d, err := mp.Propose(ctx, seq, len(prompt), 3)
		if err != nil {
			t.Fatal(err)
		}
		return mp, before, d
	}
	_, _, want := propose(false, nil)
	mp, before, got := propose(true, spec.NewWindow(4, 0.1, 0))
	if before != len(prompt) {
		t.Errorf("the draft's prefill evaluated %d tokens, want the prompt's %d", before, len(prompt))
	}
	// The first round: the token generated, then one per draft after it.
	if n := mp.Evaluated() - before; n != len(got) {
		t.Errorf("after the prefill the first round evaluated %d tokens for %d drafts, want %d", n, len(got), len(got))
	}
	if len(want) != 3 || !slices.Equal(spec.Tokens(0, got), spec.Tokens(0, want)) {
		t.Errorf("drafts after the prefill %v, without %v", got, want)
	}
	// A draft as dear as the target: no window pays, no prefill.
	if _, before, _ = propose(true, spec.NewWindow(4, 1, 0)); before != 0 {
		t.Errorf("a window that never speculates had the draft evaluate %d prompt tokens", before)
	}
}

// TestSampledDraftsKeepTheirDistributions: each sampled draft of a
// proposal carries the draft model's distribution at its own position —
// the one it was drawn from and Verify judges it by — though the
// proposer reuses their storage from one proposal to the next. Each is
// held, entry for entry, to a distribution computed afresh on a session
// of its own, in a second proposal as in the first.
func TestSampledDraftsKeepTheirDistributions(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	draft := fixture(t, be, "llama", "Q8_0")
	ctx := context.Background()
	p := sample.Params{Temperature: 1.5, TopK: 50, Seed: 9}
	session := func() *model.Session {
		s, err := draft.m.NewSession(model.SessionOptions{Context: 256})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	mp := spec.NewModelProposer(session(), p, -1)
	fresh := session()
	prompt := spectest.Repeating(1000, 5)
	for round, seq := range [][]uint32{prompt, append(slices.Clone(prompt), 7, 8)} {
		drafts, err := mp.Propose(ctx, seq, len(prompt), 4)
		if err != nil {
			t.Fatal(err)
		}
		if len(drafts) != 4 {
			t.Fatalf("round %d: %d drafts, want 4", round, len(drafts))
		}
		smp := sample.New(p)
		at := slices.Clone(seq)
		for i, d := range drafts {
			fresh.Truncate(0)
			logits, err := fresh.Eval(ctx, at)
			if err != nil {
				t.Fatal(err)
			}
			want := smp.Dist(nil, logits, at[len(prompt):])
			if !slices.Equal(d.Q, want) {
				t.Fatalf("round %d, draft %d: its distribution is not the draft model's at its position (%d entries, want %d)", round, i, len(d.Q), len(want))
			}
			at = append(at, d.Token)
		}
	}
}

// TestPredicted: a predicted output drafts its own start while the
// answer follows it (from the first round, the prompt's tokens never
// matched), then after the answer strays, what follows the prediction's
// best match of the answer's end (an edit's unchanged tail), and nothing
// past its end; its drafts have no distribution, and a judge ends them.
func TestPredicted(t *testing.T) {
	ctx := context.Background()
	prompt := []uint32{90, 91, 92}
	pred := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	p := spec.NewPredicted(pred)
	propose := func(gen []uint32, k int) []uint32 {
		t.Helper()
		d, err := p.Propose(ctx, append(slices.Clone(prompt), gen...), len(prompt), k)
		if err != nil {
			t.Fatal(err)
		}
		return textDrafts(t, d)
	}
	for _, tc := range []struct {
		gen  []uint32
		k    int
		want []uint32
	}{
		{nil, 3, []uint32{1, 2, 3}},
		{[]uint32{1, 2}, 4, []uint32{3, 4, 5, 6}},
		{[]uint32{1, 2, 3, 4, 5, 6, 7, 8}, 4, []uint32{9, 10}},
		{pred, 4, nil}, // the prediction is spent
	} {
		p = spec.NewPredicted(pred)
		if got := propose(tc.gen, tc.k); !slices.Equal(got, tc.want) {
			t.Errorf("after %v, k %d: %v, want %v", tc.gen, tc.k, got, tc.want)
		}
	}
	// One predictor through a serve: following, then an edit (40 41 for
	// 3 4), then the tail found again by its last tokens.
	p = spec.NewPredicted(pred)
	steps := []struct {
		gen, want []uint32
	}{
		{nil, []uint32{1, 2, 3}},
		{[]uint32{1, 2}, []uint32{3, 4, 5}},
		{[]uint32{1, 2, 40, 41}, nil},                  // strayed, and 41 is nowhere in it
		{[]uint32{1, 2, 40, 41, 5}, []uint32{6, 7, 8}}, // 5 matched: what follows it
		{[]uint32{1, 2, 40, 41, 5, 6, 7, 8}, []uint32{9, 10}},
	}
	for _, st := range steps {
		if got := propose(st.gen, 3); !slices.Equal(got, st.want) {
			t.Errorf("serve after %v: %v, want %v", st.gen, got, st.want)
		}
	}
	// Following the start is counted as copying, surer than a one-token
	// match after the answer strayed; a judge ends the drafts.
	p = spec.NewPredicted(pred)
	var confs []float64
	d, _ := p.ProposeJudged(ctx, prompt, len(prompt), 5, func(conf float64) (bool, bool) {
		confs = append(confs, conf)
		return true, len(confs) < 2
	})
	if len(d) != 2 {
		t.Errorf("judged to stop after 2: %d drafts", len(d))
	}
	var matched float64
	p.ProposeJudged(ctx, append(slices.Clone(prompt), 9, 5), len(prompt), 1, func(conf float64) (bool, bool) {
		matched = conf
		return false, false
	})
	if len(confs) != 2 || matched == 0 || matched >= confs[0] {
		t.Errorf("confidences along the start %v, after a one-token match %v", confs, matched)
	}
}

// TestPredictionNames: a sampled request names its prediction by its
// tokens' digest, within a receipt's 128 bytes of draft name
// (receipt.MaxDraftBytes) with prices and bounds; the window is priced
// as the name says; and a name that is not the prediction's, or names
// one that was not given, is an error.
func TestPredictionNames(t *testing.T) {
	a, b := []uint32{1, 2, 3}, []uint32{1, 2, 4}
	id := spec.PredictionID(a)
	if id != spec.PredictionID(slices.Clone(a)) || id == spec.PredictionID(b) || !spec.IsPredictionID(id) || spec.IsPredictionID(spec.DraftLookup) {
		t.Fatalf("PredictionID(%v) = %q, of %v %q", a, id, b, spec.PredictionID(b))
	}
	name := spec.LimitedDraft(spec.PricedDraft(id, spec.DraftPrices{Row: 99.99}), spec.Limits{Max: 256, Min: 256, PMin: 0.999})
	if len(name) > 128 {
		t.Errorf("%q: %d bytes", name, len(name))
	}
	if _, err := (*spec.Drafter)(nil).SampledPredictionWindow(name, a); err != nil {
		t.Errorf("the prediction's own name: %v", err)
	}
	if _, err := (*spec.Drafter)(nil).SampledPredictionWindow(name, b); err == nil {
		t.Error("another prediction's name took")
	}
	for _, c := range []struct {
		id   string
		pred []uint32
		ok   bool
	}{{id, a, true}, {id, b, false}, {"", a, false}, {spec.DraftLookup, a, false}, {id, nil, false}, {spec.DraftLookup, nil, true}, {"", nil, true}} {
		if err := spec.CheckPredictionNamed(c.id, c.pred); (err == nil) != c.ok {
			t.Errorf("CheckPredictionNamed(%q, %v): %v", c.id, c.pred, err)
		}
	}
	if p := spec.PredictionPrices(spec.Prices{SampledRow: 0.4, Cost: 0.3}, true); p != (spec.DraftPrices{Row: 0.4}) {
		t.Errorf("measured: %+v, want the sampled row at no cost", p)
	}
	if p := spec.PredictionPrices(spec.Prices{SampledRow: 0.4}, false); p != (spec.DraftPrices{Row: spec.DefaultRowCost}) {
		t.Errorf("not measured: %+v, want the default row", p)
	}
}
