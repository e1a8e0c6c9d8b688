package api

import (
	"bytes"
	"encoding/json"
	"net/http"
)

type completionRequest struct {
	sampling
	Prompt    json.RawMessage `json:"prompt"`
	MaxTokens *int            `json:"max_tokens"`
	Echo      bool            `json:"echo"`
	Suffix    *string         `json:"suffix"`
}

func parseCompletion(body []byte) (*Generation, *completionRequest, error) {
	var req completionRequest
	if err := decodeBody(body, &req); err != nil {
		return nil, nil, err
	}
	g := &Generation{Body: body}
	if err := req.apply(g); err != nil {
		return nil, nil, err
	}
	prompt, err := completionPrompt(req.Prompt)
	if err != nil {
		return nil, nil, err
	}
	g.Prompt = prompt
	if req.Echo {
		return nil, nil, badRequest("echo", "echo is not supported")
	}
	if req.Suffix != nil && *req.Suffix != "" {
		return nil, nil, badRequest("suffix", "suffix (insertion) is not supported")
	}
	if g.MaxTokens, err = maxTokens("max_tokens", req.MaxTokens); err != nil {
		return nil, nil, err
	}
	return g, &req, nil
}

// completionPrompt accepts a string or an array of exactly one string.
func completionPrompt(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", badRequest("prompt", "prompt is required")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return "", badRequest("prompt", "prompt must be a string (token-id prompts are not supported)")
	}
	if len(many) != 1 {
		return "", badRequest("prompt", "prompt must hold exactly one string (batched prompts are not supported), got %d", len(many))
	}
	return many[0], nil
}

type completionChoice struct {
	Text         string  `json:"text"`
	Index        int     `json:"index"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
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
		includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage}
	if !req.Stream {
		text, res, ok := s.generate(w, r, m, g, nil, nil)
		if ok {
			writeJSON(w, http.StatusOK, c.object([]completionChoice{{Text: text, FinishReason: &res.FinishReason}}, usageOf(res)))
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
}

func (c *completionStream) object(choices []completionChoice, u *usage) textCompletion {
	return textCompletion{ID: c.id, Object: "text_completion", Created: c.created, Model: c.model,
		SystemFingerprint: systemFingerprint, Choices: choices, Usage: u}
}

func (c *completionStream) delta(text string) error {
	if text == "" {
		return nil
	}
	return c.sse.event("", c.object([]completionChoice{{Text: text}}, nil))
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
