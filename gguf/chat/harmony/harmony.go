// Package harmony reads the output of a model trained on OpenAI's harmony
// format (gpt-oss): its answer comes as messages on channels,
//
//	<|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final<|message|>…
//
// and an API reply splits them as llama-server does: the analysis channel
// is the reasoning (reasoning_content), the final channel, and commentary
// addressed to no one (a preamble the user may see), the content. Text
// before any header is content too (a model that skips the header).
// A message addressed to a function (" to=functions.NAME") is a tool
// call, its text the arguments, when the parser is told to read calls
// (Parser.Calls: the request has tools); otherwise, and for any other
// recipient (gpt-oss's built-in browser and python tools), it is
// reasoning.
//
// The parser works on the text with the markers written out (the
// tokenizer makes <|channel|>, <|message|>, <|start|>, <|constrain|> and
// <|end|> user-defined tokens, as llama.cpp does, so they decode as text),
// and streams: Feed takes each piece as it is decoded and holds back only
// a tail that could be the start of a marker.
package harmony

import "strings"

// The control tokens that structure a reply. <|return|> and <|call|> end
// the generation (the tokenizer counts them end-of-generation), so they
// seldom reach the text; the parser accepts them anyway.
const (
	start     = "<|start|>"
	channel   = "<|channel|>"
	message   = "<|message|>"
	end       = "<|end|>"
	constrain = "<|constrain|>"
	ret       = "<|return|>"
	call      = "<|call|>"
)

// Markers are the control tokens that structure a reply.
var Markers = []string{start, channel, message, end, constrain, ret, call}

// Event is a piece of the reply: reasoning, content or a tool call.
type Event struct {
	Reasoning bool
	Text      string
	// Call, when set, is a piece of a tool call instead: the first piece
	// of call Index names its function, the rest add to its arguments.
	Call *CallPiece
}

// CallPiece is a streamed piece of a tool call.
type CallPiece struct {
	Index     int
	Name      string // on the call's first piece only
	Arguments string
}

// Call is a whole tool call: Arguments is the model's JSON text.
type Call struct {
	Name, Arguments string
}

type state int

const (
	outside state = iota // before any header, or after a message ended
	header               // between <|start|> or <|channel|> and <|message|>
	body                 // a message's text
)

// Parser splits a streamed reply. The zero value is ready to use.
type Parser struct {
	// Calls makes messages to functions.NAME tool calls (set it before
	// the first Feed).
	Calls bool

	st      state
	pending string          // text not yet handed out: a possible marker's start
	head    strings.Builder // the current header
	// reasoning: the current message's text is reasoning.
	reasoning bool
	// call: the current message is a tool call, number calls-1.
	call  bool
	calls int
	// seen: a header has been read, so text outside a message is
	// between messages: white space the model writes there is dropped, so
	// ws holds it until text or a marker shows which it is.
	seen bool
	ws   string
	// markers counts the control tokens read (FeedToken).
	markers int
}

// Kind is what a token of a reply is (FeedToken).
type Kind int

const (
	// Markup is a control token, a header, or white space between
	// messages: text no event carries.
	Markup Kind = iota
	// Content is text of the reply's content.
	Content
	// Reasoning is text of the reasoning.
	Reasoning
	// Arguments is text of a tool call's arguments.
	Arguments
)

// FeedToken is Feed of one token's text, and says what the token is, so
// that a token's log-probability can follow its text: a token that holds
// a marker is Markup, else it is what the text fed at its start goes to.
// (A token that ends a message and starts another, or a "<" held back
// as a possible marker, is counted where it starts.)
func (p *Parser) FeedToken(text string) ([]Event, Kind) {
	k := p.kind(text)
	n := p.markers
	evs := p.Feed(text)
	if p.markers != n {
		k = Markup
	}
	return evs, k
}

// kind is what text fed now goes to.
func (p *Parser) kind(text string) Kind {
	switch p.st {
	case header:
		return Markup
	case outside:
		if p.seen && strings.TrimSpace(text) == "" {
			return Markup // dropped, unless text follows
		}
		return Content
	}
	switch {
	case p.call:
		return Arguments
	case p.reasoning:
		return Reasoning
	}
	return Content
}

// Feed adds text and returns the events it completes.
func (p *Parser) Feed(text string) []Event {
	p.pending += text
	var evs []Event
	for {
		i := strings.Index(p.pending, "<|")
		if i < 0 {
			// A last "<" may open a marker in the next piece.
			keep := 0
			if strings.HasSuffix(p.pending, "<") {
				keep = 1
			}
			evs = p.text(evs, p.pending[:len(p.pending)-keep])
			p.pending = p.pending[len(p.pending)-keep:]
			return evs
		}
		evs = p.text(evs, p.pending[:i])
		p.pending = p.pending[i:]
		m, ok := marker(p.pending)
		if !ok {
			if couldBeMarker(p.pending) {
				return evs // wait for the rest
			}
			// "<|" that starts no marker is text.
			evs = p.text(evs, "<|")
			p.pending = p.pending[2:]
			continue
		}
		p.pending = p.pending[len(m):]
		evs = p.marker(evs, m)
	}
}

