package api

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/meshnode/meshnode/gguf/chat/toolcall"
)

// anthropicMessage is a Messages API answer, or (content empty, no stop
// reason) the message its stream starts with.
type anthropicMessage struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []any          `json:"content"` // anthropicTextBlock, anthropicThinkingBlock, anthropicToolUseBlock
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        anthropicUsage `json:"usage"`
}

// anthropicUsage is Anthropic's usage with meshnode's energy record (and
// placement) added, as OpenAI's usage has them.
type anthropicUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	Energy       any `json:"energy,omitempty"`
	Placement    any `json:"placement,omitempty"`
}

type anthropicTextBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// anthropicThinkingBlock is a harmony model's reasoning. Signature is empty:
// meshnode signs its receipts, not the reasoning, and takes none back.
type anthropicThinkingBlock struct {
	Type      string `json:"type"`
	Thinking  string `json:"thinking"`
	Signature string `json:"signature"`
}

type anthropicToolUseBlock struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// Content block kinds.
const (
	blockText     = "text"
	blockThinking = "thinking"
	blockToolUse  = "tool_use"
)

// messagesStream writes a Messages answer: message_start, each content
// block's start, deltas and stop, then message_delta (the stop reason
// and usage) and message_stop. With no sseWriter (a whole answer) it
// writes no events and only builds the message.
type messagesStream struct {
	sse    *sseWriter
	msg    anthropicMessage
	prompt int // the prompt's tokens, for message_start
	// calls parses the reply for tool calls (a request with tools);
	// channels splits a reply that carries reasoning into thinking, text
	// and calls. parallel false keeps the first call only.
	calls    *toolcall.Parser
	channels channelReader
	parallel bool

	started bool
	blocks  []*outBlock
	open    bool // the last block is open
	// ncalls counts the calls the reply opened, kept or not.
	ncalls int
}

// outBlock is a content block being written.
type outBlock struct {
	kind     string
	id, name string // a tool_use's
	text     strings.Builder
}

// setPromptTokens is told the prompt's length before the output starts.
func (m *messagesStream) setPromptTokens(n int) { m.prompt = n }

func (m *messagesStream) send(typ string, fields map[string]any) error {
	if m.sse == nil {
		return nil
	}
	fields["type"] = typ
	return m.sse.event(typ, fields)
}

func (m *messagesStream) start() error {
	if m.started {
		return nil
	}
	m.started = true
	open := m.msg
	open.Usage = anthropicUsage{InputTokens: m.prompt}
	return m.send("message_start", map[string]any{"message": open})
}

// json is b as the answer's content holds it; a whole block when done,
// else as its content_block_start opens it.
func (b *outBlock) json(done bool) any {
	text := ""
	if done {
		text = b.text.String()
	}
	switch b.kind {
	case blockThinking:
		return anthropicThinkingBlock{Type: blockThinking, Thinking: text}
	case blockToolUse:
		input := json.RawMessage("{}")
		if args := bytes.TrimSpace([]byte(text)); len(args) > 0 {
			input = args
			if args[0] != '{' || !json.Valid(args) {
				// Arguments that are not a JSON object are given as the
				// model wrote them, as a string, never made up.
				input = mustJSON(text)
			}
		}
		return anthropicToolUseBlock{Type: blockToolUse, ID: b.id, Name: b.name, Input: input}
	}
	return anthropicTextBlock{Type: blockText, Text: text}
}

func (m *messagesStream) openBlock(b *outBlock) error {
	if err := m.closeBlock(); err != nil {
		return err
	}
	m.blocks = append(m.blocks, b)
	m.open = true
	return m.send("content_block_start", map[string]any{"index": len(m.blocks) - 1, "content_block": b.json(false)})
}

func (m *messagesStream) closeBlock() error {
	if !m.open {
		return nil
	}
	m.open = false
	return m.send("content_block_stop", map[string]any{"index": len(m.blocks) - 1})
}

