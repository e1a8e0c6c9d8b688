package api

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/meshnode/meshnode/gguf/chat/toolcall"
)

type chatRequest struct {
	sampling
	Messages            []chatMessageIn `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Logprobs            *bool           `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	ResponseFormat      json.RawMessage `json:"response_format"`
	Grammar             *string         `json:"grammar"` // llama-server's: GBNF
	// Prediction is OpenAI's predicted output (parsePrediction).
	Prediction json.RawMessage `json:"prediction"`

	Tools             json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`

	tools toolChoice // resolved from the three fields above

	// ReasoningEffort is given to the model's chat template (gpt-oss's).
	ReasoningEffort *string `json:"reasoning_effort"`
	// ChatTemplateKwargs are variables for the chat template, as
	// llama-server and vLLM take them; enable_thinking only.
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
	// ReasoningFormat is llama-server's: how a reply's reasoning comes.
	ReasoningFormat *string `json:"reasoning_format"`
	// llama-server's stream extras (its web UI asks for them): events
	// of the prompt's progress, and the timings in every event.
	ReturnProgress  bool `json:"return_progress"`
	TimingsPerToken bool `json:"timings_per_token"`

	// llama-server's, which its clients send on chat too (llama.vim's
	// instruction editing).
	llamaOpenAI
	guidedFields // vLLM's
	// ThinkingBudgetTokens is llama-server's reasoning budget, which
	// Continue sends: -1 none, 0 no reasoning, N at most N tokens.
	ThinkingBudgetTokens *int `json:"thinking_budget_tokens"`
	// ReasoningControl is llama-server's, which its web UI sends on every
	// chat: it arms POST /v1/chat/completions/control, which a node
	// refuses (chatcontrol.go); arming changes nothing in the answer.
	ReasoningControl *bool `json:"reasoning_control"`
	// ContinueFinalMessage and AddGenerationPrompt are vLLM's, which
	// llama-server's web UI sends to continue an answer: the final
	// assistant message is continued, not answered (Generation.Prefill).
	ContinueFinalMessage *bool `json:"continue_final_message"`
	AddGenerationPrompt  *bool `json:"add_generation_prompt"`
}

// continuation reads continue_final_message and add_generation_prompt:
// the final assistant message becomes the prefill the reply continues.
func (req *chatRequest) continuation(g *Generation) error {
	cont := req.ContinueFinalMessage != nil && *req.ContinueFinalMessage
	addPrompt := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
	switch {
	case !cont && addPrompt:
		return nil
	case !cont:
		return badRequest("add_generation_prompt", "add_generation_prompt false is taken only with continue_final_message true (the final assistant message continued): a conversation rendered without the prompt for a reply would have the model write another turn")
	case addPrompt && req.AddGenerationPrompt != nil:
		return badRequest("add_generation_prompt", "continue_final_message continues the final message, and add_generation_prompt true would open another: send add_generation_prompt false, or leave it out")
	}
	last := &g.Messages[len(g.Messages)-1]
	switch {
	case last.Role != "assistant":
		return badRequest("continue_final_message", "continue_final_message continues the final message, which must be the assistant's; it is %q", last.Role)
	case len(last.ToolCalls) > 0:
		return badRequest("continue_final_message", "the final assistant message calls tools: a call is not continued; send the results after it")
	case last.Reasoning != "":
		return badRequest("continue_final_message", "the final assistant message gives back its reasoning (reasoning_content): a node continues the message's content only; leave the reasoning out")
	}
	g.Prefill, g.Continued = last.Content, true
	g.Messages = g.Messages[:len(g.Messages)-1]
	if len(g.Messages) == 0 {
		return badRequest("messages", "continue_final_message needs a conversation before the message it continues")
	}
	return nil
}

func parseChat(body []byte) (*Generation, *chatRequest, error) {
	var req chatRequest
	if err := decodeBody(body, &req); err != nil {
		return nil, nil, err
	}
	if err := checkFieldsWith(body, &req, "POST /v1/chat/completions", llamaOpenAIRefusals); err != nil {
		return nil, nil, err
	}
	// llama-server takes a chat that names no model, for the one it
	// holds: the node's one model (Server.resolveModel).
	req.modelOptional = true
	g := &Generation{Body: body}
	if err := req.apply(g); err != nil {
		return nil, nil, err
	}
	if len(req.Messages) == 0 {
		return nil, nil, badRequest("messages", "messages must hold at least one message")
	}
	for i := range req.Messages {
		m, err := req.Messages[i].message(i)
		if err != nil {
			return nil, nil, err
		}
		g.Messages = append(g.Messages, m)
	}
	if err := req.continuation(g); err != nil {
		return nil, nil, err
	}
	var err error
	if req.tools, err = req.parseTools(g); err != nil {
		return nil, nil, err
	}
	// max_completion_tokens over the older max_tokens.
	n, err := llamaMaxTokens("max_tokens", req.MaxTokens)
	if req.MaxCompletionTokens != nil {
		n, err = llamaMaxTokens("max_completion_tokens", req.MaxCompletionTokens)
	}
	if err != nil {
		return nil, nil, err
	}
	g.MaxTokens = n
	if err := req.applyLlama(g, &req.sampling, req.MaxTokens != nil || req.MaxCompletionTokens != nil, req.Stream); err != nil {
		return nil, nil, err
	}
	if err := chatLogprobsRequest(g, req.Logprobs, req.TopLogprobs); err != nil {
		return nil, nil, err
	}
	if err := parseResponseFormat(req.ResponseFormat, g); err != nil {
		return nil, nil, err
	}
	if err := parseGBNF(req.Grammar, g); err != nil {
		return nil, nil, err
	}
	if err := req.guide(g); err != nil {
		return nil, nil, err
	}
	if err := checkChoices(g); err != nil {
		return nil, nil, err
	}
	if g.Prediction, err = parsePrediction(req.Prediction, g); err != nil {
		return nil, nil, err
	}
	switch {
	case req.ReasoningEffort != nil && *req.ReasoningEffort == "none":
		g.thinking = &thinkSwitch{param: "reasoning_effort"} // off
	case req.ReasoningEffort != nil:
		if g.ReasoningEffort, err = reasoningEffort("reasoning_effort", *req.ReasoningEffort); err != nil {
			return nil, nil, err
		}
	}
	kw, err := templateKwargs(req.ChatTemplateKwargs)
	if err != nil {
		return nil, nil, err
	}
	if kw != nil {
		if g.thinking != nil && g.thinking.on != kw.on {
			return nil, nil, badRequest(kw.param, "%s and reasoning_effort \"none\" disagree on thinking", kw.param)
		}
		g.thinking = kw
	}
	if err := req.thinkingBudget(g); err != nil {
		return nil, nil, err
	}
	if g.reasoning, err = reasoningFormat(req.ReasoningFormat); err != nil {
		return nil, nil, err
	}
	if g.reasoning != reasoningSplit && req.tools.active() {
		return nil, nil, badRequest("reasoning_format", "reasoning_format %q cannot be combined with tools: a reply's calls are read from it as the model's format splits it", *req.ReasoningFormat)
	}
	if g.Logprobs && req.tools.active() {
		// Which of a reply's tokens are content and which make its calls
		// is known only once it is parsed: log-probabilities are not
		// split between them.
		return nil, nil, badRequest("logprobs", "logprobs cannot be combined with tools (tool_choice %q); send tool_choice \"none\" or no logprobs", req.tools.mode)
	}
	if g.Format == FormatGBNF && req.tools.active() {
		// A GBNF grammar holds the whole output, and would leave the
		// model no way to write a call in its own format. (A JSON
		// response format is offered beside the calls: forceTools.)
		return nil, nil, badRequest("grammar", "grammar cannot be combined with tools (tool_choice %q); send tool_choice \"none\" or no grammar", req.tools.mode)
	}
	return g, &req, nil
}

// chatLogprobsRequest reads logprobs and top_logprobs as chat completions
// define them: top_logprobs (0 … 20) needs logprobs true.
func chatLogprobsRequest(g *Generation, on *bool, top *int) error {
	g.Logprobs = on != nil && *on
	if top == nil {
		return nil
	}
	if *top < 0 || *top > maxTopLogprobs {
		return badRequest("top_logprobs", "top_logprobs must be between 0 and %d, got %d", maxTopLogprobs, *top)
	}
	if *top > 0 && !g.Logprobs {
		return badRequest("top_logprobs", "top_logprobs needs logprobs set to true")
	}
	g.TopLogprobs = *top
	return nil
}

type chatChoice struct {
	Index        int           `json:"index"`
	Message      *replyMessage `json:"message,omitempty"`
	Delta        *chatMessage  `json:"delta,omitempty"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
	// Energy is the choice's receipt where the answer has several
	// choices, each a serve of its own (usage.energy holds the one
	// receipt of an answer with one).
	Energy any `json:"energy,omitempty"`
}

