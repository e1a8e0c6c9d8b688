package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/encoder"
	"github.com/meshnode/meshnode/gguf/encoder/encodertest"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/tokenizer"
)

// encoderFixture writes a random-weight BERT-family encoder of arch
// (encodertest) as a model file and returns its path and name.
func encoderFixture(t *testing.T, arch string) (path, name string) {
	t.Helper()
	b, err := encodertest.Fixture(arch)
	if err != nil {
		t.Fatal(err)
	}
	name = arch + "-fixture"
	return writeModel(t, name, b), name
}

// writeModel writes a model file, name.gguf, in a temporary directory.
func writeModel(t *testing.T, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".gguf")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// rerankGolden is llama.cpp's answer to a rerank (rerank.cpp): each
// document with its pair's ids and its score.
type rerankGolden struct {
	Query   string `json:"query"`
	Results []struct {
		Document string   `json:"document"`
		IDs      []uint32 `json:"ids"`
		Score    float64  `json:"score"`
	} `json:"results"`
}

func readRerankGolden(t *testing.T, path string) rerankGolden {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var g rerankGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// pairsJoined holds rerankPair's join of the query and each document,
// through tmpl ("" for none), to llama-server's ids, and returns the
// documents and the pairs' tokens in all.
func (g rerankGolden) pairsJoined(t *testing.T, tok *tokenizer.Tokenizer, tmpl string) (docs []string, total int) {
	t.Helper()
	for i, r := range g.Results {
		if got := rerankPair(tok, tmpl, g.Query, r.Document, 512); !slices.Equal(got, r.IDs) {
			t.Fatalf("document %d joined as %v, llama-server's %v", i, got, r.IDs)
		}
		docs = append(docs, r.Document)
		total += len(r.IDs)
	}
	return docs, total
}

// referenceEncoderEmbedding is text's embedding as llama.cpp's server
// makes it with the fixture's mean pooling: the encoder's hidden states
// (which gguf/encoder's tests hold to llama.cpp's) averaged and scaled to
// unit length, in float64, on a model of its own.
func referenceEncoderEmbedding(t *testing.T, path string, ids []uint32) []float64 {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	be := cpu.New(cpu.Options{})
	defer be.Close()
	m, err := encoder.Load(f, be)
	if err != nil {
		t.Fatal(err)
	}
	h, err := m.Hidden(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	e := m.Config().Embd
	if !m.Projects() {
		return meanUnit(h, e)
	}
	// EmbeddingGemma's dense projections take the mean, and the result
	// is scaled (meanUnit of one row).
	n, mean := len(h)/e, make([]float32, e)
	for j := range e {
		var s float64
		for i := range n {
			s += float64(h[i*e+j])
		}
		mean[j] = float32(s / float64(n))
	}
	return meanUnit(m.Project(mean), e)
}

// TestEncoderServed: a BERT-family encoder (bert, nomic-bert,
// nomic-bert-moe, jina-bert-v2, jina-bert-v3 and modern-bert; and
// gemma-embedding, with its dense projections) is served as an embedding
// model: /v1/embeddings and Ollama's /api/embed
// answer the reference's vectors for its WordPiece tokens; /api/show
// says it embeds and nothing else; /v1/models lists it; /tokenize lends
// its tokenizer; a generation of any kind is refused naming it as an
// embedding model.
func TestEncoderServed(t *testing.T) {
	for _, arch := range []string{"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "modern-bert", "gemma-embedding"} {
		t.Run(arch, func(t *testing.T) {
			path, name := encoderFixture(t, arch)
			n, _ := startNode(t, Config{Models: []string{path}})
			tok := fileTokenizer(t, path)
			texts := []string{"A man walks into a bar.", "The cat sat on the mat!"}
			var openai struct {
				Data []struct {
					Embedding []float64 `json:"embedding"`
				} `json:"data"`
				Usage struct {
					PromptTokens int `json:"prompt_tokens"`
				} `json:"usage"`
			}
			postJSON(t, n, "/v1/embeddings", fmt.Sprintf(`{"model":%q,"input":[%q,%q]}`, name, texts[0], texts[1]), &openai)
			var ollama struct {
				Embeddings [][]float64 `json:"embeddings"`
			}
			postJSON(t, n, "/api/embed", fmt.Sprintf(`{"model":%q,"input":[%q,%q]}`, name, texts[0], texts[1]), &ollama)
			if len(openai.Data) != 2 || len(ollama.Embeddings) != 2 {
				t.Fatalf("%d and %d vectors, want 2 each", len(openai.Data), len(ollama.Embeddings))
			}
			total := 0
			for i, s := range texts {
				ids := tok.Encode(s, tokenizer.EncodeOptions{AddSpecial: true})
				if ids[0] != 2 || ids[len(ids)-1] != 3 {
					t.Fatalf("%q tokenized as %v: want [CLS] … [SEP]", s, ids)
				}
				total += len(ids)
				want := referenceEncoderEmbedding(t, path, ids)
				for _, got := range [][]float64{openai.Data[i].Embedding, ollama.Embeddings[i]} {
					if len(got) != encodertest.Embd {
						t.Fatalf("%d dimensions, want %d", len(got), encodertest.Embd)
					}
					for j := range want {
						if math.Abs(got[j]-want[j]) > embeddingTolerance {
							t.Fatalf("text %d component %d is %v, the reference's %v", i, j, got[j], want[j])
						}
					}
				}
			}
			if openai.Usage.PromptTokens != total {
				t.Fatalf("usage: %d prompt tokens, want %d", openai.Usage.PromptTokens, total)
			}
			// Ollama's older /api/embeddings: the mean as it is, which
			// scaled to unit length is /api/embed's vector.
			var legacy struct {
				Embedding []float64 `json:"embedding"`
			}
			postJSON(t, n, "/api/embeddings", fmt.Sprintf(`{"model":%q,"prompt":%q}`, name, texts[0]), &legacy)
			var norm float64
			for _, x := range legacy.Embedding {
				norm += x * x
			}
			if len(legacy.Embedding) != encodertest.Embd || math.Abs(norm-1) < 1e-3 {
				t.Fatalf("/api/embeddings: %d dimensions, norm² %v: want the unscaled mean", len(legacy.Embedding), norm)
			}
			for j, x := range legacy.Embedding {
				if math.Abs(x/math.Sqrt(norm)-ollama.Embeddings[0][j]) > embeddingTolerance {
					t.Fatalf("/api/embeddings component %d, scaled, is %v; /api/embed's %v", j, x/math.Sqrt(norm), ollama.Embeddings[0][j])
				}
			}
			// llama-server's own /embedding, naming no model (the node's
			// one): /v1/embeddings' vector by default, the mean as it is
			// with embd_normalize -1.
			for _, tc := range []struct {
				norm string
				want []float64
			}{{"", openai.Data[0].Embedding}, {`,"embd_normalize":-1`, legacy.Embedding}} {
				var native []struct {
					Index     int         `json:"index"`
					Embedding [][]float64 `json:"embedding"`
				}
				postJSON(t, n, "/embedding", fmt.Sprintf(`{"content":%q%s}`, texts[0], tc.norm), &native)
				if len(native) != 1 || len(native[0].Embedding) != 1 || !slices.Equal(native[0].Embedding[0], tc.want) {
					t.Fatalf("/embedding%s: %v, want %v", tc.norm, native, tc.want)
				}
			}

			var show struct {
				Capabilities []string       `json:"capabilities"`
				ModelInfo    map[string]any `json:"model_info"`
			}
			postJSON(t, n, "/api/show", fmt.Sprintf(`{"model":%q}`, name), &show)
			if !slices.Equal(show.Capabilities, []string{"embedding"}) || show.ModelInfo["general.architecture"] != arch {
				t.Fatalf("/api/show: %+v", show)
			}
			resp, err := http.Get("http://" + n.HTTPAddr().String() + "/v1/models")
			if err != nil {
				t.Fatal(err)
			}
			models, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(models), `"id":"`+name+`"`) {
				t.Fatalf("/v1/models: %d %s", resp.StatusCode, models)
			}
			resp, err = http.Get("http://" + n.HTTPAddr().String() + "/tokenizer_info?model=" + name)
			if err != nil {
				t.Fatal(err)
			}
			info, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(info), `"bos_token":"[CLS]"`) || !strings.Contains(string(info), `"chat_template":null`) {
				t.Fatalf("/tokenizer_info: %d %s", resp.StatusCode, info)
			}
			var toks struct {
				Tokens []uint32 `json:"tokens"`
			}
			postJSON(t, n, "/tokenize", fmt.Sprintf(`{"model":%q,"content":"the cat"}`, name), &toks)
			if !slices.Equal(toks.Tokens, tok.Encode("the cat", tokenizer.EncodeOptions{})) || len(toks.Tokens) != 2 {
				t.Fatalf("/tokenize: %v", toks.Tokens)
			}
			for path, body := range map[string]string{
				"/v1/chat/completions": `{"model":%q,"messages":[{"role":"user","content":"hi"}]}`,
				"/v1/completions":      `{"model":%q,"prompt":"hi"}`,
				"/api/generate":        `{"model":%q,"prompt":"hi","stream":false}`,
				"/completion":          `{"model":%q,"prompt":"hi"}`,
				"/v1/messages":         `{"model":%q,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`,
				"/api/chat":            `{"model":%q,"stream":false,"messages":[{"role":"user","content":"hi"}]}`,
				"/apply-template":      `{"model":%q,"messages":[{"role":"user","content":"hi"}]}`,
			} {
				code, v := answerOf(t, n, path, fmt.Sprintf(body, name))
				if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(v), "embedding model") {
					t.Fatalf("%s: %d %v", path, code, v)
				}
			}
		})
	}
}

