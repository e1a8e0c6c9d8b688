package api

import (
	"encoding/json"
	"fmt"
	"net/http"
)

type chatRequest struct {
	sampling
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Logprobs            *bool           `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	ResponseFormat      json.RawMessage `json:"response_format"`
}

func parseChat(body []byte) (*Generation, *chatRequest, error) {
	var req chatRequest
	if err := decodeBody(body, &req); err != nil {
		return nil, nil, err
	}
	if err := checkFields(body, &req, "POST /v1/chat/completions"); err != nil {
		return nil, nil, err
	}
	g := &Generation{Body: body}
	if err := req.apply(g); err != nil {
		return nil, nil, err
	}
	if len(req.Messages) == 0 {
		return nil, nil, badRequest("messages", "messages must hold at least one message")
	}
	for i, m := range req.Messages {
		if !knownRoles[m.Role] {
			return nil, nil, badRequest("messages", "messages[%d].role %q is not one of system, developer, user, assistant, tool", i, m.Role)
		}
		text, err := messageContent([]byte(m.Content), fmt.Sprintf("messages[%d].content", i))
		if err != nil {
			return nil, nil, err
		}
		g.Messages = append(g.Messages, Message{Role: m.Role, Content: text})
	}
	n, err := maxTokens("max_completion_tokens", req.MaxCompletionTokens, req.MaxTokens)
	if err != nil {
		return nil, nil, err
	}
	g.MaxTokens = n
	if err := chatLogprobsRequest(g, req.Logprobs, req.TopLogprobs); err != nil {
		return nil, nil, err
	}
	if err := parseResponseFormat(req.ResponseFormat, g); err != nil {
		return nil, nil, err
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
	Message      *chatMessage  `json:"message,omitempty"`
	Delta        *chatMessage  `json:"delta,omitempty"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

type chatMessage struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
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
}

const systemFingerprint = "meshnode"

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	var req *chatRequest
	m, g, ok := s.accept(w, r, func(body []byte) (g *Generation, err error) {
		g, req, err = parseChat(body)
		return g, err
	})
	if !ok {
		return
	}
	id, created := newID("chatcmpl-"), s.now().Unix()
	if !req.Stream {
		out, res, ok := s.generate(w, r, m, g, nil, nil)
		if !ok {
			return
		}
		choice := chatChoice{Message: &chatMessage{Role: "assistant", Content: &out.Text}, FinishReason: &res.FinishReason}
		if g.Logprobs {
			choice.Logprobs = &chatLogprobs{Content: itemsOf(out.Logprobs)}
		}
		writeJSON(w, http.StatusOK, chatCompletion{
			ID: id, Object: "chat.completion", Created: created, Model: g.Model, SystemFingerprint: systemFingerprint,
			Choices: []chatChoice{choice},
			Usage:   usageOf(res),
		})
		return
	}
	sse := s.newSSEWriter(w)
	st := &chatStream{sse: sse, id: id, created: created, model: g.Model, logprobs: g.Logprobs,
		includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage}
	s.generate(w, r, m, g, st, sse)
}

type chatStream struct {
	sse          *sseWriter
	id           string
	created      int64
	model        string
	includeUsage bool
	logprobs     bool
	sentRole     bool
}

func (c *chatStream) chunk(choices []chatChoice, u *usage) error {
	ch := chatCompletion{ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: c.model,
		SystemFingerprint: systemFingerprint, Choices: choices}
	if c.includeUsage {
		ch.Usage = u // null until the last chunk
	}
	return c.sse.event("", ch)
}

// role sends the opening chunk that names the assistant role, once.
func (c *chatStream) role() error {
	if c.sentRole {
		return nil
	}
	c.sentRole = true
	empty := ""
	return c.chunk([]chatChoice{{Delta: &chatMessage{Role: "assistant", Content: &empty}}}, nil)
}

func (c *chatStream) delta(d Delta) error {
	if err := c.role(); err != nil {
		return err
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

func (c *chatStream) finish(res *Result) error {
	if err := c.role(); err != nil {
		return err
	}
	if err := c.chunk([]chatChoice{{Delta: &chatMessage{}, FinishReason: &res.FinishReason}}, nil); err != nil {
		return err
	}
	if c.includeUsage {
		if err := c.chunk([]chatChoice{}, usageOf(res)); err != nil {
			return err
		}
	}
	return c.sse.done()
}

// fail sends the error as OpenAI does mid-stream: a data-only event
// holding {"error": ...}, and no [DONE].
func (c *chatStream) fail(e *Error) error { return c.sse.event("", e.body()) }
