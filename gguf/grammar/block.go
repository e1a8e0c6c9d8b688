package grammar

import (
	"bytes"
	"errors"
	"fmt"
)

// Block is a stretch of the output the constraint follows apart from the
// rest: a thinking model's reasoning (<think>…</think>). A lazy
// grammar's triggers do not count in it, since the model may name one
// (<tool_call>) while it plans, before the answer that makes the call
// (Skipping); and a budget bounds it in tokens (Budgeted). Past the
// block, the output is watched as from its start (an at-start trigger
// may open the answer). A grammar held from the start holds the output
// from the block's end: the output may open with the block, and the
// grammar holds from the start only where it does not.
type Block struct {
	Open, Close string
	// Opened: the output starts inside the block (its prompt opened it);
	// otherwise there is a block only where the output opens with Open
	// (after white space).
	Opened bool
}

// MaxBudget bounds a block's budget in tokens.
const MaxBudget = 1 << 24

func (b Block) check() error {
	if b.Open == "" || b.Close == "" || len(b.Open) > maxTriggerLen || len(b.Close) > maxTriggerLen {
		return fmt.Errorf("%w: block %q…%q: its tags are 1 to %d bytes", ErrInvalid, b.Open, b.Close, maxTriggerLen)
	}
	return nil
}

// Skipping returns g with b apart: a lazy grammar's triggers do not
// count in it; a grammar held from the start holds the output from its
// end, where the output opens with it (a thinking model reasons before
// it answers in the grammar). Free's needs none.
func (g *Grammar) Skipping(b Block) (*Grammar, error) {
	switch {
	case g.free:
		return nil, fmt.Errorf("%w: Free holds nothing to skip a block of", ErrInvalid)
	case g.skip != nil && *g.skip != b:
		return nil, fmt.Errorf("%w: the grammar follows another block", ErrInvalid)
	}
	if err := b.check(); err != nil {
		return nil, err
	}
	skipping := *g
	skipping.skip = &b
	return &skipping, nil
}

// Free is the grammar that holds nothing: every output is its, control
// tokens and all, and its mask is every token. It carries a budget
// (Budgeted) where a request asks for one and no other grammar.
func Free() *Grammar { return &Grammar{free: true} }

// IsFree reports whether g is Free's (with a budget or without).
func (g *Grammar) IsFree() bool { return g.free }

// Budgeted returns g bounding b to tokens tokens: once the block has
// taken that many (the tag that opens it not counted), the constraint
// writes its closing tag (the mask allows only what continues the tag),
// and the output goes on under g as before. A budget of 0 closes the
// block as soon as it opens (at once where the prompt opened it): no
// reasoning. g leaves the model room to write the block: Free; lazy,
// whose triggers then skip the block; or held, from the block's end
// (Skipping).
func (g *Grammar) Budgeted(b Block, tokens int) (*Grammar, error) {
	switch {
	case tokens < 0 || tokens > MaxBudget:
		return nil, fmt.Errorf("%w: a budget of %d tokens (0 to %d)", ErrInvalid, tokens, MaxBudget)
	case g.skip != nil && *g.skip != b:
		return nil, fmt.Errorf("%w: the grammar follows another block", ErrInvalid)
	}
	if err := b.check(); err != nil {
		return nil, err
	}
	out := *g
	out.skip, out.budget, out.budgeted = &b, tokens, true
	return &out, nil
}

// spent reports whether the block's budget is spent: it is open and
// has taken its tokens.
func (c *Constraint) spent() bool {
	return c.g.budgeted && c.blk.state == inBlock && c.blk.tokens >= c.g.budget
}

// blockState is where the output stands to a block.
type blockState int

const (
	beforeBlock blockState = iota // nothing but white space yet: a block may open
	inBlock
	pastBlock // past it, or none opened
)

// blockReader follows the output against a block.
type blockReader struct {
	b     Block
	state blockState
	// opened: the block opened (or the prompt opened it).
	opened bool
	// buf is what may still open the block (before it) or close it (in
	// it).
	buf []byte
	// tokens counts the tokens read wholly inside the block.
	tokens int
}

func newBlockReader(b Block) *blockReader {
	r := &blockReader{b: b}
	if b.Opened {
		r.state, r.opened = inBlock, true
	}
	return r
}

