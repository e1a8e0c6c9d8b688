package model_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
)

// greedyCase is one entry of models/reference-greedy.txt: llama.cpp's
// greedy ids for a prompt on one of the meshnode-fortunes files.
type greedyCase struct {
	file      string
	prompt    []uint32
	generated []uint32
}

func readGreedyReference(t *testing.T, path string) []greedyCase {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []greedyCase
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "### "):
			name, _, _ := strings.Cut(strings.TrimPrefix(line, "### "), " ")
			cases = append(cases, greedyCase{file: name})
		case strings.HasPrefix(line, "prompt ids"):
			cases[len(cases)-1].prompt = parseIDs(t, line)
		case strings.HasPrefix(line, "generated ids"):
			cases[len(cases)-1].generated = parseIDs(t, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cases
}

func parseIDs(t *testing.T, line string) []uint32 {
	t.Helper()
	_, list, _ := strings.Cut(line, ":")
	var ids []uint32
	for _, f := range strings.Fields(list) {
		v, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		ids = append(ids, uint32(v))
	}
	return ids
}

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
	cases := readGreedyReference(t, filepath.Join("..", "..", "models", "reference-greedy.txt"))
	if len(cases) == 0 {
		t.Fatal("no reference cases")
	}
	be := cpu.New(cpu.Options{})
	defer be.Close()
	for _, tc := range cases {
		t.Run(tc.file+"/"+strconv.Itoa(len(tc.prompt)), func(t *testing.T) {
			path, ok := modelPath(tc.file)
			if !ok {
				t.Skipf("%s not found (the F16 file is not in the repository; set MESHNODE_MODELS)", tc.file)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			m, err := model.Load(f, be)
			if err != nil {
				t.Fatal(err)
			}
			s, err := m.NewSession(model.SessionOptions{Context: 256})
			if err != nil {
				t.Fatal(err)
			}
			got := greedy(t, s, tc.prompt, len(tc.generated))
			if !slices.Equal(got, tc.generated) {
				t.Fatalf("greedy ids\n got %v\nwant %v", got, tc.generated)
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
