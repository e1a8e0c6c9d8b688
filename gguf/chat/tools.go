package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/meshnode/meshnode/gguf/chat/jinja"
)

// ToolCall is one function call an assistant message made, as OpenAI
// carries it: Arguments is the JSON text of the arguments object.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Input is one render: the conversation, the tools the model may call and
// whether to open the assistant's turn.
type Input struct {
	Messages []Message
	// Tools are OpenAI tool definitions, each the JSON object the client
	// sent ({"type": "function", "function": {"name", "description",
	// "parameters"}}). They reach the template as `tools`, key order
	// kept, so that tojson renders them as Hugging Face does.
	Tools               []json.RawMessage
	AddGenerationPrompt bool
	// Generic renders tools and tool turns with the generic polyfill even
	// when the template takes tools: for a template whose call format
	// the caller cannot read back (toolcall.Detect is Generic).
	Generic bool
	// ReasoningEffort, when set, is the template's reasoning_effort
	// (gpt-oss's: "low", "medium" or "high"); a template that reads none
	// refuses it (TakesReasoningEffort).
	ReasoningEffort string
	// Thinking, when set, is the template's enable_thinking: whether a
	// model that reasons before it answers (Qwen3, SmolLM3, GLM-4.5 …)
	// should; a template that reads none refuses it
	// (TakesThinkingSwitch). Unset, the template's default holds.
	Thinking *bool
}

// TakesReasoningEffort reports whether the template reads a
// reasoning_effort (gpt-oss's writes it into its system message).
func (t *Template) TakesReasoningEffort() bool {
	return t.jinja != nil && strings.Contains(t.src, "reasoning_effort")
}

// ErrNoReasoningEffort: the template reads no reasoning effort.
var ErrNoReasoningEffort = errors.New("the model's chat template takes no reasoning effort")

// TakesThinkingSwitch reports whether the template reads an
// enable_thinking (Qwen3's writes an empty reasoning block into the
// generation prompt when it is false).
func (t *Template) TakesThinkingSwitch() bool {
	return t.jinja != nil && strings.Contains(t.src, "enable_thinking")
}

// ErrNoThinkingSwitch: the template reads no enable_thinking.
var ErrNoThinkingSwitch = errors.New("the model's chat template has no thinking switch (enable_thinking)")

// TakesTools reports whether the template renders tools itself: its
// source refers to `tools` (Llama 3.x, Qwen2.5/3, Hermes, Mistral, ...).
// Other templates, and the built-in formats, get the generic polyfill
// (see Render).
func (t *Template) TakesTools() bool {
	return t.jinja != nil && strings.Contains(t.src, "tools")
}

// Render renders in. A template that takes tools gets them as `tools`
// (None when there are none, as transformers passes them), and assistant
// tool calls as `tool_calls` with arguments as objects (what
// Llama 3.x's, Qwen2.5's and Mistral's templates pass to tojson);
// arguments that are not a JSON object stay the string they were.
//
// A template that does not take tools (or any, with Input.Generic)
// renders them the generic way llama.cpp polyfills them: the tools and the expected answer shape in
// the system message, an assistant's calls as a JSON {"tool_calls": [...]}
// content, and tool results as user messages holding a JSON
// {"tool_response": ...}. toolcall.Generic parses that shape back.
func (t *Template) Render(in Input) (string, error) {
	msgs := in.Messages
	if (!t.TakesTools() || in.Generic) && (len(in.Tools) > 0 || hasToolTurns(msgs)) {
		var err error
		if msgs, err = polyfill(msgs, in.Tools); err != nil {
			return "", err
		}
		in.Tools = nil
	}
	vars := map[string]jinja.Value{}
	if in.ReasoningEffort != "" {
		if !t.TakesReasoningEffort() {
			return "", ErrNoReasoningEffort
		}
		vars["reasoning_effort"] = jinja.NewString(in.ReasoningEffort)
	}
	if in.Thinking != nil {
		if !t.TakesThinkingSwitch() {
			return "", ErrNoThinkingSwitch
		}
		vars["enable_thinking"] = jinja.NewBool(*in.Thinking)
	}
	var out string
	if t.jinja == nil {
		out = t.builtin(msgs, in.AddGenerationPrompt)
	} else {
		var err error
		if out, err = t.render(msgs, in.Tools, in.AddGenerationPrompt, vars); err != nil {
			return "", err
		}
	}
	if t.opt.StripBOS && t.opt.BOS != "" {
		out = strings.TrimPrefix(out, t.opt.BOS)
	}
	if t.opt.StripEOS && t.opt.EOS != "" {
		out = strings.TrimSuffix(out, t.opt.EOS)
	}
	return out, nil
}

