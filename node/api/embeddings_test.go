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
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{}, nil)
			h.reg.local["plain"] = generateOnly{h.model}
			resp := h.post(t, "/v1/embeddings", tt.body)
			defer resp.Body.Close()
			var got struct {
				Error struct {
					Message string `json:"message"`
					Param   string `json:"param"`
				} `json:"error"`
			}
			decodeJSON(t, resp.Body, &got)
			if resp.StatusCode != 400 || got.Error.Param != tt.param || !strings.Contains(got.Error.Message, tt.inMsg) {
				t.Fatalf("%s: %d %+v, want 400 %s %q", tt.body, resp.StatusCode, got.Error, tt.param, tt.inMsg)
			}
		})
	}
}
