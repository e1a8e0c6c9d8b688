package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"

	"github.com/meshnode/meshnode/gguf/chat/toolcall"
	"github.com/meshnode/meshnode/gguf/grammar"
)

// Tool calls (OpenAI's tools, tool_choice and parallel_tool_calls): the
// tools are rendered by the model's chat template, and its output is
// parsed for calls in the format the template taught it (package
// toolcall).

// maxTools bounds a request's tools, as OpenAI does.
const maxTools = 128

// toolName is OpenAI's pattern for a function name.
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// toolChoice is a request's tool_choice, resolved.
type toolChoice struct {
	mode     string // "none", "auto", "required" or "function"
	name     string // the function, for mode "function"
	parallel bool   // parallel_tool_calls (default true)
}

// active says the output is parsed for calls.
func (c toolChoice) active() bool { return c.mode != "none" }

// parseTools validates tools, tool_choice and parallel_tool_calls and
// sets g.Tools. Without tools, the choice is "none".
func (req *chatRequest) parseTools(g *Generation) (toolChoice, error) {
	choice := toolChoice{mode: "none", parallel: true}
	var tools []json.RawMessage
	if !isAbsent(req.Tools) {
		if err := json.Unmarshal(req.Tools, &tools); err != nil {
			return choice, badRequest("tools", "tools must be an array of tool objects")
		}
		if len(tools) > maxTools {
			return choice, badRequest("tools", "tools holds %d tools; at most %d are allowed", len(tools), maxTools)
		}
	}
	names := map[string]bool{}
	for i, raw := range tools {
		name, err := checkTool(raw, i)
		if err != nil {
			return choice, err
		}
		if names[name] {
			return choice, badRequest(fmt.Sprintf("tools[%d].function.name", i), "tools[%d]: function %q is defined twice", i, name)
		}
		names[name] = true
	}
	if req.ParallelToolCalls != nil {
		// Without tools it asks nothing.
		choice.parallel = *req.ParallelToolCalls
	}
	mode, name, err := parseToolChoice(req.ToolChoice)
	if err != nil {
		return choice, err
	}
	switch {
	case len(tools) == 0:
		if mode == "required" || mode == "function" {
			return choice, badRequest("tool_choice", "tool_choice %q needs tools; the request has none", mode)
		}
		return choice, nil
	case mode == "":
		mode = "auto"
	case mode == "function" && !names[name]:
		return choice, badRequest("tool_choice", "tool_choice names function %q, which is not among the request's tools", name)
	}
	choice.mode, choice.name = mode, name
	if mode != "none" {
		g.Tools = tools
		g.ToolChoice, g.ToolName, g.ParallelToolCalls = mode, name, choice.parallel
	}
	return choice, nil
}

