package api

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// postJSON posts body to path and decodes the answer into v, returning
// the status.
func postJSON(t *testing.T, h *harness, path, body string, v any) int {
	t.Helper()
	resp := h.post(t, path, body)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s %s: %d %s: %v", path, body, resp.StatusCode, b, err)
	}
	return resp.StatusCode
}

// TestTokenize: POST /tokenize answers as llama.cpp's server does —
// no BOS and control tokens matched by default, add_special and
// parse_special as asked, content that mixes texts and ids (BOS before
// the first part only), pieces as strings or, where not UTF-8, bytes —
// and the model may go unnamed where this node serves one.
func TestTokenize(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	var got struct {
		Tokens json.RawMessage `json:"tokens"`
	}
	for _, tc := range []struct{ body, want string }{
		{`{"model":"tiny","content":"ab</s>"}`, `[100,101,2]`},
		{`{"content":"ab</s>"}`, `[100,101,2]`},
		{`{"content":"a</s>","parse_special":false}`, `[100,63,50,118,65]`},
		{`{"content":"a","add_special":true}`, `[1,100]`},
		{`{"content":["a",7,"b"],"add_special":true}`, `[1,100,7,101]`},
		{`{"content":[7,"b"],"add_special":true}`, `[7,101]`},
		{`{"content":""}`, `[]`},
		{`{"content":"a\u00e9","with_pieces":true}`, `[{"id":100,"piece":"a"},{"id":198,"piece":[195]},{"id":172,"piece":[169]}]`},
		{`{"content":"</s>","with_pieces":true}`, `[{"id":2,"piece":"</s>"}]`},
	} {
		if status := postJSON(t, h, "/tokenize", tc.body, &got); status != 200 || string(got.Tokens) != tc.want {
			t.Errorf("%s: %d %s, want %s", tc.body, status, got.Tokens, tc.want)
		}
	}
}

// TestDetokenize: POST /detokenize joins the tokens' pieces, control
// tokens as their text, as llama.cpp's server does.
func TestDetokenize(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	var got struct {
		Content *string `json:"content"`
	}
	for _, tc := range []struct{ body, want string }{
		{`{"model":"tiny","tokens":[1,100,101,2]}`, "<s>ab</s>"},
		{`{"tokens":[]}`, ""},
		{`{"tokens":[198,172]}`, "é"},
		{`{"tokens":[198]}`, "\ufffd"}, // half a character
	} {
		if status := postJSON(t, h, "/detokenize", tc.body, &got); status != 200 || got.Content == nil || *got.Content != tc.want {
			t.Errorf("%s: %d %v, want %q", tc.body, status, got.Content, tc.want)
		}
	}
}

func TestTokenizeErrors(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	h.reg.local["other"] = &fakeModel{}
	for _, tc := range []struct {
		path, body string
		status     int
		want       string
	}{
		{"/tokenize", `{"content":"a"}`, 400, "model is required: this node serves several models (other, tiny)"},
		{"/tokenize", `{"model":"tiny"}`, 400, "content is required"},
		{"/tokenize", `{"model":"tiny","content":{"a":1}}`, 400, "content must be a string or an array"},
		{"/tokenize", `{"model":"tiny","content":["a",-1]}`, 400, "content[1] is neither a string nor a token id"},
		{"/tokenize", `{"model":"tiny","content":["a",1.5]}`, 400, "content[1] is neither"},
		{"/tokenize", `{"model":"tiny","content":["a",null]}`, 400, "content[1] is neither"},
		{"/tokenize", `{"model":"tiny","content":[259]}`, 400, "content[0]: token 259 is outside the vocabulary of 259"},
		{"/tokenize", `{"model":"tiny","content":"a","add_bos":true}`, 400, `unknown field "add_bos"`},
		{"/tokenize", `{"model":"gpt-9","content":"a"}`, 404, "gpt-9"},
		{"/detokenize", `{"model":"tiny"}`, 400, "tokens is required"},
		{"/detokenize", `{"model":"tiny","tokens":"ab"}`, 400, "tokens must be an array of token ids"},
		{"/detokenize", `{"model":"tiny","tokens":[1,4294967296]}`, 400, "tokens[1] is not a token id"},
		{"/detokenize", `{"model":"tiny","tokens":[1,300]}`, 400, "tokens[1]: token 300 is outside the vocabulary"},
		{"/detokenize", `{"model":"nope","tokens":[1]}`, 404, "nope"},
	} {
		var got errResp
		if status := postJSON(t, h, tc.path, tc.body, &got); status != tc.status || !strings.Contains(got.Error.Message, tc.want) {
			t.Errorf("%s %s: %d %q, want %d containing %q", tc.path, tc.body, status, got.Error.Message, tc.status, tc.want)
		}
	}
	// A model that lends out no tokenizer.
	h.reg.local["plain"] = generateOnly{&fakeModel{}}
	var got errResp
	if status := postJSON(t, h, "/tokenize", `{"model":"plain","content":"a"}`, &got); status != http.StatusBadRequest || got.Error.Code != "unsupported_model" {
		t.Errorf("a model with no tokenizer: %d %+v", status, got.Error)
	}
}

