package ggufengine

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/tokenizer"
)

// TestDecoderEmbeddingMatchesLlamaCpp: a Qwen3-Embedding-style model (a
// qwen3 language model whose pooling is last, EOS appended to its inputs)
// tokenizes three texts as llama.cpp does, EOS last, and its embedding
// before scaling (Pooled: the last token's normed final state) is
// llama.cpp's (gguf/encoder/testdata/hidden.cpp TEXT last) within 1e-3 of
// the vector's largest value; Embed is that vector at unit length.
func TestDecoderEmbeddingMatchesLlamaCpp(t *testing.T) {
	voc, err := gguf.Open(fortunesPath)
	if err != nil {
		t.Fatal(err)
	}
	b, err := modeltest.Embedder(voc.Metadata)
	voc.Close()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "qwen3-embedding.gguf")
	if *writeEmbedFixture != "" {
		path = *writeEmbedFixture
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("testdata/llama-embedding-qwen3.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden []struct {
		Text   string    `json:"text"`
		IDs    []uint32  `json:"ids"`
		Pooled []float32 `json:"pooled"`
	}
	if err := json.Unmarshal(raw, &golden); err != nil || len(golden) != 3 {
		t.Fatalf("goldens: %d, %v", len(golden), err)
	}
	m, err := Load(path, Config{Sessions: 1, Context: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if p, err := m.Pooling(); p != PoolingLast || err != nil {
		t.Fatalf("pooling %v, %v", p, err)
	}
	for _, g := range golden {
		ids := m.Tokenizer().Encode(g.Text, tokenizer.EncodeOptions{AddSpecial: true})
		if !slices.Equal(ids, g.IDs) {
			t.Fatalf("%q tokenized as %v, llama.cpp's %v", g.Text, ids, g.IDs)
		}
		pooled, err := m.Pooled(context.Background(), [][]uint32{ids})
		if err != nil {
			t.Fatal(err)
		}
		unit, err := m.Embed(context.Background(), [][]uint32{ids})
		if err != nil {
			t.Fatal(err)
		}
		var scale, worst, norm float64
		for _, w := range g.Pooled {
			scale = max(scale, math.Abs(float64(w)))
			norm += float64(w) * float64(w)
		}
		for j, w := range g.Pooled {
			d := math.Abs(float64(pooled[0][j])-float64(w)) / scale
			worst = max(worst, d)
			if d > 1e-3 {
				t.Fatalf("%q: component %d is %v, llama.cpp's %v", g.Text, j, pooled[0][j], w)
			}
			if u := float64(w) / math.Sqrt(norm); math.Abs(float64(unit[0][j])-u) > 1e-3 {
				t.Fatalf("%q: unit component %d is %v, llama.cpp's scaled %v", g.Text, j, unit[0][j], u)
			}
		}
		t.Logf("%q, %d tokens: worst relative difference %.2g", g.Text, len(ids), worst)
	}
}
