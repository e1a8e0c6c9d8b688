package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
)

// Anthropic's Messages API: POST /v1/messages and
// /v1/messages/count_tokens, as Anthropic's SDKs (and the tools built on
// them) call them. A request is read into the same Generation a chat
// completion is, so it is served, metered, sealed and replayed as one;
// only its shape on the wire is Anthropic's (messagesstream.go writes
// the answer).

// anthropicPrompt is what a Messages request and a token count share:
// the conversation and its tools.
type anthropicPrompt struct {
	Model      string               `json:"model"`
	Messages   []anthropicMessageIn `json:"messages"`
	System     json.RawMessage      `json:"system"`
	Tools      json.RawMessage      `json:"tools"`
	ToolChoice json.RawMessage      `json:"tool_choice"`
	Thinking   json.RawMessage      `json:"thinking"`
	// OutputConfig's format holds the output to a JSON Schema
	// (Anthropic's structured outputs); its effort is the reasoning
	// effort.
	OutputConfig json.RawMessage `json:"output_config"`

	// Anthropic's fields that ask nothing of the answer here: a cache
	// hint (the KV cache finds a cached prefix by its tokens), and a
	// speed, of which a node has one (standard).
	CacheControl json.RawMessage `json:"cache_control"`
	Speed        *string         `json:"speed"`

	tools toolChoice // resolved from Tools and ToolChoice
}

// messagesRequest is a POST /v1/messages body.
type messagesRequest struct {
	anthropicPrompt
	MaxTokens     *int           `json:"max_tokens"`
	StopSequences []string       `json:"stop_sequences"`
	Stream        bool           `json:"stream"`
	Temperature   *float64       `json:"temperature"`
	TopP          *float64       `json:"top_p"`
	TopK          *int64         `json:"top_k"`
	Metadata      map[string]any `json:"metadata"`
	ServiceTier   *string        `json:"service_tier"`
	// Opaque tags of Anthropic's accounts, which ask nothing of the
	// answer.
	UserProfileID *string `json:"user_profile_id"`
	WorkspaceID   *string `json:"workspace_id"`
	// Refused unless null: where inference must run (a node runs it
	// here), a code-execution container, diagnostics.
	InferenceGeo json.RawMessage `json:"inference_geo"`
	Container    json.RawMessage `json:"container"`
	Diagnostics  json.RawMessage `json:"diagnostics"`

	// meshnode's, as on the OpenAI endpoints.
	Seed            *json.Number    `json:"seed"`
	Speculative     *bool           `json:"speculative"`
	JCPPresentation json.RawMessage `json:"jcp_presentation"`
}

// anthropicMessageIn is one message of a request: its content a string
// or an array of content blocks.
type anthropicMessageIn struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anthropicBlock is a content block of a request, any of the kinds
// meshnode reads (the fields of the others are not looked at).
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Citations json.RawMessage `json:"citations"`
	Thinking  *string         `json:"thinking"`
}

func parseMessages(body []byte) (*Generation, *messagesRequest, error) {
	var req messagesRequest
	if err := decodeBody(body, &req); err != nil {
		return nil, nil, err
	}
	if err := checkFields(body, &req, "POST /v1/messages"); err != nil {
		return nil, nil, err
	}
	if !isAbsent(req.JCPPresentation) {
		return nil, nil, badRequest("jcp_presentation", "jcp_presentation is not served on /v1/messages: a grant rides on the OpenAI endpoints, whose binding (mesh/1 §2.3) derives the request it pays for")
	}
	if t := req.Temperature; t != nil && (math.IsNaN(*t) || *t < 0 || *t > 1) {
		return nil, nil, badRequest("temperature", "temperature must be between 0 and 1, got %v", *t)
	}
	if v := req.ServiceTier; v != nil && *v != "auto" && *v != "standard_only" {
		return nil, nil, badRequest("service_tier", "service_tier %q is not supported: a node has one tier (auto and standard_only are accepted)", *v)
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		why  string
	}{
		{"inference_geo", req.InferenceGeo, "a node runs inference where it is"},
		{"container", req.Container, "meshnode runs no code-execution containers"},
		{"diagnostics", req.Diagnostics, "meshnode returns no diagnostics"},
	} {
		if !isAbsent(f.raw) {
			return nil, nil, badRequest(f.name, "%s is not supported: %s", f.name, f.why)
		}
	}
	g := &Generation{Body: body}
	smp := sampling{Model: req.Model, Stream: req.Stream, Temperature: req.Temperature, TopP: req.TopP, TopK: req.TopK,
		Seed: req.Seed, Metadata: req.Metadata, Speculative: req.Speculative}
	if err := smp.apply(g); err != nil {
		return nil, nil, err
	}
	if req.MaxTokens == nil {
		return nil, nil, badRequest("max_tokens", "max_tokens is required")
	}
	n, err := maxTokens("max_tokens", req.MaxTokens)
	if err != nil {
		return nil, nil, err
	}
	g.MaxTokens = n
	if len(req.StopSequences) > maxStops {
		return nil, nil, badRequest("stop_sequences", "stop_sequences takes at most %d sequences, got %d", maxStops, len(req.StopSequences))
	}
	for _, s := range req.StopSequences {
		if s != "" {
			g.Stop = append(g.Stop, s)
		}
	}
	if err := req.apply(g); err != nil {
		return nil, nil, err
	}
	return g, &req, nil
}