// forceTools holds g's calls to their tools' schemas, by a grammar over
// the model's call format f (package toolcall): under a tool_choice that
// requires a call ("required", or a named function) the whole output is
// calls, every tool's arguments held to its schema (toolcall.Grammar).
// Under "auto" with a response format, the output is content in that
// format or calls (toolcall.ContentOrCalls); else, where a tool is
// strict, the output is free until the model opens a call, and the call
// is held from there (toolcall.LazyGrammar, a lazy grammar). Under
// "auto" the strict tools' arguments are held to their schemas and the
// others' to any JSON object. It returns the text to feed the parser
// before the output (a control token a forced grammar cannot make the
// model write).
func forceTools(g *Generation, f toolcall.Format) (string, error) {
	forced := g.ToolChoice == "required" || g.ToolChoice == "function"
	if !forced && g.ToolChoice != "auto" {
		return "", nil
	}
	tools := make([]toolcall.Tool, len(g.Tools))
	strict := false
	for i, raw := range g.Tools {
		var t struct {
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
				Strict     *bool           `json:"strict"`
			} `json:"function"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return "", badRequest(fmt.Sprintf("tools[%d]", i), "tools[%d]: %v", i, err)
		}
		isStrict := t.Function.Strict != nil && *t.Function.Strict
		strict = strict || isStrict
		tools[i] = toolcall.Tool{Name: t.Function.Name}
		if !isAbsent(t.Function.Parameters) && (forced || isStrict) {
			tools[i].Parameters = t.Function.Parameters
		}
	}
	var gr *grammar.Grammar
	var prefix string
	var err error
	format := FormatToolCalls
	switch {
	case forced:
		// A reply that must call is calls: a response format has
		// nothing to hold in it.
		gr, prefix, err = toolcall.Grammar(f, tools, g.ToolName, g.ParallelToolCalls)
	case g.content != nil:
		// Content in the response format, or calls.
		gr, err = toolcall.ContentOrCalls(f, tools, g.ParallelToolCalls, g.content.expr)
		format = g.Format
		if errors.Is(err, toolcall.ErrControlMarker) {
			return "", badRequest("tools", "model %q writes its calls after a control token (%v), which a grammar cannot write, so a response format cannot be combined with its tools under tool_choice \"auto\": send no response format, or tool_choice \"none\" or \"required\"", g.Model, f)
		}
	case !strict:
		return "", nil // calls are parsed as the model writes them
	default:
		gr, err = toolcall.LazyGrammar(f, tools, g.ParallelToolCalls)
	}
	if err != nil {
		var se *toolcall.SchemaError
		if errors.As(err, &se) {
			return "", schemaError(fmt.Sprintf("tools[%d].function.parameters", se.Index), se.Err)
		}
		return "", err
	}
	g.Grammar, g.Format = gr, format
	return prefix, nil
}

// readersFor are the readers of m's reply to g: channels for a model
// whose replies carry reasoning (harmony's channels, or a thinking
// block, with the content read for calls when the request has tools);
// calls alone for another model's reply to a request with tools (fed
// prefix, setupTools's); neither for plain text.
func readersFor(m Model, g *Generation, tools bool, format toolcall.Format, prefix string) (channelReader, *toolcall.Parser) {
	var calls *toolcall.Parser
	if tools {
		calls = toolParser(format, g)
		calls.Feed(prefix) // a marker only: it makes no events
	}
	if ch := newChannels(m, g, calls); ch != nil {
		return ch, nil
	}
	return nil, calls
}

// setupTools readies g's tools on m: the call format, the grammar where
// a call is required (forceTools), and the text its call parser is fed
// first (prefix). A request without tools (no g.ToolChoice: parseTools
// sets one only for an active choice) needs none.
func setupTools(m Model, g *Generation) (format toolcall.Format, prefix string, err error) {
	if g.ToolChoice == "" {
		return 0, "", nil
	}
	if format, err = toolFormat(m, g.Model); err != nil {
		return 0, "", err
	}
	prefix, err = forceTools(g, format)
	return format, prefix, err
}

// FormatToolCalls names the grammar that holds a reply's calls to their
// tools' schemas (Generation.Format): a tool_choice that requires a
// call, or strict tools under "auto".
const FormatToolCalls = "tool_calls"

// checkTool validates one tool: {"type": "function", "function": {"name",
// "description"?, "parameters"? (a JSON Schema object), "strict"?}}, and
// returns its name.
func checkTool(raw json.RawMessage, i int) (string, error) {
	field := fmt.Sprintf("tools[%d]", i)
	var t struct {
		Type     string          `json:"type"`
		Function json.RawMessage `json:"function"`
	}
	if err := json.Unmarshal(raw, &t); err != nil || bytes.TrimSpace(raw)[0] != '{' {
		return "", badRequest(field, "%s must be an object {\"type\": \"function\", \"function\": {...}}", field)
	}
	if t.Type != "function" {
		return "", badRequest(field+".type", "%s.type is %q; meshnode takes \"function\" tools only", field, t.Type)
	}
	var fn struct {
		Name        *string         `json:"name"`
		Description json.RawMessage `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	}
	if isAbsent(t.Function) || bytes.TrimSpace(t.Function)[0] != '{' || json.Unmarshal(t.Function, &fn) != nil {
		return "", badRequest(field+".function", "%s.function must be an object with a name", field)
	}
	if fn.Name == nil || !toolName.MatchString(*fn.Name) {
		got := "none"
		if fn.Name != nil {
			got = fmt.Sprintf("%q", *fn.Name)
		}
		return "", badRequest(field+".function.name", "%s.function.name must be 1 to 64 letters, digits, underscores or dashes; got %s", field, got)
	}
	if !isAbsent(fn.Description) {
		var d string
		if json.Unmarshal(fn.Description, &d) != nil {
			return "", badRequest(field+".function.description", "%s.function.description must be a string", field)
		}
	}
	if !isAbsent(fn.Parameters) && bytes.TrimSpace(fn.Parameters)[0] != '{' {
		return "", badRequest(field+".function.parameters", "%s.function.parameters must be a JSON Schema object", field)
	}
	return *fn.Name, nil
}

