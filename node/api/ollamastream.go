package api

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"

	"github.com/meshnode/meshnode/gguf/chat/toolcall"
)

// ollamaChunk is one object of an Ollama answer: a piece of a stream
// (done false) or the last, whole or streamed (done true, with the
// counts, the timings and meshnode's receipt). Chat answers carry
// message, generate answers response (always, "" included) and
// thinking.
type ollamaChunk struct {
	Model              string            `json:"model"`
	CreatedAt          string            `json:"created_at"`
	Message            *ollamaMessageOut `json:"message,omitempty"`
	Response           *string           `json:"response,omitempty"`
	Thinking           string            `json:"thinking,omitempty"`
	Done               bool              `json:"done"`
	DoneReason         string            `json:"done_reason,omitempty"`
	TotalDuration      int64             `json:"total_duration,omitempty"`
	LoadDuration       int64             `json:"load_duration,omitempty"`
	PromptEvalCount    int               `json:"prompt_eval_count,omitempty"`
	PromptEvalDuration int64             `json:"prompt_eval_duration,omitempty"`
	EvalCount          int               `json:"eval_count,omitempty"`
	EvalDuration       int64             `json:"eval_duration,omitempty"`
	// Energy is meshnode's: the serve's receipt, usage.energy's object.
	Energy any `json:"energy,omitempty"`
}

type ollamaMessageOut struct {
	Role      string           `json:"role"`
	Content   string           `json:"content"`
	Thinking  string           `json:"thinking,omitempty"`
	ToolCalls []ollamaToolCall `json:"tool_calls,omitempty"`
}

// ollamaToolCall is a call as Ollama gives it: its arguments an object
// (where the model wrote arguments that are not one, their text as a
// string, never made up).
type ollamaToolCall struct {
	Function struct {
		Index     int             `json:"index"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// ollamaStream writes an Ollama answer: chunks as the text comes (a
// stream), the calls once they are whole, then the done chunk; with no
// writer it builds the whole answer (whole).
type ollamaStream struct {
	sse      *sseWriter
	generate bool // /api/generate's shape
	model    string
	now      func() time.Time
	received time.Time
	first    time.Time
	// calls parses the reply for tool calls (a chat with tools);
	// channels splits a harmony model's reply into thinking, content
	// and calls.
	calls    *toolcall.Parser
	channels channelReader

	content, thinking strings.Builder
	tools             []ollamaToolCall
	args              []strings.Builder
	whole             ollamaChunk
}

func (s *Server) newOllamaStream(g *Generation, generate bool) *ollamaStream {
	return &ollamaStream{generate: generate, model: g.Model, now: s.now, received: g.Received}
}

func (o *ollamaStream) chunk(done bool) ollamaChunk {
	c := ollamaChunk{Model: o.model, CreatedAt: o.now().UTC().Format(time.RFC3339Nano), Done: done}
	if o.generate {
		empty := ""
		c.Response = &empty
	} else {
		c.Message = &ollamaMessageOut{Role: "assistant"}
	}
	return c
}

// text adds text to the content or the thinking, sending it at once in
// a stream.
func (o *ollamaStream) text(thinking bool, text string) error {
	if text == "" {
		return nil
	}
	if o.first.IsZero() {
		o.first = o.now()
	}
	if thinking {
		o.thinking.WriteString(text)
	} else {
		o.content.WriteString(text)
	}
	if o.sse == nil {
		return nil
	}
	c := o.chunk(false)
	switch {
	case o.generate && thinking:
		c.Thinking = text
	case o.generate:
		c.Response = &text
	case thinking:
		c.Message.Thinking = text
	default:
		c.Message.Content = text
	}
	return o.sse.line(c)
}

// call adds a piece of call index: its first piece names it, the rest
// add to its arguments. Ollama's calls carry no id: the model's, if it
// wrote one, is not kept.
func (o *ollamaStream) call(index int, _, name, args string) error {
	if o.first.IsZero() {
		o.first = o.now()
	}
	if index == len(o.tools) {
		var c ollamaToolCall
		c.Function.Index, c.Function.Name = index, name
		o.tools = append(o.tools, c)
		o.args = append(o.args, strings.Builder{})
	}
	if index < len(o.args) {
		o.args[index].WriteString(args)
	}
	return nil
}

func (o *ollamaStream) openReasoning() {
	if o.channels != nil {
		o.channels.open()
	}
}

func (o *ollamaStream) delta(d Delta) error {
	switch {
	case o.channels != nil:
		return writeChannels(o, o.channels.Feed(d.Text))
	case o.calls != nil:
		return writeCalls(o, o.calls.Feed(d.Text))
	}
	return o.text(false, d.Text)
}

// end takes in what the parsers held back and fills in the last chunk.
func (o *ollamaStream) end(res *Result) error {
	var err error
	switch {
	case o.channels != nil:
		err = writeChannels(o, o.channels.Finish())
	case o.calls != nil:
		err = writeCalls(o, o.calls.Finish())
	}
	if err != nil {
		return err
	}
	for i := range o.tools {
		args := bytes.TrimSpace([]byte(o.args[i].String()))
		switch {
		case len(args) == 0:
			args = []byte("{}")
		case args[0] != '{' || !json.Valid(args):
			args = mustJSON(o.args[i].String())
		}
		o.tools[i].Function.Arguments = args
	}
	c := o.chunk(true)
	c.DoneReason = res.FinishReason
	end := o.now()
	c.TotalDuration = int64(end.Sub(o.received))
	first := o.first
	if first.IsZero() {
		first = end
	}
	c.PromptEvalDuration, c.EvalDuration = int64(first.Sub(o.received)), int64(end.Sub(first))
	c.PromptEvalCount, c.EvalCount, c.Energy = res.PromptTokens, res.CompletionTokens, res.Energy
	if o.sse == nil {
		// The whole answer: all of it in the last chunk.
		content, thinking := o.content.String(), o.thinking.String()
		if o.generate {
			c.Response, c.Thinking = &content, thinking
		} else {
			c.Message.Content, c.Message.Thinking = content, thinking
		}
	}
	if !o.generate {
		c.Message.ToolCalls = o.tools
	}
	o.whole = c
	return nil
}

func (o *ollamaStream) finish(res *Result) error {
	if err := o.end(res); err != nil {
		return err
	}
	return o.sse.line(o.whole)
}

// fail ends a started stream as Ollama does: a line holding the error.
func (o *ollamaStream) fail(e *Error) error { return o.sse.line(ollamaError{e.Message}) }