// parseOutputConfig reads output_config: its format, a JSON Schema the
// output is held to as response_format's json_schema is; an effort is
// refused (meshnode does not steer a model's effort).
func parseOutputConfig(raw json.RawMessage, g *Generation) error {
	if isAbsent(raw) {
		return nil
	}
	var c struct {
		Effort json.RawMessage `json:"effort"`
		Format *struct {
			Type   string          `json:"type"`
			Schema json.RawMessage `json:"schema"`
		} `json:"format"`
	}
	if err := decodeBody(raw, &c); err != nil || bytes.TrimSpace(raw)[0] != '{' {
		return badRequest("output_config", "output_config must be an object {format, effort}")
	}
	if err := checkFields(raw, &c, "output_config"); err != nil {
		e := asError(err)
		e.Param = "output_config." + e.Param
		return e
	}
	if !isAbsent(c.Effort) {
		// The model's reasoning effort, where its chat template takes one
		// (gpt-oss's); "xhigh" and "max" have no level there.
		var effort string
		if json.Unmarshal(c.Effort, &effort) != nil {
			return badRequest("output_config.effort", "output_config.effort must be a string")
		}
		var err error
		if g.ReasoningEffort, err = reasoningEffort("output_config.effort", effort); err != nil {
			return err
		}
	}
	if c.Format == nil {
		return nil
	}
	if c.Format.Type != "json_schema" || isAbsent(c.Format.Schema) || bytes.TrimSpace(c.Format.Schema)[0] != '{' {
		return badRequest("output_config.format", `output_config.format must be {"type": "json_schema", "schema": {...}}`)
	}
	rf := mustJSON(map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "output", "schema": c.Format.Schema}})
	if err := parseResponseFormat(rf, g); err != nil {
		e := asError(err)
		e.Param = "output_config.format"
		return e
	}
	return nil
}

// countTokensRequest is a POST /v1/messages/count_tokens body.
type countTokensRequest struct {
	anthropicPrompt
}

func parseCountTokens(body []byte) (*Generation, *countTokensRequest, error) {
	var req countTokensRequest
	if err := decodeBody(body, &req); err != nil {
		return nil, nil, err
	}
	if err := checkFields(body, &req, "POST /v1/messages/count_tokens"); err != nil {
		return nil, nil, err
	}
	if req.Model == "" {
		return nil, nil, badRequest("model", "model is required")
	}
	g := &Generation{Model: req.Model, Body: body}
	if err := req.apply(g); err != nil {
		return nil, nil, err
	}
	return g, &req, nil
}