// parseToolChoice reads "none", "auto", "required" or {"type":
// "function", "function": {"name": ...}}; "" when absent.
func parseToolChoice(raw json.RawMessage) (mode, name string, err error) {
	if isAbsent(raw) {
		return "", "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "none", "auto", "required":
			return s, "", nil
		}
		return "", "", badRequest("tool_choice", "tool_choice %q is not one of none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}", s)
	}
	var o struct {
		Type     string `json:"type"`
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &o) != nil || o.Type != "function" || o.Function == nil || o.Function.Name == "" {
		return "", "", badRequest("tool_choice", "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}")
	}
	return "function", o.Function.Name, nil
}

// chatMessageIn is a message of a chat request.
type chatMessageIn struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       *string         `json:"name"`
	ToolCallID *string         `json:"tool_call_id"`
	ToolCalls  json.RawMessage `json:"tool_calls"`
	// ReasoningContent is an assistant's reasoning, given back as the
	// answer gave it (Message.Reasoning).
	ReasoningContent *string `json:"reasoning_content"`
}

// message converts and checks the i-th message.
func (m *chatMessageIn) message(i int) (Message, error) {
	field := fmt.Sprintf("messages[%d]", i)
	if !knownRoles[m.Role] {
		return Message{}, badRequest("messages", "%s.role %q is not one of system, developer, user, assistant, tool", field, m.Role)
	}
	text, err := messageContent([]byte(m.Content), field+".content")
	if err != nil {
		return Message{}, err
	}
	out := Message{Role: m.Role, Content: text}
	if m.Name != nil && m.Role == "tool" {
		// A tool result's function name reaches the template. Other
		// messages' names (OpenAI's participant names) never did: no
		// template here renders them, and a granted request's id does
		// not cover them.
		out.Name = *m.Name
	}
	if !isAbsent(m.ToolCalls) {
		if m.Role != "assistant" {
			return Message{}, badRequest(field+".tool_calls", "%s.tool_calls: only assistant messages carry tool calls", field)
		}
		var calls []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function *struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		}
		if err := json.Unmarshal(m.ToolCalls, &calls); err != nil {
			return Message{}, badRequest(field+".tool_calls", "%s.tool_calls must be an array of {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}", field)
		}
		for j, c := range calls {
			cf := fmt.Sprintf("%s.tool_calls[%d]", field, j)
			switch {
			case c.ID == "":
				return Message{}, badRequest(cf+".id", "%s.id is required", cf)
			case c.Type != "function":
				return Message{}, badRequest(cf+".type", "%s.type is %q; want \"function\"", cf, c.Type)
			case c.Function == nil || c.Function.Name == "":
				return Message{}, badRequest(cf+".function", "%s.function must name the function called", cf)
			}
			var args string
			if !isAbsent(c.Function.Arguments) && json.Unmarshal(c.Function.Arguments, &args) != nil {
				return Message{}, badRequest(cf+".function.arguments", "%s.function.arguments must be a string (the arguments' JSON text)", cf)
			}
			out.ToolCalls = append(out.ToolCalls, ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: args})
		}
	}
	if m.ReasoningContent != nil {
		if m.Role != "assistant" {
			return Message{}, badRequest(field+".reasoning_content", "%s.reasoning_content: only assistant messages carry reasoning", field)
		}
		out.Reasoning = *m.ReasoningContent
	}
	if m.ToolCallID != nil {
		if m.Role != "tool" {
			return Message{}, badRequest(field+".tool_call_id", "%s.tool_call_id: only tool messages answer a tool call", field)
		}
		out.ToolCallID = *m.ToolCallID
	}
	if m.Role == "tool" && out.ToolCallID == "" {
		return Message{}, badRequest(field+".tool_call_id", "%s: a tool message needs the tool_call_id of the call it answers", field)
	}
	return out, nil
}

