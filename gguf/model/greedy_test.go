package model_test

import (
	"context"
	"math"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/greedyhead"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
)

// TestShadowSameTokens: on every fixture (F16 and Q8_0) and on the
// fortunes models, wherever the head takes a shadow, greedy tokens through
// it are the full head's — one by one (EvalArgMax), and as the rows of a
// verified window (Batch.ArgMaxAt) — and logits read after a shadowed
// argmax are the full head's bits. Random weights make many close calls,
// which the shadow must settle exactly or hand back.
func TestShadowSameTokens(t *testing.T) {
	if !greedyhead.Available() {
		t.Skip("no shadow on this CPU: its int8 kernels need amd64 with AVX512-VNNI")
	}
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	shadowed := 0
	for _, ft := range []string{"F16", "Q8_0"} {
		for _, arch := range []string{"llama", "qwen2", "qwen3", "phi3", "gemma3", "gemma4", "gpt-oss", "qwen35"} {
			t.Run(arch+"-"+ft, func(t *testing.T) {
				f, err := gguf.Parse(fixtureBytes(t, arch, ft))
				if err != nil {
					t.Fatal(err)
				}
				if shadowSameTokens(t, be, f, 24) {
					shadowed++
				}
			})
		}
	}
	if shadowed == 0 {
		t.Fatal("no fixture took a shadow")
	}
	for _, name := range []string{"meshnode-fortunes-q8_0.gguf", "meshnode-fortunes-f16.gguf"} {
		t.Run(name, func(t *testing.T) {
			path, ok := modelPath(name)
			if !ok {
				t.Skipf("%s not found (the F16 file is not in the repository; set MESHNODE_MODELS)", name)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if !shadowSameTokens(t, be, f, 64) {
				t.Fatal("the fortunes head took no shadow")
			}
		})
	}
}

// shadowSameTokens runs TestShadowSameTokens on f for n tokens and
// reports whether its head took a shadow.
func shadowSameTokens(t *testing.T, be backend.Backend, f *gguf.File, n int) bool {
	t.Helper()
	ctx := context.Background()
	with, err := model.Load(f, be)
	if err != nil {
		t.Fatal(err)
	}
	if !with.Shadowed() {
		t.Logf("the head takes no shadow (a bias, a final softcap, or a type it does not take)")
		return false
	}
	without, err := model.Load(f, be)
	if err != nil {
		t.Fatal(err)
	}
	// The shadow's memory: a byte per weight of the head (rows padded to
	// blocks of 16) and a scale per row, counted by ShadowBytes.
	c := with.Config()
	padded := int64((c.VocabSize + 15) / 16 * 16)
	if got, want := with.ShadowBytes(), padded*int64(c.Embd)+4*padded; got != want {
		t.Errorf("ShadowBytes %d, want %d for a %d × %d head", got, want, c.VocabSize, c.Embd)
	}
	without.DropShadow()
	if got := without.ShadowBytes(); got != 0 {
		t.Errorf("ShadowBytes %d without a shadow", got)
	}
	sw, err := with.NewSession(model.SessionOptions{Context: 128})
	if err != nil {
		t.Fatal(err)
	}
	so, err := without.NewSession(model.SessionOptions{Context: 128})
	if err != nil {
		t.Fatal(err)
	}
	prompt := []uint32{1, 15, 200, 31, 7, 99}
	_, a, err := sw.PrefillArgMax(ctx, prompt)
	if err != nil {
		t.Fatal(err)
	}
	_, b, err := so.PrefillArgMax(ctx, prompt)
	if err != nil {
		t.Fatal(err)
	}
	seq := []uint32{a}
	for len(seq) < n {
		if a != b {
			t.Fatalf("token %d: %d through the shadow, %d through the full head", len(seq), a, b)
		}
		if a, err = sw.EvalArgMax(ctx, []uint32{a}); err != nil {
			t.Fatal(err)
		}
		if b, err = so.EvalArgMax(ctx, []uint32{b}); err != nil {
			t.Fatal(err)
		}
		seq = append(seq, a)
	}
	cands, settled, unsettled := sw.ShadowStats()
	if settled == 0 {
		t.Fatal("the shadow settled no token")
	}
	t.Logf("%d tokens settled (%.1f rows dotted exactly each), %d left to the full head", settled, float64(cands)/float64(settled), unsettled)
	// A window of the tokens just decoded, verified in one step on fresh
	// sessions: every row's argmax, then its logits.
	window := func(m *model.Model) ([]uint32, [][]float32) {
		s, err := m.NewSession(model.SessionOptions{Context: 128})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.PrefillArgMax(ctx, prompt); err != nil {
			t.Fatal(err)
		}
		bt, err := m.NewBatch(model.BatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w := seq[:6]
		if err := bt.Step(ctx, []model.Seq{{Session: s, Tokens: w, Logits: len(w)}}); err != nil {
			t.Fatal(err)
		}
		var ids []uint32
		var logits [][]float32
		for j := range w {
			ids = append(ids, bt.ArgMaxAt(0, j))
		}
		for j := range w {
			logits = append(logits, append([]float32(nil), bt.LogitsAt(0, j)...))
		}
		return ids, logits
	}
	gi, gl := window(with)
	wi, wl := window(without)
	for j := range wi {
		if gi[j] != wi[j] {
			t.Fatalf("window row %d: %d through the shadow, %d through the full head", j, gi[j], wi[j])
		}
		for k := range wl[j] {
			if math.Float32bits(gl[j][k]) != math.Float32bits(wl[j][k]) {
				t.Fatalf("window row %d logit %d: %v after the shadow, %v without", j, k, gl[j][k], wl[j][k])
			}
		}
	}
	return true
}

// TestStageShadowOnRequest: a last stage's head gets its shadow only from
// BuildShadow (for a caller whose budget holds it), and ShadowBytes says
// what it will hold before it is built; Load builds it.
func TestStageShadowOnRequest(t *testing.T) {
	if !greedyhead.Available() {
		t.Skip("this CPU builds no head shadow (greedyhead needs AVX512-VNNI)")
	}
	path, _ := modelPath("meshnode-fortunes-q8_0.gguf")
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	f, whole := modeltest.Load(t, path, be)
	c := whole.Config()
	padded := int64((c.VocabSize + 15) / 16 * 16)
	want := padded*int64(c.Embd) + 4*padded
	if !whole.Shadowed() || whole.ShadowBytes() != want {
		t.Fatalf("Load: shadowed %v, %d bytes, want %d", whole.Shadowed(), whole.ShadowBytes(), want)
	}
	last, err := model.LoadStage(f, be, model.LayerRange{Lo: 2, Hi: c.Layers})
	if err != nil {
		t.Fatal(err)
	}
	if last.Shadowed() || last.ShadowBytes() != want {
		t.Fatalf("LoadStage: shadowed %v, %d bytes, want none built and %d to come", last.Shadowed(), last.ShadowBytes(), want)
	}
	if !last.BuildShadow() || !last.Shadowed() || last.ShadowBytes() != want {
		t.Fatalf("BuildShadow: shadowed %v, %d bytes, want %d", last.Shadowed(), last.ShadowBytes(), want)
	}
	first, err := model.LoadStage(f, be, model.LayerRange{Lo: 0, Hi: 2})
	if err != nil {
		t.Fatal(err)
	}
	if first.BuildShadow() || first.ShadowBytes() != 0 {
		t.Fatalf("a first stage (no head): BuildShadow %v, %d bytes", first.Shadowed(), first.ShadowBytes())
	}
}
