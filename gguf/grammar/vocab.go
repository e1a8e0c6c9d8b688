package grammar

import (
	"errors"
	"fmt"
	"slices"
)

// Vocab is a model's vocabulary as the mask needs it: a trie of its
// tokens' bytes, so that the tokens sharing a prefix are walked against
// the matcher once, and a prefix the grammar refuses prunes every token
// under it. Build it once per model (it is immutable and safe for
// concurrent use).
type Vocab struct {
	size  int // tokens the mask covers (the logits' length)
	nodes []trieNode
	edges []trieEdge
	toks  []uint32
	eog   []uint32
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
	v := &Vocab{size: size}
	for _, id := range eog {
		if int(id) < size {
			v.eog = append(v.eog, id)
		}
	}
	// Built breadth-first so that a node's children are contiguous: the
	// sorted tokens under a node share its prefix, so each level splits
	// a node's range by the next byte.
	type span struct {
		node     uint32
		lo, hi   int // tokens all[lo:hi] share the node's prefix
		depth    int
		children []trieEdge
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
	err := w.walk(0, 0, m.stacks)
	m.arena = m.arena[:mark]
	if err != nil {
		return dst, err
	}
	if !w.any && !(m.accepting && len(v.eog) > 0) {
		return dst, fmt.Errorf("%w (after %d bytes)", ErrNoToken, m.consumed)
	}
	return dst, nil
}

type walker struct {
	v      *Vocab
	m      *Matcher
	dst    []uint64
	levels [][]int32 // stack sets by depth, reused across siblings
	any    bool
}

// walk visits node's children that the stacks allow: a child's tokens are
// allowed when its byte leaves a stack, or lets the grammar end; its
// subtree is walked only if stacks remain.
func (w *walker) walk(node uint32, depth int, stacks []int32) error {
	v, m := w.v, w.m
	nd := v.nodes[node]
	if nd.nEdges == 0 || len(stacks) == 0 {
		return nil
	}
	next := m.first(stacks)
	if depth == len(w.levels) {
		w.levels = append(w.levels, nil)
	}
	for _, e := range v.edges[nd.edge : nd.edge+nd.nEdges] {
		if !next.Has(e.b) {
			continue
		}
		mark := len(m.arena)
		out, acc, err := m.step(stacks, e.b, w.levels[depth][:0])
		w.levels[depth] = out
		if err != nil {
			return err
		}
		if len(out) == 0 && !acc {
			m.arena = m.arena[:mark]
			continue
		}
		child := v.nodes[e.child]
		if child.nToks > 0 {
			w.any = true
			for _, id := range v.toks[child.tok : child.tok+child.nToks] {
				w.dst[id>>6] |= 1 << (id & 63)
			}
		}
		if len(out) > 0 && child.nEdges > 0 {
			if err := w.walk(e.child, depth+1, out); err != nil {
				return err
			}
		}
		m.arena = m.arena[:mark]
	}
	return nil
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
	cache map[string][]uint64
	order []string // cached keys, oldest first
	key   []byte
}

// NewConstraint starts a generation under g over the vocabulary v, whose
// token bytes piece gives (the function NewVocab was given).
func NewConstraint(g *Grammar, v *Vocab, piece func(id uint32) []byte) (*Constraint, error) {
	m, err := g.NewMatcher()
	if err != nil {
		return nil, err
	}
	return &Constraint{v: v, m: m, piece: piece, cache: map[string][]uint64{}}, nil
}

// Mask is the bitset of the tokens allowed next (see Vocab.Mask). The
// slice is the constraint's until the next call; it must not be changed.
func (c *Constraint) Mask() ([]uint64, error) {
	c.key = c.m.key(c.key[:0])
	if mk, ok := c.cache[string(c.key)]; ok {
		return mk, nil
	}
	var reuse []uint64
	if len(c.order) >= maxCached {
		reuse = c.cache[c.order[0]]
		delete(c.cache, c.order[0])
		c.order = c.order[1:]
	}
	mk, err := c.v.Mask(c.m, reuse)
	if err != nil {
		return nil, err
	}
	k := string(c.key)
	c.cache[k] = mk
	c.order = append(c.order, k)
	return mk, nil
}

// Accept advances over token id, which must be allowed: its bytes, or an
// end-of-generation token where the grammar may end.
func (c *Constraint) Accept(id uint32) error {
	if slices.Contains(c.v.eog, id) {
		if !c.m.accepting {
			return fmt.Errorf("%w: the generation ends before the grammar does", ErrRejected)
		}
		return nil
	}
	b := c.piece(id)
	if int(id) >= c.v.size || len(b) == 0 {
		return fmt.Errorf("%w: token %d has no bytes", ErrRejected, id)
	}
	return c.m.Advance(b)
}

// Done reports whether the grammar must end here (nothing may follow
// what was accepted).
func (c *Constraint) Done() bool { return c.m.Done() }

// Accepting reports whether the grammar may end here.
func (c *Constraint) Accepting() bool { return c.m.Accepting() }
