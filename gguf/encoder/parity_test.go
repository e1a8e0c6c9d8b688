package encoder

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/encoder/encodertest"
	"github.com/meshnode/meshnode/gguf/tokenizer"
)

// hiddenTolerance bounds each hidden component's difference from
// llama.cpp's, relative to the row's largest magnitude. Both compute in
// float32, rounding activations to half precision for the F16 matrices,
// but sum in other orders (SIMD lanes, threads) and take exponentials a
// last bit apart. Mostly that leaves the states within 1e-5 of
// llama.cpp's; now and then a last-bit difference puts an activation on
// the other side of a half-precision rounding boundary (or of GELU's
// table's), one half-precision quantum, which a random-weight network
// carries on undamped: measured up to 3.6e-4 on the 55-token text, as the
// decoders' F16 parity allows 0.02 on logits of ±15 (gguf/model).
const hiddenTolerance = 2e-3

// TestHiddenMatchesLlamaCpp: the fixtures' final hidden states, for three
// texts (9, 26 and 55 tokens), are llama.cpp's (testdata/hidden.cpp, flash
// attention off) within hiddenTolerance, every token of every text, for
// bert, nomic-bert, nomic-bert-moe (a mixture of four experts, two a
// token, in its second layer) and jina-bert-v3 (rotary, GELU, biases).
func TestHiddenMatchesLlamaCpp(t *testing.T) {
	golden := readHiddenGoldens(t, "testdata/llama-embedding.json")
	for _, arch := range []string{"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v3"} {
		cases := golden[arch]
		if len(cases) == 0 {
			t.Fatalf("no goldens for %s", arch)
		}
		be := cpu.New(cpu.Options{Threads: 2})
		m, err := Load(openFixture(t, arch), be)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			checkHidden(t, m, arch, c)
		}
		be.Close()
	}
}

// loadBuilt loads the encoder build writes onto be, failing t on an
// error; it returns the model and its file.
func loadBuilt(t *testing.T, be backend.Backend, build func() ([]byte, error)) (*Model, *gguf.File) {
	t.Helper()
	b, err := build()
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(f, be)
	if err != nil {
		t.Fatal(err)
	}
	return m, f
}

// hiddenCase is a golden: a text, llama.cpp's ids for it and its final
// hidden states, a row per token.
type hiddenCase struct {
	Text   string      `json:"text"`
	IDs    []uint32    `json:"ids"`
	Hidden [][]float32 `json:"hidden"`
	Pooled []float32   `json:"pooled"` // hidden.cpp's "mean": the states' mean, projected
}

// readHiddenGoldens reads a goldens file: the cases of each fixture.
func readHiddenGoldens(t *testing.T, path string) map[string][]hiddenCase {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var golden map[string][]hiddenCase
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	return golden
}

// checkHidden holds m's hidden states for c's ids to c's within
// hiddenTolerance of each row's largest value, and logs the worst.
func checkHidden(t *testing.T, m *Model, what string, c hiddenCase) {
	t.Helper()
	got, err := m.Hidden(context.Background(), c.IDs)
	if err != nil {
		t.Fatal(err)
	}
	e := m.Config().Embd
	if len(got) != len(c.Hidden)*e {
		t.Fatalf("%s %q: %d values, want %d rows of %d", what, c.Text, len(got), len(c.Hidden), e)
	}
	var worst float64
	for i, want := range c.Hidden {
		var scale float64
		for _, w := range want {
			scale = max(scale, math.Abs(float64(w)))
		}
		for j, w := range want {
			d := math.Abs(float64(got[i*e+j])-float64(w)) / scale
			worst = max(worst, d)
			if d > hiddenTolerance {
				t.Fatalf("%s %q: token %d component %d is %v, llama.cpp's %v", what, c.Text, i, j, got[i*e+j], w)
			}
		}
	}
	t.Logf("%s, %d tokens: worst relative difference %.2g", what, len(c.IDs), worst)
}