// TestRerankerServed: cross-encoders (the bert fixture with a
// classification head, the jina-reranker-v1-shaped jina-bert-v2 fixture,
// and the modern-bert one with a BPE vocabulary; pooling rank) answer
// /v1/rerank with llama.cpp's scores for the query and documents of
// gguf/encoder's goldens, each pair joined as llama-server joins them
// ([CLS] query [SEP] document, or BPE's BOS query EOS SEP document EOS:
// the goldens' ids),
// best first; a reranker makes no embeddings and generates nothing,
// saying it is a reranker; an embedding model is no reranker.
func TestRerankerServed(t *testing.T) {
	type reranker struct {
		name, golden string
		build        func() ([]byte, error)
	}
	rerankers := []reranker{
		{"reranker", "llama-rerank.json", encodertest.Reranker},
		{"jina-reranker", "llama-rerank-jina.json", encodertest.JinaReranker},
		{"modern-reranker", "llama-rerank-modern.json", func() ([]byte, error) { return encodertest.Modern(testVocabFile(t, "gpt-2"), true) }},
	}
	embPath, embName := encoderFixture(t, "bert")
	paths := []string{embPath}
	for _, r := range rerankers {
		b, err := r.build()
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, writeModel(t, r.name, b))
	}
	n, _ := startNode(t, Config{Models: paths})
	for i, r := range rerankers {
		golden := readRerankGolden(t, "../gguf/encoder/testdata/"+r.golden)
		docs, total := golden.pairsJoined(t, fileTokenizer(t, paths[i+1]), "")
		body, _ := json.Marshal(map[string]any{"model": r.name, "query": golden.Query, "documents": docs})
		var got struct {
			Results []struct {
				Index          int     `json:"index"`
				RelevanceScore float64 `json:"relevance_score"`
			} `json:"results"`
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		postJSON(t, n, "/v1/rerank", string(body), &got)
		if len(got.Results) != len(docs) || got.Usage.PromptTokens != total {
			t.Fatalf("%s: %d results, %d prompt tokens (want %d, %d)", r.name, len(got.Results), got.Usage.PromptTokens, len(docs), total)
		}
		for k, res := range got.Results {
			want := golden.Results[res.Index].Score
			if math.Abs(res.RelevanceScore-want) > 2e-3*math.Abs(want) {
				t.Fatalf("%s: document %d scored %v, llama.cpp's %v", r.name, res.Index, res.RelevanceScore, want)
			}
			if k > 0 && res.RelevanceScore > got.Results[k-1].RelevanceScore {
				t.Fatalf("%s: results not best first: %+v", r.name, got.Results)
			}
		}
	}
	for path, body := range map[string]string{
		"/v1/embeddings":       `{"model":"reranker","input":"hi"}`,
		"/v1/chat/completions": `{"model":"reranker","messages":[{"role":"user","content":"hi"}]}`,
	} {
		code, v := answerOf(t, n, path, body)
		if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(v), "reranker") {
			t.Fatalf("%s: %d %v", path, code, v)
		}
	}
	code, v := answerOf(t, n, "/v1/rerank", fmt.Sprintf(`{"model":%q,"query":"q","documents":["a"]}`, embName))
	if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(v), "not a reranker") {
		t.Fatalf("an embedding model asked to rerank: %d %v", code, v)
	}
	var show struct {
		Capabilities []string `json:"capabilities"`
	}
	postJSON(t, n, "/api/show", `{"model":"reranker"}`, &show)
	if show.Capabilities == nil || len(show.Capabilities) != 0 {
		t.Fatalf("/api/show capabilities %v, want none Ollama names", show.Capabilities)
	}
}

