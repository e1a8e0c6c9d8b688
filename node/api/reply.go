package api

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"

	"github.com/meshnode/meshnode/gguf/chat/harmony"
	"github.com/meshnode/meshnode/gguf/chat/think"
	"github.com/meshnode/meshnode/gguf/chat/toolcall"
)

// ThinkingModel is a Model whose replies may open with a reasoning block
// (<think>…</think>: Qwen3, QwQ, DeepSeek-R1, SmolLM3 …): the chat-shaped
// APIs give the block as the reasoning (reasoning_content, reasoning
// items, thinking blocks) and the rest as the content (package think).
type ThinkingModel interface {
	// Thinking is the block's tags (ok false: the model writes none), and
	// whether the model's chat template turns thinking on and off
	// (enable_thinking, Generation.Think).
	Thinking() (tags think.Tags, switchable, ok bool)
}

// thinkingOf is m's reasoning block, for a model that is not harmony's
// (whose reasoning is a channel).
func thinkingOf(m Model) (tags think.Tags, switchable, ok bool) {
	tm, is := m.(ThinkingModel)
	if !is || isHarmony(m) {
		return think.Tags{}, false, false
	}
	return tm.Thinking()
}

// reasons reports whether m's replies can carry reasoning: harmony's
// analysis channel, or a thinking block.
func reasons(m Model) bool {
	_, _, ok := thinkingOf(m)
	return ok || isHarmony(m)
}

// thinkSwitch is a request's switch for the model's reasoning: on or
// off, and the field that asked (param).
type thinkSwitch struct {
	param string
	on    bool
}

// applyThinking applies g's switch, if it has one, to m (setThinking):
// the handlers and a replay call it once the model is known.
func applyThinking(m Model, g *Generation) error {
	if g.thinking == nil {
		return nil
	}
	return setThinking(m, g, g.thinking.param, g.thinking.on)
}

// maxThinkBudget bounds a thinking budget (grammar.MaxBudget).
const maxThinkBudget = 1 << 24

// setThinking reads a request's switch for the model's reasoning (param
// names it in an error): on is refused for a model that never reasons,
// off for gpt-oss, which always does. Where the template has the switch
// (enable_thinking), Generation.Think carries it; a thinking model
// without one is held to no reasoning (Generation.ThinkOff: its block
// closed as soon as it opens, as Qwen3's template writes it empty).
func setThinking(m Model, g *Generation, param string, on bool) error {
	_, switchable, thinks := thinkingOf(m)
	switch {
	case on && !reasons(m):
		return badRequest(param, "%s asks for thinking, but model %q does not reason (its chat template writes no reasoning block)", param, g.Model)
	case !on && isHarmony(m):
		return badRequest(param, "%s turns thinking off, but model %q always reasons (gpt-oss: its reasoning comes on the analysis channel)", param, g.Model)
	case thinks && (switchable || !on) && g.Messages == nil:
		return badRequest(param, "%s: a raw prompt goes to model %q as it is, through no chat template, so nothing turns its thinking on or off; send messages", param, g.Model)
	case switchable:
		g.Think = &on
	case thinks && !on:
		g.ThinkOff = true
	}
	return nil
}

// templateKwargs reads chat_template_kwargs: enable_thinking, a boolean,
// is the one variable taken (setThinking); any other is refused by name,
// since a template variable meshnode does not know could change the
// prompt in ways it cannot check.
func templateKwargs(raw json.RawMessage) (*thinkSwitch, error) {
	if isAbsent(raw) {
		return nil, nil
	}
	var kw map[string]json.RawMessage
	if err := json.Unmarshal(raw, &kw); err != nil || bytes.TrimSpace(raw)[0] != '{' {
		return nil, badRequest("chat_template_kwargs", "chat_template_kwargs must be an object")
	}
	var sw *thinkSwitch
	for _, k := range slices.Sorted(maps.Keys(kw)) {
		param := "chat_template_kwargs." + k
		if k != "enable_thinking" {
			return nil, badRequest(param, "%s is not taken: enable_thinking is the one chat template variable meshnode passes", param)
		}
		sw = &thinkSwitch{param: param}
		if err := json.Unmarshal(kw[k], &sw.on); err != nil {
			return nil, badRequest(param, "%s must be true or false", param)
		}
	}
	return sw, nil
}