// chatMessage is a stream's delta. ReasoningContent is a harmony model's
// analysis channel, as llama-server streams it.
type chatMessage struct {
	Role             string        `json:"role,omitempty"`
	Content          *string       `json:"content,omitempty"`
	ReasoningContent *string       `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallOut `json:"tool_calls,omitempty"`
}

// replyMessage is a completion's message: content is null when the reply
// is only tool calls; reasoning_content is there when a harmony model
// reasoned.
type replyMessage struct {
	Role             string        `json:"role"`
	Content          *string       `json:"content"`
	ReasoningContent *string       `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallOut `json:"tool_calls,omitempty"`
}

// chatCompletion is a completion, or one chunk of a stream. Usage is an
// interface so that a stream that asked for usage can send it as an
// explicit null on every chunk but the last, as OpenAI does: a nil *usage
// in it encodes as null, while a nil interface is left out.
type chatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           []chatChoice `json:"choices"`
	Usage             any          `json:"usage,omitempty"`
	// llama-server's, on a stream that asks for them.
	Timings        *llamaTimings      `json:"timings,omitempty"`
	PromptProgress *promptProgressOut `json:"prompt_progress,omitempty"`
}

const systemFingerprint = "meshnode"

// thinkingBudget reads llama-server's thinking_budget_tokens: a budget
// of N thinks at most N tokens (grammar.Budgeted, as Anthropic's
// budget_tokens), 0 does not think (the switch off), -1 is unbounded.
func (req *chatRequest) thinkingBudget(g *Generation) error {
	n := req.ThinkingBudgetTokens
	if n == nil || *n == -1 {
		return nil
	}
	const param = "thinking_budget_tokens"
	switch {
	case *n < -1 || *n > maxThinkBudget:
		return badRequest(param, "thinking_budget_tokens must be -1 (unbounded), 0 (no thinking) or up to %d, got %d", maxThinkBudget, *n)
	case g.thinking != nil && g.thinking.on != (*n > 0):
		return badRequest(param, "thinking_budget_tokens and %s disagree on thinking", g.thinking.param)
	case g.MaxTokens > 0 && *n >= g.MaxTokens:
		return badRequest(param, "thinking_budget_tokens (%d) must be less than max_tokens (%d)", *n, g.MaxTokens)
	}
	g.thinking = &thinkSwitch{param: param, on: *n > 0}
	g.ThinkBudget = *n
	return nil
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	var req *chatRequest
	m, g, ok := s.accept(w, r, func(body []byte) (g *Generation, err error) {
		g, req, err = parseChat(body)
		return g, err
	})
	if !ok {
		return
	}
	if err := applyThinking(m, g); err != nil {
		writeError(w, err)
		return
	}
	format, prefix, err := setupTools(m, g)
	if err != nil {
		writeError(w, err)
		return
	}
	id, created := newID("chatcmpl-"), s.now().Unix()
	gs := g.Choices()
	if !req.Stream {
		outs, ress, ok := s.generateAll(w, r, m, gs)
		if !ok {
			return
		}
		choices := make([]chatChoice, len(gs))
		for i := range gs {
			choices[i] = chatReply(m, outs[i], ress[i], g, req.tools, format, prefix)
			choices[i].Index = i
		}
		var answer any = chatCompletion{
			ID: id, Object: "chat.completion", Created: created, Model: g.Model, SystemFingerprint: systemFingerprint,
			Choices: choices,
			Usage:   usageOfAll(gs, ress, func(i int, energy any) { choices[i].Energy = energy }),
		}
		writeJSON(w, http.StatusOK, req.shape(answer))
		return
	}
	sse := s.newSSEWriter(w)
	defer sse.pingEvery(g.SSEPing)()
	sts := make([]choiceStream, len(gs))
	for i := range gs {
		st := &chatStream{sse: sse, id: id, created: created, model: g.Model, logprobs: g.Logprobs,
			includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage, index: i, multi: len(gs) > 1, format: format}
		st.extras = extras{progress: req.ReturnProgress, timings: req.TimingsPerToken, now: s.now, received: g.Received}
		st.channels, st.calls = readersFor(m, g, req.tools.active(), format, prefix)
		st.tokens = newChannels(m, g, nil)
		st.parallel = req.tools.parallel
		sts[i] = st
	}
	s.streamAll(w, r, m, gs, sts, sse)
}

