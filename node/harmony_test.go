package node

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/chat/harmony"
	"github.com/meshnode/meshnode/gguf/grammar/grammartest"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/tokenizer"
)

// harmonyVocab is the llama-bpe vocabulary with reserved control tokens
// renamed to harmony's markers, as o200k_harmony names its own.
func harmonyVocab(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	v, err := tokenizer.VocabFromGGUF(testVocabFile(t, "llama-bpe").Metadata)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range harmony.Markers {
		v.Tokens[128020+i] = m // <|reserved_special_token_15|> …: control tokens
	}
	tok, err := tokenizer.New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestHarmonyDecoder: a harmony vocabulary is recognised, and its replies
// decode with the channel markers written out, so that the API can split
// them: the tokenizer makes them user-defined tokens, as llama.cpp does
// (another vocabulary's control tokens decode to nothing); <|end|> does
// not end the generation (the analysis message ends with it), <|return|>
// does.
func TestHarmonyDecoder(t *testing.T) {
	tok := harmonyVocab(t)
	if !isHarmony(tok) || isHarmony(llamaVocab(t)) {
		t.Fatalf("isHarmony: harmony vocabulary %v, llama's %v", isHarmony(tok), isHarmony(llamaVocab(t)))
	}
	end, _ := tok.Lookup("<|end|>")
	ret, _ := tok.Lookup("<|return|>")
	if tok.IsEOG(end) || !tok.IsEOG(ret) {
		t.Errorf("end-of-generation: <|end|> %v, <|return|> %v; want false, true", tok.IsEOG(end), tok.IsEOG(ret))
	}
	const reply = "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Done."
	ids := tok.Encode(reply, tokenizer.EncodeOptions{ParseSpecial: true})
	decode := func(d decoder) string {
		var b strings.Builder
		for _, id := range ids {
			b.WriteString(d.Next(id))
		}
		b.WriteString(d.Flush())
		return b.String()
	}
	text := decode(newTokenDecoder(tok))
	if text != reply {
		t.Fatalf("decoded %q, want %q", text, reply)
	}
	if r, c := harmony.Split(text); r != "Think." || c != "Done." {
		t.Errorf("split %q / %q", r, c)
	}
	llama := llamaVocab(t)
	ids = llama.Encode("<|reserved_special_token_5|>x", tokenizer.EncodeOptions{ParseSpecial: true})
	if plain := decode(newTokenDecoder(llama)); plain != "x" {
		t.Errorf("another vocabulary's control token decodes to %q", plain)
	}
}

// harmonyModelPath writes the gpt-oss random-weight fixture with a
// harmony vocabulary (modeltest.HarmonyVocab over the built-in model's)
// and returns its path.
func harmonyModelPath(t *testing.T) string {
	t.Helper()
	p, err := modeltest.WriteHarmonyFixture(t.TempDir(), fortunesPath(t), harmony.Markers)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHarmonyServed: a node serving the gpt-oss fixture with a harmony
// vocabulary, end to end. A forced tool_choice holds the output to the
// harmony call grammar: each reply is 200, no content, and either a call
// of the named tool whose arguments meet its schema, decoded and parsed
// from the served text, or reasoning cut off by max_tokens. logprobs
// list the content's tokens, whose bytes spell the content; /v1/responses
// gives the same reply as reasoning and message items.
func TestHarmonyServed(t *testing.T) {
	path := harmonyModelPath(t)
	n, _ := startNode(t, Config{Models: []string{path}})
	name := strings.TrimSuffix(filepath.Base(path), ".gguf")

	const schema = `{"type":"object","properties":{"city":{"type":"string","maxLength":6},"metric":{"type":"boolean"}},"required":["city"],"additionalProperties":false}`
	calls := 0
	for seed := range 12 {
		var got struct {
			Choices []struct {
				Message struct {
					Content   *string `json:"content"`
					ToolCalls []struct {
						Function struct{ Name, Arguments string } `json:"function"`
					} `json:"tool_calls"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		postJSON(t, n, "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"temperature":1.5,"seed":%d,"max_tokens":96,
			"tool_choice":{"type":"function","function":{"name":"get_weather"}},
			"tools":[{"type":"function","function":{"name":"get_weather","parameters":%s}},{"type":"function","function":{"name":"now"}}],
			"messages":[{"role":"user","content":"Weather in Oslo?"}]}`, name, seed, schema), &got)
		c := got.Choices[0]
		switch c.FinishReason {
		case "tool_calls":
			calls++
			if len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Name != "get_weather" || c.Message.Content != nil {
				t.Fatalf("seed %d: %+v", seed, c)
			}
			if err := grammartest.Validate([]byte(schema), []byte(c.Message.ToolCalls[0].Function.Arguments)); err != nil {
				t.Fatalf("seed %d: arguments %q: %v", seed, c.Message.ToolCalls[0].Function.Arguments, err)
			}
		case "length":
			if len(c.Message.ToolCalls) != 0 || c.Message.Content == nil || *c.Message.Content != "" {
				t.Fatalf("seed %d: cut off with %+v", seed, c)
			}
		default:
			t.Fatalf("seed %d: finish_reason %q", seed, c.FinishReason)
		}
	}
	if calls == 0 {
		t.Fatal("no forced reply of 12 seeds ended with its call within 96 tokens")
	}

	var chat struct {
		Choices []struct {
			Message struct {
				Content          string `json:"content"`
				ReasoningContent string `json:"reasoning_content"`
			} `json:"message"`
			Logprobs struct {
				Content []struct {
					Bytes []byte `json:"bytes"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	const ask = `"seed":3,"temperature":0.8`
	postJSON(t, n, "/v1/chat/completions", `{"model":"`+name+`",`+ask+`,"max_tokens":32,"logprobs":true,"messages":[{"role":"user","content":"hi"}]}`, &chat)
	ch := chat.Choices[0]
	var spelled []byte
	for _, tok := range ch.Logprobs.Content {
		spelled = append(spelled, tok.Bytes...)
	}
	t.Logf("%d forced calls; reply: reasoning %q, content %q, %d content tokens", calls, ch.Message.ReasoningContent, ch.Message.Content, len(ch.Logprobs.Content))
	if string(spelled) != ch.Message.Content {
		t.Errorf("logprobs spell %q, the content is %q", spelled, ch.Message.Content)
	}

	var resp struct {
		Output []struct {
			Type    string `json:"type"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"output"`
	}
	postJSON(t, n, "/v1/responses", `{"model":"`+name+`",`+ask+`,"max_output_tokens":32,"input":"hi"}`, &resp)
	var reasoning, content string
	for _, o := range resp.Output {
		switch o.Type {
		case "reasoning":
			reasoning += o.Content[0].Text
		case "message":
			content += o.Content[0].Text
		}
	}
	if last := resp.Output[len(resp.Output)-1]; last.Type != "message" || reasoning != ch.Message.ReasoningContent || content != ch.Message.Content {
		t.Errorf("responses: %+v; chat's reasoning %q, content %q", resp.Output, ch.Message.ReasoningContent, ch.Message.Content)
	}
}
