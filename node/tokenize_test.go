package node

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
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
	prompts, _ := llamaReference(t)
	return prompts
}

// llamaReference is llamaPrompts, and llama.cpp's greedy ids after each
// prompt.
func llamaReference(t *testing.T) (prompts, generated map[string][]uint32) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "models", "reference-greedy.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	header := regexp.MustCompile(`^### meshnode-fortunes-q8_0\.gguf  prompt: "(.*)"  \(`)
	prompts, generated = map[string][]uint32{}, map[string][]uint32{}
	ids := func(rest string) []uint32 {
		fields := strings.Fields(rest)[1:] // after "(n):"
		out := make([]uint32, len(fields))
		for i, s := range fields {
			if _, err := fmt.Sscan(s, &out[i]); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	var prompt string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		if m := header.FindStringSubmatch(line); m != nil {
			prompt = m[1]
			continue
		}
		if prompt == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "prompt ids "); ok {
			prompts[prompt] = ids(rest)
		}
		if rest, ok := strings.CutPrefix(line, "generated ids "); ok {
			generated[prompt] = ids(rest)
		}
	}
	if len(prompts) == 0 || len(generated) != len(prompts) {
		t.Fatalf("%d prompts and %d continuations in the reference", len(prompts), len(generated))
	}
	return prompts, generated
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
	// vLLM's dialect, as lm-evaluation-harness's remote tokenizer asks:
	// its tokenizer_info, and eos_token back to its id.
	resp, err := http.Get("http://" + n.HTTPAddr().String() + "/tokenizer_info?model=" + fortunesModel)
	if err != nil {
		t.Fatal(err)
	}
	var info api.TokenizerInfo
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || info.EOSToken == nil || *info.EOSToken != "</s>" || info.BOSToken == nil || *info.BOSToken != "<s>" || !info.AddBOS ||
		info.ChatTemplate != nil || info.ModelMaxLength != 256 || info.VocabSize != 32000 {
		t.Errorf("tokenizer_info: %+v (%v)", info, err)
	}
	var eos struct {
		Tokens []uint32 `json:"tokens"`
	}
	postJSON(t, n, "/tokenize", fmt.Sprintf(`{"model":%q,"prompt":"</s>","add_special_tokens":false}`, fortunesModel), &eos)
	if !slices.Equal(eos.Tokens, []uint32{2}) {
		t.Errorf("</s> is %v, want [2]", eos.Tokens)
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
	req := receipt.ServeRequest{PromptHash: receipt.TokenPromptHash(ids), PromptTokens: uint32(len(ids)), MaxTokens: 12, JouleCeilingUJ: DefaultJouleCeilingUJ}
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

// completionLogprobs is a completion's text and legacy logprobs.
type completionLogprobs struct {
	Choices []struct {
		Text     string `json:"text"`
		Logprobs struct {
			Tokens        []string              `json:"tokens"`
			TokenLogprobs []*float64            `json:"token_logprobs"`
			TopLogprobs   []map[string]*float64 `json:"top_logprobs"`
			TextOffset    []int                 `json:"text_offset"`
		} `json:"logprobs"`
	} `json:"choices"`
}

// TestEcho: echo puts the prompt before the answer; with logprobs, its
// tokens' log-probabilities come first — the first unscored, a BOS the
// node added left out — and they are the numbers the same tokens get
// when generated: lm-evaluation-harness's loglikelihood request (token
// ids, echo, logprobs 1, max_tokens 1) scores a continuation as the
// model generates it.
func TestEcho(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	const text = "A man walks into a bar"
	req := func(extra string) string { return `{"model":"` + fortunesModel + `"` + extra + `}` }

	plain, _ := generate(t, n, "/v1/completions", req(`,"prompt":"`+text+`","max_tokens":8`))
	echoed, _ := generate(t, n, "/v1/completions", req(`,"prompt":"`+text+`","max_tokens":8,"echo":true`))
	if echoed != text+plain {
		t.Fatalf("echoed %q, want %q", echoed, text+plain)
	}

	// The model's greedy continuation of llama.cpp's ids (llama.cpp's
	// own), with logprobs.
	prompts, generated := llamaReference(t)
	ids, cont := prompts[text], generated[text][:3]
	list := func(ids []uint32) string { b, _ := json.Marshal(ids); return string(b) }
	var gen completionLogprobs
	postJSON(t, n, "/v1/completions", req(`,"prompt":`+list(ids)+`,"max_tokens":4,"logprobs":1`), &gen)
	g := gen.Choices[0].Logprobs
	if len(g.Tokens) != 4 {
		t.Fatalf("generated %q in %d tokens", gen.Choices[0].Text, len(g.Tokens))
	}
	// lm-eval's request: context and continuation as ids, one prompt.
	var ll completionLogprobs
	postJSON(t, n, "/v1/completions", req(`,"prompt":[`+list(append(slices.Clone(ids), cont...))+`],"temperature":0,"max_tokens":1,"logprobs":1,"seed":1234,"echo":true`), &ll)
	l := ll.Choices[0].Logprobs
	if len(l.TokenLogprobs) != len(ids)+len(cont)+1 || l.TokenLogprobs[0] != nil || l.TopLogprobs[0] != nil || l.Tokens[0] != "<s>" {
		t.Fatalf("echo of %d ids and 1 more: %d entries, first %v %v %q", len(ids)+len(cont), len(l.TokenLogprobs), l.TokenLogprobs[0], l.TopLogprobs[0], l.Tokens[0])
	}
	for i := range cont {
		got, want := l.TokenLogprobs[len(ids)+i], g.TokenLogprobs[i]
		if got == nil || *got != *want || l.Tokens[len(ids)+i] != g.Tokens[i] {
			t.Fatalf("continuation token %d %q: scored %v, generated %q at %v", i, l.Tokens[len(ids)+i], got, g.Tokens[i], *want)
		}
		// lm-eval's is_greedy: the token's is the likeliest of its top.
		best := math.Inf(-1)
		for _, v := range l.TopLogprobs[len(ids)+i] {
			best = max(best, *v)
		}
		if best != *got {
			t.Errorf("continuation token %d: %v, but its alternatives' best is %v", i, *got, best)
		}
	}
	// The ids' text, control tokens hidden as in an answer.
	if want := " " + text + gen.Choices[0].Text; !strings.HasPrefix(ll.Choices[0].Text, want[:len(want)-len(g.Tokens[3])]) {
		t.Errorf("echoed text %q, want it to begin %q", ll.Choices[0].Text, want)
	}

	// lm-eval with batch_size > 1 sends its requests as one batch of
	// prompts: each choice scores its prompt as that request alone does.
	other := prompts["Love is"]
	var one, batch completionLogprobs
	postJSON(t, n, "/v1/completions", req(`,"prompt":[`+list(other)+`],"max_tokens":1,"logprobs":1,"echo":true`), &one)
	postJSON(t, n, "/v1/completions", req(`,"prompt":[`+list(append(slices.Clone(ids), cont...))+`,`+list(other)+`],"temperature":0,"max_tokens":1,"logprobs":1,"seed":1234,"echo":true`), &batch)
	if len(batch.Choices) != 2 {
		t.Fatalf("a batch of 2 prompts: %d choices", len(batch.Choices))
	}
	for i, want := range []completionLogprobs{ll, one} {
		got, w := batch.Choices[i].Logprobs, want.Choices[0].Logprobs
		if len(got.TokenLogprobs) != len(w.TokenLogprobs) || batch.Choices[i].Text != want.Choices[0].Text {
			t.Fatalf("batch choice %d: %d scores, %q; alone %d, %q", i, len(got.TokenLogprobs), batch.Choices[i].Text, len(w.TokenLogprobs), want.Choices[0].Text)
		}
		for j := 1; j < len(w.TokenLogprobs); j++ {
			if *got.TokenLogprobs[j] != *w.TokenLogprobs[j] {
				t.Fatalf("batch choice %d token %d: %v, alone %v", i, j, *got.TokenLogprobs[j], *w.TokenLogprobs[j])
			}
		}
	}

	// Streamed: the first event carries the prompt, the text and its
	// tokens' log-probabilities, ahead of the answer's.
	resp := post(t, n, "/v1/completions", req(`,"prompt":"`+text+`","max_tokens":3,"logprobs":1,"echo":true,"stream":true`))
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	first, _, _ := strings.Cut(strings.TrimPrefix(string(raw), "data: "), "\n")
	var ev completionLogprobs
	if err := json.Unmarshal([]byte(first), &ev); err != nil || !strings.HasPrefix(ev.Choices[0].Text, text) || len(ev.Choices[0].Logprobs.Tokens) < len(ids)-1 {
		t.Errorf("the stream's first event %s (%v)", first, err)
	}

	// A text prompt: the node's BOS is not the client's, so not echoed.
	var tl completionLogprobs
	postJSON(t, n, "/v1/completions", req(`,"prompt":"`+text+`","max_tokens":1,"logprobs":0,"echo":true`), &tl)
	e := tl.Choices[0].Logprobs
	if len(e.Tokens) != len(ids) || e.TokenLogprobs[0] == nil || e.Tokens[0] != " A" || e.TextOffset[0] != 0 {
		t.Errorf("a text prompt's echo: %d tokens (want %d, its BOS left out), first %q at %d scored %v", len(e.Tokens), len(ids), e.Tokens[0], e.TextOffset[0], e.TokenLogprobs[0])
	}
}