// read takes a token's text. Once the output is past the block it
// reports so, with the output after it: everything from the output's
// start where no block opened, the text after the closing tag where one
// closed, the token's text after that.
func (r *blockReader) read(text []byte) (after []byte, past bool) {
	if r.state == pastBlock {
		return text, true
	}
	inside := r.state == inBlock
	r.buf = append(r.buf, text...)
	if r.state == beforeBlock {
		first := bytes.TrimLeft(r.buf, " \t\r\n")
		switch {
		case bytes.HasPrefix(first, []byte(r.b.Open)):
			r.state, r.opened = inBlock, true
			r.buf = append(r.buf[:0], first[len(r.b.Open):]...)
		case bytes.HasPrefix([]byte(r.b.Open), first):
			return nil, false // white space, or the tag's start: wait
		default:
			r.state = pastBlock
			after, r.buf = r.buf, nil
			return after, true // no block: all of it is the output's start
		}
	}
	if i := bytes.Index(r.buf, []byte(r.b.Close)); i >= 0 {
		r.state = pastBlock
		after, r.buf = r.buf[i+len(r.b.Close):], nil
		return after, true
	}
	if inside {
		r.tokens++
	}
	if keep := len(r.b.Close) - 1; len(r.buf) > keep {
		r.buf = append(r.buf[:0], r.buf[len(r.buf)-keep:]...)
	}
	return nil, false
}

// pending is how much of the closing tag the block's text already ends
// with.
func (r *blockReader) pending() int { return partialSuffix(r.buf, r.b.Close) }

// partialSuffix is the length of the longest end of s that is a proper
// prefix of tag.
func partialSuffix(s []byte, tag string) int {
	for n := min(len(s), len(tag)-1); n > 0; n-- {
		if bytes.HasSuffix(s, []byte(tag[:n])) {
			return n
		}
	}
	return 0
}

// literal is the grammar of s alone.
func literal(s string) *Grammar {
	b := NewBuilder()
	b.Define("root", Lit(s))
	g, err := b.Build("root")
	if err != nil {
		panic(err) // a literal always builds
	}
	return g
}

// force starts writing the block's closing tag (its budget is spent):
// what the output does not yet end with of it, spelled by tokens of text
// or by the control token that is all of it.
func (c *Constraint) force() {
	rest := c.blk.b.Close[c.blk.pending():]
	c.forced, c.forcedCtl = literalMatcher(rest), noToken
	for id := range uint32(min(c.v.n, c.v.size)) {
		if p := c.piece(id); len(c.v.tokenBytes(id)) == 0 && string(p) == rest {
			c.forcedCtl = id
			return
		}
	}
}

// literalMatcher is a matcher of s alone.
func literalMatcher(s string) *Matcher {
	m, err := literal(s).NewMatcher()
	if err != nil {
		panic(err) // a literal's matcher always starts
	}
	return m
}

// noToken marks no control token to force.
const noToken = ^uint32(0)

// forcedMask is the mask while the closing tag is forced: its control
// token where it is one, else the tokens whose text continues it.
func (c *Constraint) forcedMask() ([]uint64, error) {
	if c.forcedCtl != noToken {
		mask := make([]uint64, (c.v.size+63)/64)
		mask[c.forcedCtl>>6] |= 1 << (c.forcedCtl & 63)
		return mask, nil
	}
	mask, err := c.v.Mask(c.forced, nil)
	if errors.Is(err, ErrNoToken) {
		// No token continues the tag as begun: the whole tag then,
		// which closes the block wherever it is written.
		c.forced = literalMatcher(c.blk.b.Close)
		return c.v.Mask(c.forced, nil)
	}
	return mask, err
}

// acceptForced takes a token of the forced closing tag.
func (c *Constraint) acceptForced(id uint32, text []byte) error {
	if id == c.forcedCtl {
		c.forced = nil
	} else if b := c.v.tokenBytes(id); len(b) == 0 || c.forced.Advance(b) != nil {
		return fmt.Errorf("%w: token %d does not continue the closing tag %q the budget forces", ErrRejected, id, c.blk.b.Close)
	}
	if c.forced != nil && c.forced.Accepting() {
		c.forced = nil
	}
	after, past := c.blk.read(text)
	if !past {
		return nil
	}
	return c.afterBlock(after)
}