// How a chat reply's reasoning comes back (llama-server's
// reasoning_format).
type reasoningMode uint8

const (
	// reasoningSplit: the reasoning as reasoning_content, the rest as
	// the content ("deepseek", "auto"; the default).
	reasoningSplit reasoningMode = iota
	// reasoningRaw: the reply as the model wrote it, all of it content
	// ("none").
	reasoningRaw
	// reasoningBoth: the reasoning as reasoning_content, and the reply
	// as written, tags and all, as the content ("deepseek-legacy").
	reasoningBoth
)

// reasoningFormat reads llama-server's reasoning_format.
func reasoningFormat(f *string) (reasoningMode, error) {
	if f == nil {
		return reasoningSplit, nil
	}
	switch *f {
	case "none":
		return reasoningRaw, nil
	case "deepseek", "auto":
		return reasoningSplit, nil
	case "deepseek-legacy":
		return reasoningBoth, nil
	}
	return reasoningSplit, badRequest("reasoning_format", `reasoning_format %q is not taken: "none" (the reply as written), "deepseek" and "auto" (its reasoning as reasoning_content, the default) or "deepseek-legacy" (both)`, *f)
}

// opensReasoning reports whether p's prompt leaves a reasoning block
// open, so that the reply starts inside it (DeepSeek-R1's template ends
// its generation prompt with "<think>\n").
func opensReasoning(p Prepared) bool {
	o, ok := p.(interface{ OpensReasoning() bool })
	return ok && o.OpensReasoning()
}

// replyEvent is a piece of a reply read back: reasoning or content text,
// or a piece of a tool call (whose first piece names it; ID "" where the
// format gives calls none, and the endpoint makes one).
type replyEvent struct {
	Reasoning bool
	Text      string
	Call      *toolcall.Delta
}

// channelReader reads a reply that carries reasoning: a harmony model's
// channels, or a thinking model's block then its content, with tools
// parsed for calls.
type channelReader interface {
	Feed(text string) []replyEvent
	Finish() []replyEvent
	// FeedToken is Feed of one token's text, and reports whether the
	// token is content (not reasoning, markup or a call).
	FeedToken(text string) ([]replyEvent, bool)
	// calling reports whether the reply is read for calls.
	calling() bool
	// open tells the reader the prompt opened the reasoning block
	// (opensReasoning), before it is fed.
	open()
}

// newChannels is the reader of m's replies to g, calls read with calls
// (nil: the request has no tools), or nil for a model whose replies carry
// no reasoning, or a request that asks for the reply as written
// (reasoning_format "none").
func newChannels(m Model, g *Generation, calls *toolcall.Parser) channelReader {
	var r channelReader
	switch {
	case g.reasoning == reasoningRaw:
		return nil
	case isHarmony(m):
		r = &harmonyReader{p: harmony.Parser{Calls: calls != nil}}
	default:
		tags, _, ok := thinkingOf(m)
		if !ok {
			return nil
		}
		r = &thinkReader{tags: tags, calls: calls}
	}
	if g.reasoning == reasoningBoth {
		return bothReader{r}
	}
	return r
}

// bothReader is llama-server's "deepseek-legacy": the reasoning r reads,
// and the reply as written, as the content. (Tools are not read with
// it: the content is the reply whole.)
type bothReader struct{ r channelReader }

func (b bothReader) Feed(text string) []replyEvent { return b.with(b.r.Feed(text), text) }
func (b bothReader) Finish() []replyEvent          { return b.with(b.r.Finish(), "") }
func (b bothReader) calling() bool                 { return false }
func (b bothReader) open()                         { b.r.open() }

func (b bothReader) FeedToken(text string) ([]replyEvent, bool) {
	evs, _ := b.r.FeedToken(text)
	return b.with(evs, text), true // every token is the content's
}

// with is the reasoning of evs, then text as content.
func (b bothReader) with(evs []replyEvent, text string) []replyEvent {
	out := evs[:0]
	for _, e := range evs {
		if e.Reasoning {
			out = append(out, e)
		}
	}
	if text != "" {
		out = append(out, replyEvent{Text: text})
	}
	return out
}