// Finish ends the reply and returns what was held back.
func (p *Parser) Finish() []Event {
	rest := p.pending
	p.pending = ""
	if p.st == header {
		// A header that never opened its message: the model stopped
		// mid-header. It is not content.
		return nil
	}
	return p.text(nil, rest)
}

// text routes s by the state.
func (p *Parser) text(evs []Event, s string) []Event {
	if s == "" {
		return evs
	}
	switch p.st {
	case header:
		p.head.WriteString(s)
		return evs
	case outside:
		if !p.seen {
			return appendEvent(evs, Event{Text: s})
		}
		t := strings.TrimRight(s, " \t\r\n")
		if t == "" {
			p.ws += s
			return evs
		}
		evs = appendEvent(evs, Event{Text: p.ws + t})
		p.ws = s[len(t):]
		return evs
	}
	if p.call {
		return append(evs, Event{Call: &CallPiece{Index: p.calls - 1, Arguments: s}})
	}
	return appendEvent(evs, Event{Reasoning: p.reasoning, Text: s})
}

func appendEvent(evs []Event, e Event) []Event {
	if n := len(evs); n > 0 && evs[n-1].Call == nil && evs[n-1].Reasoning == e.Reasoning {
		evs[n-1].Text += e.Text
		return evs
	}
	return append(evs, e)
}

// marker moves the state on a control token; a tool call's message
// opening is an event (its name).
func (p *Parser) marker(evs []Event, m string) []Event {
	p.ws = ""
	p.markers++
	switch m {
	case start, channel:
		if p.st != header {
			p.st = header
			p.head.Reset()
		}
		p.head.WriteString(m)
		p.seen = true
	case constrain:
		if p.st == header {
			p.head.WriteString(m)
		}
	case message:
		if p.st == header {
			h := p.head.String()
			p.reasoning, p.call = isReasoning(h), false
			p.st = body
			if name, ok := function(h); ok && p.Calls {
				p.call = true
				p.calls++
				evs = append(evs, Event{Call: &CallPiece{Index: p.calls - 1, Name: name}})
			}
		}
	case end, ret, call:
		p.st = outside
		p.call = false
	}
	return evs
}

// function is the NAME of a header's " to=functions.NAME" recipient.
func function(h string) (string, bool) {
	_, after, ok := strings.Cut(h, " to=")
	if !ok {
		return "", false
	}
	if i := strings.IndexAny(after, " <"); i >= 0 {
		after = after[:i]
	}
	name, ok := strings.CutPrefix(after, "functions.")
	return name, ok && name != ""
}

// isReasoning reads a header ("<|start|>assistant<|channel|>final",
// "<|channel|>commentary to=functions.f <|constrain|>json", ...): only the
// final channel, and commentary to no recipient, are content.
func isReasoning(h string) bool {
	if strings.Contains(h, " to=") {
		return true
	}
	_, after, ok := strings.Cut(h, channel)
	if !ok {
		return false // no channel: the answer itself
	}
	name := after
	if i := strings.IndexAny(name, " <"); i >= 0 {
		name = name[:i]
	}
	return name != "final" && name != "commentary"
}

// marker returns the control token s starts with.
func marker(s string) (string, bool) {
	for _, m := range Markers {
		if strings.HasPrefix(s, m) {
			return m, true
		}
	}
	return "", false
}

// couldBeMarker reports whether s is a proper prefix of a control token.
func couldBeMarker(s string) bool {
	for _, m := range Markers {
		if len(s) < len(m) && strings.HasPrefix(m, s) {
			return true
		}
	}
	return false
}

// Split parses a whole reply into its reasoning and its content.
func Split(text string) (reasoning, content string) {
	r := Parse(text, false)
	return r.Reasoning, r.Content
}

// Reply is a whole reply, parsed.
type Reply struct {
	Reasoning, Content string
	Calls              []Call
}

// Parse parses a whole reply; calls says whether messages to functions
// are tool calls (Parser.Calls).
func Parse(text string, calls bool) Reply {
	p := Parser{Calls: calls}
	var r, c strings.Builder
	var out []Call
	for _, e := range append(p.Feed(text), p.Finish()...) {
		switch {
		case e.Call != nil && e.Call.Index == len(out):
			out = append(out, Call{Name: e.Call.Name, Arguments: e.Call.Arguments})
		case e.Call != nil:
			out[e.Call.Index].Arguments += e.Call.Arguments
		case e.Reasoning:
			r.WriteString(e.Text)
		default:
			c.WriteString(e.Text)
		}
	}
	return Reply{Reasoning: r.String(), Content: c.String(), Calls: out}
}
