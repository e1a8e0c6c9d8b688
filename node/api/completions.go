package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"unicode/utf8"
)

type completionRequest struct {
	sampling
	Prompt    json.RawMessage `json:"prompt"`
	MaxTokens *int            `json:"max_tokens"`
	Echo      bool            `json:"echo"`
	Suffix    *string         `json:"suffix"`
	Logprobs  *int            `json:"logprobs"`
	Grammar   *string         `json:"grammar"` // llama-server's: GBNF
	llamaOpenAI
	guidedFields // vLLM's
	// llama-server's stream extras, as on chat completions.
	ReturnProgress  bool `json:"return_progress"`
	TimingsPerToken bool `json:"timings_per_token"`
}

func parseCompletion(body []byte) (*Generation, *completionRequest, error) {
	var req completionRequest
	if err := decodeBody(body, &req); err != nil {
		return nil, nil, err
	}
	if err := checkFieldsWith(body, &req, "POST /v1/completions", llamaOpenAIRefusals); err != nil {
		return nil, nil, err
	}
	g := &Generation{Body: body}
	if err := req.apply(g); err != nil {
		return nil, nil, err
	}
	prompts, err := completionPrompts(req.Prompt)
	if err != nil {
		return nil, nil, err
	}
	g.Prompt, g.PromptIDs, g.Echo = prompts[0].text, prompts[0].ids, req.Echo
	if len(prompts) > 1 {
		g.batch = prompts
	}
	if n := req.Logprobs; n != nil {
		if *n < 0 || *n > maxLegacyLogprobs {
			return nil, nil, badRequest("logprobs", "logprobs must be between 0 and %d, got %d", maxLegacyLogprobs, *n)
		}
		g.Logprobs, g.TopLogprobs = true, *n
	}
	if req.Suffix != nil && *req.Suffix != "" {
		switch {
		case slices.ContainsFunc(prompts, func(p batchPrompt) bool { return p.ids != nil }):
			return nil, nil, badRequest("suffix", "suffix (fill in the middle) takes a text prompt, the text before the middle, not token ids")
		case g.Echo:
			return nil, nil, badRequest("suffix", "suffix (fill in the middle) and echo do not go together: the prompt is not the text before the answer")
		}
		g.Suffix = *req.Suffix
	}
	if g.MaxTokens, err = llamaMaxTokens("max_tokens", req.MaxTokens); err != nil {
		return nil, nil, err
	}
	if err := req.applyLlama(g, &req.sampling, req.MaxTokens != nil, req.Stream); err != nil {
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
	return g, &req, nil
}

// maxPromptIDs bounds a prompt of token ids as it is read, past any
// model's context (which the model then holds it to).
const maxPromptIDs = 1 << 20

// completionPrompts reads the prompts: a string or an array of token
// ids (one prompt), or an array of either (a batch, each prompt served
// as choices of its own).
func completionPrompts(raw json.RawMessage) ([]batchPrompt, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, badRequest("prompt", "prompt is required")
	}
	if text, ids, ok, err := onePrompt(raw, "prompt"); ok {
		return []batchPrompt{{text, ids}}, err
	}
	var many []json.RawMessage
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, badRequest("prompt", "prompt must be a string, an array of token ids, or an array of either")
	}
	switch {
	case len(many) == 0:
		return nil, badRequest("prompt", "prompt must hold at least one prompt")
	case len(many) > maxChoices:
		return nil, badRequest("prompt", "prompt holds %d prompts; at most %d are served at once", len(many), maxChoices)
	}
	out := make([]batchPrompt, len(many))
	for i, p := range many {
		field := fmt.Sprintf("prompt[%d]", i)
		text, ids, ok, err := onePrompt(p, field)
		if !ok {
			err = badRequest("prompt", "%s must be a string or an array of token ids", field)
		}
		if err != nil {
			return nil, err
		}
		out[i] = batchPrompt{text, ids}
	}
	return out, nil
}

// onePrompt reads raw as a string or an array of token ids; ok is false
// when it is neither kind.
func onePrompt(raw json.RawMessage, field string) (string, []uint32, bool, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return s, nil, true, nil
	}
	ids, ok, err := tokenIDs(raw, "prompt", field, maxPromptIDs)
	return "", ids, ok, err
}