// chatReply is a whole answer's choice: its message (for a model whose
// replies carry reasoning, split into reasoning and content; with tools,
// parsed for calls) and its logprobs.
func chatReply(m Model, out Delta, res *Result, g *Generation, tools toolChoice, format toolcall.Format, prefix string) chatChoice {
	msg := &replyMessage{Role: "assistant", Content: &out.Text}
	channels, calls := readersFor(m, g, tools.active(), format, prefix)
	switch {
	case channels != nil:
		if res.reasoningOpen {
			channels.open()
		}
		reasoning, content, cs := readWhole(channels, out.Text)
		for i := range cs {
			if cs[i].ID == "" {
				cs[i].ID = toolcall.NewID(format)
			}
		}
		msg.Content, msg.ToolCalls = toolReply(content, cs, tools)
		if reasoning != "" {
			msg.ReasoningContent = &reasoning
		}
	case calls != nil:
		content, cs := calls.Parse(out.Text)
		msg.Content, msg.ToolCalls = toolReply(content, cs, tools)
	}
	choice := chatChoice{Message: msg, FinishReason: finishReason(res, len(msg.ToolCalls))}
	if g.Logprobs {
		lps := out.Logprobs
		if tokens := newChannels(m, g, nil); tokens != nil {
			if res.reasoningOpen {
				tokens.open()
			}
			lps = filterContent(tokens, lps)
		}
		choice.Logprobs = &chatLogprobs{Content: itemsOf(lps)}
	}
	return choice
}

