package grammar

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// A lazy grammar holds only part of an output: the output is free until
// one of the grammar's triggers appears in it, and held to the grammar
// from there on. A tool call under tool_choice "auto" is one: the model
// may answer in prose, but once it opens a call (<tool_call>,
// [TOOL_CALLS], …) the call must meet its tool's schema. llama.cpp calls
// these lazy grammars too.

// Trigger is where a lazy grammar takes hold.
type Trigger struct {
	// Text is what the output must show: its text with control tokens
	// rendered, so that a control token ([TOOL_CALLS]) can be one.
	Text string
	// AtStart: Text counts only as the output's first text (after white
	// space), not anywhere in it.
	AtStart bool
	// Included: the grammar holds the output from Text's first byte
	// (Text is the start of what it matches); otherwise from the byte
	// after Text (a control token, which no grammar can spell).
	Included bool
}

// Bounds on a lazy grammar's triggers: a request names them through its
// tools, not freely, but the constraint searches them after every token.
const (
	MaxTriggers   = 16
	maxTriggerLen = 256
)

// Lazy returns g held only from the first of triggers on (see Trigger).
// An included trigger must be a start the grammar allows; its texts
// must not be empty.
func (g *Grammar) Lazy(triggers ...Trigger) (*Grammar, error) {
	if len(triggers) == 0 || len(triggers) > MaxTriggers {
		return nil, fmt.Errorf("%w: a lazy grammar has 1 to %d triggers, not %d", ErrInvalid, MaxTriggers, len(triggers))
	}
	for _, t := range triggers {
		if t.Text == "" || len(t.Text) > maxTriggerLen {
			return nil, fmt.Errorf("%w: trigger %q: its text is 1 to %d bytes", ErrInvalid, t.Text, maxTriggerLen)
		}
		if !t.Included {
			continue
		}
		m, err := g.NewMatcher()
		if err == nil {
			err = m.Advance([]byte(t.Text))
		}
		if err != nil {
			return nil, fmt.Errorf("%w: trigger %q is included, but the grammar does not begin with it: %w", ErrInvalid, t.Text, err)
		}
	}
	lazy := *g
	lazy.triggers = slices.Clone(triggers)
	return &lazy, nil
}

// Triggers are a lazy grammar's triggers (none: the grammar holds the
// whole output).
func (g *Grammar) Triggers() []Trigger { return slices.Clone(g.triggers) }

// writeTriggers appends the triggers to the grammar's canonical text, so
// that a lazy grammar and the same rules held from the start differ.
func (g *Grammar) writeTriggers(b *strings.Builder) {
	if s := g.skip; s != nil {
		fmt.Fprintf(b, "block %s %s", strconv.Quote(s.Open), strconv.Quote(s.Close))
		if s.Opened {
			b.WriteString(" opened")
		}
		b.WriteByte('\n')
	}
	if g.budgeted {
		fmt.Fprintf(b, "budget %d\n", g.budget)
	}
	for _, t := range g.triggers {
		b.WriteString("trigger ")
		b.WriteString(strconv.Quote(t.Text))
		if t.AtStart {
			b.WriteString(" at-start")
		}
		if t.Included {
			b.WriteString(" included")
		}
		b.WriteByte('\n')
	}
}

// watch is a lazy constraint's Accept before its trigger: text is the
// token's text (control tokens rendered). Once a trigger appears, the
// matcher is advanced over the output from where the grammar takes hold;
// bytes it refuses there are an error wrapping ErrRejected.
func (c *Constraint) watch(text []byte) error {
	triggers := c.g.triggers
	longest := 0
	for _, t := range triggers {
		longest = max(longest, len(t.Text))
	}
	// A trigger anywhere can only end in the new text: search from as
	// far back as a trigger could begin before it.
	from := max(0, len(c.seen)-longest+1)
	c.seen = append(c.seen, text...)
	at, which := -1, Trigger{}
	found := func(i int, t Trigger) {
		if at < 0 || i < at || i == at && len(t.Text) > len(which.Text) {
			at, which = i, t
		}
	}
	lead := len(c.seen) - len(bytes.TrimLeft(c.seen, " \t\r\n"))
	for _, t := range triggers {
		switch {
		case t.AtStart:
			if !c.pastStart && bytes.HasPrefix(c.seen[lead:], []byte(t.Text)) {
				found(lead, t)
			}
		default:
			if i := bytes.Index(c.seen[from:], []byte(t.Text)); i >= 0 {
				found(from+i, t)
			}
		}
	}
	if at < 0 {
		c.forget(lead, longest)
		return nil
	}
	held := c.seen[at+len(which.Text):]
	if which.Included {
		held = c.seen[at:]
	}
	c.triggered = true
	err := c.m.Advance(held)
	c.seen = nil
	if err != nil {
		return fmt.Errorf("after trigger %q: %w", which.Text, err)
	}
	return nil
}

// forget drops what no trigger can still begin in: once the output's
// first text is longer than every at-start trigger (or differs from
// them), only the last bytes a trigger anywhere could begin in are kept.
func (c *Constraint) forget(lead, longest int) {
	if !c.pastStart {
		first := c.seen[lead:]
		c.pastStart = true
		for _, t := range c.g.triggers {
			if t.AtStart && (len(first) < len(t.Text) && strings.HasPrefix(t.Text, string(first))) {
				c.pastStart = false // still on its way
			}
		}
		if !c.pastStart {
			return
		}
	}
	if keep := longest - 1; len(c.seen) > keep {
		c.seen = append(c.seen[:0], c.seen[len(c.seen)-keep:]...)
	}
}
