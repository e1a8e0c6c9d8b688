package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
)

type responsesRequest struct {
	sampling
	Input           json.RawMessage `json:"input"`
	Instructions    *string         `json:"instructions"`
	MaxOutputTokens *int            `json:"max_output_tokens"`
	Text            json.RawMessage `json:"text"`
	TopLogprobs     *int            `json:"top_logprobs"`
	Include         []string        `json:"include"`
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
		var items []struct {
			Type    string          `json:"type"`
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(input, &items); err != nil {
			return nil, nil, badRequest("input", "input must be a string or an array of messages")
		}
		for i, it := range items {
			if it.Type != "" && it.Type != "message" {
				return nil, nil, badRequest("input", "input[%d] has type %q; meshnode accepts messages only", i, it.Type)
			}
			if !knownRoles[it.Role] {
				return nil, nil, badRequest("input", "input[%d].role %q is not one of system, developer, user, assistant", i, it.Role)
			}
			content, err := messageContent(it.Content, fmt.Sprintf("input[%d].content", i))
			if err != nil {
				return nil, nil, err
			}
			g.Messages = append(g.Messages, Message{Role: it.Role, Content: content})
		}
		if len(items) == 0 {
			return nil, nil, badRequest("input", "input must hold at least one message")
		}
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
	return g, &req, nil
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

type responseUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	TotalTokens  int `json:"total_tokens"`
	Energy       any `json:"energy,omitempty"`
	Placement    any `json:"placement,omitempty"`
}

type responseObject struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	CreatedAt         int64             `json:"created_at"`
	Status            string            `json:"status"`
	Model             string            `json:"model"`
	Output            []responseItem    `json:"output"`
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
	if isHarmony(m) {
		// Its reasoning would need the Responses API's reasoning items,
		// which this endpoint does not make yet; chat completions split it.
		e := Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_model",
			"model %q answers in harmony channels (reasoning and content), which /v1/responses does not split yet: use /v1/chat/completions, whose replies carry reasoning_content", g.Model)
		e.Param = "model"
		writeError(w, e)
		return
	}
	rs := &responseStream{resp: responseObject{ID: newID("resp_"), Object: "response", CreatedAt: s.now().Unix(),
		Status: "in_progress", Model: g.Model, Output: []responseItem{}}, itemID: newID("msg_")}
	rs.logprobs = g.Logprobs
	if !req.Stream {
		out, res, ok := s.generate(w, r, m, g, nil, nil)
		if ok {
			rs.complete(out.Text, itemsOf(out.Logprobs), res)
			writeJSON(w, http.StatusOK, rs.resp)
		}
		return
	}
	rs.sse = s.newSSEWriter(w)
	s.generate(w, r, m, g, rs, rs.sse)
}

// responseStream emits the Responses API's typed events: created,
// in_progress, the item and part opening, text deltas, then the closing
// events and response.completed.
type responseStream struct {
	sse    *sseWriter
	resp   responseObject
	itemID string
	text   bytes.Buffer
	// logprobs: asked for; lps are the tokens' so far.
	logprobs bool
	lps      []logprobItemOut
	seq      int
	started  bool
}

func (r *responseStream) send(typ string, fields map[string]any) error {
	fields["type"] = typ
	fields["sequence_number"] = r.seq
	r.seq++
	return r.sse.event(typ, fields)
}

func (r *responseStream) item(status string, text *string) responseItem {
	it := responseItem{Type: "message", ID: r.itemID, Status: status, Role: "assistant", Content: []responseText{}}
	if text != nil {
		it.Content = append(it.Content, r.part(*text))
	}
	return it
}

// part is the output_text content part, with the tokens'
// log-probabilities when they were asked for.
func (r *responseStream) part(text string) responseText {
	p := responseText{Type: "output_text", Text: text, Annotations: []any{}}
	if r.logprobs {
		p.Logprobs = r.lps
		if p.Logprobs == nil {
			p.Logprobs = []logprobItemOut{}
		}
	}
	return p
}

func (r *responseStream) open() error {
	if r.started {
		return nil
	}
	r.started = true
	steps := []struct {
		typ    string
		fields map[string]any
	}{
		{"response.created", map[string]any{"response": r.resp}},
		{"response.in_progress", map[string]any{"response": r.resp}},
		{"response.output_item.added", map[string]any{"output_index": 0, "item": r.item("in_progress", nil)}},
		{"response.content_part.added", map[string]any{"item_id": r.itemID, "output_index": 0, "content_index": 0,
			"part": responseText{Type: "output_text", Annotations: []any{}}}},
	}
	for _, s := range steps {
		if err := r.send(s.typ, s.fields); err != nil {
			return err
		}
	}
	return nil
}

func (r *responseStream) delta(d Delta) error {
	if err := r.open(); err != nil {
		return err
	}
	if d.Text == "" && len(d.Logprobs) == 0 {
		return nil
	}
	r.text.WriteString(d.Text)
	fields := map[string]any{"item_id": r.itemID, "output_index": 0, "content_index": 0, "delta": d.Text}
	if r.logprobs {
		items := itemsOf(d.Logprobs)
		r.lps = append(r.lps, items...)
		fields["logprobs"] = items
	}
	return r.send("response.output_text.delta", fields)
}

// complete fills the response object for a generation that ended, with
// its tokens' log-probabilities when they were asked for.
func (r *responseStream) complete(text string, lps []logprobItemOut, res *Result) {
	if r.logprobs {
		r.lps = lps
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
	r.resp.Output = []responseItem{r.item("completed", &text)}
	r.resp.Usage = &responseUsage{InputTokens: res.PromptTokens, OutputTokens: res.CompletionTokens,
		TotalTokens: res.PromptTokens + res.CompletionTokens, Energy: res.Energy, Placement: res.Placement}
}

func (r *responseStream) finish(res *Result) error {
	if err := r.open(); err != nil {
		return err
	}
	text := r.text.String()
	r.complete(text, r.lps, res)
	final := "response.completed"
	if r.resp.Status == "incomplete" {
		final = "response.incomplete"
	}
	steps := []struct {
		typ    string
		fields map[string]any
	}{
		{"response.output_text.done", r.textDone(text)},
		{"response.content_part.done", map[string]any{"item_id": r.itemID, "output_index": 0, "content_index": 0,
			"part": r.part(text)}},
		{"response.output_item.done", map[string]any{"output_index": 0, "item": r.resp.Output[0]}},
		{final, map[string]any{"response": r.resp}},
	}
	for _, s := range steps {
		if err := r.send(s.typ, s.fields); err != nil {
			return err
		}
	}
	return nil
}

// textDone is the response.output_text.done event's fields.
func (r *responseStream) textDone(text string) map[string]any {
	f := map[string]any{"item_id": r.itemID, "output_index": 0, "content_index": 0, "text": text}
	if r.logprobs {
		f["logprobs"] = r.part(text).Logprobs
	}
	return f
}

// fail sends the Responses API's typed error event.
func (r *responseStream) fail(e *Error) error {
	return r.send("error", map[string]any{"code": e.Code, "message": e.Message, "param": e.body().Error.Param})
}