func hasToolTurns(msgs []Message) bool {
	for _, m := range msgs {
		if len(m.ToolCalls) > 0 || m.Role == "tool" {
			return true
		}
	}
	return false
}

// messageValue is m as transformers hands a message dict to a template:
// role and content, then tool_calls, tool_call_id and name only when set
// (Llama 3.x's template tests `'tool_calls' in message`).
func messageValue(m Message) jinja.Value {
	v := jinja.NewDict()
	d := v.AsDict()
	d.Set("role", jinja.NewString(m.Role))
	d.Set("content", jinja.NewString(m.Content))
	if m.Reasoning != "" {
		d.Set("reasoning_content", jinja.NewString(m.Reasoning))
		d.Set("thinking", jinja.NewString(m.Reasoning))
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]jinja.Value, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			fn := jinja.NewDict()
			fn.AsDict().Set("name", jinja.NewString(c.Name))
			fn.AsDict().Set("arguments", argumentsValue(c.Arguments))
			call := jinja.NewDict()
			call.AsDict().Set("id", jinja.NewString(c.ID))
			call.AsDict().Set("type", jinja.NewString("function"))
			call.AsDict().Set("function", fn)
			calls[i] = call
		}
		d.Set("tool_calls", jinja.NewList(calls))
	}
	if m.ToolCallID != "" {
		d.Set("tool_call_id", jinja.NewString(m.ToolCallID))
	}
	if m.Name != "" {
		d.Set("name", jinja.NewString(m.Name))
	}
	return v
}

// argumentsValue is a call's arguments as an object when they are a JSON
// object, else the text as given.
func argumentsValue(args string) jinja.Value {
	trimmed := strings.TrimSpace(args)
	if strings.HasPrefix(trimmed, "{") {
		if v, err := JSONValue([]byte(trimmed)); err == nil {
			return v
		}
	}
	return jinja.NewString(args)
}

// maxJSONDepth bounds the nesting JSONValue accepts: it recurses once per
// level, and tools and arguments come from clients.
const maxJSONDepth = 128

// JSONValue decodes one JSON value into a Jinja value, keeping the order
// of object keys (Python's dicts do, and tojson must print a tool's schema
// as the client wrote it). Integers stay integers, as json.loads keeps
// them.
func JSONValue(b []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Undefined(), errors.New("chat: JSON value followed by more data")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxJSONDepth {
		return jinja.Undefined(), fmt.Errorf("chat: JSON nested deeper than %d", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("chat: JSON: %w", err)
	}
	switch tok := tok.(type) {
	case json.Delim:
		switch tok {
		case '{':
			v := jinja.NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), fmt.Errorf("chat: JSON: %w", err)
				}
				val, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				v.AsDict().Set(k.(string), val)
			}
			_, err := dec.Token() // '}'
			return v, err
		case '[':
			var items []jinja.Value
			for dec.More() {
				val, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, val)
			}
			_, err := dec.Token() // ']'
			return jinja.NewList(items), err
		}
		return jinja.Undefined(), fmt.Errorf("chat: JSON: unexpected %v", tok)
	case json.Number:
		if !strings.ContainsAny(string(tok), ".eE") {
			// An integer, past int64 too: json.loads keeps every digit,
			// and tojson prints them back; up to the engine's bound on
			// an integer's size (tens of thousands of digits).
			if v := jinja.FromGoValue(tok); v.IsInt() {
				return v, nil
			}
			return jinja.Undefined(), fmt.Errorf("chat: JSON integer of %d digits is out of range", len(tok))
		}
		// Past float64's range a number has no value a template could
		// print back as JSON (Python would give Infinity, which is not
		// JSON), so it is refused rather than turned into a string.
		f, err := tok.Float64()
		if err != nil {
			return jinja.Undefined(), fmt.Errorf("chat: JSON number %s is out of range", tok)
		}
		return jinja.FromGoValue(f), nil
	case string:
		return jinja.NewString(tok), nil
	case bool:
		return jinja.NewBool(tok), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Undefined(), fmt.Errorf("chat: JSON: unexpected token %v", tok)
}

