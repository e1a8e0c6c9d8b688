package grammar

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Vocab is a model's vocabulary as the mask needs it: a trie of its
// tokens' bytes, so that the tokens sharing a prefix are walked against
// the matcher once, and a prefix the grammar refuses prunes every token
// under it. Build it once per model (it is immutable and safe for
// concurrent use).
type Vocab struct {
	size int // tokens the mask covers (the logits' length)
	// n and bytesOf give the tokens' bytes, as NewVocab was given them.
	n       int
	bytesOf func(id uint32) []byte
	nodes   []trieNode
	edges   []trieEdge
	toks    []uint32
	eog     []uint32
}

type trieNode struct {
	edge, nEdges uint32 // children: edges[edge : edge+nEdges]
	tok, nToks   uint32 // tokens whose bytes end here: toks[tok : tok+nToks]
}

type trieEdge struct {
	b     byte
	child uint32
}

// NewVocab builds the trie. size is the vocabulary's size as the logits
// count it; piece(id) is token id's bytes for ids below n (those past n,
// and tokens with no bytes, such as control tokens, are never allowed);
// eog lists the end-of-generation tokens, allowed exactly where the
// grammar may end.
func NewVocab(size, n int, piece func(id uint32) []byte, eog []uint32) *Vocab {
	type tok struct {
		b  []byte
		id uint32
	}
	all := make([]tok, 0, n)
	for id := range min(n, size) {
		if b := piece(uint32(id)); len(b) > 0 {
			all = append(all, tok{b, uint32(id)})
		}
	}
	slices.SortFunc(all, func(a, b tok) int {
		if c := slices.Compare(a.b, b.b); c != 0 {
			return c
		}
		return int(a.id) - int(b.id)
	})
	v := &Vocab{size: size, n: n, bytesOf: piece}
	for _, id := range eog {
		if int(id) < size {
			v.eog = append(v.eog, id)
		}
	}
	// Built breadth-first so that a node's children are contiguous: the
	// sorted tokens under a node share its prefix, so each level splits
	// a node's range by the next byte.
	type span struct {
		node   uint32
		lo, hi int // tokens all[lo:hi] share the node's prefix
		depth  int
	}
	v.nodes = append(v.nodes, trieNode{})
	queue := []span{{node: 0, lo: 0, hi: len(all)}}
	for len(queue) > 0 {
		sp := queue[0]
		queue = queue[1:]
		i := sp.lo
		nd := &v.nodes[sp.node]
		nd.tok = uint32(len(v.toks))
		for i < sp.hi && len(all[i].b) == sp.depth {
			v.toks = append(v.toks, all[i].id)
			i++
		}
		nd.nToks = uint32(len(v.toks)) - nd.tok
		nd.edge = uint32(len(v.edges))
		for i < sp.hi {
			b := all[i].b[sp.depth]
			j := i
			for j < sp.hi && all[j].b[sp.depth] == b {
				j++
			}
			child := uint32(len(v.nodes))
			v.nodes = append(v.nodes, trieNode{})
			nd = &v.nodes[sp.node]
			v.edges = append(v.edges, trieEdge{b, child})
			queue = append(queue, span{node: child, lo: i, hi: j, depth: sp.depth + 1})
			i = j
		}
		nd.nEdges = uint32(len(v.edges)) - nd.edge
	}
	return v
}

// Size is the number of tokens a mask covers.
func (v *Vocab) Size() int { return v.size }

// Nodes is the trie's node count.
func (v *Vocab) Nodes() int { return len(v.nodes) }

// ErrNoToken is the error of a state the grammar allows to continue, but
// with bytes no token of the vocabulary begins with.
var ErrNoToken = errors.New("grammar: no token of the vocabulary fits the grammar here")

// Mask sets in dst (a bitset of v.Size() bits, resized and cleared) the
// tokens whose bytes m can take next, and the end-of-generation tokens
// when m accepts. m is left as it was. It fails with ErrNoToken when no
// token fits, and with ErrAmbiguous when the grammar is.
func (v *Vocab) Mask(m *Matcher, dst []uint64) ([]uint64, error) {
	words := (v.size + 63) / 64
	dst = slices.Grow(dst[:0], words)[:words]
	clear(dst)
	if m.accepting {
		for _, id := range v.eog {
			dst[id>>6] |= 1 << (id & 63)
		}
	}
	w := walker{v: v, m: m, dst: dst}
	mark := len(m.arena)
	// The walk's frames are interned, so that equal stacks are the same
	// stacks and its memo finds them; they go when it ends.
	if m.intern == nil {
		m.intern, m.memo = map[frame]int32{}, map[string]*memo{}
	}
	m.interning = true
	err := w.walk(0, m.stacks, m.first(m.stacks))
	m.interning = false
	m.arena = m.arena[:mark]
	clear(m.intern)
	clear(m.memo)
	if err != nil {
		return dst, err
	}
	if !w.any && !(m.accepting && len(v.eog) > 0) {
		return dst, fmt.Errorf("%w (after %d bytes)", ErrNoToken, m.consumed)
	}
	return dst, nil
}

