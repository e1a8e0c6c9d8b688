package node

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/grammar/grammartest"
	"github.com/meshnode/meshnode/node/api"
)

// messagesAnswer is a /v1/messages answer, its content text blocks'.
type messagesAnswer struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StopReason   string  `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        struct {
		InputTokens  int             `json:"input_tokens"`
		OutputTokens int             `json:"output_tokens"`
		Energy       json.RawMessage `json:"energy"`
	} `json:"usage"`
}

func (a messagesAnswer) text() string {
	var b strings.Builder
	for _, c := range a.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

// TestMessagesServe: the built-in model served through Anthropic's
// Messages API says what it says through chat completions for the same
// conversation, on the same prompt tokens (which count_tokens counts),
// streamed or not; its receipt replays; a stop sequence ends it and is
// named; a final assistant message is continued, not repeated, and its
// replay needs the endpoint named, since chat completions read the same
// body as a finished turn.
func TestMessagesServe(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	const conv = `"messages":[{"role":"user","content":"A man walks into a bar"}]`

	var chat struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	postJSON(t, n, "/v1/chat/completions", `{"model":"`+fortunesModel+`","max_tokens":12,`+conv+`}`, &chat)
	want := chat.Choices[0].Message.Content

	body := `{"model":"` + fortunesModel + `","max_tokens":12,` + conv + `}`
	var got messagesAnswer
	postJSON(t, n, "/v1/messages", body, &got)
	if got.text() != want || len(got.Content) != 1 || got.Content[0].Type != "text" || got.StopReason != "max_tokens" ||
		got.Usage.InputTokens != chat.Usage.PromptTokens || got.Usage.OutputTokens != 12 {
		t.Fatalf("messages answered %+v; chat %q on %d prompt tokens", got, want, chat.Usage.PromptTokens)
	}
	var count struct {
		InputTokens int `json:"input_tokens"`
	}
	postJSON(t, n, "/v1/messages/count_tokens", `{"model":"`+fortunesModel+`",`+conv+`}`, &count)
	if count.InputTokens != got.Usage.InputTokens {
		t.Fatalf("count_tokens %d, served on %d", count.InputTokens, got.Usage.InputTokens)
	}
	if _, res, raw := replayRaw(t, n, `{"request":`+body+`,"energy":`+string(got.Usage.Energy)+`}`); res.Verdict != api.VerdictVerified {
		t.Fatalf("replay: %s", raw)
	}

	// Streamed: the same text, the usage in message_delta.
	resp := post(t, n, "/v1/messages", `{"model":"`+fortunesModel+`","max_tokens":12,"stream":true,`+conv+`}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var streamed strings.Builder
	var stop string
	for line := range strings.Lines(string(b)) {
		data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type  string `json:"type"`
			Delta struct {
				Text       string `json:"text"`
				StopReason string `json:"stop_reason"`
			} `json:"delta"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("%v: %s", err, data)
		}
		streamed.WriteString(ev.Delta.Text)
		if ev.Type == "message_delta" {
			stop = ev.Delta.StopReason
		}
	}
	if resp.StatusCode != http.StatusOK || streamed.String() != want || stop != "max_tokens" {
		t.Fatalf("streamed %d %q (stop %q), want %q:\n%s", resp.StatusCode, streamed.String(), stop, want, b)
	}

	// A stop sequence: the text up to it, and which one.
	cut := strings.Index(want[1:], " ") + 1 // the first word's end
	if cut <= 0 {
		t.Fatalf("no word break in %q", want)
	}
	seq := want[cut : cut+2]
	postJSON(t, n, "/v1/messages", `{"model":"`+fortunesModel+`","max_tokens":12,"stop_sequences":["zzz",`+jsonString(seq)+`],`+conv+`}`, &got)
	if got.text() != want[:strings.Index(want, seq)] || got.StopReason != "stop_sequence" || got.StopSequence == nil || *got.StopSequence != seq {
		t.Fatalf("stopped at %q: %+v", seq, got)
	}

	// A prefill: the model continues the reply's first words.
	prefill := want[:cut]
	pbody := `{"model":"` + fortunesModel + `","max_tokens":8,"messages":[{"role":"user","content":"A man walks into a bar"},{"role":"assistant","content":` + jsonString(prefill) + `}]}`
	postJSON(t, n, "/v1/messages", pbody, &got)
	if cont := got.text(); !strings.HasPrefix(want, prefill+cont) && !strings.HasPrefix(prefill+cont, want) || cont == "" {
		t.Fatalf("prefill %q continued with %q; the plain answer is %q", prefill, cont, want)
	}
	energy := string(got.Usage.Energy)
	if _, res, raw := replayRaw(t, n, `{"request":`+pbody+`,"energy":`+energy+`,"endpoint":"/v1/messages"}`); res.Verdict != api.VerdictVerified {
		t.Fatalf("prefill replay: %s", raw)
	}
	if _, res, raw := replayRaw(t, n, `{"request":`+pbody+`,"energy":`+energy+`}`); res.Verdict != api.VerdictNotReplayable {
		t.Fatalf("prefill replayed as a chat completion: %s", raw)
	}
}

// TestStructuredOutputsAcrossAPIs: a JSON Schema held to the output
// through Anthropic's output_config.format and Ollama's format gives the
// answer response_format gives on chat completions: the same grammar,
// the same tokens.
func TestStructuredOutputsAcrossAPIs(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	const schema = `{"type":"object","properties":{"answer":{"type":"string","maxLength":10},"sure":{"type":"boolean"}},"required":["answer","sure"],"additionalProperties":false}`
	conv := `"messages":[{"role":"user","content":"Is it true?"}]`
	want, _ := generate(t, n, "/v1/chat/completions", `{"model":"`+fortunesModel+`","max_tokens":200,`+conv+
		`,"response_format":{"type":"json_schema","json_schema":{"name":"v","schema":`+schema+`}}}`)
	if err := grammartest.Validate([]byte(schema), []byte(want)); err != nil {
		t.Fatalf("chat answer %q: %v", want, err)
	}
	var msg messagesAnswer
	postJSON(t, n, "/v1/messages", `{"model":"`+fortunesModel+`","max_tokens":200,`+conv+`,"output_config":{"format":{"type":"json_schema","schema":`+schema+`}}}`, &msg)
	var ollama struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
	}
	postJSON(t, n, "/api/chat", `{"model":"`+fortunesModel+`","stream":false,"options":{"num_predict":200},`+conv+`,"format":`+schema+`}`, &ollama)
	if msg.text() != want || ollama.Message.Content != want {
		t.Fatalf("messages %q, ollama %q; chat completions %q", msg.text(), ollama.Message.Content, want)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestReasoningEffort: a reasoning effort reaches a chat template that
// reads one (gpt-oss's, on a fixture model) through each API's field —
// chat completions' reasoning_effort, the Responses API's
// reasoning.effort, Ollama's think level, Anthropic's
// output_config.effort — and a serve with it replays; a model whose
// template reads none (the built-in one) refuses it rather than ignore it.
func TestReasoningEffort(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "gguf", "chat", "testdata", "templates", "gpt-oss.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	path := hostileTemplateModel(t, string(src))
	n, _ := startNode(t, Config{Models: []string{path, fortunesModel}})
	name := strings.TrimSuffix(filepath.Base(path), ".gguf")
	var rendered struct {
		Prompt string `json:"prompt"`
	}
	for effort, want := range map[string]string{"": "Reasoning: medium", `,"reasoning_effort":"low"`: "Reasoning: low", `,"reasoning_effort":"high"`: "Reasoning: high"} {
		postJSON(t, n, "/apply-template", `{"model":"`+name+`","messages":[{"role":"user","content":"hi"}]`+effort+`}`, &rendered)
		if !strings.Contains(rendered.Prompt, want) {
			t.Errorf("effort %q: rendered %q", effort, rendered.Prompt)
		}
	}
	// Each API's field, served: the prompt the template wrote for it
	// is what the serve was given, so the receipts differ by prompt.
	chat := `{"model":"` + name + `","max_tokens":4,"reasoning_effort":"high","messages":[{"role":"user","content":"hi"}]}`
	_, energy := generate(t, n, "/v1/chat/completions", chat)
	if _, res, raw := replayRaw(t, n, `{"request":`+chat+`,"energy":`+string(energy)+`}`); res.Verdict != api.VerdictVerified {
		t.Fatalf("replay: %s", raw)
	}
	for _, tc := range []struct{ path, body string }{
		{"/v1/responses", `{"model":"` + name + `","max_output_tokens":4,"reasoning":{"effort":"high"},"input":"hi"}`},
		{"/v1/messages", `{"model":"` + name + `","max_tokens":4,"output_config":{"effort":"high"},"messages":[{"role":"user","content":"hi"}]}`},
	} {
		resp := post(t, n, tc.path, tc.body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"prompt_hash"`) && !strings.Contains(string(b), `"energy"`) {
			t.Errorf("%s: %d %s", tc.path, resp.StatusCode, b)
		}
	}
	// The built-in model's template reads no effort.
	resp := post(t, n, "/v1/chat/completions", `{"model":"`+fortunesModel+`","max_tokens":4,"reasoning_effort":"low","messages":[{"role":"user","content":"hi"}]}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "takes no reasoning effort") {
		t.Errorf("the built-in model: %d %s", resp.StatusCode, b)
	}
}
