package grammar

import (
	"errors"
	"fmt"
	"slices"
)

// MaxStacks bounds a matcher's parse stacks at any one byte. An
// unambiguous grammar (every one Builder.Schema makes) keeps a handful;
// an ambiguous one can double them with each byte, and is stopped here
// rather than let its state grow without bound.
const MaxStacks = 1024

// ErrAmbiguous is the error of a matcher whose grammar asked for more
// than MaxStacks parse stacks.
var ErrAmbiguous = errors.New("grammar: too ambiguous")

// ErrRejected is the error of bytes the grammar does not allow where
// they were offered.
var ErrRejected = errors.New("grammar: bytes not allowed here")

// frame is one level of a parse stack, in the matcher's arena: pos is
// the element to match (at the top) or to return to (below it); up is
// the frame below, -1 at the bottom.
type frame struct{ pos, up int32 }

// Matcher runs a Grammar over bytes. Its state is a set of parse stacks
// (their tops, in an arena of frames they share) and whether the grammar
// may end here. It is not safe for concurrent use.
type Matcher struct {
	g         *Grammar
	arena     []frame
	stacks    []int32 // top frames; each top's pos is a byte class
	accepting bool
	consumed  int // bytes advanced over, for errors

	spare []int32 // scratch stack set
	remap []int32 // compaction scratch

	// The mask walk's: frames interned while interning, and the memo of
	// where stacks lead (Vocab.Mask); emptied after each walk.
	interning bool
	intern    map[frame]int32
	memo      map[string]*memo
}

// NewMatcher returns a matcher at the start of g.
func (g *Grammar) NewMatcher() (*Matcher, error) {
	if g.free {
		return nil, fmt.Errorf("%w: the free grammar holds nothing, so it has no matcher (NewConstraint takes it)", ErrInvalid)
	}
	m := &Matcher{g: g}
	var out []int32
	for _, s := range g.starts[g.root] {
		var err error
		if out, err = m.expand(s, -1, out); err != nil {
			return nil, err
		}
	}
	m.stacks = out
	return m, nil
}

// clone is a matcher at m's state that advances apart from it (nil for
// nil): its stacks and their frames copied, its scratch its own.
func (m *Matcher) clone() *Matcher {
	if m == nil {
		return nil
	}
	return &Matcher{g: m.g, arena: slices.Clone(m.arena), stacks: slices.Clone(m.stacks), accepting: m.accepting, consumed: m.consumed}
}

// Grammar is the grammar m runs.
func (m *Matcher) Grammar() *Grammar { return m.g }

// Accepting reports whether the bytes so far are a whole sentence of the
// grammar (it may end here).
func (m *Matcher) Accepting() bool { return m.accepting }

// Done reports whether the grammar must end here: it accepts what came,
// and no byte may follow.
func (m *Matcher) Done() bool { return m.accepting && len(m.stacks) == 0 }

// Next is the set of bytes that may come next.
func (m *Matcher) Next() Class { return m.first(m.stacks) }

// first is the union of the classes at the tops of stacks.
func (m *Matcher) first(stacks []int32) Class {
	var c Class
	for _, s := range stacks {
		c.or(&m.g.elems[m.arena[s].pos].class)
	}
	return c
}

// Advance moves m over bs. Bytes the grammar does not allow leave m as
// it was and return an error wrapping ErrRejected; a grammar too
// ambiguous to follow, ErrAmbiguous.
func (m *Matcher) Advance(bs []byte) error {
	mark := len(m.arena)
	cur, acc := m.stacks, m.accepting
	var buf [2][]int32
	buf[0], buf[1] = m.spare[:0], nil
	for i, b := range bs {
		next, a, err := m.step(cur, b, buf[i&1][:0])
		if err != nil {
			m.arena = m.arena[:mark]
			return fmt.Errorf("%w at byte %d", err, m.consumed+i)
		}
		buf[i&1] = next
		if len(next) == 0 && !a {
			m.arena = m.arena[:mark]
			return fmt.Errorf("%w: %q at byte %d", ErrRejected, b, m.consumed+i)
		}
		cur, acc = next, a
	}
	m.consumed += len(bs)
	if len(bs) > 0 {
		m.stacks, m.spare = append(m.stacks[:0], cur...), buf[0]
		m.accepting = acc
		m.compact()
	}
	return nil
}