type walker struct {
	v   *Vocab
	m   *Matcher
	dst []uint64
	any bool
	key []byte
	// The last memo found and its key: consecutive children mostly
	// share one (a string's characters), and a compare is cheaper than
	// the map.
	lastKey []byte
	last    *memo
}

// memo is where a set of stacks leads once they take a byte. A stack's
// advance does not depend on which byte of its class it took, and with
// the walk's frames interned (Matcher.intern) the same stacks recur all
// over the trie: inside a string, every node's stacks are the string's,
// and each character leads back to them. So each distinct set of taking
// stacks is expanded once per mask.
type memo struct {
	stacks []int32 // what they lead to
	accept bool    // whether one of them empties
	first  Class   // the bytes the result may take next
}

// walk visits node's children that the stacks allow: a child's tokens are
// allowed when its byte leaves a stack, or lets the grammar end; its
// subtree is walked only if stacks remain.
func (w *walker) walk(node uint32, stacks []int32, first Class) error {
	v := w.v
	nd := v.nodes[node]
	for _, e := range v.edges[nd.edge : nd.edge+nd.nEdges] {
		if !first.Has(e.b) {
			continue
		}
		mo, err := w.advance(stacks, e.b)
		if err != nil {
			return err
		}
		if len(mo.stacks) == 0 && !mo.accept {
			continue
		}
		child := v.nodes[e.child]
		if child.nToks > 0 {
			w.any = true
			for _, id := range v.toks[child.tok : child.tok+child.nToks] {
				w.dst[id>>6] |= 1 << (id & 63)
			}
		}
		if len(mo.stacks) > 0 && child.nEdges > 0 {
			if err := w.walk(e.child, mo.stacks, mo.first); err != nil {
				return err
			}
		}
	}
	return nil
}

// advance is where stacks lead after byte b, from the memo or expanded
// into it.
func (w *walker) advance(stacks []int32, b byte) (*memo, error) {
	m := w.m
	elems, arena := m.g.elems, m.arena
	key := w.key[:0]
	for _, s := range stacks {
		if elems[arena[s].pos].class.Has(b) {
			key = append(key, byte(s), byte(s>>8), byte(s>>16), byte(s>>24))
		}
	}
	w.key = key
	if w.last != nil && string(key) == string(w.lastKey) {
		return w.last, nil
	}
	if mo, ok := m.memo[string(key)]; ok {
		w.last, w.lastKey = mo, append(w.lastKey[:0], key...)
		return mo, nil
	}
	mo := &memo{}
	for i := 0; i < len(key); i += 4 {
		s := int32(key[i]) | int32(key[i+1])<<8 | int32(key[i+2])<<16 | int32(key[i+3])<<24
		f := m.arena[s]
		var err error
		if mo.stacks, err = m.expandAcc(f.pos+1, f.up, mo.stacks, &mo.accept); err != nil {
			return nil, err
		}
	}
	mo.first = m.first(mo.stacks)
	m.memo[string(key)] = mo
	w.last, w.lastKey = mo, append(w.lastKey[:0], key...)
	return mo, nil
}

// Allowed reports whether bitset mask holds token id.
func Allowed(mask []uint64, id uint32) bool {
	return int(id>>6) < len(mask) && mask[id>>6]&(1<<(id&63)) != 0
}

// maxCached bounds the masks a Constraint keeps.
const maxCached = 32

// Constraint keeps one generation to a grammar: the mask for its next
// token, and its advance over each token picked. Masks are cached by the
// matcher's state, which repeats (inside a string every token leaves the
// same state), so the trie is walked once per distinct state. It is not
// safe for concurrent use.
type Constraint struct {
	v     *Vocab
	m     *Matcher
	piece func(id uint32) []byte
	cache *maskCache // shared with c's clones
	key   []byte

	// A lazy grammar's (Grammar.Lazy) wait for its trigger: whether it
	// came, the output since the start that a trigger may still begin
	// in, and whether the output's first text is past every trigger
	// that must open it.
	triggered bool
	seen      []byte
	pastStart bool
	// g is the grammar (m is nil for Free's); blk follows its block,
	// where it has one; forced, while set, is the closing tag its budget
	// forces (forcedCtl the control token that is all of it, or
	// noToken).
	g         *Grammar
	blk       *blockReader
	forced    *Matcher
	forcedCtl uint32
	// front follows a held grammar's block (front.go), nil for a lazy
	// or free grammar's.
	front *front
}

// waiting says the grammar is lazy and its trigger has not come: every
// token is allowed, and the output may end.
func (c *Constraint) waiting() bool { return !c.triggered && len(c.g.triggers) > 0 }

// tokenBytes is token id's bytes (none for a control token).
func (v *Vocab) tokenBytes(id uint32) []byte {
	if int(id) >= v.n || v.bytesOf == nil {
		return nil
	}
	return v.bytesOf(id)
}