// apply reads the conversation, its tools and its output config into g.
func (p *anthropicPrompt) apply(g *Generation) error {
	if v := p.Speed; v != nil && *v != "standard" {
		return badRequest("speed", "speed %q is not supported: a node has one speed (standard is accepted)", *v)
	}
	if err := parseOutputConfig(p.OutputConfig, g); err != nil {
		return err
	}
	if !isAbsent(p.Thinking) {
		var t struct {
			Type         string `json:"type"`
			BudgetTokens *int   `json:"budget_tokens"`
		}
		if err := json.Unmarshal(p.Thinking, &t); err != nil {
			return badRequest("thinking", `thinking must be an object {"type": "adaptive"}, {"type": "disabled"} or {"type": "enabled", "budget_tokens": N}`)
		}
		if err := strictJSON(p.Thinking, &t); err != nil {
			// display (summarized, omitted) and the like.
			return badRequest("thinking", `thinking: %v (meshnode takes {"type": "adaptive"}, {"type": "disabled"} or {"type": "enabled", "budget_tokens": N}: a reasoning model's thinking comes whole, not summarised or omitted)`, err)
		}
		if t.BudgetTokens != nil && t.Type != "enabled" {
			return badRequest("thinking", `thinking.budget_tokens goes with {"type": "enabled"} only`)
		}
		switch t.Type {
		case "adaptive":
			// The model decides whether and how long to reason, as
			// every model here does: gpt-oss reasons as its effort
			// says, another never does.
		case "disabled":
			g.thinking = &thinkSwitch{param: "thinking"}
		case "enabled":
			// A thinking model reasons, at most budget_tokens tokens:
			// past them its block is closed for it (the node's grammar
			// writes the closing tag), as Anthropic's budget bounds
			// Claude's thinking.
			switch n := t.BudgetTokens; {
			case n == nil || *n < 1 || *n > maxThinkBudget:
				return badRequest("thinking", `thinking {"type": "enabled"} needs budget_tokens, 1 to %d`, maxThinkBudget)
			case g.MaxTokens > 0 && *n >= g.MaxTokens:
				return badRequest("thinking", "thinking.budget_tokens (%d) must be less than max_tokens (%d)", *n, g.MaxTokens)
			}
			g.thinking, g.ThinkBudget = &thinkSwitch{param: "thinking", on: true}, *t.BudgetTokens
		default:
			return badRequest("thinking", `thinking.type must be "adaptive", "disabled" or "enabled", got %q`, t.Type)
		}
	}
	if !isAbsent(p.System) {
		text, err := anthropicText(p.System, "system")
		if err != nil {
			return err
		}
		g.Messages = append(g.Messages, Message{Role: "system", Content: text})
	}
	if len(p.Messages) == 0 {
		return badRequest("messages", "messages must hold at least one message")
	}
	names := map[string]string{} // tool_use id → the tool's name, for its result
	for i, m := range p.Messages {
		last := i == len(p.Messages)-1
		var err error
		switch m.Role {
		case "user":
			g.Messages, err = userTurn(g.Messages, m.Content, i, names)
		case "assistant":
			var msg Message
			if msg, err = assistantTurn(m.Content, i, names); err == nil {
				if last && len(msg.ToolCalls) == 0 {
					// A final assistant message is a prefill: the reply
					// continues it, and does not repeat it.
					g.Prefill = msg.Content
				} else {
					g.Messages = append(g.Messages, msg)
				}
			}
			if err == nil && last && len(msg.ToolCalls) > 0 {
				err = badRequest("messages", "messages[%d] is the last message and calls tools: send their results (tool_result blocks) in a user message after it", i)
			}
		default:
			err = badRequest("messages", "messages[%d].role %q is not one of user, assistant (the system prompt goes in system)", i, m.Role)
		}
		if err != nil {
			return err
		}
	}
	if g.Prefill != "" && !slices.ContainsFunc(g.Messages, func(m Message) bool { return m.Role != "system" }) {
		return badRequest("messages", "a final assistant message (a prefill) continues a conversation: send the messages it follows")
	}
	var err error
	p.tools, err = p.parseTools(g)
	return err
}

// blocks reads a message's content: a string is one text block.
func blocks(raw json.RawMessage, field string) ([]anthropicBlock, error) {
	raw = bytes.TrimSpace(raw)
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []anthropicBlock{{Type: "text", Text: &s}}, nil
	}
	var bs []anthropicBlock
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &bs) != nil {
		return nil, badRequest(field, "%s must be a string or an array of content blocks", field)
	}
	return bs, nil
}

// textOf is a text block's text; citations are refused (meshnode cites
// nothing back).
func textOf(b anthropicBlock, field string) (string, error) {
	if b.Text == nil {
		return "", badRequest(field, "%s is a text block without text", field)
	}
	if holdsSomething(b.Citations) {
		return "", badRequest(field, "%s.citations is not supported: meshnode's answers cite no documents", field)
	}
	return *b.Text, nil
}

// anthropicText flattens a system prompt or a tool result's content (a
// string, or text blocks) to text.
func anthropicText(raw json.RawMessage, field string) (string, error) {
	bs, err := blocks(raw, field)
	if err != nil {
		return "", err
	}
	var text string
	for j, b := range bs {
		f := fmt.Sprintf("%s[%d]", field, j)
		if b.Type != "text" {
			return "", badRequest(field, "%s has type %q; meshnode's models read text blocks only", f, b.Type)
		}
		t, err := textOf(b, f)
		if err != nil {
			return "", err
		}
		text += t
	}
	return text, nil
}

