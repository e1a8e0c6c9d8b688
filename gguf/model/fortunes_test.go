package model_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
)

// modelDirs are where the fortunes files may be: the repository's models/
// (the Q8_0 file is committed) and $MESHNODE_MODELS (for the F16 one).
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

// TestFortunesGreedy holds the engine to llama.cpp's greedy decoding of a
// trained model: the same 40 ids for each reference prompt (decoding goes
// on past EOS, as the reference did).
func TestFortunesGreedy(t *testing.T) {
	cases, err := modeltest.ReadGreedyReference(filepath.Join("..", "..", "models", "reference-greedy.txt"))
	if err != nil || len(cases) == 0 {
		t.Fatalf("reference: %d cases, %v", len(cases), err)
	}
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for _, tc := range cases {
		t.Run(tc.File+"/"+strconv.Itoa(len(tc.Prompt)), func(t *testing.T) {
			path, ok := modelPath(tc.File)
			if !ok {
				t.Skipf("%s not found (the F16 file is not in the repository; set MESHNODE_MODELS)", tc.File)
			}
			_, m := modeltest.Load(t, path, be)
			s, err := m.NewSession(model.SessionOptions{Context: 256})
			if err != nil {
				t.Fatal(err)
			}
			got := greedy(t, s, tc.Prompt, len(tc.Generated))
			if !slices.Equal(got, tc.Generated) {
				t.Fatalf("greedy ids\n got %v\nwant %v", got, tc.Generated)
			}
		})
	}
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

func greedy(t *testing.T, s *model.Session, prompt []uint32, n int) []uint32 {
	t.Helper()
	ctx := context.Background()
	_, logits, err := s.Prefill(ctx, prompt)
	if err != nil {
		t.Fatal(err)
	}
	var out []uint32
	for len(out) < n {
		tok := argmax(logits)
		out = append(out, tok)
		if len(out) == n {
			break
		}
		if logits, err = s.Eval(ctx, []uint32{tok}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
