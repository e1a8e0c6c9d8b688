package node

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward/grant"
)

// llamaPrompts are the prompts of the built-in model's llama.cpp
// reference (models/reference-greedy.txt) with llama.cpp's ids for them.
func llamaPrompts(t *testing.T) map[string][]uint32 {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "models", "reference-greedy.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	header := regexp.MustCompile(`^### meshnode-fortunes-q8_0\.gguf  prompt: "(.*)"  \(`)
	out := map[string][]uint32{}
	var prompt string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		if m := header.FindStringSubmatch(line); m != nil {
			prompt = m[1]
			continue
		}
		if rest, ok := strings.CutPrefix(line, "prompt ids "); ok && prompt != "" {
			fields := strings.Fields(rest)[1:] // after "(n):"
			ids := make([]uint32, len(fields))
			for i, s := range fields {
				if _, err := fmt.Sscan(s, &ids[i]); err != nil {
					t.Fatal(err)
				}
			}
			out[prompt], prompt = ids, ""
		}
	}
	if len(out) == 0 {
		t.Fatal("no prompts in the reference")
	}
	return out
}

// TestTokenizeMatchesLlamaCpp: POST /tokenize on the built-in model,
// with add_special, answers llama.cpp's ids for the reference prompts,
// and /detokenize of them gives the text back after BOS (llama.cpp's
// pieces, the first with its SentencePiece space); the reference model,
// which has no tokenizer, says so.
func TestTokenizeMatchesLlamaCpp(t *testing.T) {
	n, _ := startNode(t, Config{Models: []string{fortunesPath(t), ReferenceModel}})
	for text, want := range llamaPrompts(t) {
		var got struct {
			Tokens []uint32 `json:"tokens"`
		}
		postJSON(t, n, "/tokenize", fmt.Sprintf(`{"model":%q,"content":%q,"add_special":true}`, fortunesModel, text), &got)
		if !slices.Equal(got.Tokens, want) {
			t.Errorf("%q: %v, llama.cpp's %v", text, got.Tokens, want)
		}
		ids, _ := json.Marshal(want)
		var back struct {
			Content string `json:"content"`
		}
		postJSON(t, n, "/detokenize", fmt.Sprintf(`{"model":%q,"tokens":%s}`, fortunesModel, ids), &back)
		if back.Content != "<s> "+text {
			t.Errorf("%v: %q, want %q", want, back.Content, "<s> "+text)
		}
	}
	code, v := answerOf(t, n, "/tokenize", fmt.Sprintf(`{"model":%q,"content":"x"}`, ReferenceModel))
	if e, _ := v["error"].(map[string]any); code != 400 || e["code"] != "unsupported_model" || !strings.Contains(fmt.Sprint(e["message"]), "has no tokenizer") {
		t.Errorf("the reference model: %d %v", code, v)
	}
}

// TestApplyTemplateIsTheServedPrompt: POST /apply-template on the
// built-in model answers the very prompt a chat completion is served
// with — tokenized as a prompt is, it is as many tokens as the
// completion's usage counts — with tools (here the generic polyfill's
// instruction) as the request has them.
func TestApplyTemplateIsTheServedPrompt(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	const tool = `{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}`
	for _, extra := range []string{"", `,"tools":[` + tool + `]`} {
		body := `{"model":"` + fortunesModel + `","max_tokens":2,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"A man walks into a bar"}]` + extra + `}`
		var tmpl struct {
			Prompt string `json:"prompt"`
		}
		postJSON(t, n, "/apply-template", body, &tmpl)
		if !strings.Contains(tmpl.Prompt, "A man walks into a bar") || extra != "" && !strings.Contains(tmpl.Prompt, "get_weather") {
			t.Fatalf("prompt %q", tmpl.Prompt)
		}
		content, _ := json.Marshal(tmpl.Prompt)
		var tok struct {
			Tokens []uint32 `json:"tokens"`
		}
		postJSON(t, n, "/tokenize", `{"content":`+string(content)+`,"add_special":true}`, &tok)
		var chat struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		postJSON(t, n, "/v1/chat/completions", body, &chat)
		if len(tok.Tokens) != chat.Usage.PromptTokens || chat.Usage.PromptTokens == 0 {
			t.Errorf("tools %v: the rendered prompt is %d tokens; the completion's, %d", extra != "", len(tok.Tokens), chat.Usage.PromptTokens)
		}
	}
}