// TestApplyTemplate: POST /apply-template answers the prompt a chat
// completions body renders to, validated as that body is, and
// generates nothing.
func TestApplyTemplate(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	var got struct {
		Prompt string `json:"prompt"`
	}
	body := `{"model":"tiny","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"max_tokens":3}`
	if status := postJSON(t, h, "/apply-template", body, &got); status != 200 || got.Prompt != "system: be brief\nuser: hi\nassistant:" {
		t.Errorf("%d %q", status, got.Prompt)
	}
	if n := len(h.model.calls); n != 0 {
		t.Errorf("apply-template prepared %d generations", n)
	}
	for _, tc := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"model":"tiny","messages":[]}`, 400, "at least one"},
		{`{"model":"tiny","messages":[{"role":"user","content":"x"}],"store":true}`, 400, "store"},
		{`{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, 404, "gpt-9"},
		// The fake writes no tool format, so tools are refused as a chat
		// completion refuses them.
		{`{"model":"tiny","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]}`, 400, "cannot take tools"},
	} {
		var e errResp
		if status := postJSON(t, h, "/apply-template", tc.body, &e); status != tc.status || !strings.Contains(e.Error.Message, tc.want) {
			t.Errorf("%s: %d %q, want %d containing %q", tc.body, status, e.Error.Message, tc.status, tc.want)
		}
	}
	h.reg.local["plain"] = generateOnly{&fakeModel{}}
	var e errResp
	if status := postJSON(t, h, "/apply-template", `{"model":"plain","messages":[{"role":"user","content":"x"}]}`, &e); status != 400 || e.Error.Code != "unsupported_model" {
		t.Errorf("a model with no template: %d %+v", status, e.Error)
	}
}

// TestTokenizeVLLM: vLLM's dialect, which lm-evaluation-harness's remote
// tokenizer speaks: /tokenize's prompt and add_special_tokens (BOS by
// default), count and max_model_len in the answer, /detokenize's text as
// prompt too, and GET /tokenizer_info.
func TestTokenizeVLLM(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	var got struct {
		Tokens      []uint32 `json:"tokens"`
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
	}
	for body, want := range map[string][]uint32{
		`{"prompt":"ab</s>"}`:                                          {1, 100, 101, 2},
		`{"prompt":"ab","add_special_tokens":false}`:                   {100, 101},
		`{"content":"ab","add_special_tokens":true}`:                   {1, 100, 101},
		`{"content":"a","add_special":true,"add_special_tokens":true}`: {1, 100},
	} {
		if status := postJSON(t, h, "/tokenize", body, &got); status != 200 || !slices.Equal(got.Tokens, want) || got.Count != len(want) || got.MaxModelLen != 256 {
			t.Errorf("%s: %d %+v, want %v", body, status, got, want)
		}
	}
	for body, msg := range map[string]string{
		`{"prompt":"a","content":"b"}`:                                  "not both",
		`{"content":"a","add_special":true,"add_special_tokens":false}`: "disagree",
		`{"prompt":["a"]}`:                                              "wrong type",
	} {
		var e errResp
		if status := postJSON(t, h, "/tokenize", body, &e); status != 400 || !strings.Contains(e.Error.Message, msg) {
			t.Errorf("%s: %d %q, want 400 saying %q", body, status, e.Error.Message, msg)
		}
	}
	var text map[string]string
	if status := postJSON(t, h, "/detokenize", `{"tokens":[100,101]}`, &text); status != 200 || text["prompt"] != "ab" || text["content"] != "ab" {
		t.Errorf("detokenize: %d %v", status, text)
	}
	resp, err := http.Get(h.http.URL + "/tokenizer_info")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != `{"tokenizer_class":"fake","bos_token":"<s>","eos_token":"</s>","unk_token":null,"pad_token":null,"add_bos_token":false,"chat_template":null,"model_max_length":256,"vocab_size":259}`+"\n" {
		t.Errorf("tokenizer_info: %d %s", resp.StatusCode, b)
	}
	if resp, err := http.Get(h.http.URL + "/tokenizer_info?model=gpt-9"); err != nil || resp.StatusCode != 404 {
		t.Errorf("tokenizer_info of an unknown model: %v %v", resp.StatusCode, err)
	}
}