type chatStream struct {
	// index is the choice's; multi marks an answer of several choices.
	index        int
	multi        bool
	sse          *sseWriter
	id           string
	created      int64
	model        string
	includeUsage bool
	logprobs     bool
	sentRole     bool
	// calls parses the text for tool calls when the request has tools;
	// parallel false keeps only the first call.
	calls    *toolcall.Parser
	parallel bool
	// channels splits a reply that carries reasoning into reasoning,
	// content and (with tools) calls, of which channelCalls were made;
	// format names the calls' ids.
	channels     channelReader
	channelCalls int
	format       toolcall.Format
	// tokens reads the same reply token by token, for the content
	// tokens' log-probabilities (filterContent).
	tokens channelReader
	// What the stream reports beside the text, where asked.
	extras
}

// promptProgress sends a chunk of the prompt's progress: the role's
// delta, as llama-server sends it, with prompt_progress.
func (c *chatStream) promptProgress(p PromptProgress) error {
	c.sentRole = true
	ch := c.newChunk([]chatChoice{{Index: c.index, Delta: &chatMessage{Role: "assistant"}}})
	ch.PromptProgress = c.progressOut(p)
	return c.sse.event("", ch)
}

func (c *chatStream) openReasoning() {
	for _, r := range []channelReader{c.channels, c.tokens} {
		if r != nil {
			r.open()
		}
	}
}

