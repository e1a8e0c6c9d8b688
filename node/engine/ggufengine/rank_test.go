package ggufengine

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/node/engine"
)

// writeRerankFixture writes the Qwen3-style reranker fixture, for
// llama.cpp to make testdata/llama-rerank-qwen3.json from; and
// writeEmbedFixture the Qwen3-Embedding-style one, for
// testdata/llama-embedding-qwen3.json.
var (
	writeRerankFixture = flag.String("write-rerank-fixture", "", "write the qwen3 reranker fixture to this file")
	writeEmbedFixture  = flag.String("write-embed-fixture", "", "write the qwen3 embedding fixture to this file")
)

// rerankFixture is modeltest.Reranker with the built-in model's
// vocabulary, failing t on an error.
func rerankFixture(t testing.TB) []byte {
	t.Helper()
	voc, err := gguf.Open(fortunesPath)
	if err != nil {
		t.Fatal(err)
	}
	defer voc.Close()
	b, err := modeltest.Reranker(voc.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDecoderRerankMatchesLlamaCpp: a Qwen3-style reranker's relevance
// for a query and three documents (the pairs as llama-server's rerank
// template makes them: the goldens' ids) is llama.cpp's
// (gguf/encoder/testdata/rerank.cpp) within 1e-3; it makes no
// embeddings; a model whose pooling is not rank is no reranker.
func TestDecoderRerankMatchesLlamaCpp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "qwen3-reranker.gguf")
	if *writeRerankFixture != "" {
		path = *writeRerankFixture
	}
	if err := os.WriteFile(path, rerankFixture(t), 0o644); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("testdata/llama-rerank-qwen3.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Results []struct {
			IDs   []uint32 `json:"ids"`
			Score float64  `json:"score"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &golden); err != nil || len(golden.Results) == 0 {
		t.Fatalf("goldens: %v", err)
	}
	m, err := Load(path, Config{Sessions: 1, Context: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.Reranks() || m.RerankTemplate() != modeltest.RerankTemplate {
		t.Fatalf("reranks %v, template %q", m.Reranks(), m.RerankTemplate())
	}
	for _, r := range golden.Results {
		got, err := m.Rank(context.Background(), [][]uint32{r.IDs})
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(float64(got[0])-r.Score) > 1e-3 {
			t.Fatalf("%v: relevance %v, llama.cpp's %v", r.IDs, got[0], r.Score)
		}
		t.Logf("relevance %v, llama.cpp's %v", got[0], r.Score)
	}
	if _, err := m.Embed(context.Background(), [][]uint32{golden.Results[0].IDs}); !errors.Is(err, engine.ErrRefused) {
		t.Fatalf("a reranker's embedding: %v", err)
	}
	plain, err := Load(fortunesPath, Config{Sessions: 1, Context: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Rank(context.Background(), [][]uint32{{1, 2}}); plain.Reranks() || !errors.Is(err, engine.ErrRefused) {
		t.Fatalf("the built-in model reranks: %v", err)
	}
}