// NewConstraint starts a generation under g over the vocabulary v, whose
// token bytes piece gives: the function NewVocab was given, except that
// a control token's text may be given too (the mask never allows one by
// it, but a lazy grammar's trigger may be one).
func NewConstraint(g *Grammar, v *Vocab, piece func(id uint32) []byte) (*Constraint, error) {
	c := &Constraint{v: v, g: g, piece: piece, cache: &maskCache{masks: map[string][]uint64{}}}
	if !g.free {
		m, err := g.NewMatcher()
		if err != nil {
			return nil, err
		}
		c.m = m
	}
	if g.skip != nil {
		c.blk = newBlockReader(*g.skip)
		if !g.free && len(g.triggers) == 0 {
			if err := c.startFront(); err != nil {
				return nil, err
			}
		}
		if c.spent() {
			c.force() // a budget of none, on a block the prompt opened
		}
	}
	return c, nil
}

// Mask is the bitset of the tokens allowed next (see Vocab.Mask), nil
// while a lazy grammar waits for its trigger (every token). The slice is
// the constraint's until the next call; it must not be changed.
func (c *Constraint) Mask() ([]uint64, error) {
	switch {
	case c.forced != nil:
		return c.forcedMask()
	case c.g.free || c.waiting():
		return nil, nil
	case c.fronted():
		return c.frontMask()
	}
	c.key = c.m.key(c.key[:0])
	mc := c.cache
	if mk, ok := mc.masks[string(c.key)]; ok {
		return mk, nil
	}
	var reuse []uint64
	if len(mc.order) >= maxCached {
		reuse = mc.masks[mc.order[0]]
		delete(mc.masks, mc.order[0])
		mc.order = mc.order[1:]
	}
	mk, err := c.v.Mask(c.m, reuse)
	if err != nil {
		return nil, err
	}
	k := string(c.key)
	mc.masks[k] = mk
	mc.order = append(mc.order, k)
	return mk, nil
}

// maskCache holds the masks of the grammar states a Constraint (and its
// clones) met last, by the matcher's key.
type maskCache struct {
	masks map[string][]uint64
	order []string // keys, oldest first
}

// Clone returns a constraint at c's state that advances apart from it:
// speculative decoding walks a window's drafts on a clone, c staying
// where the output is. The two share their cache of masks (a state's mask
// is the grammar's, whoever meets it), so they must be used from one
// goroutine at a time, and a mask either returns is valid until the next
// Mask call on either.
func (c *Constraint) Clone() *Constraint {
	d := *c
	d.key = nil
	d.m = c.m.clone()
	d.forced = c.forced.clone()
	d.seen = slices.Clone(c.seen)
	if c.blk != nil {
		b := *c.blk
		b.buf = slices.Clone(b.buf)
		d.blk = &b
	}
	if c.front != nil {
		f := *c.front
		f.opener = f.opener.clone()
		f.inside = maps.Clone(f.inside)
		d.front = &f
	}
	return &d
}

// Accept advances over token id, which must be allowed: its bytes, or an
// end-of-generation token where the grammar may end.
func (c *Constraint) Accept(id uint32) error {
	if slices.Contains(c.v.eog, id) {
		if !c.Accepting() {
			return fmt.Errorf("%w: the generation ends before the grammar does", ErrRejected)
		}
		return nil
	}
	b := c.piece(id)
	if c.forced != nil {
		return c.acceptForced(id, b)
	}
	if c.fronted() && c.blk.state == beforeBlock {
		return c.acceptFront(id, b)
	}
	if c.blk != nil && c.blk.state != pastBlock {
		after, past := c.blk.read(b)
		if !past {
			// Inside the block (or before it opens) nothing is held,
			// and no trigger counts; a spent budget forces its end.
			if c.spent() {
				c.force()
			}
			return nil
		}
		return c.afterBlock(after)
	}
	switch {
	case c.g.free:
		return nil
	case c.waiting():
		return c.watch(b)
	case int(id) >= c.v.size || len(b) == 0:
		return fmt.Errorf("%w: token %d has no bytes", ErrRejected, id)
	}
	return c.m.Advance(b)
}

// afterBlock takes the output that follows the block (or, where none
// opened, the output from its start), as the first text the grammar
// reads.
func (c *Constraint) afterBlock(after []byte) error {
	switch {
	case c.g.free:
		return nil
	case c.waiting():
		return c.watch(after)
	}
	return c.m.Advance(after)
}

// Done reports whether the grammar must end here (nothing may follow
// what was accepted).
func (c *Constraint) Done() bool {
	return c.forced == nil && !c.g.free && !c.waiting() && !c.fronted() && c.m.Done()
}

// Accepting reports whether the grammar may end here.
func (c *Constraint) Accepting() bool {
	if c.fronted() {
		// Before the block, where the grammar has taken the output so
		// far; never inside it.
		return c.forced == nil && c.blk.state == beforeBlock && !c.front.gramDead && c.m.Accepting()
	}
	return c.forced == nil && (c.g.free || c.waiting() || c.m.Accepting())
}

// Triggered reports whether a lazy grammar's trigger has come (always,
// for a grammar that is not lazy).
func (c *Constraint) Triggered() bool { return !c.waiting() }
