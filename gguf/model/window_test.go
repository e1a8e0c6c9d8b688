package model_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
)

// TestWindowLogits: a sequence that asks for the logits after each of its
// last n tokens (a speculative window being verified) gets, in every row,
// the bits plain one-token decoding gets at that position; and a session
// trimmed with Truncate and evaluated again gets them too. On every parity
// fixture and the trained built-in model.
func TestWindowLogits(t *testing.T) {
	md, err := vocabSource()
	if err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	for _, arch := range modeltest.Archs {
		for _, ft := range modeltest.FileTypes {
			t.Run(fixtureName(arch, ft), func(t *testing.T) {
				file, err := modeltest.Generate(modeltest.Fixture(arch, ft), md)
				if err != nil {
					t.Fatal(err)
				}
				m, err := load(t, file, be)
				if err != nil {
					t.Fatal(err)
				}
				checkWindow(t, m, 0)
			})
		}
	}
	t.Run("fortunes-q8_0", func(t *testing.T) {
		_, m := modeltest.Load(t, filepath.Join("..", "..", "models", "meshnode-fortunes-q8_0.gguf"), be)
		checkWindow(t, m, 2000)
	})
}

// checkWindow decodes greedily token by token, then verifies the same
// tokens as windows of every length 1…6 after the prompt, comparing each
// row bit for bit; then trims a window's last tokens and evaluates them
// again.
func checkWindow(t *testing.T, m *model.Model, vocab int) {
	t.Helper()
	ctx := context.Background()
	if vocab == 0 {
		vocab = m.Config().VocabSize
	}
	rng := rand.New(rand.NewPCG(seedOf(t.Name()), 2))
	prompt := make([]uint32, 5+rng.IntN(8))
	for i := range prompt {
		prompt[i] = uint32(rng.IntN(vocab))
	}
	const n = 6
	// Plain decoding: the logits after the prompt and after each of the
	// n tokens generated.
	plain := session(t, m, model.SessionOptions{Context: 64})
	logits, err := plain.Eval(ctx, prompt)
	if err != nil {
		t.Fatal(err)
	}
	var gen []uint32
	var want [][]float32
	for range n {
		gen = append(gen, argmax(logits))
		if logits, err = plain.Eval(ctx, gen[len(gen)-1:]); err != nil {
			t.Fatal(err)
		}
		want = append(want, append([]float32(nil), logits...))
	}
	same := func(what string, got, ref []float32) {
		t.Helper()
		for j := range ref {
			if math.Float32bits(got[j]) != math.Float32bits(ref[j]) {
				t.Fatalf("%s: id %d is %v, plain decoding %v", what, j, got[j], ref[j])
			}
		}
	}

	b, err := m.NewBatch(model.BatchOptions{Tokens: 16, Seqs: n + 1})
	if err != nil {
		t.Fatal(err)
	}
	s := session(t, m, model.SessionOptions{Context: 64})
	other := session(t, m, model.SessionOptions{Context: 64})
	for w := 1; w <= n; w++ {
		s.Truncate(0)
		if _, err := s.Eval(ctx, prompt); err != nil {
			t.Fatal(err)
		}
		// Another sequence's decode token shares the step, in front.
		other.Truncate(0)
		step := []model.Seq{{Session: other, Tokens: prompt[:3], Logits: 1}, {Session: s, Tokens: gen[:w], Logits: w}}
		if err := b.Step(ctx, step); err != nil {
			t.Fatal(err)
		}
		if b.Rows(1) != w {
			t.Fatalf("window of %d: %d rows", w, b.Rows(1))
		}
		for r := range w {
			if a := b.ArgMaxAt(1, r); a != argmax(want[r]) {
				t.Fatalf("window of %d, row %d: ArgMaxAt %d, plain %d", w, r, a, argmax(want[r]))
			}
			same(fmt.Sprintf("window of %d, row %d", w, r), b.LogitsAt(1, r), want[r])
		}
		same(fmt.Sprintf("window of %d, Logits", w), b.Logits(1), want[w-1])

		// Trim the window's last half (rejected tokens) and evaluate
		// them again, one by one.
		keep := w / 2
		s.Truncate(len(prompt) + keep)
		if s.Len() != len(prompt)+keep {
			t.Fatalf("after Truncate: %d tokens", s.Len())
		}
		for r := keep; r < w; r++ {
			got, err := s.Eval(ctx, gen[r:r+1])
			if err != nil {
				t.Fatal(err)
			}
			same(fmt.Sprintf("window of %d trimmed to %d, re-evaluated token %d", w, keep, r), got, want[r])
		}
	}
}