// harmonyReader reads harmony channels.
type harmonyReader struct{ p harmony.Parser }

func (h *harmonyReader) Feed(text string) []replyEvent { return fromHarmony(h.p.Feed(text)) }
func (h *harmonyReader) Finish() []replyEvent          { return fromHarmony(h.p.Finish()) }
func (h *harmonyReader) calling() bool                 { return h.p.Calls }
func (h *harmonyReader) open()                         {} // a harmony prompt opens no channel's text

func (h *harmonyReader) FeedToken(text string) ([]replyEvent, bool) {
	evs, k := h.p.FeedToken(text)
	return fromHarmony(evs), k == harmony.Content
}

func fromHarmony(evs []harmony.Event) []replyEvent {
	out := make([]replyEvent, len(evs))
	for i, e := range evs {
		out[i] = replyEvent{Reasoning: e.Reasoning, Text: e.Text}
		if e.Call != nil {
			out[i].Call = &toolcall.Delta{Index: e.Call.Index, Name: e.Call.Name, Arguments: e.Call.Arguments}
		}
	}
	return out
}

// thinkReader reads a thinking block, then the content, which a request
// with tools parses for calls. Its think.Parser is made at the first
// piece, once open has been told.
type thinkReader struct {
	tags   think.Tags
	opened bool
	p      *think.Parser
	calls  *toolcall.Parser
}

func (t *thinkReader) calling() bool { return t.calls != nil }
func (t *thinkReader) open()         { t.opened = true }

func (t *thinkReader) parser() *think.Parser {
	if t.p == nil {
		t.p = think.NewParser(t.tags, t.opened)
	}
	return t.p
}

func (t *thinkReader) Feed(text string) []replyEvent {
	return t.content(t.parser().Feed(text), false)
}

func (t *thinkReader) Finish() []replyEvent {
	return t.content(t.parser().Finish(), true)
}

func (t *thinkReader) FeedToken(text string) ([]replyEvent, bool) {
	evs, k := t.parser().FeedToken(text)
	return t.content(evs, false), k == think.Content
}

// content passes the content on through the call parser, when there is
// one (finished at the reply's end).
func (t *thinkReader) content(evs []think.Event, end bool) []replyEvent {
	var out []replyEvent
	for _, e := range evs {
		switch {
		case e.Reasoning:
			out = append(out, replyEvent{Reasoning: true, Text: e.Text})
		case t.calls != nil:
			out = appendCalls(out, t.calls.Feed(e.Text))
		default:
			out = append(out, replyEvent{Text: e.Text})
		}
	}
	if end && t.calls != nil {
		out = appendCalls(out, t.calls.Finish())
	}
	return out
}

func appendCalls(out []replyEvent, evs []toolcall.Event) []replyEvent {
	for _, e := range evs {
		out = append(out, replyEvent{Text: e.Content, Call: e.Call})
	}
	return out
}

// readWhole reads a whole reply: its reasoning, content and calls (with
// the ids the format gave them, or none).
func readWhole(r channelReader, text string) (reasoning, content string, calls []toolcall.Call) {
	var rb, cb []byte
	for _, e := range append(r.Feed(text), r.Finish()...) {
		switch {
		case e.Call != nil && e.Call.Index == len(calls):
			calls = append(calls, toolcall.Call{ID: e.Call.ID, Name: e.Call.Name, Arguments: e.Call.Arguments})
		case e.Call != nil:
			calls[e.Call.Index].Arguments += e.Call.Arguments
		case e.Reasoning:
			rb = append(rb, e.Text...)
		default:
			cb = append(cb, e.Text...)
		}
	}
	return string(rb), string(cb), calls
}

// filterContent feeds tokens to r, one by one, and keeps the content's:
// the reasoning's, the markup's and the calls' have none in logprobs, as
// OpenAI gives none for reasoning.
func filterContent(r channelReader, tokens []TokenLogprob) []TokenLogprob {
	var out []TokenLogprob
	for _, t := range tokens {
		if _, content := r.FeedToken(string(t.Bytes)); content {
			out = append(out, t)
		}
	}
	return out
}

// reasoningOpener is a stream whose readers are told the prompt opened
// the reasoning block.
type reasoningOpener interface{ openReasoning() }
