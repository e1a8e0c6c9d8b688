// Package think reads the reply of a model that reasons in a tagged block
// before it answers,
//
//	<think>The user wants 2+2. That is 4.</think>
//
//	2 + 2 = 4.
//
// (Qwen3, QwQ, DeepSeek-R1 and its distills, SmolLM3, GLM-4.5 and later,
// Kimi K2 Thinking, MiniMax-M2, Nemotron Nano; Magistral's [THINK];
// Cohere's <|START_THINKING|>) and splits it as llama-server's
// reasoning_format "deepseek" does: the block is the reasoning
// (reasoning_content), the rest the content. The block counts only at the
// start of the reply (after white space), or from the first byte when the
// prompt already opened it (a template whose generation prompt ends in
// "<think>\n": DeepSeek-R1's, QwQ's; an opening tag the model writes
// first anyway is then markup); a tag anywhere else is text. A reply cut
// short inside the block is all reasoning.
//
// White space is trimmed where the model writes it as layout: at both
// ends of the reasoning and after the closing tag. A reply with no block
// reads back as it was written, byte for byte.
//
// The parser streams: Feed takes each piece as it is decoded and holds
// back only what could still be a tag, or the reasoning's trailing white
// space.
package think

import "strings"

// Tags are the tags that open and close a reasoning block, as the reply's
// text shows them (a control token by its text).
type Tags struct {
	Open, Close string
}

// Known are the reasoning blocks meshnode reads, in the order Detect
// tries them.
var Known = []Tags{
	{"<think>", "</think>"},
	{"[THINK]", "[/THINK]"},
	{"<|START_THINKING|>", "<|END_THINKING|>"},
}

// Detect is the reasoning block a chat template's model writes: the first
// known one whose closing tag the template itself writes (to drop the
// reasoning from earlier turns, to render it, or to write an empty block
// that turns thinking off). A template that writes none has no block.
func Detect(template string) (Tags, bool) {
	for _, t := range Known {
		if strings.Contains(template, t.Close) {
			return t, true
		}
	}
	return Tags{}, false
}

// Opens reports whether prompt, a rendered conversation with its
// generation prompt, leaves the block open: it ends (white space aside)
// with the opening tag, so the reply starts inside the reasoning.
func (t Tags) Opens(prompt string) bool {
	return strings.HasSuffix(strings.TrimRight(prompt, space), t.Open)
}

// Event is a piece of the reply: reasoning or content.
type Event struct {
	Reasoning bool
	Text      string
}

// Kind is what a token of a reply is (FeedToken).
type Kind int

const (
	// Markup is a tag, or a token that holds one.
	Markup Kind = iota
	// Content is text of the reply's content.
	Content
	// Reasoning is text of the reasoning.
	Reasoning
)

const space = " \t\r\n"

type state int

const (
	begin  state = iota // nothing but white space read: a block may open
	opened              // the prompt opened the block; the model may open it again
	inside              // in the block
	after               // past the block, or a reply with none
)

// Parser splits a streamed reply. It is not safe for concurrent use.
type Parser struct {
	tags Tags
	st   state
	// pending is text held back: at the start, white space and what may
	// be the opening tag; inside the block, trailing white space and what
	// may be the start of the closing tag.
	pending string
	// started: some reasoning was handed out (its leading white space is
	// dropped until then).
	started bool
	// trim drops the white space after the closing tag.
	trim bool
	// tags counts the tags read (FeedToken).
	read int
}

// NewParser returns a parser for replies marked with t; open says the
// prompt opened the block (Tags.Opens), so the reply starts inside it
// (an opening tag the model writes first anyway is markup).
func NewParser(t Tags, open bool) *Parser {
	p := &Parser{tags: t}
	if open {
		p.st = opened
	}
	return p
}

// Feed adds text and returns the events it completes.
func (p *Parser) Feed(text string) []Event {
	var evs []Event
	if p.st == begin || p.st == opened {
		p.pending += text
		text = ""
		s := strings.TrimLeft(p.pending, space)
		switch {
		case strings.HasPrefix(s, p.tags.Open):
			p.st, p.read = inside, p.read+1
			text, p.pending = s[len(p.tags.Open):], ""
		case strings.HasPrefix(p.tags.Open, s):
			return nil // white space, or the tag's start: wait
		case p.st == opened:
			p.st = inside // the reasoning, from its first byte
			text, p.pending = p.pending, ""
		default:
			p.st = after
			text, p.pending = p.pending, ""
		}
	}
	if p.st == inside {
		s := p.pending + text
		text = ""
		i := strings.Index(s, p.tags.Close)
		if i < 0 {
			keep := len(s) - partial(s, p.tags.Close)
			keep = len(strings.TrimRight(s[:keep], space))
			evs = p.reasoning(evs, s[:keep])
			p.pending = s[keep:]
			return evs
		}
		evs = p.reasoning(evs, strings.TrimRight(s[:i], space))
		p.st, p.read, p.trim, p.pending = after, p.read+1, true, ""
		text = s[i+len(p.tags.Close):]
	}
	if p.trim {
		text = strings.TrimLeft(text, space)
		if text == "" {
			return evs
		}
		p.trim = false
	}
	if text != "" {
		evs = append(evs, Event{Text: text})
	}
	return evs
}

// reasoning hands out s as reasoning, its leading white space dropped
// while none has been handed out.
func (p *Parser) reasoning(evs []Event, s string) []Event {
	if !p.started {
		s = strings.TrimLeft(s, space)
	}
	if s == "" {
		return evs
	}
	p.started = true
	return append(evs, Event{Reasoning: true, Text: s})
}

// partial is the length of the longest end of s that is a proper prefix
// of tag: the start of a tag the next piece may finish.
func partial(s, tag string) int {
	for n := min(len(s), len(tag)-1); n > 0; n-- {
		if strings.HasSuffix(s, tag[:n]) {
			return n
		}
	}
	return 0
}

// Finish ends the reply and returns what was held back: at the start, the
// text as it was (a reply of white space, or of the opening tag's first
// bytes, is content); inside the block, the rest of the reasoning.
func (p *Parser) Finish() []Event {
	rest := p.pending
	p.pending = ""
	switch p.st {
	case begin:
		p.st = after
		if rest != "" {
			return []Event{{Text: rest}}
		}
	case opened, inside:
		return p.reasoning(nil, strings.TrimRight(rest, space))
	}
	return nil
}

// FeedToken is Feed of one token's text, and says what the token is, so
// that a token's log-probability can follow its text: a token that holds
// a tag is Markup, else it is what the text fed at its start goes to.
func (p *Parser) FeedToken(text string) ([]Event, Kind) {
	k := Content
	if p.st == inside || p.st == opened {
		k = Reasoning
	}
	n := p.read
	evs := p.Feed(text)
	if p.read != n {
		k = Markup
	}
	return evs, k
}

// Split parses a whole reply into its reasoning and its content.
func Split(t Tags, open bool, text string) (reasoning, content string) {
	p := NewParser(t, open)
	var r, c strings.Builder
	for _, e := range append(p.Feed(text), p.Finish()...) {
		if e.Reasoning {
			r.WriteString(e.Text)
		} else {
			c.WriteString(e.Text)
		}
	}
	return r.String(), c.String()
}