// toolFormat is the call format of the model m; a model that cannot take
// tools refuses a request that has them.
func toolFormat(m Model, model string) (toolcall.Format, error) {
	if tm, ok := m.(ToolModel); ok {
		if f, ok := tm.ToolFormat(); ok {
			return f, nil
		}
	}
	e := Errorf(http.StatusBadRequest, "invalid_request_error", "tools_not_supported", "model %q cannot take tools", model)
	e.Param = "tools"
	return 0, e
}

// toolCallOut is a tool call in a response: whole in a message, a delta
// (with its index) in a stream.
type toolCallOut struct {
	Index    *int            `json:"index,omitempty"`
	ID       string          `json:"id,omitempty"`
	Type     string          `json:"type,omitempty"`
	Function toolFunctionOut `json:"function"`
}

type toolFunctionOut struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// toolParser is the call parser of a generation of g in format f.
func toolParser(f toolcall.Format, g *Generation) *toolcall.Parser {
	p := toolcall.NewParser(f, nil)
	types := map[string]map[string]string{}
	for _, raw := range g.Tools {
		var t struct {
			Function struct {
				Name       string `json:"name"`
				Parameters struct {
					Properties map[string]struct {
						Type any `json:"type"`
					} `json:"properties"`
				} `json:"parameters"`
			} `json:"function"`
		}
		if json.Unmarshal(raw, &t) != nil {
			continue // a schema of another shape: its values are read as JSON where they are JSON
		}
		m := map[string]string{}
		for k, prop := range t.Function.Parameters.Properties {
			if s, ok := prop.Type.(string); ok {
				m[k] = s
			}
		}
		types[t.Function.Name] = m
	}
	p.ParamType = func(tool, param string) string { return types[tool][param] }
	return p
}

// replySink is a stream that writes a parsed reply: its text (reasoning
// or content) and the pieces of its calls (the call's index; on its first
// piece the id the model wrote, if any, and the function; the arguments'
// text).
type replySink interface {
	text(reasoning bool, s string) error
	call(index int, id, name, args string) error
}

// writeCalls writes what a tool-call parser made of a reply to w.
func writeCalls(w replySink, evs []toolcall.Event) error {
	for _, e := range evs {
		var err error
		if e.Call == nil {
			err = w.text(false, e.Content)
		} else {
			err = w.call(e.Call.Index, e.Call.ID, e.Call.Name, e.Call.Arguments)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// writeChannels writes what a channel reader made of a reply to w: the
// reasoning, the content and the calls.
func writeChannels(w replySink, evs []replyEvent) error {
	for _, e := range evs {
		var err error
		if e.Call == nil {
			err = w.text(e.Reasoning, e.Text)
		} else {
			err = w.call(e.Call.Index, e.Call.ID, e.Call.Name, e.Call.Arguments)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// toolReply is a finished generation's content and calls as a reply
// gives them: content (nil when the reply is only calls) and the calls,
// at most one unless parallel calls are allowed.
func toolReply(content string, calls []toolcall.Call, choice toolChoice) (*string, []toolCallOut) {
	if !choice.parallel && len(calls) > 1 {
		calls = calls[:1]
	}
	var out []toolCallOut
	for _, c := range calls {
		out = append(out, toolCallOut{ID: c.ID, Type: "function", Function: toolFunctionOut{Name: c.Name, Arguments: c.Arguments}})
	}
	if content == "" && len(out) > 0 {
		return nil, out
	}
	return &content, out
}

// finishReason is OpenAI's for a reply: "tool_calls" when it called a
// tool and ended by itself.
func finishReason(res *Result, calls int) *string {
	reason := res.FinishReason
	if calls > 0 && reason == "stop" {
		reason = "tool_calls"
	}
	return &reason
}