// TestTokenPrompt: a completion's prompt may be token ids, given as they
// are: llama.cpp's ids for a reference prompt (BOS included) answer what
// the text answers; the receipt's prompt_hash is the ids' (their
// canonical CBOR array) and the serve replays; an id past the
// vocabulary, or more ids than the context holds, is refused.
func TestTokenPrompt(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	const text = "A man walks into a bar"
	ids := llamaPrompts(t)[text]
	list, _ := json.Marshal(ids)
	want, _ := generate(t, n, "/v1/completions", `{"model":"`+fortunesModel+`","max_tokens":12,"prompt":"`+text+`"}`)
	body := `{"model":"` + fortunesModel + `","max_tokens":12,"prompt":` + string(list) + `}`
	got, energy := generate(t, n, "/v1/completions", body)
	if got != want {
		t.Fatalf("the ids answered %q; the text, %q", got, want)
	}
	var e struct {
		Receipt struct {
			RequestID string `json:"request_id"`
		} `json:"receipt"`
	}
	if err := json.Unmarshal(energy, &e); err != nil {
		t.Fatal(err)
	}
	req := receipt.ServeRequest{PromptHash: receipt.TokenPromptHash(ids), PromptTokens: uint32(len(ids)), MaxTokens: 12, JouleCeilingUJ: 1_000_000_000}
	if id, err := req.ID(); err != nil || id.String() != e.Receipt.RequestID {
		t.Errorf("request id %s, want the ids' request %s (%v)", e.Receipt.RequestID, id, err)
	}
	replay, _ := json.Marshal(map[string]any{"request": json.RawMessage(body), "energy": energy})
	if status, res, raw := replayRaw(t, n, string(replay)); status != 200 || res.Verdict != api.VerdictVerified {
		t.Errorf("replay: %d %s", status, raw)
	}

	// On a grant: the binding hashes a prompt's text, so ids are refused
	// (here a presentation made for the text, the body then given ids).
	caller, chain := issueGrant(t, n)
	presented, _, err := grant.PresentBody([]byte(`{"model":"`+fortunesModel+`","max_tokens":12,"prompt":"`+text+`","metadata":{"joule_ceiling_uj":1000000000}}`), chain, caller, nil)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(presented, &fields); err != nil {
		t.Fatal(err)
	}
	fields["prompt"] = list
	swapped, _ := json.Marshal(fields)
	if code, v := answerOf(t, n, "/v1/completions", string(swapped)); code != 400 || !strings.Contains(fmt.Sprint(v), "param:prompt") {
		t.Errorf("a granted prompt of ids: %d %v", code, v)
	}

	long := make([]uint32, 300)
	for i := range long {
		long[i] = 319
	}
	longList, _ := json.Marshal(long)
	for _, tc := range []struct{ prompt, code, msg string }{
		{`[1,32000]`, "invalid_prompt", "prompt token 32000 (at 1) is outside the vocabulary of 32000"},
		{string(longList), "context_length_exceeded", "at least 300 tokens"},
	} {
		code, v := answerOf(t, n, "/v1/completions", `{"model":"`+fortunesModel+`","prompt":`+tc.prompt+`}`)
		e, _ := v["error"].(map[string]any)
		if code != 400 || e["code"] != tc.code || !strings.Contains(fmt.Sprint(e["message"]), tc.msg) {
			t.Errorf("%.40s: %d %v", tc.prompt, code, v)
		}
	}
}
