package node

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/tokenizer"
)

// embeddingTolerance bounds each component's difference from the
// reference: the same f32 hidden states, pooled and normalised in
// float64 by both, then rounded to f32.
const embeddingTolerance = 1e-6

// referenceEmbedding is the fortunes model's embedding of text as
// llama.cpp's server makes it for a model with no pooling type: the mean
// of every position's final hidden state (gguf/model's EvalHidden, which
// TestEvalHiddenFeedsTheHead holds to the output head), scaled to unit
// length, computed here on a session of its own.
func referenceEmbedding(t *testing.T, ids []uint32) []float64 {
	t.Helper()
	be := cpu.New(cpu.Options{})
	defer be.Close()
	_, m := modeltest.Load(t, fortunesPath(t), be)
	s, err := m.NewSession(model.SessionOptions{Context: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h, err := s.EvalHidden(context.Background(), ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	return meanUnit(h, m.Config().Embd)
}

// meanUnit is the mean of rows of hidden states (e floats each), in
// float64, scaled to unit length: an embedding pooled by mean.
func meanUnit(h []float32, e int) []float64 {
	n := len(h) / e
	mean := make([]float64, e)
	for i := range n {
		for j := range e {
			mean[j] += float64(h[i*e+j]) / float64(n)
		}
	}
	var norm float64
	for _, x := range mean {
		norm += x * x
	}
	for j := range mean {
		mean[j] /= math.Sqrt(norm)
	}
	return mean
}

// fileTokenizer is the tokenizer of the GGUF file at path.
func fileTokenizer(t *testing.T, path string) *tokenizer.Tokenizer {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestEmbeddingsAgainstReference: /v1/embeddings on the built-in model
// answers the reference's vectors, for text and for token ids, as floats
// and as base64; usage counts the tokens; dimensions below the model's
// give the vector's first dimensions at unit length (the reference's,
// cut and scaled), on /v1/embeddings and Ollama's /api/embed alike; more
// dimensions than the model's, and a model with no hidden states, are
// refused.
func TestEmbeddingsAgainstReference(t *testing.T) {
	n, _ := startNode(t, Config{Models: []string{fortunesPath(t), ReferenceModel}})
	tok := fileTokenizer(t, fortunesPath(t))
	texts := []string{"A man walks into a bar", "The cat sat on the mat."}
	var refs [][]float64
	total := 0
	for _, s := range texts {
		ids := tok.Encode(s, tokenizer.EncodeOptions{AddSpecial: true})
		total += len(ids)
		refs = append(refs, referenceEmbedding(t, ids))
	}
	check := func(what string, got []float64, want []float64) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d dimensions, want %d", what, len(got), len(want))
		}
		for j := range want {
			if math.Abs(got[j]-want[j]) > embeddingTolerance {
				t.Fatalf("%s: component %d is %v, the reference's %v", what, j, got[j], want[j])
			}
		}
	}
	var floats struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	postJSON(t, n, "/v1/embeddings", fmt.Sprintf(`{"model":%q,"input":[%q,%q]}`, fortunesModel, texts[0], texts[1]), &floats)
	if len(floats.Data) != 2 || floats.Usage.PromptTokens != total {
		t.Fatalf("%d vectors, %d prompt tokens (want 2, %d)", len(floats.Data), floats.Usage.PromptTokens, total)
	}
	for i, d := range floats.Data {
		check(fmt.Sprintf("text %d", i), d.Embedding, refs[i])
	}

	ids := tok.Encode(texts[1], tokenizer.EncodeOptions{AddSpecial: true})
	idList := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(ids)), ","), "[]")
	var b64 struct {
		Data []struct {
			Embedding string `json:"embedding"`
		} `json:"data"`
	}
	postJSON(t, n, "/v1/embeddings", fmt.Sprintf(`{"model":%q,"input":[[%s]],"encoding_format":"base64","dimensions":%d}`, fortunesModel, idList, len(refs[1])), &b64)
	raw, err := base64.StdEncoding.DecodeString(b64.Data[0].Embedding)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float64, len(raw)/4)
	for j := range got {
		got[j] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:])))
	}
	check("token ids, base64", got, refs[1])

	var short struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	postJSON(t, n, "/v1/embeddings", fmt.Sprintf(`{"model":%q,"input":%q,"dimensions":7}`, fortunesModel, texts[0]), &short)
	var ollama struct {
		Embeddings [][]float64 `json:"embeddings"`
	}
	postJSON(t, n, "/api/embed", fmt.Sprintf(`{"model":%q,"input":%q,"dimensions":7}`, fortunesModel, texts[0]), &ollama)
	want := slices.Clone(refs[0][:7])
	var norm float64
	for _, x := range want {
		norm += x * x
	}
	for j := range want {
		want[j] /= math.Sqrt(norm)
	}
	if len(short.Data) != 1 || len(ollama.Embeddings) != 1 {
		t.Fatalf("dimensions 7: %d and %d vectors", len(short.Data), len(ollama.Embeddings))
	}
	check("dimensions 7", short.Data[0].Embedding, want)
	check("/api/embed dimensions 7", ollama.Embeddings[0], want)

	for _, tc := range []struct{ body, param, inMsg string }{
		{fmt.Sprintf(`{"model":%q,"input":"x","dimensions":1000}`, fortunesModel), "dimensions", "dimensions 1000 is more"},
		{`{"model":"mesh-reference","input":"x"}`, "model", "cannot make embeddings"},
		{fmt.Sprintf(`{"model":%q,"input":[[99999999]]}`, fortunesModel), "input", "outside the vocabulary"},
	} {
		code, v := answerOf(t, n, "/v1/embeddings", tc.body)
		e, _ := v["error"].(map[string]any)
		if code != http.StatusBadRequest || e["param"] != tc.param || !strings.Contains(fmt.Sprint(e["message"]), tc.inMsg) {
			t.Fatalf("%s: %d %v", tc.body, code, v)
		}
	}
}
