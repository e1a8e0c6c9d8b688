package grammar

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// A grammar held from the start with a block apart (Grammar.Skipping, or
// Budgeted) holds the output from the block's end: a thinking model that
// opens its own block (Qwen3's <think>) reasons in it, then answers in
// the grammar; an output that does not open the block is the grammar's
// from its first byte. Until the output shows which, the constraint
// follows both: the grammar over the output so far, and the opening tag
// (after white space). Inside the block every token is allowed but the
// ends of generation (the grammar is yet to be met) and a token that
// closes the block with text the grammar refuses after it.

// maxLeadingSpace bounds the white space the output may open with
// before the block's tag.
const maxLeadingSpace = 4

// front is a held grammar's state before and inside its block.
type front struct {
	// opener follows the output as the block's opening (white space,
	// the tag, then anything), nil once the output cannot be; gramDead
	// says the grammar cannot take the output so far; openCtl is the
	// control token that is all of the tag (noToken: none).
	opener   *Matcher
	gramDead bool
	openCtl  uint32
	// inside is the mask inside the block for each length of closing
	// tag the block's text already ends with, made when first needed.
	inside map[int][]uint64
}

// fronted reports whether c is a held grammar before or inside its
// block.
func (c *Constraint) fronted() bool {
	return c.front != nil && c.blk.state != pastBlock
}

// startFront readies the front of a held grammar with a block.
func (c *Constraint) startFront() error {
	b := *c.g.skip
	c.front = &front{openCtl: noToken, inside: map[int][]uint64{}}
	if b.Opened {
		return nil
	}
	ob := NewBuilder()
	// A few bytes of white space may come before the tag, as the block
	// reader allows; unbounded, a model could loop on them and never
	// open the block nor begin the grammar.
	ws := Bytes([2]byte{' ', ' '}, [2]byte{'\t', '\n'}, [2]byte{'\r', '\r'})
	ob.Define("root", Seq(Repeat(ws, 0, maxLeadingSpace), Lit(b.Open), Star(Alt(Bytes([2]byte{0, 0x7F}), UTF8()))))
	og, err := ob.Build("root")
	if err != nil {
		return err
	}
	if c.front.opener, err = og.NewMatcher(); err != nil {
		return err
	}
	for id := range uint32(min(c.v.n, c.v.size)) {
		if p := c.piece(id); len(c.v.tokenBytes(id)) == 0 && string(p) == b.Open {
			c.front.openCtl = id
			break
		}
	}
	return nil
}

// frontMask is the mask before or inside the block.
func (c *Constraint) frontMask() ([]uint64, error) {
	if c.blk.state == inBlock {
		return c.insideMask()
	}
	f := c.front
	words := (c.v.size + 63) / 64
	mask := make([]uint64, words)
	any := false
	for _, m := range []*Matcher{c.m, f.opener} {
		if m == nil || m == c.m && f.gramDead {
			continue
		}
		mk, err := c.v.Mask(m, nil)
		if errors.Is(err, ErrNoToken) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m == f.opener {
			if err := c.refuseClosings(mk, c.blk.buf, true); err != nil {
				return nil, err
			}
		}
		for i := range mask {
			mask[i] |= mk[i]
		}
		any = true
	}
	if f.opener != nil && f.openCtl != noToken && len(bytes.TrimLeft(c.blk.buf, " \t\r\n")) == 0 {
		mask[f.openCtl>>6] |= 1 << (f.openCtl & 63)
		any = true
	}
	if !any {
		return nil, fmt.Errorf("%w: neither the block's opening nor the grammar fits here", ErrNoToken)
	}
	return mask, nil
}

// insideMask is the mask inside the block: every token but the ends of
// generation, and but those that would close the block with text after
// the tag that the grammar refuses from its start.
func (c *Constraint) insideMask() ([]uint64, error) {
	pending := c.blk.pending()
	if mk, ok := c.front.inside[pending]; ok {
		return mk, nil
	}
	mask := make([]uint64, (c.v.size+63)/64)
	for id := range uint32(c.v.size) {
		mask[id>>6] |= 1 << (id & 63)
	}
	for _, id := range c.v.eog {
		mask[id>>6] &^= 1 << (id & 63)
	}
	if err := c.refuseClosings(mask, []byte(c.blk.b.Close[:pending]), false); err != nil {
		return nil, err
	}
	c.front.inside[pending] = mask
	return mask, nil
}

// refuseClosings clears in mask the tokens that, after the text so far
// (before: the output before the block, which opens it after white space;
// else the block's text that may begin its closing tag), would close the
// block with text after its tag that the grammar refuses from its start.
func (c *Constraint) refuseClosings(mask []uint64, so []byte, before bool) error {
	b := c.blk.b
	for id := range uint32(min(c.v.n, c.v.size)) {
		if !Allowed(mask, id) {
			continue
		}
		text := string(so) + string(c.piece(id))
		if before {
			rest, ok := strings.CutPrefix(strings.TrimLeft(text, " \t\r\n"), b.Open)
			if !ok {
				continue
			}
			text = rest
		}
		i := strings.Index(text, b.Close)
		if i < 0 || i+len(b.Close) == len(text) {
			continue
		}
		m, err := c.g.NewMatcher()
		if err != nil {
			return err
		}
		if m.Advance([]byte(text[i+len(b.Close):])) != nil {
			mask[id>>6] &^= 1 << (id & 63)
		}
	}
	return nil
}

// acceptFront takes a token before the block opens: the grammar and the
// opening follow it, each while it can; the block reader tells what it
// was. text is its text (a control token's included).
func (c *Constraint) acceptFront(id uint32, text []byte) error {
	f := c.front
	tb := c.v.tokenBytes(id)
	if !f.gramDead && (len(tb) == 0 || c.m.Advance(tb) != nil) {
		f.gramDead = true
	}
	if f.opener != nil && id != f.openCtl && (len(tb) == 0 || f.opener.Advance(tb) != nil) {
		f.opener = nil
	}
	if f.gramDead && f.opener == nil {
		return fmt.Errorf("%w: token %d neither opens the block %q nor begins the grammar", ErrRejected, id, c.blk.b.Open)
	}
	after, past := c.blk.read(text)
	switch {
	case !c.blk.opened && past:
		// No block: the grammar has taken the output from its start.
		if f.gramDead {
			return fmt.Errorf("%w: token %d begins no block, and the grammar refuses the output's start", ErrRejected, id)
		}
		f.opener = nil
		return nil
	case !c.blk.opened:
		return nil // white space, or the tag's start: either may follow
	}
	// The block opened: the grammar starts over at its end.
	m, err := c.g.NewMatcher()
	if err != nil {
		return err
	}
	c.m, f.gramDead, f.opener = m, false, nil
	if past {
		return c.m.Advance(after)
	}
	if c.spent() {
		c.force()
	}
	return nil
}