func (c *chatStream) chunk(choices []chatChoice, u *usage) error {
	for i := range choices {
		choices[i].Index = c.index
	}
	ch := c.newChunk(choices)
	if c.includeUsage {
		ch.Usage = u // null until the last chunk
	}
	ch.Timings = c.timingsNow()
	return c.sse.event("", ch)
}

func (c *chatStream) newChunk(choices []chatChoice) chatCompletion {
	return chatCompletion{ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: c.model,
		SystemFingerprint: systemFingerprint, Choices: choices}
}

// role sends the opening chunk that names the assistant role, once.
func (c *chatStream) role() error {
	if c.sentRole {
		return nil
	}
	c.sentRole = true
	d := &chatMessage{Role: "assistant"}
	if c.calls == nil && (c.channels == nil || !c.channels.calling()) {
		// With tools the reply may be calls only, whose content stays
		// unset (null once accumulated), as OpenAI's is.
		empty := ""
		d.Content = &empty
	}
	return c.chunk([]chatChoice{{Delta: d}}, nil)
}

func (c *chatStream) delta(d Delta) error {
	c.output()
	if err := c.role(); err != nil {
		return err
	}
	if c.calls != nil {
		// A request with tools asks no logprobs (parseChat).
		return c.events(c.calls.Feed(d.Text))
	}
	if c.channels != nil {
		var lps []TokenLogprob
		if c.logprobs {
			lps = filterContent(c.tokens, d.Logprobs)
		}
		return c.channelEvents(c.channels.Feed(d.Text), lps)
	}
	if d.Text == "" && len(d.Logprobs) == 0 {
		return nil
	}
	choice := chatChoice{Delta: &chatMessage{Content: &d.Text}}
	if c.logprobs {
		choice.Logprobs = &chatLogprobs{Content: itemsOf(d.Logprobs)}
	}
	return c.chunk([]chatChoice{choice}, nil)
}

// events sends what the tool-call parser made of the text: content and
// tool-call deltas, as OpenAI streams them.
func (c *chatStream) events(evs []toolcall.Event) error {
	for _, e := range evs {
		d := &chatMessage{}
		switch {
		case e.Call == nil:
			d.Content = &e.Content
		case !c.parallel && e.Call.Index > 0:
			continue
		default:
			index := e.Call.Index
			out := toolCallOut{Index: &index, ID: e.Call.ID, Function: toolFunctionOut{Name: e.Call.Name, Arguments: e.Call.Arguments}}
			if e.Call.ID != "" {
				out.Type = "function"
			}
			d.ToolCalls = []toolCallOut{out}
		}
		if err := c.chunk([]chatChoice{{Delta: d}}, nil); err != nil {
			return err
		}
	}
	return nil
}