// TestDecoderRerankerServed: a Qwen3-style reranker (a language model
// whose pooling is rank, with a yes/no head and a rerank template) answers
// /v1/rerank with llama.cpp's relevances for the goldens' query and
// documents, each pair tokenized through the template as llama-server
// tokenizes it (the goldens' ids), best first.
func TestDecoderRerankerServed(t *testing.T) {
	golden := readRerankGolden(t, "engine/ggufengine/testdata/llama-rerank-qwen3.json")
	voc, err := gguf.Open(fortunesPath(t))
	if err != nil {
		t.Fatal(err)
	}
	b, err := modeltest.Reranker(voc.Metadata)
	voc.Close()
	if err != nil {
		t.Fatal(err)
	}
	path := writeModel(t, "qwen3-reranker", b)
	n, _ := startNode(t, Config{Models: []string{path}})
	docs, _ := golden.pairsJoined(t, fileTokenizer(t, path), modeltest.RerankTemplate)
	body, _ := json.Marshal(map[string]any{"query": golden.Query, "texts": docs})
	resp := post(t, n, "/rerank", string(body))
	defer resp.Body.Close()
	var got []struct {
		Index int     `json:"index"`
		Score float64 `json:"score"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK || len(got) != len(docs) {
		t.Fatalf("%d: %v %+v", resp.StatusCode, err, got)
	}
	for k, r := range got {
		if want := golden.Results[r.Index].Score; math.Abs(r.Score-want) > 1e-3 || k > 0 && r.Score > got[k-1].Score {
			t.Fatalf("results %+v, llama.cpp's %+v", got, golden.Results)
		}
	}
}

// TestOllamaEmbedTruncates: Ollama's /api/embed cuts an input past the
// model's context to fit unless truncate is false, as Ollama does: the
// text's first tokens between [CLS] and [SEP], the vector the reference's
// for those ids, prompt_eval_count the context; with truncate false, and
// on /v1/embeddings, such an input is refused naming the context.
func TestOllamaEmbedTruncates(t *testing.T) {
	path, name := encoderFixture(t, "bert")
	n, _ := startNode(t, Config{Models: []string{path}})
	tok := fileTokenizer(t, path)
	text := strings.Repeat("the man walks into the bar, the dog runs into the man. ", 8)
	full := tok.Encode(text, tokenizer.EncodeOptions{AddSpecial: true})
	if len(full) <= encodertest.Context {
		t.Fatalf("%d tokens: the text must be longer than the context of %d", len(full), encodertest.Context)
	}
	cut := append(append([]uint32{}, full[:encodertest.Context-1]...), full[len(full)-1]) // [CLS] … [SEP]
	want := referenceEncoderEmbedding(t, path, cut)
	var got struct {
		Embeddings      [][]float64 `json:"embeddings"`
		PromptEvalCount int         `json:"prompt_eval_count"`
	}
	postJSON(t, n, "/api/embed", fmt.Sprintf(`{"model":%q,"input":[%q,"A man walks into a bar."]}`, name, text), &got)
	short := len(tok.Encode("A man walks into a bar.", tokenizer.EncodeOptions{AddSpecial: true}))
	if len(got.Embeddings) != 2 || got.PromptEvalCount != encodertest.Context+short {
		t.Fatalf("%d vectors, %d prompt tokens; want 2, %d", len(got.Embeddings), got.PromptEvalCount, encodertest.Context+short)
	}
	for j := range want {
		if math.Abs(got.Embeddings[0][j]-want[j]) > embeddingTolerance {
			t.Fatalf("component %d is %v, the cut input's %v", j, got.Embeddings[0][j], want[j])
		}
	}
	for path, body := range map[string]string{
		"/api/embed":     fmt.Sprintf(`{"model":%q,"input":%q,"truncate":false}`, name, text),
		"/v1/embeddings": fmt.Sprintf(`{"model":%q,"input":%q}`, name, text),
	} {
		if code, v := answerOf(t, n, path, body); code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(v), "context of 64") {
			t.Fatalf("%s: %d %v", path, code, v)
		}
	}
}