// TestScoresMatchLlamaCpp: a reranker's scores (rank pooling through its
// classification head) are llama.cpp's for a query joined to three
// documents as llama-server joins them (testdata/rerank.cpp), within
// hiddenTolerance of the score, for a bert cross-encoder (cls and
// cls.output), a jina-reranker-v1-shaped one (a one-row cls) and a
// modern-bert one (the mean through cls, GELU, its norm and cls.output);
// a model without a head refuses to score.
func TestScoresMatchLlamaCpp(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	for _, tc := range []struct {
		golden string
		build  func() ([]byte, error)
	}{
		{"testdata/llama-rerank.json", encodertest.Reranker},
		{"testdata/llama-rerank-jina.json", encodertest.JinaReranker},
		{"testdata/llama-rerank-modern.json", func() ([]byte, error) { return modernFixture(t, true), nil }},
	} {
		raw, err := os.ReadFile(tc.golden)
		if err != nil {
			t.Fatal(err)
		}
		var golden struct {
			Results []struct {
				IDs   []uint32 `json:"ids"`
				Score float64  `json:"score"`
			} `json:"results"`
		}
		if err := json.Unmarshal(raw, &golden); err != nil || len(golden.Results) != 3 {
			t.Fatalf("%s: %v", tc.golden, err)
		}
		m, _ := loadBuilt(t, be, tc.build)
		if m.Config().Classes != 1 {
			t.Fatalf("%s: %d classes, want 1", tc.golden, m.Config().Classes)
		}
		for _, r := range golden.Results {
			got, err := m.Scores(context.Background(), r.IDs)
			if err != nil || len(got) != 1 {
				t.Fatalf("%v: %v, %v", r.IDs, got, err)
			}
			if d := math.Abs(float64(got[0])-r.Score) / math.Abs(r.Score); d > hiddenTolerance {
				t.Fatalf("%s %v: score %v, llama.cpp's %v", tc.golden, r.IDs, got[0], r.Score)
			}
			t.Logf("%s: score %v, llama.cpp's %v", tc.golden, got[0], r.Score)
		}
	}
	plain, err := Load(openFixture(t, "bert"), be)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Scores(context.Background(), []uint32{2, 5, 3}); !errors.Is(err, ErrNoHead) {
		t.Fatalf("a model without a head: %v", err)
	}
}

// TestJinaMatchesLlamaCpp: jina-bert-v2 encoders (ALiBi in place of
// positions, a gated GELU feed-forward) give llama.cpp's hidden states
// within hiddenTolerance for the three texts: one built as
// jina-embeddings-v2-base-code is (a gate of its own; the queries' and
// keys' norms and a second norm after attention; six heads, so that ALiBi's
// slopes take both of ggml's branches), and the jina-reranker-v1-shaped
// one (the gate in up's first half).
func TestJinaMatchesLlamaCpp(t *testing.T) {
	golden := readHiddenGoldens(t, "testdata/llama-embedding-jina.json")
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	for _, tc := range []struct {
		name  string
		build func() ([]byte, error)
		want  Config
	}{
		{"jina-bert-v2", encodertest.Jina, Config{FFN: GEGLU, Heads: 6}},
		{"jina-reranker", encodertest.JinaReranker, Config{FFN: GEGLU, Heads: 4, FusedGate: true}},
	} {
		cases := golden[tc.name]
		if len(cases) != 3 {
			t.Fatalf("%d %s goldens, want 3", len(cases), tc.name)
		}
		m, _ := loadBuilt(t, be, tc.build)
		c := m.Config()
		if c.FFN != tc.want.FFN || c.Heads != tc.want.Heads || c.FusedGate != tc.want.FusedGate || c.ALiBi != 8 || c.Positions || c.RoPEBase != 0 {
			t.Fatalf("%s: config %+v", tc.name, c)
		}
		for _, h := range cases {
			checkHidden(t, m, tc.name, h)
		}
	}
}

// TestModernBertMatchesLlamaCpp: modern-bert encoders (pre-norm layers
// without biases, NeoX RoPE of two bases, the local layers' symmetric
// window of 16, the fused GEGLU or SwiGLU feed-forward, the output norm)
// tokenize three texts as llama.cpp does with a BPE vocabulary under
// ModernBERT's pre-tokenizer (BOS and EOS added), and their hidden states
// are llama.cpp's within hiddenTolerance; the 19- and 37-token texts are
// longer than the window.
func TestModernBertMatchesLlamaCpp(t *testing.T) {
	golden := readHiddenGoldens(t, "testdata/llama-embedding-modern.json")
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	for _, tc := range []struct {
		name     string
		reranker bool
		ffn      FFN
	}{{"modern-bert", false, GEGLU}, {"modern-bert-reranker", true, SwiGLU}} {
		cases := golden[tc.name]
		if len(cases) != 3 {
			t.Fatalf("%d %s goldens, want 3", len(cases), tc.name)
		}
		m, f := loadBuilt(t, be, func() ([]byte, error) { return modernFixture(t, tc.reranker), nil })
		tok, err := tokenizer.FromGGUF(f.Metadata)
		if err != nil {
			t.Fatal(err)
		}
		if c := m.Config(); c.FFN != tc.ffn || !c.PreNorm || c.Window != 16 || c.Local(0) || !c.Local(1) || !c.Local(2) || c.RoPEBase != 160000 || c.RoPEBaseSWA != 10000 {
			t.Fatalf("%s: config %+v", tc.name, c)
		}
		for _, c := range cases {
			if ids := tok.Encode(c.Text, tokenizer.EncodeOptions{AddSpecial: true}); !slices.Equal(ids, c.IDs) {
				t.Fatalf("%q tokenized as %v, llama.cpp's %v", c.Text, ids, c.IDs)
			}
			checkHidden(t, m, tc.name, c)
		}
	}
}