type completionChoice struct {
	Text         string          `json:"text"`
	Index        int             `json:"index"`
	Logprobs     *legacyLogprobs `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	// Energy is the choice's receipt in an answer of several (chatChoice's).
	Energy any `json:"energy,omitempty"`
}

type textCompletion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint"`
	Choices           []completionChoice `json:"choices"`
	Usage             *usage             `json:"usage,omitempty"`
	// llama-server's, on a stream that asks for them.
	Timings        *llamaTimings      `json:"timings,omitempty"`
	PromptProgress *promptProgressOut `json:"prompt_progress,omitempty"`
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req *completionRequest
	m, g, ok := s.accept(w, r, func(body []byte) (g *Generation, err error) {
		g, req, err = parseCompletion(body)
		return g, err
	})
	if !ok {
		return
	}
	gs := g.Choices()
	id, created := newID("cmpl-"), s.now().Unix()
	var sse *sseWriter
	if req.Stream {
		sse = s.newSSEWriter(w)
		defer sse.pingEvery(g.SSEPing)()
	}
	cs := make([]*completionStream, len(gs))
	for i, cg := range gs {
		cs[i] = &completionStream{sse: sse, id: id, created: created, model: g.Model, index: i, multi: len(gs) > 1,
			includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
			logprobs:     g.Logprobs, top: g.TopLogprobs,
			extras: extras{progress: req.ReturnProgress && req.Stream, timings: req.TimingsPerToken && req.Stream, now: s.now, received: g.Received}}
		if !g.Echo {
			// The answer's offsets count on from its prompt's text (which
			// an echo's text holds).
			cs[i].offset = utf8.RuneCountInString(cg.Prompt)
		}
	}
	if !req.Stream {
		outs, ress, ok := s.generateAll(w, r, m, gs)
		if ok {
			choices := make([]completionChoice, len(gs))
			for i, out := range outs {
				choices[i] = completionChoice{Index: i, Text: out.Text, FinishReason: &ress[i].FinishReason, Logprobs: cs[i].legacy(out.Logprobs)}
			}
			u := usageOfAll(gs, ress, func(i int, energy any) { choices[i].Energy = energy })
			writeJSON(w, http.StatusOK, req.shape(cs[0].object(choices, u)))
		}
		return
	}
	sts := make([]choiceStream, len(cs))
	for i, c := range cs {
		sts[i] = c
	}
	s.streamAll(w, r, m, gs, sts, sse)
}

type completionStream struct {
	// index is the choice's; multi marks an answer of several choices.
	index        int
	multi        bool
	sse          *sseWriter
	id           string
	created      int64
	model        string
	includeUsage bool
	// Log-probabilities: asked for, with top alternatives; the next
	// token's text_offset, and the bytes of a character it began.
	logprobs bool
	top      int
	offset   int
	carry    []byte
	// What the stream reports beside the text, where asked.
	extras
}

// promptProgress sends a chunk of the prompt's progress: no text, and
// prompt_progress.
func (c *completionStream) promptProgress(p PromptProgress) error {
	o := c.object([]completionChoice{{Index: c.index}}, nil)
	o.PromptProgress = c.progressOut(p)
	return c.sse.event("", o)
}

// legacy renders tokens as the choice's logprobs, nil when the request
// asked for none.
func (c *completionStream) legacy(tokens []TokenLogprob) *legacyLogprobs {
	if !c.logprobs {
		return nil
	}
	var l *legacyLogprobs
	l, c.offset, c.carry = legacyOf(tokens, c.top, c.offset, c.carry)
	return l
}

func (c *completionStream) object(choices []completionChoice, u *usage) textCompletion {
	return textCompletion{ID: c.id, Object: "text_completion", Created: c.created, Model: c.model,
		SystemFingerprint: systemFingerprint, Choices: choices, Usage: u}
}

// timed is o with the timings so far, where the stream asks for them.
func (c *completionStream) timed(o textCompletion) textCompletion {
	o.Timings = c.timingsNow()
	return o
}

func (c *completionStream) delta(d Delta) error {
	if d.Text == "" && len(d.Logprobs) == 0 {
		return nil
	}
	c.output()
	return c.sse.event("", c.timed(c.object([]completionChoice{{Index: c.index, Text: d.Text, Logprobs: c.legacy(d.Logprobs)}}, nil)))
}

func (c *completionStream) finish(res *Result) error {
	if err := c.finishChoice(res); err != nil {
		return err
	}
	return c.closing([]*Result{res}, nil)
}

// finishChoice ends the choice's stream with its finish reason (and its
// receipt, in an answer of several choices).
func (c *completionStream) finishChoice(res *Result) error {
	end := completionChoice{Index: c.index, FinishReason: &res.FinishReason}
	if c.multi {
		end.Energy = res.Energy
	}
	c.decoded.Store(int64(res.CompletionTokens)) // the last chunk's timings count them all
	return c.sse.event("", c.timed(c.object([]completionChoice{end}, nil)))
}

// closing ends the answer once every choice has: the usage chunk, when
// asked for, and [DONE].
func (c *completionStream) closing(ress []*Result, gs []*Generation) error {
	if c.includeUsage {
		if err := c.sse.event("", c.object([]completionChoice{}, usageOfAll(gs, ress, nil))); err != nil {
			return err
		}
	}
	return c.sse.done()
}

// fail is chatStream.fail.
func (c *completionStream) fail(e *Error) error { return c.sse.event("", e.body()) }
