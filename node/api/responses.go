package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/meshnode/meshnode/gguf/chat/toolcall"
)

type responsesRequest struct {
	sampling
	Input           json.RawMessage `json:"input"`
	Instructions    *string         `json:"instructions"`
	MaxOutputTokens *int            `json:"max_output_tokens"`
	Text            json.RawMessage `json:"text"`
	TopLogprobs     *int            `json:"top_logprobs"`
	Include         []string        `json:"include"`

	Tools             json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`

	tools toolChoice // resolved from the three fields above

	// Reasoning's effort is given to the model's chat template (gpt-oss's).
	Reasoning json.RawMessage `json:"reasoning"`
}

// includeLogprobs is the include value that asks for the output text's
// log-probabilities, the only one meshnode has to give.
const includeLogprobs = "message.output_text.logprobs"

// responsesLogprobs reads include and top_logprobs: the log-probabilities
// come with include's message.output_text.logprobs, with top_logprobs
// (0 … 20) alternatives each.
func responsesLogprobs(g *Generation, include []string, top *int) error {
	for i, v := range include {
		if v != includeLogprobs {
			return badRequest("include", "include[%d] %q is not supported: meshnode can include %q only", i, v, includeLogprobs)
		}
		g.Logprobs = true
	}
	if top == nil {
		return nil
	}
	if *top < 0 || *top > maxTopLogprobs {
		return badRequest("top_logprobs", "top_logprobs must be between 0 and %d, got %d", maxTopLogprobs, *top)
	}
	if *top > 0 && !g.Logprobs {
		return badRequest("top_logprobs", "top_logprobs needs include to hold %q", includeLogprobs)
	}
	g.TopLogprobs = *top
	return nil
}

func parseResponses(body []byte) (*Generation, *responsesRequest, error) {
	var req responsesRequest
	if err := decodeBody(body, &req); err != nil {
		return nil, nil, err
	}
	if err := checkFields(body, &req, "POST /v1/responses"); err != nil {
		return nil, nil, err
	}
	g := &Generation{Body: body}
	if err := req.apply(g); err != nil {
		return nil, nil, err
	}
	if req.Instructions != nil && *req.Instructions != "" {
		g.Messages = append(g.Messages, Message{Role: "system", Content: *req.Instructions})
	}
	input := bytes.TrimSpace(req.Input)
	if len(input) == 0 || bytes.Equal(input, []byte("null")) {
		return nil, nil, badRequest("input", "input is required")
	}
	var text string
	if err := json.Unmarshal(input, &text); err == nil {
		g.Messages = append(g.Messages, Message{Role: "user", Content: text})
	} else {
		msgs, err := responsesInput(input)
		if err != nil {
			return nil, nil, err
		}
		g.Messages = append(g.Messages, msgs...)
	}
	n, err := maxTokens("max_output_tokens", req.MaxOutputTokens)
	if err != nil {
		return nil, nil, err
	}
	g.MaxTokens = n
	if err := responsesLogprobs(g, req.Include, req.TopLogprobs); err != nil {
		return nil, nil, err
	}
	if err := parseTextFormat(req.Text, g); err != nil {
		return nil, nil, err
	}
	if g.N > 1 {
		return nil, nil, badRequest("n", "n must be 1 on /v1/responses: a response has one output (n > 1 is served on chat completions and completions)")
	}
	if req.tools, err = req.parseTools(g); err != nil {
		return nil, nil, err
	}
	if err := parseReasoning(req.Reasoning, g); err != nil {
		return nil, nil, err
	}
	if g.Logprobs && req.tools.active() {
		return nil, nil, badRequest("include", "the output's log-probabilities cannot be combined with tools (tool_choice %q); send tool_choice \"none\" or no include", req.tools.mode)
	}
	return g, &req, nil
}

// parseReasoning reads reasoning: its effort (low, medium, high) is given
// to the model's chat template; a summary is refused (no summarizer
// runs: a harmony model's reasoning comes whole, as reasoning items).
func parseReasoning(raw json.RawMessage, g *Generation) error {
	if isAbsent(raw) {
		return nil
	}
	var r struct {
		Effort          *string         `json:"effort"`
		Summary         json.RawMessage `json:"summary"`
		GenerateSummary json.RawMessage `json:"generate_summary"`
	}
	if err := decodeBody(raw, &r); err != nil || bytes.TrimSpace(raw)[0] != '{' {
		return badRequest("reasoning", "reasoning must be an object {effort, summary}")
	}
	if err := checkFields(raw, &r, "reasoning"); err != nil {
		e := asError(err)
		e.Param = "reasoning." + e.Param
		return e
	}
	if !isAbsent(r.Summary) || !isAbsent(r.GenerateSummary) {
		return badRequest("reasoning.summary", "reasoning.summary is not supported: no summarizer runs (a reasoning model's reasoning comes whole, as reasoning items)")
	}
	if r.Effort != nil && *r.Effort == "none" {
		g.thinking = &thinkSwitch{param: "reasoning.effort"} // off
		return nil
	}
	if r.Effort != nil {
		var err error
		g.ReasoningEffort, err = reasoningEffort("reasoning.effort", *r.Effort)
		return err
	}
	return nil
}

// responsesInput reads input items: messages, and the function calls
// a reply made (function_call) and their results (function_call_output),
// as the Responses API hands them back. A call joins the assistant
// message before it (or opens one); a result answers its call_id.
// A reasoning item, a reply's reasoning, is given back as the reasoning
// of the assistant turn after it (Message.Reasoning: its reasoning_text
// parts), which the template renders where it renders any.
func responsesInput(input json.RawMessage) ([]Message, error) {
	var items []struct {
		Type      string          `json:"type"`
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		CallID    string          `json:"call_id"`
		Name      string          `json:"name"`
		Arguments *string         `json:"arguments"`
		Output    json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(input, &items); err != nil {
		return nil, badRequest("input", "input must be a string or an array of input items")
	}
	if len(items) == 0 {
		return nil, badRequest("input", "input must hold at least one item")
	}
	var msgs []Message
	names := map[string]string{} // call_id → the function called
	reasoning := ""              // a reasoning item's, for the next assistant turn
	assistant := func() *Message {
		if len(msgs) == 0 || msgs[len(msgs)-1].Role != "assistant" {
			msgs = append(msgs, Message{Role: "assistant"})
		}
		last := &msgs[len(msgs)-1]
		last.Reasoning += reasoning
		reasoning = ""
		return last
	}
	for i, it := range items {
		field := fmt.Sprintf("input[%d]", i)
		switch it.Type {
		case "", "message":
			if !knownRoles[it.Role] || it.Role == "tool" {
				return nil, badRequest("input", "%s.role %q is not one of system, developer, user, assistant (a tool's result is a function_call_output item)", field, it.Role)
			}
			content, err := messageContent(it.Content, field+".content")
			if err != nil {
				return nil, err
			}
			m := Message{Role: it.Role, Content: content}
			if it.Role == "assistant" {
				m.Reasoning, reasoning = reasoning, ""
			}
			msgs = append(msgs, m)
		case "function_call":
			switch {
			case it.CallID == "":
				return nil, badRequest("input", "%s.call_id is required", field)
			case it.Name == "":
				return nil, badRequest("input", "%s.name is required", field)
			case it.Arguments == nil:
				return nil, badRequest("input", "%s.arguments is required (the arguments' JSON text)", field)
			}
			if _, dup := names[it.CallID]; dup {
				return nil, badRequest("input", "%s.call_id %q is used by an earlier function_call", field, it.CallID)
			}
			names[it.CallID] = it.Name
			last := assistant()
			last.ToolCalls = append(last.ToolCalls, ToolCall{ID: it.CallID, Name: it.Name, Arguments: *it.Arguments})
		case "function_call_output":
			name, ok := names[it.CallID]
			if !ok {
				return nil, badRequest("input", "%s.call_id %q answers no function_call before it", field, it.CallID)
			}
			var output string
			if json.Unmarshal(it.Output, &output) != nil {
				var err error
				if output, err = messageContent(it.Output, field+".output"); err != nil {
					return nil, err
				}
			}
			msgs = append(msgs, Message{Role: "tool", Content: output, ToolCallID: it.CallID, Name: name})
		case "reasoning":
			var parts []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if !isAbsent(it.Content) && json.Unmarshal(it.Content, &parts) != nil {
				return nil, badRequest("input", "%s.content must be an array of reasoning_text parts", field)
			}
			for _, p := range parts {
				if p.Type == "reasoning_text" {
					reasoning += p.Text
				}
			}
		default:
			return nil, badRequest("input", "%s has type %q; meshnode takes messages, function_call, function_call_output and reasoning items", field, it.Type)
		}
	}
	return msgs, nil
}

// parseTools reads the Responses API's function tools ({"type":
// "function", "name", "description", "parameters", "strict"}) and
// tool_choice into chat completions' (parseTools there), which the chat
// template renders and the tool-call machinery serves.
func (req *responsesRequest) parseTools(g *Generation) (toolChoice, error) {
	var tools []map[string]json.RawMessage
	if !isAbsent(req.Tools) && json.Unmarshal(req.Tools, &tools) != nil {
		return toolChoice{}, badRequest("tools", "tools must be an array of function tools {\"type\": \"function\", \"name\", \"parameters\"}")
	}
	chat := chatRequest{ParallelToolCalls: req.ParallelToolCalls}
	var fns []json.RawMessage
	for i, t := range tools {
		var typ string
		if json.Unmarshal(t["type"], &typ) != nil || typ != "function" {
			return toolChoice{}, badRequest(fmt.Sprintf("tools[%d].type", i), "tools[%d] is a %s tool: meshnode runs no tools; define a function tool", i, compact(t["type"]))
		}
		fn := map[string]json.RawMessage{}
		for _, k := range []string{"name", "description", "parameters", "strict"} {
			if v, ok := t[k]; ok && !isAbsent(v) {
				fn[k] = v
			}
		}
		for k := range t {
			switch k {
			case "type", "name", "description", "parameters", "strict":
			default:
				return toolChoice{}, badRequest(fmt.Sprintf("tools[%d].%s", i, k), "tools[%d].%s is not supported", i, k)
			}
		}
		fns = append(fns, mustJSON(map[string]any{"type": "function", "function": fn}))
	}
	if fns != nil {
		chat.Tools = mustJSON(fns)
	}
	if !isAbsent(req.ToolChoice) {
		chat.ToolChoice = req.ToolChoice
		var c struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		if json.Unmarshal(req.ToolChoice, &c) == nil && c.Type == "function" {
			// The Responses API names the function beside its type.
			chat.ToolChoice = mustJSON(map[string]any{"type": "function", "function": map[string]string{"name": c.Name}})
		}
	}
	return chat.parseTools(g)
}

type responseText struct {
	Type        string           `json:"type"`
	Text        string           `json:"text"`
	Annotations []any            `json:"annotations"`
	Logprobs    []logprobItemOut `json:"logprobs,omitempty"`
}

type responseItem struct {
	Type    string         `json:"type"`
	ID      string         `json:"id"`
	Status  string         `json:"status"`
	Role    string         `json:"role"`
	Content []responseText `json:"content"`
}

// reasoningItem is a harmony model's reasoning (its analysis channel) as
// the Responses API gives gpt-oss's: a reasoning item whose content is
// reasoning_text parts, before the message, with no summary.
type reasoningItem struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Status  string          `json:"status"`
	Summary []any           `json:"summary"`
	Content []reasoningText `json:"content"`
}

type reasoningText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type responseUsage struct {
	InputTokens        int            `json:"input_tokens"`
	OutputTokens       int            `json:"output_tokens"`
	OutputTokensDetail *tokensDetails `json:"output_tokens_details,omitempty"`
	TotalTokens        int            `json:"total_tokens"`
	Energy             any            `json:"energy,omitempty"`
	Placement          any            `json:"placement,omitempty"`
}

type responseObject struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	CreatedAt         int64             `json:"created_at"`
	Status            string            `json:"status"`
	Model             string            `json:"model"`
	Output            []any             `json:"output"` // responseItem, reasoningItem
	IncompleteDetails map[string]string `json:"incomplete_details"`
	Usage             *responseUsage    `json:"usage"`
}

func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	var req *responsesRequest
	m, g, ok := s.accept(w, r, func(body []byte) (g *Generation, err error) {
		g, req, err = parseResponses(body)
		return g, err
	})
	if !ok {
		return
	}
	rs := &responseStream{resp: responseObject{ID: newID("resp_"), Object: "response", CreatedAt: s.now().Unix(),
		Status: "in_progress", Model: g.Model, Output: []any{}}, logprobs: g.Logprobs, parallel: req.tools.parallel}
	if err := applyThinking(m, g); err != nil {
		writeError(w, err)
		return
	}
	format, prefix, err := setupTools(m, g)
	if err != nil {
		writeError(w, err)
		return
	}
	// A reply's reasoning (harmony's analysis channel, a thinking block)
	// is a reasoning item, its content the message (chat completions'
	// reasoning_content and content), its calls function_call items.
	rs.channels, rs.calls = readersFor(m, g, req.tools.active(), format, prefix)
	rs.tokens = newChannels(m, g, nil)
	if !req.Stream {
		s.answerWhole(w, r, m, g, rs, func() any { return rs.resp })
		return
	}
	rs.sse = s.newSSEWriter(w)
	s.generate(w, r, m, g, rs, rs.sse)
}

// responseStream emits the Responses API's typed events: created,
// in_progress, then each output item's opening, text deltas and closing
// (a message; for a harmony model, reasoning items and the message, in
// the order the reply has them), then response.completed. With no
// sseWriter (a whole response) it writes no events and only builds the
// response object.
type responseStream struct {
	sse  *sseWriter
	resp responseObject
	// logprobs: asked for (the message's tokens').
	logprobs bool
	seq      int
	started  bool
	// channels splits a reply that carries reasoning into reasoning,
	// content and (with tools) calls, and tokens reads it token by token
	// for the content tokens' log-probabilities (filterContent); nil for
	// a model whose replies carry none.
	channels, tokens channelReader
	// calls parses another model's reply for calls (a request with
	// tools); parallel false keeps the first call only, of ncalls made.
	calls    *toolcall.Parser
	parallel bool
	ncalls   int
	// items are the output items so far; the last may be open.
	items []*outItem
	open  bool
}

// outItem is an output item being written: a message, a reasoning item
// or a function call (call: its call id and function; text its
// arguments).
type outItem struct {
	reasoning bool
	call      bool
	callID    string
	name      string
	id        string
	text      strings.Builder
	lps       []logprobItemOut
}

// functionCallItem is a function call output item.
type functionCallItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
}

func (r *responseStream) send(typ string, fields map[string]any) error {
	if r.sse == nil {
		return nil
	}
	fields["type"] = typ
	fields["sequence_number"] = r.seq
	r.seq++
	return r.sse.event(typ, fields)
}

// itemJSON is it as the output array has it.
func (r *responseStream) itemJSON(it *outItem, status string, done bool) any {
	if it.call {
		fc := functionCallItem{Type: "function_call", ID: it.id, CallID: it.callID, Name: it.name, Status: status}
		if done {
			fc.Arguments = it.text.String()
		}
		return fc
	}
	if it.reasoning {
		ri := reasoningItem{Type: "reasoning", ID: it.id, Status: status, Summary: []any{}, Content: []reasoningText{}}
		if done {
			ri.Content = append(ri.Content, reasoningText{Type: "reasoning_text", Text: it.text.String()})
		}
		return ri
	}
	mi := responseItem{Type: "message", ID: it.id, Status: status, Role: "assistant", Content: []responseText{}}
	if done {
		mi.Content = append(mi.Content, r.part(it))
	}
	return mi
}

// part is a message's output_text content part, with the tokens'
// log-probabilities when they were asked for.
func (r *responseStream) part(it *outItem) responseText {
	p := responseText{Type: "output_text", Text: it.text.String(), Annotations: []any{}}
	if r.logprobs {
		p.Logprobs = it.lps
		if p.Logprobs == nil {
			p.Logprobs = []logprobItemOut{}
		}
	}
	return p
}

func (r *responseStream) start() error {
	if r.started {
		return nil
	}
	r.started = true
	if err := r.send("response.created", map[string]any{"response": r.resp}); err != nil {
		return err
	}
	if err := r.send("response.in_progress", map[string]any{"response": r.resp}); err != nil {
		return err
	}
	if r.channels == nil && r.calls == nil {
		return r.openItem(false) // the message, at once
	}
	return nil
}

// openItem opens a new output item, a reasoning item or the message.
func (r *responseStream) openItem(reasoning bool) error {
	it := &outItem{reasoning: reasoning, id: newID("msg_")}
	part := any(responseText{Type: "output_text", Annotations: []any{}})
	if reasoning {
		it.id = newID("rs_")
		part = reasoningText{Type: "reasoning_text"}
	}
	r.items = append(r.items, it)
	r.open = true
	idx := len(r.items) - 1
	if err := r.send("response.output_item.added", map[string]any{"output_index": idx, "item": r.itemJSON(it, "in_progress", false)}); err != nil {
		return err
	}
	return r.send("response.content_part.added", map[string]any{"item_id": it.id, "output_index": idx, "content_index": 0, "part": part})
}

// openCall opens a function call item: the call's id (made when the
// model wrote none) and function.
func (r *responseStream) openCall(callID, name string) error {
	if err := r.closeItem(); err != nil {
		return err
	}
	if callID == "" {
		callID = newID("call_")
	}
	it := &outItem{call: true, id: newID("fc_"), callID: callID, name: name}
	r.items = append(r.items, it)
	r.open = true
	return r.send("response.output_item.added", map[string]any{"output_index": len(r.items) - 1, "item": r.itemJSON(it, "in_progress", false)})
}

// call adds a piece of call index: its first piece opens its item, the
// rest add to its arguments.
func (r *responseStream) call(index int, id, name, args string) error {
	if !r.parallel && index > 0 {
		return nil
	}
	if index == r.ncalls {
		r.ncalls++
		if err := r.openCall(id, name); err != nil {
			return err
		}
	}
	if args == "" {
		return nil
	}
	it, idx := r.items[len(r.items)-1], len(r.items)-1
	it.text.WriteString(args)
	return r.send("response.function_call_arguments.delta", map[string]any{"item_id": it.id, "output_index": idx, "delta": args})
}

// closeItem closes the open item, if any.
func (r *responseStream) closeItem() error {
	if !r.open {
		return nil
	}
	r.open = false
	it, idx := r.items[len(r.items)-1], len(r.items)-1
	text := it.text.String()
	if it.call {
		if err := r.send("response.function_call_arguments.done", map[string]any{"item_id": it.id, "output_index": idx, "arguments": text}); err != nil {
			return err
		}
		return r.send("response.output_item.done", map[string]any{"output_index": idx, "item": r.itemJSON(it, "completed", true)})
	}
	var steps []struct {
		typ    string
		fields map[string]any
	}
	add := func(typ string, fields map[string]any) {
		steps = append(steps, struct {
			typ    string
			fields map[string]any
		}{typ, fields})
	}
	if it.reasoning {
		add("response.reasoning_text.done", map[string]any{"item_id": it.id, "output_index": idx, "content_index": 0, "text": text})
		add("response.content_part.done", map[string]any{"item_id": it.id, "output_index": idx, "content_index": 0,
			"part": reasoningText{Type: "reasoning_text", Text: text}})
	} else {
		done := map[string]any{"item_id": it.id, "output_index": idx, "content_index": 0, "text": text}
		if r.logprobs {
			done["logprobs"] = r.part(it).Logprobs
		}
		add("response.output_text.done", done)
		add("response.content_part.done", map[string]any{"item_id": it.id, "output_index": idx, "content_index": 0, "part": r.part(it)})
	}
	add("response.output_item.done", map[string]any{"output_index": idx, "item": r.itemJSON(it, "completed", true)})
	for _, s := range steps {
		if err := r.send(s.typ, s.fields); err != nil {
			return err
		}
	}
	return nil
}

// write adds text (and, to the message, its tokens' log-probabilities)
// to the open item of its kind, opening one when the kind changes.
func (r *responseStream) write(reasoning bool, text string, lps []TokenLogprob) error {
	if last := len(r.items) - 1; !r.open || r.items[last].reasoning != reasoning || r.items[last].call {
		if err := r.closeItem(); err != nil {
			return err
		}
		if err := r.openItem(reasoning); err != nil {
			return err
		}
	}
	it, idx := r.items[len(r.items)-1], len(r.items)-1
	it.text.WriteString(text)
	fields := map[string]any{"item_id": it.id, "output_index": idx, "content_index": 0, "delta": text}
	if reasoning {
		return r.send("response.reasoning_text.delta", fields)
	}
	if r.logprobs {
		items := itemsOf(lps)
		it.lps = append(it.lps, items...)
		fields["logprobs"] = items
	}
	return r.send("response.output_text.delta", fields)
}

func (r *responseStream) delta(d Delta) error {
	if err := r.start(); err != nil {
		return err
	}
	if r.calls != nil {
		// A request with tools asks no logprobs (parseResponses).
		return writeCalls(r, r.calls.Feed(d.Text))
	}
	if r.channels == nil {
		if d.Text == "" && len(d.Logprobs) == 0 {
			return nil
		}
		return r.write(false, d.Text, d.Logprobs)
	}
	var lps []TokenLogprob
	if r.logprobs {
		lps = filterContent(r.tokens, d.Logprobs)
	}
	return r.channelEvents(r.channels.Feed(d.Text), lps)
}

// channelEvents writes a reply's pieces to reasoning items, the message
// and function calls; lps (the content tokens') go with the first content
// piece, or a piece of their own.
func (r *responseStream) channelEvents(evs []replyEvent, lps []TokenLogprob) error {
	for _, e := range evs {
		if e.Call != nil {
			if err := r.call(e.Call.Index, e.Call.ID, e.Call.Name, e.Call.Arguments); err != nil {
				return err
			}
			continue
		}
		var with []TokenLogprob
		if !e.Reasoning {
			with, lps = lps, nil
		}
		if err := r.write(e.Reasoning, e.Text, with); err != nil {
			return err
		}
	}
	if len(lps) > 0 {
		return r.write(false, "", lps)
	}
	return nil
}

func (r *responseStream) openReasoning() {
	for _, c := range []channelReader{r.channels, r.tokens} {
		if c != nil {
			c.open()
		}
	}
}

// text writes reasoning or message text (with no log-probabilities: a
// reply parsed for calls asks none).
func (r *responseStream) text(reasoning bool, s string) error { return r.write(reasoning, s, nil) }

// end closes the output (a reply with neither text nor calls gets an
// empty message, a harmony one that never reached its final channel
// included) and fills the response object.
func (r *responseStream) end(res *Result) error {
	if err := r.start(); err != nil {
		return err
	}
	if r.calls != nil {
		if err := writeCalls(r, r.calls.Finish()); err != nil {
			return err
		}
	}
	if r.channels != nil {
		if err := r.channelEvents(r.channels.Finish(), nil); err != nil {
			return err
		}
	}
	if r.channels != nil || r.calls != nil {
		if !slices.ContainsFunc(r.items, func(it *outItem) bool { return !it.reasoning }) {
			if err := r.closeItem(); err != nil {
				return err
			}
			if err := r.openItem(false); err != nil {
				return err
			}
		}
	}
	if err := r.closeItem(); err != nil {
		return err
	}
	r.resp.Status = "completed"
	switch res.FinishReason {
	case "length":
		r.resp.Status = "incomplete"
		r.resp.IncompleteDetails = map[string]string{"reason": "max_output_tokens"}
	case FinishJouleCeiling:
		r.resp.Status = "incomplete"
		r.resp.IncompleteDetails = map[string]string{"reason": FinishJouleCeiling}
	}
	r.resp.Output = make([]any, len(r.items))
	for i, it := range r.items {
		r.resp.Output[i] = r.itemJSON(it, "completed", true)
	}
	r.resp.Usage = &responseUsage{InputTokens: res.PromptTokens, OutputTokens: res.CompletionTokens,
		OutputTokensDetail: detailsOf(res.ReasoningTokens, nil),
		TotalTokens:        res.PromptTokens + res.CompletionTokens, Energy: res.Energy, Placement: res.Placement}
	return nil
}

func (r *responseStream) finish(res *Result) error {
	if err := r.end(res); err != nil {
		return err
	}
	final := "response.completed"
	if r.resp.Status == "incomplete" {
		final = "response.incomplete"
	}
	return r.send(final, map[string]any{"response": r.resp})
}

// fail sends the Responses API's typed error event.
func (r *responseStream) fail(e *Error) error {
	return r.send("error", map[string]any{"code": e.Code, "message": e.Message, "param": e.body().Error.Param})
}