// TestGemmaEmbeddingMatchesLlamaCpp: gemma-embedding encoders
// (EmbeddingGemma's: embeddings scaled by √Embd, RMS norms before and
// after attention and the feed-forward, per-head Q and K norms, grouped
// queries over heads of their own width, two local layers in a window of
// 16 then a global one, each with its RoPE base, a GELU-gated
// feed-forward, the output norm) give llama.cpp's hidden states within
// hiddenTolerance for the three texts; with the dense projections, the
// mean of the states through them (Project) is llama.cpp's pooled
// embedding within the same tolerance of its largest value.
func TestGemmaEmbeddingMatchesLlamaCpp(t *testing.T) {
	golden := readHiddenGoldens(t, "testdata/llama-embedding-gemma.json")
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	for _, dense := range []bool{false, true} {
		name := "gemma-embedding"
		if dense {
			name += "-dense"
		}
		cases := golden[name]
		if len(cases) != 3 {
			t.Fatalf("%d %s goldens, want 3", len(cases), name)
		}
		m, _ := loadBuilt(t, be, func() ([]byte, error) { return encodertest.Gemma(dense) })
		if c := m.Config(); !c.Sandwich || c.KVHeads != 2 || c.HeadDim != 16 || !c.Local(0) || !c.Local(1) || c.Local(2) || m.Projects() != dense {
			t.Fatalf("%s: config %+v, projects %v", name, c, m.Projects())
		}
		for _, c := range cases {
			if !dense {
				checkHidden(t, m, name, c)
				continue
			}
			h, err := m.Hidden(context.Background(), c.IDs)
			if err != nil {
				t.Fatal(err)
			}
			got := m.Project(meanRows(h, encodertest.Embd))
			var scale, worst float64
			for _, w := range c.Pooled {
				scale = max(scale, math.Abs(float64(w)))
			}
			if len(got) != len(c.Pooled) {
				t.Fatalf("%s: %d pooled values, want %d", name, len(got), len(c.Pooled))
			}
			for j, w := range c.Pooled {
				d := math.Abs(float64(got[j])-float64(w)) / scale
				worst = max(worst, d)
				if d > hiddenTolerance {
					t.Fatalf("%s %q: pooled component %d is %v, llama.cpp's %v", name, c.Text, j, got[j], w)
				}
			}
			t.Logf("%s, %d tokens: pooled, worst relative difference %.2g", name, len(c.IDs), worst)
		}
	}
}

// TestXLMRobertaMatchesLlamaCpp: a bge-m3-shaped encoder (bert with an
// XLM-RoBERTa vocabulary: SentencePiece Unigram, 250k tokens) tokenizes
// three texts (English; German, French and Japanese; full-width letters,
// runs of spaces, a tab and a ligature the charsmap normalises) as
// llama.cpp does, <s> … </s>, and its hidden states are llama.cpp's
// within hiddenTolerance.
func TestXLMRobertaMatchesLlamaCpp(t *testing.T) {
	cases := readHiddenGoldens(t, "testdata/llama-embedding-xlmr.json")["xlmr"]
	if len(cases) != 3 {
		t.Fatalf("%d xlmr goldens, want 3", len(cases))
	}
	f, err := gguf.Parse(xlmrFixture(t))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	m, err := Load(f, be)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if ids := tok.Encode(c.Text, tokenizer.EncodeOptions{AddSpecial: true}); !slices.Equal(ids, c.IDs) {
			t.Fatalf("%q tokenized as %v, llama.cpp's %v", c.Text, ids, c.IDs)
		}
		checkHidden(t, m, "xlmr", c)
	}
}