// userTurn appends the i-th message, a user's: its text, and each
// tool_result as a tool message answering its call, in their order.
func userTurn(msgs []Message, content json.RawMessage, i int, names map[string]string) ([]Message, error) {
	field := fmt.Sprintf("messages[%d].content", i)
	bs, err := blocks(content, field)
	if err != nil {
		return nil, err
	}
	text, pending := "", false
	flush := func() {
		if pending {
			msgs = append(msgs, Message{Role: "user", Content: text})
		}
		text, pending = "", false
	}
	for j, b := range bs {
		f := fmt.Sprintf("%s[%d]", field, j)
		switch b.Type {
		case "text":
			t, err := textOf(b, f)
			if err != nil {
				return nil, err
			}
			text, pending = text+t, true
		case "tool_result":
			name, ok := names[b.ToolUseID]
			if !ok {
				return nil, badRequest(field, "%s.tool_use_id %q answers no tool_use of an earlier assistant message", f, b.ToolUseID)
			}
			result := ""
			if !isAbsent(b.Content) {
				if result, err = anthropicText(b.Content, f+".content"); err != nil {
					return nil, err
				}
			}
			if b.IsError {
				// Chat templates have no place for the flag: the model
				// reads it as the result's first word.
				result = "Error: " + result
			}
			flush()
			msgs = append(msgs, Message{Role: "tool", Content: result, ToolCallID: b.ToolUseID, Name: name})
		default:
			return nil, badRequest(field, "%s has type %q; a user message takes text and tool_result blocks (meshnode's models read text)", f, b.Type)
		}
	}
	if len(bs) == 0 {
		pending = true // an empty message is still a turn
	}
	flush()
	return msgs, nil
}

// assistantTurn reads the i-th message, an assistant's: its text, tool
// calls and thinking (given back as its reasoning, which a template
// renders where it renders any: Qwen3's within a tool loop; a redacted
// block carries none to give).
func assistantTurn(content json.RawMessage, i int, names map[string]string) (Message, error) {
	field := fmt.Sprintf("messages[%d].content", i)
	bs, err := blocks(content, field)
	if err != nil {
		return Message{}, err
	}
	msg := Message{Role: "assistant"}
	for j, b := range bs {
		f := fmt.Sprintf("%s[%d]", field, j)
		switch b.Type {
		case "text":
			t, err := textOf(b, f)
			if err != nil {
				return Message{}, err
			}
			msg.Content += t
		case "tool_use":
			switch {
			case b.ID == "":
				return Message{}, badRequest(field, "%s.id is required", f)
			case b.Name == "":
				return Message{}, badRequest(field, "%s.name is required", f)
			case isAbsent(b.Input) || bytes.TrimSpace(b.Input)[0] != '{':
				return Message{}, badRequest(field, "%s.input must be an object, the tool's arguments", f)
			}
			if _, dup := names[b.ID]; dup {
				return Message{}, badRequest(field, "%s.id %q is used by an earlier tool_use", f, b.ID)
			}
			names[b.ID] = b.Name
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: string(compact(b.Input))})
		case "thinking":
			if b.Thinking != nil {
				msg.Reasoning += *b.Thinking
			}
		case "redacted_thinking":
		default:
			return Message{}, badRequest(field, "%s has type %q; an assistant message takes text, tool_use and thinking blocks", f, b.Type)
		}
	}
	return msg, nil
}

