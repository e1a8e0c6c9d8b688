package node

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/chat"
	"github.com/meshnode/meshnode/gguf/chat/think"
	"github.com/meshnode/meshnode/gguf/grammar"
	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node/api"
)

// templateModel is the llama fixture with the chat template in file
// (gguf/chat/testdata/templates), named name.
func templateModel(t *testing.T, file, name string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "gguf", "chat", "testdata", "templates", file))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(filepath.Dir(hostileTemplateModel(t, string(src))), name+".gguf")
	if err := os.Rename(filepath.Join(filepath.Dir(p), "hostile-template.gguf"), p); err != nil {
		t.Fatal(err)
	}
	return p
}

// thinkingAnswer is a whole chat answer's first choice.
type thinkingAnswer struct {
	Choices []struct {
		Message struct {
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		Energy                  json.RawMessage `json:"energy"`
		CompletionTokens        int             `json:"completion_tokens"`
		CompletionTokensDetails *struct {
			ReasoningTokens int `json:"reasoning_tokens"`
		} `json:"completion_tokens_details"`
	} `json:"usage"`
}

// TestThinkingServed: models with Qwen3's and DeepSeek-R1's chat
// templates, served end to end. A grammar makes the random-weight model
// write a <think> block and an answer; the node decodes it, and the chat
// API gives the block as reasoning_content and the rest as content, whole
// and streamed alike. enable_thinking reaches Qwen3's template (an empty
// block in the prompt) and is sealed with the prompt, so the serve
// replays; R1's prompt opens the block, so its reply is reasoning from
// the first byte, and a grammar waits for </think> rather than hold the
// reasoning.
func TestThinkingServed(t *testing.T) {
	qwen := templateModel(t, "Qwen-Qwen3-0.6B.jinja", "qwen3-fixture")
	r1 := templateModel(t, "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "r1-fixture")
	n, _ := startNode(t, Config{Models: []string{qwen, r1}})

	const gbnf = "root ::= \"<think>\\n\" word (\" \" word){0,2} \"\\n</think>\\n\\n\" word\nword ::= [a-z]{1,6}"
	g, err := grammar.ParseGBNF(gbnf)
	if err != nil {
		t.Fatal(err)
	}
	quoted, _ := json.Marshal(gbnf)
	body := `{"model":"qwen3-fixture","max_tokens":80,"grammar":` + string(quoted) + `,"messages":[{"role":"user","content":"hi"}]}`
	var whole thinkingAnswer
	postJSON(t, n, "/v1/chat/completions", body, &whole)
	m := whole.Choices[0].Message
	if m.ReasoningContent == nil || m.Content == nil || whole.Choices[0].FinishReason != "stop" {
		t.Fatalf("answer %+v", whole)
	}
	reasoning, content := *m.ReasoningContent, *m.Content
	if !regexp.MustCompile(`^[a-z]+( [a-z]+)*$`).MatchString(reasoning) || !regexp.MustCompile(`^[a-z]+$`).MatchString(content) {
		t.Fatalf("reasoning %q, content %q", reasoning, content)
	}
	// Its reasoning tokens are counted: some, and fewer than the reply's
	// (the tags and the answer are not reasoning).
	if d := whole.Usage.CompletionTokensDetails; d == nil || d.ReasoningTokens < 1 || d.ReasoningTokens > whole.Usage.CompletionTokens-3 {
		t.Errorf("completion_tokens_details %+v of %d tokens", d, whole.Usage.CompletionTokens)
	}
	// What the model wrote is the grammar's: the split lost nothing.
	mt, _ := g.NewMatcher()
	if err := mt.Advance([]byte("<think>\n" + reasoning + "\n</think>\n\n" + content)); err != nil || !mt.Accepting() {
		t.Fatalf("reasoning %q and content %q are not the reply the grammar took: %v", reasoning, content, err)
	}

	resp := post(t, n, "/v1/chat/completions", strings.Replace(body, `"model"`, `"stream":true,"model"`, 1))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var sr, sc strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					Content          *string `json:"content"`
					ReasoningContent *string `json:"reasoning_content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatal(err)
		}
		for _, c := range ch.Choices {
			if c.Delta.ReasoningContent != nil {
				sr.WriteString(*c.Delta.ReasoningContent)
			}
			if c.Delta.Content != nil {
				sc.WriteString(*c.Delta.Content)
			}
		}
	}
	if sr.String() != reasoning || sc.String() != content {
		t.Errorf("streamed %q / %q, whole %q / %q", sr.String(), sc.String(), reasoning, content)
	}

	// The switch: Qwen3's template writes an empty block, the serve is
	// sealed with that prompt and replays.
	var rendered struct {
		Prompt string `json:"prompt"`
	}
	for kw, tail := range map[string]string{"": "<|im_start|>assistant\n", `,"chat_template_kwargs":{"enable_thinking":false}`: "<|im_start|>assistant\n<think>\n\n</think>\n\n"} {
		postJSON(t, n, "/apply-template", `{"model":"qwen3-fixture","messages":[{"role":"user","content":"hi"}]`+kw+`}`, &rendered)
		if !strings.HasSuffix(rendered.Prompt, tail) {
			t.Errorf("%q: rendered %q", kw, rendered.Prompt)
		}
	}
	off := `{"model":"qwen3-fixture","max_tokens":6,"chat_template_kwargs":{"enable_thinking":false},"messages":[{"role":"user","content":"hi"}]}`
	var answered thinkingAnswer
	postJSON(t, n, "/v1/chat/completions", off, &answered)
	if _, res, raw := replayRaw(t, n, `{"request":`+off+`,"energy":`+string(answered.Usage.Energy)+`}`); res.Verdict != api.VerdictVerified {
		t.Errorf("replay with the switch: %s", raw)
	}
	on := strings.Replace(off, `false`, `true`, 1)
	if _, res, raw := replayRaw(t, n, `{"request":`+on+`,"energy":`+string(answered.Usage.Energy)+`}`); res.Verdict == api.VerdictVerified {
		t.Errorf("the switch turned over replays as the same serve: %s", raw)
	}

	// R1's prompt opens the block: the reply is reasoning from its first
	// byte, and with a grammar still is (the grammar waits for </think>,
	// which the random model never writes, so it runs to max_tokens
	// where a grammar held from the start would end at "yes" or "no").
	for _, extra := range []string{"", `,"grammar":"root ::= \"yes\" | \"no\""`} {
		var a thinkingAnswer
		postJSON(t, n, "/v1/chat/completions", `{"model":"r1-fixture","max_tokens":10`+extra+`,"messages":[{"role":"user","content":"hi"}]}`, &a)
		c := a.Choices[0]
		if c.FinishReason != "length" || c.Message.Content == nil || *c.Message.Content != "" || c.Message.ReasoningContent == nil || *c.Message.ReasoningContent == "" {
			t.Errorf("r1%s: finish %q, content %v, reasoning %v", extra, c.FinishReason, c.Message.Content, c.Message.ReasoningContent)
		}
		// Every token was reasoning, and usage says so.
		if d := a.Usage.CompletionTokensDetails; d == nil || d.ReasoningTokens != 10 {
			t.Errorf("r1%s: completion_tokens_details %+v, want 10 reasoning tokens", extra, d)
		}
	}
	// R1's template has no switch: off holds the model to no reasoning,
	// its block closed at once, and it answers; the serve replays. (The
	// fixture's vocabulary has no </think> token: the tag is spelled in
	// several, all but the last counted with the reasoning tokens.)
	r1Off := `{"model":"r1-fixture","max_tokens":10,"chat_template_kwargs":{"enable_thinking":false},"messages":[{"role":"user","content":"hi"}]}`
	var a thinkingAnswer
	postJSON(t, n, "/v1/chat/completions", r1Off, &a)
	if c := a.Choices[0].Message; c.ReasoningContent != nil || c.Content == nil || *c.Content == "" || a.Usage.CompletionTokensDetails.ReasoningTokens >= len("</think>") {
		t.Errorf("r1, thinking off: content %v, reasoning %v, %+v", c.Content, c.ReasoningContent, a.Usage.CompletionTokensDetails)
	}
	if _, res, raw := replayRaw(t, n, `{"request":`+r1Off+`,"energy":`+string(a.Usage.Energy)+`}`); res.Verdict != api.VerdictVerified {
		t.Errorf("replay of r1 with thinking off: %s", raw)
	}
	for _, tc := range []struct{ body, param string }{
		{`{"model":"qwen3-fixture","jcp_presentation":"x","chat_template_kwargs":{"enable_thinking":false},"messages":[{"role":"user","content":"hi"}]}`, "think"},
	} {
		resp := post(t, n, "/v1/chat/completions", tc.body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), fmt.Sprintf(`"param":%q`, tc.param)) {
			t.Errorf("%s: %d %s", tc.body, resp.StatusCode, b)
		}
	}
}

// TestThinkingDecoder: where the block's tags are control tokens
// (Magistral's [THINK] and [/THINK]), a chat reply's decoder writes them,
// as it writes a call's marker, so that the API can split the reply; the
// plain decoder drops them. (This Llama 3.0 vocabulary's reserved control
// tokens are renamed to the tags.)
func TestThinkingDecoder(t *testing.T) {
	v, err := tokenizer.VocabFromGGUF(testVocabFile(t, "llama-bpe").Metadata)
	if err != nil {
		t.Fatal(err)
	}
	v.Tokens[128020], v.Tokens[128021] = "[THINK]", "[/THINK]"
	tok, err := tokenizer.New(v)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("../gguf/chat/testdata/templates/mistralai-Ministral-3-14B-Reasoning-2512.jinja")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chat.Compile(string(src), chat.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tags, _, ok := thinkingOf(tmpl); !ok || tags.Open != "[THINK]" {
		t.Fatalf("thinkingOf: %v %v", tags, ok)
	}
	const reply = "[THINK]Hmm.[/THINK]Yes."
	ids := tok.Encode(reply, tokenizer.EncodeOptions{ParseSpecial: true})
	decode := func(d decoder) string {
		var b strings.Builder
		for _, id := range ids {
			b.WriteString(d.Next(id))
		}
		return b.String() + d.Flush()
	}
	if got := decode(newToolDecoder(tok, replyMarkers(tmpl, false, true))); got != reply {
		t.Fatalf("the reply decoder wrote %q", got)
	}
	// The tags are written only for a reply read for its reasoning.
	if ms := replyMarkers(tmpl, true, false); slices.Contains(ms, "[THINK]") || len(replyMarkers(tmpl, false, false)) != 0 {
		t.Errorf("markers without thinking: %q", ms)
	}
	if got := decode(newTokenDecoder(tok)); got != "Hmm.Yes." {
		t.Fatalf("the plain decoder wrote %q", got)
	}
	if r, c := think.Split(think.Tags{Open: "[THINK]", Close: "[/THINK]"}, false, reply); r != "Hmm." || c != "Yes." {
		t.Errorf("split %q / %q", r, c)
	}
}

// TestReasoningFirst: a thinking model's lazy grammar (strict tools under
// auto) skips the reasoning block, opened by the reply or by the prompt;
// a grammar held from the first byte waits for the closing tag where the
// prompt opened the block, and is left as it is where it did not.
func TestReasoningFirst(t *testing.T) {
	tags := think.Tags{Open: "<think>", Close: "</think>"}
	full, err := grammar.ParseGBNF(`root ::= "yes" | "no"`)
	if err != nil {
		t.Fatal(err)
	}
	spelled, err := grammar.ParseGBNF(`root ::= "<think>" [a-z]* "</think>" ("yes" | "no")`)
	if err != nil {
		t.Fatal(err)
	}
	lazy, err := full.Lazy(grammar.Trigger{Text: "<tool_call>"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		in    *grammar.Grammar
		opens bool
		want  string // a line of the result's canonical text ("": the input's text)
	}{
		{lazy, false, `block "<think>" "</think>"` + "\n"},
		{lazy, true, `block "<think>" "</think>" opened` + "\n"},
		{full, true, `trigger "</think>"` + "\n"},
		{full, false, `block "<think>" "</think>"` + "\n"},
		{spelled, false, ""}, // the grammar writes the block itself
	} {
		got, err := reasoningFirst(c.in, tags, c.opens)
		if err != nil {
			t.Fatal(err)
		}
		if c.want == "" && got.String() != c.in.String() || c.want != "" && !strings.Contains(got.String(), c.want) {
			t.Errorf("opens %v: %s", c.opens, got.String())
		}
	}
	// A budget: alone on the free grammar, on a lazy one, and on a
	// grammar held from the block's end.
	for _, c := range []struct {
		in   *grammar.Grammar
		want string
	}{
		{nil, "free\nblock \"<think>\" \"</think>\"\nbudget 3\n"},
		{lazy, "block \"<think>\" \"</think>\"\nbudget 3\n"},
		{full, "block \"<think>\" \"</think>\"\nbudget 3\n"},
	} {
		got, err := budgeted(c.in, tags, false, 3)
		if err != nil || !strings.Contains(got.String(), c.want) {
			t.Errorf("budgeted %v: %v\n%s", c.in, err, got)
		}
	}
}

// TestThinkingBudget: Anthropic's thinking budget on a model whose prompt
// opens the block (R1's template on the fixture): greedy, the thinking is
// the first budget_tokens tokens of what the model reasons unbounded,
// then the block is closed for it and it answers; the budget is in the
// request's identity (a replay under another budget is another serve);
// a model that does not reason refuses it.
func TestThinkingBudget(t *testing.T) {
	r1 := templateModel(t, "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "r1-fixture")
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{Models: []string{r1, fortunesModel}})

	// The unbounded reply's tokens, as the model writes them.
	var raw struct {
		Choices []struct {
			Logprobs struct {
				Content []struct {
					Token string `json:"token"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	postJSON(t, n, "/v1/chat/completions", `{"model":"r1-fixture","max_tokens":12,"reasoning_format":"none","logprobs":true,"messages":[{"role":"user","content":"hi"}]}`, &raw)
	toks := raw.Choices[0].Logprobs.Content
	if len(toks) < 4 {
		t.Fatalf("the unbounded reply has %d tokens", len(toks))
	}
	const budget = 3
	var first strings.Builder
	for _, tk := range toks[:budget] {
		first.WriteString(tk.Token)
	}

	body := fmt.Sprintf(`{"model":"r1-fixture","max_tokens":24,"thinking":{"type":"enabled","budget_tokens":%d},"messages":[{"role":"user","content":"hi"}]}`, budget)
	var msg struct {
		Content []struct {
			Type     string `json:"type"`
			Thinking string `json:"thinking"`
			Text     string `json:"text"`
		} `json:"content"`
		Usage struct {
			OutputTokens int             `json:"output_tokens"`
			Energy       json.RawMessage `json:"energy"`
		} `json:"usage"`
	}
	postJSON(t, n, "/v1/messages", body, &msg)
	if len(msg.Content) == 0 || msg.Content[0].Type != "thinking" || msg.Content[0].Thinking != strings.TrimSpace(first.String()) {
		t.Fatalf("budgeted thinking %+v, want the unbounded reply's first %d tokens %q", msg.Content, budget, first.String())
	}
	if msg.Usage.OutputTokens <= budget+1 {
		t.Errorf("the reply ended with its thinking (%d tokens): the model should answer after the closed block", msg.Usage.OutputTokens)
	}
	if _, res, raw := replayRaw(t, n, `{"endpoint":"/v1/messages","request":`+body+`,"energy":`+string(msg.Usage.Energy)+`}`); res.Verdict != api.VerdictVerified {
		t.Errorf("replay: %s", raw)
	}
	other := strings.Replace(body, `"budget_tokens":3`, `"budget_tokens":4`, 1)
	if _, res, raw := replayRaw(t, n, `{"endpoint":"/v1/messages","request":`+other+`,"energy":`+string(msg.Usage.Energy)+`}`); res.Verdict == api.VerdictVerified {
		t.Errorf("a replay under another budget verified: %s", raw)
	}
	resp := post(t, n, "/v1/messages", strings.Replace(body, "r1-fixture", fortunesModel, 1))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "does not reason") {
		t.Errorf("a budget on a model that does not reason: %d %s", resp.StatusCode, b)
	}

	// llama-server's thinking_budget_tokens on chat completions (what
	// Continue sends) bounds it alike: the same reasoning, then an answer.
	var chat thinkingAnswer
	chatBody := fmt.Sprintf(`{"model":"r1-fixture","max_tokens":24,"thinking_budget_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`, budget)
	postJSON(t, n, "/v1/chat/completions", chatBody, &chat)
	if m := chat.Choices[0].Message; m.ReasoningContent == nil || *m.ReasoningContent != msg.Content[0].Thinking || chat.Usage.CompletionTokens != msg.Usage.OutputTokens {
		t.Errorf("thinking_budget_tokens %d: %+v; the messages API thought %q", budget, chat, msg.Content[0].Thinking)
	}
}

// TestHarmonyThinkingBudget: on a harmony model (gpt-oss) a thinking
// budget bounds the reply's analysis message: the request's grammar is
// the budget on that block, named in its identity, and the serve
// replays (only under its budget).
func TestHarmonyThinkingBudget(t *testing.T) {
	path := harmonyModelPath(t)
	n, _ := startNode(t, Config{Models: []string{path}})
	name := strings.TrimSuffix(filepath.Base(path), ".gguf")
	sm, ok := (&registry{n: n}).served(name)
	if !ok {
		t.Fatal("the harmony fixture is not served")
	}
	g := &api.Generation{Model: name, Messages: []api.Message{{Role: "user", Content: "hi"}}, MaxTokens: 16, ThinkBudget: 5}
	if _, _, _, err := sm.prepare(g); err != nil {
		t.Fatal(err)
	}
	if s := g.Grammar.String(); !strings.Contains(s, "free\n") || !strings.Contains(s, `block "<|channel|>analysis<|message|>" "<|end|>"`) || !strings.Contains(s, "budget 5\n") {
		t.Fatalf("the budget's grammar:\n%s", s)
	}

	body := `{"model":"` + name + `","max_tokens":16,"thinking":{"type":"enabled","budget_tokens":5},"messages":[{"role":"user","content":"hi"}]}`
	var msg struct {
		Usage struct {
			Energy json.RawMessage `json:"energy"`
		} `json:"usage"`
	}
	postJSON(t, n, "/v1/messages", body, &msg)
	if _, res, raw := replayRaw(t, n, `{"endpoint":"/v1/messages","request":`+body+`,"energy":`+string(msg.Usage.Energy)+`}`); res.Verdict != api.VerdictVerified {
		t.Errorf("replay: %s", raw)
	}
	other := strings.Replace(body, `"budget_tokens":5`, `"budget_tokens":6`, 1)
	if _, res, raw := replayRaw(t, n, `{"endpoint":"/v1/messages","request":`+other+`,"energy":`+string(msg.Usage.Energy)+`}`); res.Verdict == api.VerdictVerified {
		t.Errorf("a replay under another budget verified: %s", raw)
	}
}

// TestThinkingHeldGrammar: a model that opens its own block (Qwen3's
// template on the fixture), under a grammar that holds its answer from
// the first byte (Anthropic's tool_choice "any": a call, held to its
// tool's schema), reasons first: its block, bounded by a thinking budget,
// then the call, valid. The block before the grammar is in the request's
// identity, so the serve replays. With thinking off (the template writes
// the block empty), the grammar holds from the first byte, as it did.
func TestThinkingHeldGrammar(t *testing.T) {
	qwen := templateModel(t, "Qwen-Qwen3-0.6B.jinja", "qwen3-fixture")
	n, _ := startNode(t, Config{Models: []string{qwen}})
	const tools = `"tool_choice":{"type":"any"},"tools":[{"name":"get_weather","input_schema":{"type":"object",` +
		`"properties":{"city":{"type":"string","enum":["Paris","Oslo"]}},"required":["city"]}}],"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		thinking string
		reasons  bool
	}{
		{`{"type":"enabled","budget_tokens":3}`, true},
		{`{"type":"disabled"}`, false},
	} {
		body := `{"model":"qwen3-fixture","max_tokens":200,"thinking":` + tc.thinking + `,` + tools
		var msg struct {
			Content []struct {
				Type     string            `json:"type"`
				Thinking string            `json:"thinking"`
				Name     string            `json:"name"`
				Input    map[string]string `json:"input"`
			} `json:"content"`
			StopReason string `json:"stop_reason"`
			Usage      struct {
				Energy json.RawMessage `json:"energy"`
			} `json:"usage"`
		}
		postJSON(t, n, "/v1/messages", body, &msg)
		var thought, city string
		for _, c := range msg.Content {
			switch c.Type {
			case "thinking":
				thought = c.Thinking
			case "tool_use":
				city = c.Input["city"]
			}
		}
		if (thought != "") != tc.reasons || city != "Paris" && city != "Oslo" || msg.StopReason != "tool_use" {
			t.Fatalf("thinking %s: %+v", tc.thinking, msg)
		}
		replay := `{"endpoint":"/v1/messages","request":` + body + `,"energy":` + string(msg.Usage.Energy) + `}`
		if _, res, raw := replayRaw(t, n, replay); res.Verdict != api.VerdictVerified {
			t.Fatalf("thinking %s: replay %s", tc.thinking, raw)
		}
	}
}
