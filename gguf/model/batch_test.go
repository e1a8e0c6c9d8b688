package model_test

import (
	"context"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
)

func seedOf(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}

// TestBatchInvariance: on every parity fixture (architecture × weight
// type) and the trained built-in model, random mixes of sequences — random
// arrivals, orders, prompt chunkings and step budgets, prefill chunks and
// decode tokens sharing steps — give every sequence the logits it gets
// alone, bit for bit (modeltest.BatchInvariance).
func TestBatchInvariance(t *testing.T) {
	md, err := vocabSource()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	opt := modeltest.MixOptions{Seqs: 4, MaxPrompt: 20, Decode: 6, Context: 64, Mixes: 3}
	check := func(t *testing.T, m *model.Model, opt modeltest.MixOptions) {
		rng := rand.New(rand.NewPCG(seedOf(t.Name()), 1))
		st, err := modeltest.BatchInvariance(ctx, m, rng, opt)
		if err != nil {
			t.Fatal(err)
		}
		// A mix trims only where its random draft was wrong; a few more
		// mixes (of the same random stream) give every fixture a trim.
		for try := 0; try < 3 && st.Trims == 0; try++ {
			more, err := modeltest.BatchInvariance(ctx, m, rng, opt)
			if err != nil {
				t.Fatal(err)
			}
			st.Steps, st.MixedSteps, st.Windows, st.Trims = st.Steps+more.Steps, st.MixedSteps+more.MixedSteps, st.Windows+more.Windows, st.Trims+more.Trims
			st.MaxSeqs = max(st.MaxSeqs, more.MaxSeqs)
		}
		if st.MaxSeqs < 2 || st.MixedSteps == 0 || st.Windows == 0 || st.Trims == 0 {
			t.Errorf("the mixes never batched sequences together, never mixed prefill with decode, or never verified (and trimmed) a window: %+v", st)
		}
		t.Logf("%+v", st)
	}
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
				check(t, m, opt)
			})
		}
	}
	t.Run("fortunes-q8_0", func(t *testing.T) {
		_, m := modeltest.Load(t, filepath.Join("..", "..", "models", "meshnode-fortunes-q8_0.gguf"), be)
		o := opt
		o.Vocab = 2000 // ordinary word pieces rather than control tokens
		check(t, m, o)
	})
}

// TestBatchStepErrors: a step is checked whole before it runs, and a
// refused one changes no session.
func TestBatchStepErrors(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	file := tiny(t, "llama")
	m, err := load(t, file, be)
	if err != nil {
		t.Fatal(err)
	}
	other, err := load(t, file, be)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.NewBatch(model.BatchOptions{Tokens: 8, Seqs: 2})
	if err != nil {
		t.Fatal(err)
	}
	s1 := session(t, m, model.SessionOptions{Context: 6})
	s2 := session(t, m, model.SessionOptions{Context: 16})
	s3 := session(t, m, model.SessionOptions{Context: 16})
	foreign := session(t, other, model.SessionOptions{Context: 16})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		seqs []model.Seq
		want error
	}{
		{"empty", nil, nil},
		{"another model's session", []model.Seq{{Session: foreign, Tokens: []uint32{1}}}, nil},
		{"a session twice", []model.Seq{{Session: s2, Tokens: []uint32{1}}, {Session: s2, Tokens: []uint32{2}}}, nil},
		{"past the context", []model.Seq{{Session: s2, Tokens: []uint32{1}}, {Session: s1, Tokens: []uint32{1, 2, 3, 4, 5, 6, 7}}}, model.ErrContext},
		{"a token outside the vocabulary", []model.Seq{{Session: s2, Tokens: []uint32{1, 300}}}, model.ErrToken},
		{"no tokens", []model.Seq{{Session: s2}}, nil},
		{"more tokens than the batch", []model.Seq{{Session: s2, Tokens: make([]uint32, 9)}}, nil},
		{"logits after more tokens than given", []model.Seq{{Session: s2, Tokens: []uint32{1}, Logits: 2}}, nil},
		{"a negative logits count", []model.Seq{{Session: s2, Tokens: []uint32{1}, Logits: -1}}, nil},
		{"a window of more logits rows than the batch", []model.Seq{{Session: s2, Tokens: []uint32{1, 2, 3}, Logits: 3}}, nil},
		{"more logits rows than the batch", []model.Seq{{Session: s1, Tokens: []uint32{1}, Logits: 1}, {Session: s2, Tokens: []uint32{1}, Logits: 1}, {Session: s3, Tokens: []uint32{1}, Logits: 1}}, nil},
	} {
		err := b.Step(ctx, tc.seqs)
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: %v, want an error (%v)", tc.name, err, tc.want)
		}
		if s1.Len()+s2.Len()+s3.Len() != 0 {
			t.Fatalf("%s: a refused step changed a session", tc.name)
		}
	}

	// A cancelled step changes no session either, and the next one runs.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	step := []model.Seq{{Session: s2, Tokens: []uint32{1, 2, 3}, Logits: 1}, {Session: s3, Tokens: []uint32{4}}}
	if err := b.Step(cancelled, step); !errors.Is(err, context.Canceled) || s2.Len() != 0 {
		t.Fatalf("cancelled step: %v, %d tokens cached", err, s2.Len())
	}
	if err := b.Step(ctx, step); err != nil {
		t.Fatal(err)
	}
	want, err := session(t, m, model.SessionOptions{Context: 16}).Eval(ctx, []uint32{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.Logits(0), want) || s2.Len() != 3 || s3.Len() != 1 {
		t.Errorf("after a cancelled step: logits equal %v, lengths %d and %d", slices.Equal(b.Logits(0), want), s2.Len(), s3.Len())
	}
	defer func() {
		if recover() == nil {
			t.Error("Logits of a sequence that asked for none did not panic")
		}
	}()
	b.Logits(1)
}