// channelEvents sends a reply's pieces as reasoning_content, content or
// tool-call deltas; lps (the content tokens' log-probabilities, when
// asked for) go with the first content delta, or a content delta of
// their own.
func (c *chatStream) channelEvents(evs []replyEvent, lps []TokenLogprob) error {
	for _, e := range evs {
		d := &chatMessage{Content: &e.Text}
		var choice chatChoice
		switch {
		case e.Call != nil && !c.parallel && e.Call.Index > 0:
			continue
		case e.Call != nil:
			index := e.Call.Index
			out := toolCallOut{Index: &index, Function: toolFunctionOut{Name: e.Call.Name, Arguments: e.Call.Arguments}}
			if e.Call.Index == c.channelCalls {
				// The call's first piece: its id and name.
				out.ID, out.Type = e.Call.ID, "function"
				if out.ID == "" {
					out.ID = toolcall.NewID(c.format)
				}
				c.channelCalls++
			}
			d = &chatMessage{ToolCalls: []toolCallOut{out}}
		case e.Reasoning:
			d = &chatMessage{ReasoningContent: &e.Text}
		case c.logprobs:
			choice.Logprobs = &chatLogprobs{Content: itemsOf(lps)}
			lps = nil
		}
		choice.Delta = d
		if err := c.chunk([]chatChoice{choice}, nil); err != nil {
			return err
		}
	}
	if len(lps) > 0 {
		empty := ""
		return c.chunk([]chatChoice{{Delta: &chatMessage{Content: &empty}, Logprobs: &chatLogprobs{Content: itemsOf(lps)}}}, nil)
	}
	return nil
}

func (c *chatStream) finish(res *Result) error {
	if err := c.finishChoice(res); err != nil {
		return err
	}
	return c.closing([]*Result{res}, nil)
}

// finishChoice ends the choice's stream: what its parsers held back, and
// its finish reason (with its receipt, in an answer of several choices).
func (c *chatStream) finishChoice(res *Result) error {
	c.decoded.Store(int64(res.CompletionTokens)) // the last chunk's timings count them all
	if err := c.role(); err != nil {
		return err
	}
	calls := 0
	if c.channels != nil {
		if err := c.channelEvents(c.channels.Finish(), nil); err != nil {
			return err
		}
		calls = c.channelCalls
		if !c.parallel {
			calls = min(calls, 1)
		}
	}
	if c.calls != nil {
		if err := c.events(c.calls.Finish()); err != nil {
			return err
		}
		calls = c.calls.Calls()
	}
	end := chatChoice{Delta: &chatMessage{}, FinishReason: finishReason(res, calls)}
	if c.multi {
		end.Energy = res.Energy
	}
	return c.chunk([]chatChoice{end}, nil)
}

// closing ends the answer once every choice has: the usage chunk, when
// asked for, and [DONE].
func (c *chatStream) closing(ress []*Result, gs []*Generation) error {
	if c.includeUsage {
		if err := c.chunk([]chatChoice{}, usageOfAll(gs, ress, nil)); err != nil {
			return err
		}
	}
	return c.sse.done()
}

// fail sends the error as OpenAI does mid-stream: a data-only event
// holding {"error": ...}, and no [DONE].
func (c *chatStream) fail(e *Error) error { return c.sse.event("", e.body()) }

// parsePrediction reads OpenAI's prediction, {"type": "content",
// "content": text or text parts}: text the answer is expected to repeat
// in large part, which drafts the serve's speculative rounds
// (Generation.Prediction). It is refused beside speculation turned off,
// which it would contradict.
func parsePrediction(raw json.RawMessage, g *Generation) (string, error) {
	if isAbsent(raw) || isNull(compact(raw)) {
		return "", nil
	}
	var p struct {
		Type    string          `json:"type"`
		Content json.RawMessage `json:"content"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return "", badRequest("prediction", "prediction must be an object {\"type\": \"content\", \"content\": ...}: %v", err)
	}
	if p.Type != "content" {
		return "", badRequest("prediction", "prediction.type must be \"content\", got %q", p.Type)
	}
	text, err := messageContent(p.Content, "prediction.content")
	if err != nil {
		return "", err
	}
	switch {
	case text == "":
		return "", nil
	case g.Speculative != nil && !*g.Speculative:
		return "", badRequest("prediction", "prediction drafts speculative rounds, and speculative is false")
	}
	return text, nil
}
