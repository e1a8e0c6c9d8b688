package metal_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
)

// The GPU tests: the same suites as the stand-in's, on the system's Metal
// device (or the stand-in, with MESHNODE_METAL_DEVICE=stand-in). They
// skip where there is none; scripts/metal-check.sh fails if they do.

func TestGPUKernels(t *testing.T) {
	be := newGPU(t)
	defer be.Close()
	testKernels(t, be)
}

func TestGPUModels(t *testing.T) {
	be := newGPU(t)
	defer be.Close()
	testModels(t, be)
	t.Logf("stats: %+v", be.Stats())
}

// TestGPUArgMaxDecode: greedy decoding by the device's argmax gives the
// tokens the device's logits give (the logits' agreement with the CPU's is
// TestGPUModels'), reading one int back per token.
func TestGPUArgMaxDecode(t *testing.T) {
	be := newGPU(t)
	defer be.Close()
	testArgMaxDecode(t, be, be)
}

// TestGPUBuiltinGreedy holds the Metal backend to llama.cpp's greedy
// decoding of the built-in model (models/meshnode-fortunes-q8_0.gguf), as
// gguf/model's TestFortunesGreedy holds the CPU: the reference's ids for
// each prompt (METAL_GREEDY_TOKENS of them, default all 40), decoded by
// the device's argmax with the file mapped in place.
func TestGPUBuiltinGreedy(t *testing.T) {
	be := newGPU(t)
	defer be.Close()
	cases, err := modeltest.ReadGreedyReference(filepath.Join("..", "models", "reference-greedy.txt"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(filepath.Join("..", "models", "meshnode-fortunes-q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := be.MapFile(f.Bytes(), largestTensor(f)); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(f, be)
	if err != nil {
		t.Fatal(err)
	}
	n := envInt("METAL_GREEDY_TOKENS", 40)
	ctx := context.Background()
	ran := 0
	for _, tc := range cases {
		if !strings.Contains(tc.File, "q8_0") {
			continue
		}
		ran++
		s, err := m.NewSession(model.SessionOptions{Context: 256})
		if err != nil {
			t.Fatal(err)
		}
		_, next, err := s.PrefillArgMax(ctx, tc.Prompt)
		if err != nil {
			t.Fatal(err)
		}
		got := []uint32{next}
		for len(got) < min(n, len(tc.Generated)) {
			if next, err = s.EvalArgMax(ctx, []uint32{next}); err != nil {
				t.Fatal(err)
			}
			got = append(got, next)
		}
		s.Close()
		if want := tc.Generated[:len(got)]; !slices.Equal(got, want) {
			t.Errorf("prompt %v: greedy ids\n got %v\nwant %v (llama.cpp)", tc.Prompt, got, want)
		}
	}
	if ran == 0 {
		t.Fatal("no Q8_0 references")
	}
	t.Logf("built-in model: llama.cpp's greedy ids for %d prompts, %d tokens each", ran, n)
}