// parseTools reads Anthropic's tools ({name, description, input_schema})
// and tool_choice into OpenAI's, which the chat template renders and the
// tool-call machinery serves.
func (p *anthropicPrompt) parseTools(g *Generation) (toolChoice, error) {
	var tools []struct {
		Type        *string         `json:"type"`
		Name        string          `json:"name"`
		Description json.RawMessage `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
		Strict      *bool           `json:"strict"`
	}
	if !isAbsent(p.Tools) && json.Unmarshal(p.Tools, &tools) != nil {
		return toolChoice{}, badRequest("tools", "tools must be an array of tools {name, description, input_schema}")
	}
	var fns []json.RawMessage
	for i, t := range tools {
		field := fmt.Sprintf("tools[%d]", i)
		switch {
		case t.Type != nil && *t.Type != "custom":
			return toolChoice{}, badRequest(field+".type", "%s is Anthropic's server tool %q: meshnode runs no tools; define a client tool {name, description, input_schema}", field, *t.Type)
		case !toolName.MatchString(t.Name):
			return toolChoice{}, badRequest(field+".name", "%s.name must be 1 to 64 letters, digits, underscores or dashes; got %q", field, t.Name)
		case isAbsent(t.InputSchema) || bytes.TrimSpace(t.InputSchema)[0] != '{':
			return toolChoice{}, badRequest(field+".input_schema", "%s.input_schema must be a JSON Schema object", field)
		}
		fn := map[string]json.RawMessage{"name": mustJSON(t.Name), "parameters": t.InputSchema}
		if !isAbsent(t.Description) {
			fn["description"] = t.Description
		}
		if t.Strict != nil {
			// Held to its schema as chat completions' strict tools are:
			// by the grammar of a choice that requires a call.
			fn["strict"] = mustJSON(*t.Strict)
		}
		fns = append(fns, mustJSON(map[string]any{"type": "function", "function": fn}))
	}
	chat := chatRequest{}
	if fns != nil {
		chat.Tools = mustJSON(fns)
	}
	if !isAbsent(p.ToolChoice) {
		var c struct {
			Type                   string `json:"type"`
			Name                   string `json:"name"`
			DisableParallelToolUse *bool  `json:"disable_parallel_tool_use"`
		}
		if json.Unmarshal(p.ToolChoice, &c) != nil {
			return toolChoice{}, badRequest("tool_choice", `tool_choice must be {"type": "auto"}, {"type": "any"}, {"type": "tool", "name": ...} or {"type": "none"}`)
		}
		switch c.Type {
		case "auto", "none":
			chat.ToolChoice = mustJSON(c.Type)
		case "any":
			chat.ToolChoice = mustJSON("required")
		case "tool":
			chat.ToolChoice = mustJSON(map[string]any{"type": "function", "function": map[string]string{"name": c.Name}})
		default:
			return toolChoice{}, badRequest("tool_choice", `tool_choice.type %q is not one of auto, any, tool, none`, c.Type)
		}
		if (c.Type == "any" || c.Type == "tool") && len(tools) == 0 {
			return toolChoice{}, badRequest("tool_choice", "tool_choice %q needs tools; the request has none", c.Type)
		}
		if c.DisableParallelToolUse != nil {
			parallel := !*c.DisableParallelToolUse
			chat.ParallelToolCalls = &parallel
		}
	}
	return chat.parseTools(g)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // values built here always marshal
	}
	return b
}

// checkModel refuses what m cannot serve as asked: a prefill on a model
// that answers in harmony channels (the reply must open its channel
// itself) or with tools (calls are read from the reply alone), and
// thinking turned off on a model that always reasons.
func (p *anthropicPrompt) checkModel(m Model, g *Generation) error {
	switch {
	case g.Prefill != "" && isHarmony(m):
		return badRequest("messages", "model %q answers in harmony channels and cannot continue a final assistant message (a prefill); end the messages with a user message", g.Model)
	case g.Prefill != "" && p.tools.active():
		return badRequest("messages", "a final assistant message (a prefill) cannot be combined with tools: calls are read from the reply alone")
	}
	return applyThinking(m, g)
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	var req *messagesRequest
	m, g, ok := s.accept(w, r, func(body []byte) (g *Generation, err error) {
		g, req, err = parseMessages(body)
		return g, err
	})
	if !ok {
		return
	}
	if err := req.checkModel(m, g); err != nil {
		writeError(w, err)
		return
	}
	format, prefix, err := setupTools(m, g)
	if err != nil {
		writeError(w, err)
		return
	}
	ms := &messagesStream{msg: anthropicMessage{ID: newID("msg_"), Type: "message", Role: "assistant", Model: g.Model, Content: []any{}},
		parallel: req.tools.parallel}
	ms.channels, ms.calls = readersFor(m, g, req.tools.active(), format, prefix)
	if !req.Stream {
		s.answerWhole(w, r, m, g, ms, func() any { return ms.msg })
		return
	}
	ms.sse = s.newSSEWriter(w)
	s.generate(w, r, m, g, ms, ms.sse)
}

// handleCountTokens is POST /v1/messages/count_tokens: the prompt a
// Messages request would be served with, counted in the model's tokens
// ({"input_tokens"}); nothing is generated.
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	_, n, ok := s.renderBody(w, r, func(body []byte) (*Generation, func(Model) error, error) {
		g, req, err := parseCountTokens(body)
		if err != nil {
			return nil, nil, err
		}
		return g, func(m Model) error { return req.checkModel(m, g) }, nil
	})
	if ok {
		writeJSON(w, http.StatusOK, map[string]int{"input_tokens": n})
	}
}
