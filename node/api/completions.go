package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"unicode/utf8"
)

type completionRequest struct {
	sampling
	Prompt    json.RawMessage `json:"prompt"`
	MaxTokens *int            `json:"max_tokens"`
	Echo      bool            `json:"echo"`
	Suffix    *string         `json:"suffix"`
	Logprobs  *int            `json:"logprobs"`
}

func parseCompletion(body []byte) (*Generation, *completionRequest, error) {
	var req completionRequest
	if err := decodeBody(body, &req); err != nil {
		return nil, nil, err
	}
	if err := checkFields(body, &req, "POST /v1/completions"); err != nil {
		return nil, nil, err
	}
	g := &Generation{Body: body}
	if err := req.apply(g); err != nil {
		return nil, nil, err
	}
	prompt, ids, err := completionPrompt(req.Prompt)
	if err != nil {
		return nil, nil, err
	}
	g.Prompt, g.PromptIDs, g.Echo = prompt, ids, req.Echo
	if n := req.Logprobs; n != nil {
		if *n < 0 || *n > maxLegacyLogprobs {
			return nil, nil, badRequest("logprobs", "logprobs must be between 0 and %d, got %d", maxLegacyLogprobs, *n)
		}
		g.Logprobs, g.TopLogprobs = true, *n
	}
	if req.Suffix != nil && *req.Suffix != "" {
		switch {
		case g.PromptIDs != nil:
			return nil, nil, badRequest("suffix", "suffix (fill in the middle) takes a text prompt, the text before the middle, not token ids")
		case g.Echo:
			return nil, nil, badRequest("suffix", "suffix (fill in the middle) and echo do not go together: the prompt is not the text before the answer")
		}
		g.Suffix = *req.Suffix
	}
	if g.MaxTokens, err = maxTokens("max_tokens", req.MaxTokens); err != nil {
		return nil, nil, err
	}
	return g, &req, nil
}

// maxPromptIDs bounds a prompt of token ids as it is read, past any
// model's context (which the model then holds it to).
const maxPromptIDs = 1 << 20

// completionPrompt reads one prompt: a string, an array of token ids, or
// an array holding exactly one of either.
func completionPrompt(raw json.RawMessage) (string, []uint32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil, badRequest("prompt", "prompt is required")
	}
	if text, ids, ok, err := onePrompt(raw, "prompt"); ok {
		return text, ids, err
	}
	var many []json.RawMessage
	if err := json.Unmarshal(raw, &many); err != nil {
		return "", nil, badRequest("prompt", "prompt must be a string or an array of token ids")
	}
	if len(many) != 1 {
		return "", nil, badRequest("prompt", "prompt must hold exactly one prompt (batched prompts are not supported), got %d", len(many))
	}
	if text, ids, ok, err := onePrompt(many[0], "prompt[0]"); ok {
		return text, ids, err
	}
	return "", nil, badRequest("prompt", "prompt[0] must be a string or an array of token ids")
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
}

type textCompletion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint"`
	Choices           []completionChoice `json:"choices"`
	Usage             *usage             `json:"usage,omitempty"`
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
	c := &completionStream{id: newID("cmpl-"), created: s.now().Unix(), model: g.Model,
		includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		logprobs:     g.Logprobs, top: g.TopLogprobs}
	if !g.Echo {
		// The answer's offsets count on from its prompt's text (which an
		// echo's text holds).
		c.offset = utf8.RuneCountInString(g.Prompt)
	}
	if !req.Stream {
		out, res, ok := s.generate(w, r, m, g, nil, nil)
		if ok {
			choice := completionChoice{Text: out.Text, FinishReason: &res.FinishReason}
			choice.Logprobs = c.legacy(out.Logprobs)
			writeJSON(w, http.StatusOK, c.object([]completionChoice{choice}, usageOf(res)))
		}
		return
	}
	c.sse = s.newSSEWriter(w)
	s.generate(w, r, m, g, c, c.sse)
}

type completionStream struct {
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

func (c *completionStream) delta(d Delta) error {
	if d.Text == "" && len(d.Logprobs) == 0 {
		return nil
	}
	return c.sse.event("", c.object([]completionChoice{{Text: d.Text, Logprobs: c.legacy(d.Logprobs)}}, nil))
}

func (c *completionStream) finish(res *Result) error {
	if err := c.sse.event("", c.object([]completionChoice{{FinishReason: &res.FinishReason}}, nil)); err != nil {
		return err
	}
	if c.includeUsage {
		if err := c.sse.event("", c.object([]completionChoice{}, usageOf(res))); err != nil {
			return err
		}
	}
	return c.sse.done()
}

// fail is chatStream.fail.
func (c *completionStream) fail(e *Error) error { return c.sse.event("", e.body()) }