// GenericToolPrompt is the system text the generic polyfill adds: the
// tools' JSON definitions follow it, and toolcall.Generic parses the
// answer it asks for.
const GenericToolPrompt = "You can call the following tools. To call one or more of them, answer with only a JSON object " +
	"{\"tool_calls\": [{\"name\": <tool name>, \"arguments\": <arguments as a JSON object>}]} and nothing else; " +
	"the results come back in a {\"tool_response\": ...} message. Otherwise answer the user directly.\n\nTools:\n"

// polyfill rewrites a conversation with tools for a template that has no
// notion of them (see Render).
func polyfill(msgs []Message, tools []json.RawMessage) ([]Message, error) {
	out := make([]Message, 0, len(msgs)+1)
	if len(tools) > 0 {
		var b strings.Builder
		b.WriteString(GenericToolPrompt)
		for _, tool := range tools {
			var c bytes.Buffer
			if err := json.Compact(&c, tool); err != nil {
				return nil, fmt.Errorf("chat: a tool is not valid JSON: %w", err)
			}
			b.Write(c.Bytes())
			b.WriteByte('\n')
		}
		text := strings.TrimSuffix(b.String(), "\n")
		if len(msgs) > 0 && msgs[0].Role == "system" {
			sys := msgs[0]
			sys.Content += "\n\n" + text
			out = append(out, sys)
			msgs = msgs[1:]
		} else {
			out = append(out, Message{Role: "system", Content: text})
		}
	}
	for _, m := range msgs {
		switch {
		case len(m.ToolCalls) > 0:
			type call struct {
				Name      string `json:"name"`
				Arguments any    `json:"arguments"`
				ID        string `json:"id,omitempty"`
			}
			calls := make([]call, len(m.ToolCalls))
			for i, c := range m.ToolCalls {
				var args any = c.Arguments
				if json.Valid([]byte(c.Arguments)) {
					args = json.RawMessage(c.Arguments)
				}
				calls[i] = call{Name: c.Name, Arguments: args, ID: c.ID}
			}
			b, err := marshalPlain(map[string]any{"tool_calls": calls})
			if err != nil {
				return nil, err
			}
			content := string(b)
			if m.Content != "" {
				content = m.Content + "\n" + content
			}
			out = append(out, Message{Role: m.Role, Content: content})
		case m.Role == "tool":
			type response struct {
				ToolCallID string `json:"tool_call_id,omitempty"`
				Name       string `json:"name,omitempty"`
				Content    string `json:"content"`
			}
			b, err := marshalPlain(map[string]any{"tool_response": response{m.ToolCallID, m.Name, m.Content}})
			if err != nil {
				return nil, err
			}
			out = append(out, Message{Role: "user", Content: string(b)})
		default:
			out = append(out, m)
		}
	}
	return out, nil
}

// marshalPlain is json.Marshal without HTML escaping (a model reads it).
func marshalPlain(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("chat: %w", err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