// step advances the stacks in over byte b into out: every stack whose
// top takes b moves past it, and what follows is expanded down to byte
// classes. It reports whether a stack emptied (the grammar may end after
// b).
func (m *Matcher) step(in []int32, b byte, out []int32) ([]int32, bool, error) {
	acc := false
	for _, s := range in {
		f := m.arena[s]
		if !m.g.elems[f.pos].class.Has(b) {
			continue
		}
		var err error
		if out, err = m.expandAcc(f.pos+1, f.up, out, &acc); err != nil {
			return out, false, err
		}
	}
	return out, acc, nil
}

// expand is expandAcc for the start, where emptying cannot be recorded
// (an empty grammar accepts at once).
func (m *Matcher) expand(pos, up int32, out []int32) ([]int32, error) {
	return m.expandAcc(pos, up, out, &m.accepting)
}

// expandAcc expands position pos (with up below it) into the stack tops
// it leads to, appending them to out: it returns through ended
// alternatives, enters every alternative of a referenced rule, and stops
// at byte classes. A stack that empties sets *acc. Grammar.Build refused
// left recursion, so this ends.
func (m *Matcher) expandAcc(pos, up int32, out []int32, acc *bool) ([]int32, error) {
	g := m.g
	for {
		el := &g.elems[pos]
		switch el.kind {
		case elemEnd:
			if up < 0 {
				*acc = true
				return out, nil
			}
			f := m.arena[up]
			pos, up = f.pos, f.up
			continue
		case elemRef:
			ret := up
			if g.elems[pos+1].kind != elemEnd {
				// A reference last in its alternative returns straight to
				// the frame below: right recursion does not deepen stacks.
				ret = m.push(pos+1, up)
			}
			var err error
			for _, s := range g.starts[el.ref] {
				if out, err = m.expandAcc(s, ret, out, acc); err != nil {
					return out, err
				}
			}
			return out, nil
		}
		for _, s := range out {
			if f := m.arena[s]; f.pos == pos && f.up == up {
				return out, nil
			}
		}
		if len(out) >= MaxStacks {
			return out, fmt.Errorf("%w: more than %d parse stacks", ErrAmbiguous, MaxStacks)
		}
		return append(out, m.push(pos, up)), nil
	}
}

func (m *Matcher) push(pos, up int32) int32 {
	f := frame{pos, up}
	if m.interning {
		if i, ok := m.intern[f]; ok {
			return i
		}
		m.arena = append(m.arena, f)
		m.intern[f] = int32(len(m.arena) - 1)
		return int32(len(m.arena) - 1)
	}
	m.arena = append(m.arena, f)
	return int32(len(m.arena) - 1)
}

// compact keeps only the frames the stacks reach, so that the arena
// holds the live state rather than every frame a generation made.
func (m *Matcher) compact() {
	if len(m.arena) < 64 {
		return
	}
	remap := m.remap[:0]
	for range m.arena {
		remap = append(remap, -1)
	}
	next := make([]frame, 0, len(m.stacks)*4)
	var move func(i int32) int32
	move = func(i int32) int32 {
		if i < 0 {
			return -1
		}
		if remap[i] >= 0 {
			return remap[i]
		}
		f := m.arena[i]
		f.up = move(f.up)
		next = append(next, f)
		remap[i] = int32(len(next) - 1)
		return remap[i]
	}
	for k, s := range m.stacks {
		m.stacks[k] = move(s)
	}
	m.arena, m.remap = next, remap
}

// key appends a description of m's state for mask caching: whether it
// accepts, and each stack's positions from the top down. Equal keys are
// equal states.
func (m *Matcher) key(dst []byte) []byte {
	if m.accepting {
		dst = append(dst, 1)
	} else {
		dst = append(dst, 0)
	}
	for _, s := range m.stacks {
		for i := s; i >= 0; i = m.arena[i].up {
			p := uint32(m.arena[i].pos)
			dst = append(dst, byte(p), byte(p>>8), byte(p>>16), byte(p>>24))
		}
		dst = append(dst, 0xff, 0xff, 0xff, 0xff)
	}
	return dst
}