// text adds text or thinking to the open block of its kind, opening
// one when the kind changes.
func (m *messagesStream) text(thinking bool, text string) error {
	if text == "" {
		return nil
	}
	kind := blockText
	if thinking {
		kind = blockThinking
	}
	if !m.open || m.blocks[len(m.blocks)-1].kind != kind {
		if err := m.openBlock(&outBlock{kind: kind}); err != nil {
			return err
		}
	}
	m.blocks[len(m.blocks)-1].text.WriteString(text)
	delta := map[string]any{"type": "text_delta", "text": text}
	if kind == blockThinking {
		delta = map[string]any{"type": "thinking_delta", "thinking": text}
	}
	return m.send("content_block_delta", map[string]any{"index": len(m.blocks) - 1, "delta": delta})
}

// call adds a piece of call index: its first piece opens a tool_use
// block (id, when the model wrote none, is made), the rest add to its
// arguments.
func (m *messagesStream) call(index int, id, name, args string) error {
	if !m.parallel && index > 0 {
		return nil
	}
	if index == m.ncalls {
		m.ncalls++
		if id == "" {
			id = newID("toolu_")
		}
		if err := m.openBlock(&outBlock{kind: blockToolUse, id: id, name: name}); err != nil {
			return err
		}
	}
	if args == "" {
		return nil
	}
	m.blocks[len(m.blocks)-1].text.WriteString(args)
	return m.send("content_block_delta", map[string]any{"index": len(m.blocks) - 1,
		"delta": map[string]any{"type": "input_json_delta", "partial_json": args}})
}

func (m *messagesStream) openReasoning() {
	if m.channels != nil {
		m.channels.open()
	}
}

func (m *messagesStream) delta(d Delta) error {
	if err := m.start(); err != nil {
		return err
	}
	switch {
	case m.channels != nil:
		return writeChannels(m, m.channels.Feed(d.Text))
	case m.calls != nil:
		return writeCalls(m, m.calls.Feed(d.Text))
	}
	return m.text(false, d.Text)
}

// end closes the content and fills in the message.
func (m *messagesStream) end(res *Result) error {
	if err := m.start(); err != nil {
		return err
	}
	var err error
	switch {
	case m.channels != nil:
		err = writeChannels(m, m.channels.Finish())
	case m.calls != nil:
		err = writeCalls(m, m.calls.Finish())
	}
	if err == nil {
		err = m.closeBlock()
	}
	if err != nil {
		return err
	}
	m.msg.Content = make([]any, len(m.blocks))
	for i, b := range m.blocks {
		m.msg.Content[i] = b.json(true)
	}
	reason := stopReason(res, m.ncalls > 0)
	m.msg.StopReason = &reason
	if reason == "stop_sequence" {
		m.msg.StopSequence = &res.StopSequence
	}
	m.msg.Usage = anthropicUsage{InputTokens: res.PromptTokens, OutputTokens: res.CompletionTokens, Energy: res.Energy, Placement: res.Placement}
	return nil
}

// stopReason is Anthropic's for a reply: end_turn, stop_sequence,
// tool_use (it called a tool and ended by itself), max_tokens, or
// meshnode's joule_ceiling.
func stopReason(res *Result, called bool) string {
	switch {
	case res.FinishReason == "length":
		return "max_tokens"
	case res.FinishReason != "stop":
		return res.FinishReason
	case called:
		return "tool_use"
	case res.StopSequence != "":
		return "stop_sequence"
	}
	return "end_turn"
}

func (m *messagesStream) finish(res *Result) error {
	if err := m.end(res); err != nil {
		return err
	}
	delta := map[string]any{"stop_reason": m.msg.StopReason, "stop_sequence": m.msg.StopSequence}
	if err := m.send("message_delta", map[string]any{"delta": delta, "usage": m.msg.Usage}); err != nil {
		return err
	}
	return m.send("message_stop", map[string]any{})
}

// fail sends Anthropic's error event.
func (m *messagesStream) fail(e *Error) error {
	return m.sse.event("error", e.anthropicBody())
}
