package api

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"strings"
	"testing"
)

// TestEmbeddings: every input form OpenAI defines reaches the model as
// its inputs; vectors come back in order, as floats or as base64 of
// their little-endian float32s; usage counts the model's tokens.
func TestEmbeddings(t *testing.T) {
	type out struct {
		Object string `json:"object"`
		Model  string `json:"model"`
		Data   []struct {
			Object    string `json:"object"`
			Index     int    `json:"index"`
			Embedding any    `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		} `json:"usage"`
	}
	for _, tt := range []struct {
		name, input string
		want        []EmbedInput
	}{
		{"string", `"hello"`, []EmbedInput{{Text: "hello"}}},
		{"strings", `["a","bcd"]`, []EmbedInput{{Text: "a"}, {Text: "bcd"}}},
		{"tokens", `[1,2,3]`, []EmbedInput{{Tokens: []uint32{1, 2, 3}, IsTokens: true}}},
		{"token arrays", `[[1],[4,5]]`, []EmbedInput{{Tokens: []uint32{1}, IsTokens: true}, {Tokens: []uint32{4, 5}, IsTokens: true}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{}, nil)
			resp := h.post(t, "/v1/embeddings", `{"model":"tiny","input":`+tt.input+`,"user":"u1"}`)
			defer resp.Body.Close()
			var got out
			decodeJSON(t, resp.Body, &got)
			if resp.StatusCode != 200 || got.Object != "list" || got.Model != "tiny" || len(got.Data) != len(tt.want) {
				t.Fatalf("%d %+v", resp.StatusCode, got)
			}
			e := h.model.embeds[0]
			total := 0
			for i, w := range tt.want {
				in := e.Inputs[i]
				if in.Text != w.Text || in.IsTokens != w.IsTokens || len(in.Tokens) != len(w.Tokens) {
					t.Fatalf("input %d reached the model as %+v, want %+v", i, in, w)
				}
				n := len(w.Text) + len(w.Tokens)
				total += n
				d := got.Data[i]
				v, _ := d.Embedding.([]any)
				if d.Object != "embedding" || d.Index != i || len(v) != 2 || v[0] != float64(i) || v[1] != float64(n) {
					t.Fatalf("data[%d] = %+v", i, d)
				}
			}
			if got.Usage.PromptTokens != total || got.Usage.TotalTokens != total {
				t.Fatalf("usage %+v, want %d", got.Usage, total)
			}
		})
	}

	h := newHarness(t, Config{}, nil)
	resp := h.post(t, "/v1/embeddings", `{"model":"tiny","input":"abc","encoding_format":"base64","dimensions":3}`)
	defer resp.Body.Close()
	var got out
	decodeJSON(t, resp.Body, &got)
	s, _ := got.Data[0].Embedding.(string)
	b, err := base64.StdEncoding.DecodeString(s)
	if resp.StatusCode != 200 || err != nil || len(b) != 12 {
		t.Fatalf("base64: %d %q %v", resp.StatusCode, s, err)
	}
	want := []float32{0, 3, 0}
	for i := range want {
		if x := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])); x != want[i] {
			t.Fatalf("base64 float %d is %v, want %v", i, x, want[i])
		}
	}
	if h.model.embeds[0].Dimensions != 3 {
		t.Fatalf("dimensions reached the model as %d", h.model.embeds[0].Dimensions)
	}
}

// TestEmbeddingsRefused: malformed inputs, an unknown encoding and a model
// that makes no embeddings are 400s naming the field.
func TestEmbeddingsRefused(t *testing.T) {
	for _, tt := range []struct {
		name, body, param, inMsg string
	}{
		{"no input", `{"model":"tiny"}`, "input", "required"},
		{"empty string", `{"model":"tiny","input":""}`, "input", "empty string"},
		{"empty array", `{"model":"tiny","input":[]}`, "input", "at least one"},
		{"empty in array", `{"model":"tiny","input":["a",""]}`, "input", "input[1]"},
		{"mixed", `{"model":"tiny","input":["a",[1]]}`, "input", "mixes"},
		{"bad token", `{"model":"tiny","input":[1,-2]}`, "input", "not a token id"},
		{"empty tokens", `{"model":"tiny","input":[[]]}`, "input", "empty token array"},
		{"object", `{"model":"tiny","input":{"a":1}}`, "input", "must be a string"},
		{"encoding", `{"model":"tiny","input":"a","encoding_format":"int8"}`, "encoding_format", "float or base64"},
		{"dimensions", `{"model":"tiny","input":"a","dimensions":0}`, "dimensions", "at least 1"},
		{"unknown field", `{"model":"tiny","input":"a","pooling":"cls"}`, "pooling", "unknown field"},
		{"no model", `{"input":"a"}`, "model", "required"},
		{"generate only", `{"model":"plain","input":"a"}`, "model", "cannot make embeddings"},
	} {
		t.Run(tt.name, func(t *testing.T) { embedRefused(t, "/v1/embeddings", tt.body, tt.param, tt.inMsg) })
	}
}

// embedRefused posts body to path on a harness that also serves "plain",
// a model that only generates, and wants a 400 naming param and saying
// inMsg.
func embedRefused(t *testing.T, path, body, param, inMsg string) {
	t.Helper()
	h := newHarness(t, Config{}, nil)
	h.reg.local["plain"] = generateOnly{h.model}
	resp := h.post(t, path, body)
	defer resp.Body.Close()
	var got struct {
		Error struct {
			Message string `json:"message"`
			Param   string `json:"param"`
		} `json:"error"`
	}
	decodeJSON(t, resp.Body, &got)
	if resp.StatusCode != 400 || got.Error.Param != param || !strings.Contains(got.Error.Message, inMsg) {
		t.Fatalf("%s %s: %d %+v, want 400 %s %q", path, body, resp.StatusCode, got.Error, param, inMsg)
	}
}

// TestLlamaEmbedding: llama-server's own POST /embedding and /embeddings
// take the text in content or input, name the node's one model when the
// request names none, and answer [{"index", "embedding": [vector]}], each
// vector scaled as embd_normalize says (the textbook norms: none, the
// largest magnitude to 32760, taxicab, Euclidean by the model, a p-norm);
// /v1/embeddings takes embd_normalize too. Bad requests are 400s naming
// the field.
func TestLlamaEmbedding(t *testing.T) {
	type item struct {
		Index     int         `json:"index"`
		Embedding [][]float64 `json:"embedding"`
	}
	// The fake's vectors for "a" and "bcd": [0 1] and [1 3].
	raw := [][]float64{{0, 1}, {1, 3}}
	pnorm := func(p float64) func([]float64) float64 {
		return func(v []float64) float64 {
			return math.Pow(math.Pow(math.Abs(v[0]), p)+math.Pow(math.Abs(v[1]), p), 1/p)
		}
	}
	for _, tt := range []struct {
		path, body   string
		unnormalized bool
		norm         func([]float64) float64 // what the answer is divided by
	}{
		{"/embedding", `{"content":["a","bcd"]}`, false, func([]float64) float64 { return 1 }},
		{"/embeddings", `{"model":"tiny","input":["a","bcd"],"embd_normalize":2}`, false, func([]float64) float64 { return 1 }},
		{"/embedding", `{"content":["a","bcd"],"embd_normalize":-1}`, true, func([]float64) float64 { return 1 }},
		{"/embedding", `{"content":["a","bcd"],"embd_normalize":0}`, true, func(v []float64) float64 { return max(math.Abs(v[0]), math.Abs(v[1])) / 32760 }},
		{"/embedding", `{"content":["a","bcd"],"embd_normalize":1,"encoding_format":"float"}`, true, pnorm(1)},
		{"/embedding", `{"content":["a","bcd"],"embd_normalize":3}`, true, pnorm(3)},
	} {
		h := newHarness(t, Config{}, nil)
		resp := h.post(t, tt.path, tt.body)
		var got []item
		decodeJSON(t, resp.Body, &got)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(got) != 2 {
			t.Fatalf("%s %s: %d %+v", tt.path, tt.body, resp.StatusCode, got)
		}
		e := h.model.embeds[0]
		if e.Model != "tiny" || e.Unnormalized != tt.unnormalized || len(e.Inputs) != 2 || e.Inputs[1].Text != "bcd" {
			t.Fatalf("%s: reached the model as %+v", tt.body, e)
		}
		for i, it := range got {
			if it.Index != i || len(it.Embedding) != 1 || len(it.Embedding[0]) != 2 {
				t.Fatalf("%s: item %d is %+v", tt.body, i, it)
			}
			for j, x := range it.Embedding[0] {
				if want := raw[i][j] / tt.norm(raw[i]); math.Abs(x-want) > 1e-6*math.Max(1, math.Abs(want)) {
					t.Fatalf("%s: vector %d is %v, want component %d %v", tt.body, i, it.Embedding[0], j, want)
				}
			}
		}
	}

	h := newHarness(t, Config{}, nil)
	resp := h.post(t, "/v1/embeddings", `{"model":"tiny","input":"bcd","embd_normalize":1}`)
	var list struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	decodeJSON(t, resp.Body, &list)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(list.Data) != 1 || list.Data[0].Embedding[1] != 1 || !h.model.embeds[0].Unnormalized {
		t.Fatalf("/v1/embeddings with embd_normalize 1: %d %+v", resp.StatusCode, list)
	}

	for _, tt := range []struct {
		body, param, inMsg string
	}{
		{`{}`, "content", "required"},
		{`{"content":"a","input":"b"}`, "content", "not both"},
		{`{"content":""}`, "input", "empty string"},
		{`{"content":"a","embd_normalize":-2}`, "embd_normalize", "got -2"},
		{`{"content":"a","encoding_format":"base64"}`, "encoding_format", "answers floats"},
		{`{"content":"a","n_predict":3}`, "n_predict", "unknown field"},
		{`{"model":"plain","content":"a"}`, "model", "cannot make embeddings"},
	} {
		embedRefused(t, "/embedding", tt.body, tt.param, tt.inMsg)
	}
}
