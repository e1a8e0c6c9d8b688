package tokenizer

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
)

// SentencePiece Unigram, llama.cpp's UGM vocabulary type
// (llm_tokenizer_ugm and its session; GGUF's tokenizer.ggml.model "t5":
// T5, XLM-RoBERTa). Each fragment is normalised first: at each position a
// user-defined token's text passes unchanged, else the longest prefix the
// precompiled charsmap knows is replaced (NFKC and friends), else one
// character passes (an invalid byte becomes U+FFFD); spaces become "▁",
// runs of them merged and the text given a leading one where the vocabulary
// asks. The normalised text is then segmented by Viterbi: the segmentation
// whose token scores sum highest, where a character no token spells alone
// may be UNK at a penalty, and consecutive UNKs are one UNK. llama.cpp fixes
// escape_whitespaces on and treat_whitespace_as_suffix off for UGM, so
// those are not options here.

// ugmConfig is what a UGM tokenizer adds to the others.
type ugmConfig struct {
	tokens   ugmTrie  // normal, user-defined and unused tokens, by text
	user     ugmTrie  // user-defined tokens' texts: passed through normalisation
	chars    charsMap // the precompiled charsmap; empty: none
	unkScore float64  // the score of an UNK standing for one character
	// addPrefix puts "▁" before a fragment's text (add_space_prefix);
	// mergeSpaces drops leading and trailing spaces and makes each run
	// of them one "▁" (remove_extra_whitespaces), which prefixes the text
	// too.
	addPrefix, mergeSpaces bool
	// scores is the Viterbi score of each trie node's token: the file's,
	// or 0 for a user-defined token (llama.cpp favours them so).
	scores []float64
}

// ugmSpace is the escaped space.
const ugmSpace = "▁"

// buildUGM builds the token tries and the UNK score from the attributes
// the file gave, before fixSpecialTokens changes them: llama.cpp builds
// its tokenizer at that point too.
func (t *Tokenizer) buildUGM(v *Vocab) error {
	u := &t.ugm
	u.addPrefix, u.mergeSpaces = v.AddSpacePrefix, v.RemoveExtraSpaces
	if err := u.chars.parse(v.CharsMap); err != nil {
		return err
	}
	var inTrie, user []int32
	minScore := float32(math.MaxFloat32)
	for id, a := range t.attrs {
		if a&attrNormal != 0 {
			// Not min(): a NaN score is skipped, as std::min<float> skips it.
			if s := t.scores[id]; s < minScore {
				minScore = s
			}
		}
		if a&(attrNormal|attrUserDefined|attrUnused) != 0 {
			inTrie = append(inTrie, int32(id))
		}
		if a&attrUserDefined != 0 {
			user = append(user, int32(id))
		}
	}
	u.unkScore = float64(minScore - 10) // float arithmetic, as llama.cpp
	u.tokens.build(t.tokens, inTrie)
	u.user.build(t.tokens, user)
	return nil
}

// finishUGM sets the per-node scores from the final attributes (which
// llama.cpp reads while tokenizing) and MinTokens' bound (see minTokensUGM).
func (t *Tokenizer) finishUGM() {
	u := &t.ugm
	u.scores = make([]float64, len(u.tokens.val))
	bounded := !math.IsNaN(u.unkScore) && !math.IsInf(u.unkScore, 0)
	longest := 0
	for node, id := range u.tokens.val {
		if id < 0 {
			continue
		}
		s := float64(t.scores[id])
		if t.attrs[id]&attrUserDefined != 0 {
			s = 0
		}
		u.scores[node] = s
		// A score that is not finite can leave a position unreachable, and
		// the merged UNKs can swallow a token that is the UNK token itself:
		// then no length bound holds.
		if math.IsNaN(s) || math.IsInf(s, 0) || uint32(id) == t.unk {
			bounded = false
		}
		longest = max(longest, len(t.tokens[id]))
	}
	if bounded {
		t.maxTokenBytes = longest
	}
}

// ugmTrie is a byte trie in which a node's children are consecutive nodes, sorted by their label; node 0
// is the root.
type ugmTrie struct {
	label []byte   // by node: the byte leading to it
	first []int32  // by node: its first child
	nkids []uint16 // by node: how many children it has
	val   []int32  // by node: the token id it spells, -1 for none
	root  [256]int32
}

// build makes the trie of the texts of ids (in id order: a later id with
// the same text wins, as llama.cpp's naive_trie keeps the last insert).
// A node's texts are kept as a run of ids grouped by their next byte,
// those ending at the node first, so that its children's runs follow in
// label order: a long run is bucketed by that byte (MSD radix), a short
// one sorted whole, after which its descendants' runs are sorted already.
func (tr *ugmTrie) build(tokens []string, ids []int32) {
	*tr = ugmTrie{label: []byte{0}, first: []int32{0}, nkids: []uint16{0}, val: []int32{-1}}
	for c := range tr.root {
		tr.root[c] = -1
	}
	ids = slices.Clone(ids)
	scratch := make([]int32, len(ids))
	// Most texts end in nodes of their own; growing is what is left.
	tr.label = slices.Grow(tr.label, 2*len(ids))
	tr.first = slices.Grow(tr.first, 2*len(ids))
	tr.nkids = slices.Grow(tr.nkids, 2*len(ids))
	tr.val = slices.Grow(tr.val, 2*len(ids))
	type item struct {
		node, lo, hi, depth int
		sorted              bool
	}
	// byteAt is the byte of a text at depth, or -1 where it ends.
	byteAt := func(id int32, depth int) int {
		if t := tokens[id]; depth < len(t) {
			return int(t[depth])
		}
		return -1
	}
	// A node's children are numbered together when it is reached, so the
	// order nodes are reached in is free: depth first keeps the stack short.
	stack := []item{{0, 0, len(ids), 0, false}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		run := ids[it.lo:it.hi]
		switch {
		case it.sorted:
		case len(run) > 64:
			var at [258]int // bucket 0: texts that end; 1+b: texts going on with b
			for _, id := range run {
				at[byteAt(id, it.depth)+2]++
			}
			for k := 1; k < len(at); k++ {
				at[k] += at[k-1]
			}
			for _, id := range run { // stable: id order kept
				k := byteAt(id, it.depth) + 1
				scratch[at[k]] = id
				at[k]++
			}
			copy(run, scratch[:len(run)])
		default:
			slices.SortFunc(run, func(a, b int32) int {
				if c := strings.Compare(tokens[a][it.depth:], tokens[b][it.depth:]); c != 0 {
					return c
				}
				return cmp.Compare(a, b) // the same text: the later id last
			})
			it.sorted = true
		}
		pos := it.lo
		for pos < it.hi && len(tokens[ids[pos]]) == it.depth {
			pos++
		}
		if pos > it.lo {
			tr.val[it.node] = ids[pos-1]
		}
		tr.first[it.node] = int32(len(tr.val))
		for pos < it.hi {
			b := tokens[ids[pos]][it.depth]
			end := pos + 1
			for end < it.hi && tokens[ids[end]][it.depth] == b {
				end++
			}
			child := len(tr.val)
			tr.label = append(tr.label, b)
			tr.first = append(tr.first, 0)
			tr.nkids = append(tr.nkids, 0)
			tr.val = append(tr.val, -1)
			tr.nkids[it.node]++
			if it.node == 0 {
				tr.root[b] = int32(child)
			}
			stack = append(stack, item{child, pos, end, it.depth + 1, it.sorted})
			pos = end
		}
	}
}

// child is node's child labelled c, or -1.
func (tr *ugmTrie) child(node int32, c byte) int32 {
	if node == 0 {
		return tr.root[c]
	}
	lo, hi := int(tr.first[node]), int(tr.first[node])+int(tr.nkids[node])
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		switch l := tr.label[m]; {
		case l == c:
			return int32(m)
		case l < c:
			lo = m + 1
		default:
			hi = m
		}
	}
	return -1
}

// charsMap is SentencePiece's precompiled charsmap: a little-endian
// uint32 size, that many bytes of XOR-compressed compact double array
// (darts-clone units) mapping byte strings to offsets, then the
// NUL-terminated replacement strings those offsets point into.
type charsMap struct {
	xcda []uint32
	repl string
}

// Parts of an XCDA unit.
func xcdaBase(u uint32) uint32   { return (u >> 10) << ((u & (1 << 9)) >> 6) }
func xcdaLCheck(u uint32) uint32 { return u & (1<<31 | 0xFF) }
func xcdaLeaf(u uint32) bool     { return u>>8&1 != 0 }
func xcdaValue(u uint32) uint32  { return u & (1<<31 - 1) }

// parse reads b, refusing what llama.cpp refuses at load (a size header
// missing or too large) and what it would throw on while tokenizing some
// input (a node, a replacement offset or a replacement's end outside the
// data): every state a byte string can reach is walked once here, so that
// normalising never has to check.
func (m *charsMap) parse(b []byte) error {
	*m = charsMap{}
	if len(b) == 0 {
		return nil
	}
	if len(b) < 4 {
		return fmt.Errorf("%w: precompiled charsmap of %d bytes has no size header", ErrInvalidVocab, len(b))
	}
	size := uint64(binary.LittleEndian.Uint32(b))
	if size+4 >= uint64(len(b)) {
		return fmt.Errorf("%w: precompiled charsmap's double array of %d bytes leaves no replacements in %d", ErrInvalidVocab, size, len(b))
	}
	xcda := make([]uint32, size/4)
	for i := range xcda {
		xcda[i] = binary.LittleEndian.Uint32(b[4+4*i:])
	}
	m.xcda, m.repl = xcda, string(b[4+size:])
	if len(xcda) == 0 {
		return nil // llama.cpp never walks an empty array
	}
	lastNUL := strings.LastIndexByte(m.repl, 0)
	n := uint64(len(xcda))
	// A state whose transitions are all in range is below n+256 (XOR
	// with a byte moves within a block of 256), so this bitmap holds them.
	seen := make([]uint64, (n+256+63)/64)
	bad := func(what string, at uint64) error {
		return fmt.Errorf("%w: precompiled charsmap's %s %d is outside its %d units", ErrInvalidVocab, what, at, n)
	}
	root := uint64(xcdaBase(xcda[0]))
	if root >= n+256 {
		return bad("root", root)
	}
	seen[root/64] |= 1 << (root % 64)
	stack := []uint64{root}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for c := uint64(1); c < 256; c++ {
			i := s ^ c
			if i >= n {
				return bad("node", i)
			}
			u := xcda[i]
			if uint64(xcdaLCheck(u)) != c {
				continue
			}
			next := i ^ uint64(xcdaBase(u))
			if xcdaLeaf(u) {
				if next >= n {
					return bad("value node", next)
				}
				if off := xcdaValue(xcda[next]); int64(off) > int64(lastNUL) {
					return fmt.Errorf("%w: precompiled charsmap's replacement at %d is outside its %d bytes or unterminated", ErrInvalidVocab, off, len(m.repl))
				}
			}
			if next >= n+256 {
				return bad("node", next)
			}
			if seen[next/64]&(1<<(next%64)) == 0 {
				seen[next/64] |= 1 << (next % 64)
				stack = append(stack, next)
			}
		}
	}
	return nil
}

// match is the replacement for the longest prefix of s the charsmap
// maps, and that prefix's length; 0 when none.
func (m *charsMap) match(s string) (string, int) {
	if len(m.xcda) == 0 {
		return "", 0
	}
	xcda := m.xcda
	n := uint32(len(xcda))
	node := xcdaBase(xcda[0])
	length, off := 0, uint32(0)
	for k := 0; k < len(s); k++ {
		c := s[k]
		if c == 0 {
			break
		}
		node ^= uint32(c)
		if node >= n || xcdaLCheck(xcda[node]) != uint32(c) { // parse checked the range
			break
		}
		u := xcda[node]
		node ^= xcdaBase(u)
		if xcdaLeaf(u) && node < n {
			length, off = k+1, xcdaValue(xcda[node])
		}
	}
	if length == 0 || int(off) >= len(m.repl) {
		return "", 0
	}
	r := m.repl[off:]
	if end := strings.IndexByte(r, 0); end >= 0 {
		return r[:end], length
	}
	return "", 0
}

// ugmNormalizer normalises one fragment, a prefix at a time.
type ugmNormalizer struct {
	u         *ugmConfig
	s         string
	i         int
	nonSpace  bool // inside a run of non-spaces
	prepended bool // the leading "▁" is out
}

// llamaUTF8Len is the length of the character at s[i] when llama.cpp's
// unicode_cpt_from_utf8 accepts it (a lead byte and its continuation
// bytes, nothing more checked), else 0.
func llamaUTF8Len(s string, i int) int {
	c := s[i]
	n := 0
	switch {
	case c < 0x80:
		return 1
	case c&0xE0 == 0xC0:
		n = 2
	case c&0xF0 == 0xE0:
		n = 3
	case c&0xF8 == 0xF0:
		n = 4
	default:
		return 0
	}
	if i+n > len(s) {
		return 0
	}
	for k := 1; k < n; k++ {
		if s[i+k]&0xC0 != 0x80 {
			return 0
		}
	}
	return n
}

// next appends the normalisation of the next prefix of the text to dst;
// done reports whether the text is used up.
func (z *ugmNormalizer) next(dst []byte) []byte {
	u, s := z.u, z.s[z.i:]
	var repl string
	consumed := 0
	// llama.cpp's naive_trie::get_longest_prefix: as deep as the trie
	// goes, whether or not a user-defined token ends there.
	if len(u.user.val) > 1 {
		node := int32(0)
		for consumed < len(s) {
			if node = u.user.child(node, s[consumed]); node < 0 {
				break
			}
			consumed++
		}
		repl = s[:consumed]
	}
	if consumed == 0 {
		if repl, consumed = u.chars.match(s); consumed == 0 {
			if n := llamaUTF8Len(s, 0); n > 0 {
				repl, consumed = s[:n], n
			} else {
				repl, consumed = "\uFFFD", 1
			}
		}
	}
	z.i += consumed
	for k := 0; k < len(repl); k++ {
		c := repl[k]
		if c != ' ' {
			if !z.nonSpace {
				z.nonSpace = true
				if u.addPrefix && !z.prepended || u.mergeSpaces {
					dst = append(dst, ugmSpace...)
					z.prepended = true
				}
			}
			dst = append(dst, c)
			continue
		}
		z.nonSpace = false
		if !u.mergeSpaces {
			dst = append(dst, ugmSpace...)
		}
	}
	return dst
}

func (z *ugmNormalizer) done() bool { return z.i >= len(z.s) }

// normalize appends the normalisation of s to dst.
func (u *ugmConfig) normalize(dst []byte, s string) []byte {
	z := ugmNormalizer{u: u, s: s}
	for !z.done() {
		dst = z.next(dst)
	}
	return dst
}

// ugmBest is the best segmentation found of a prefix of the normalised
// text: its score and last token, which starts at from.
type ugmBest struct {
	score float64
	from  int
	tok   uint32
}

// appendUGM is appendEncode for UGM: BOS, each fragment's ids, EOS.
func (t *Tokenizer) appendUGM(dst []uint32, frags []fragment, addSpecial bool, limit int) ([]uint32, bool) {
	over := func() bool { return limit >= 0 && len(dst) > limit }
	if addSpecial && t.addBOS {
		dst = append(dst, t.bos)
	}
	var norm []byte
	var best []ugmBest
	for _, f := range frags {
		if over() {
			break
		}
		if f.tok != NoToken {
			dst = append(dst, f.tok)
			continue
		}
		norm = t.ugm.normalize(norm[:0], f.text)
		dst, best = t.viterbi(norm, dst, best)
	}
	if over() {
		// A fragment is segmented whole; its ids past the limit are cut.
		return dst[:limit+1], false
	}
	if addSpecial && t.addEOS {
		dst = append(dst, t.eos)
	}
	return dst, true
}

// viterbi appends the ids of the best segmentation of the normalised text
// s, best being scratch space.
func (t *Tokenizer) viterbi(s []byte, out []uint32, best []ugmBest) ([]uint32, []ugmBest) {
	n := len(s)
	if n == 0 {
		return out, best
	}
	u := &t.ugm
	tr := &u.tokens
	best = slices.Grow(best[:0], n+1)[:n+1]
	for i := range best {
		best[i] = ugmBest{score: -math.MaxFloat64, tok: t.unk}
	}
	best[0].score = 0
	for off := 0; off < n; {
		cl := min(utf8Len(s[off]), n-off)
		cur := best[off].score
		single := false
		node := int32(0)
		for p := off; p < n; p++ {
			if node = tr.child(node, s[p]); node < 0 {
				break
			}
			id := tr.val[node]
			if id < 0 {
				continue
			}
			if p+1-off == cl {
				single = true
			}
			if c := cur + u.scores[node]; c > best[p+1].score {
				best[p+1] = ugmBest{score: c, from: off, tok: uint32(id)}
			}
		}
		if !single {
			if c := cur + u.unkScore; c > best[off+cl].score {
				best[off+cl] = ugmBest{score: c, from: off, tok: t.unk}
			}
		}
		off += cl
	}
	// Back from the end; llama.cpp writes consecutive UNKs as one.
	start := len(out)
	prevUnk := false
	for b := best[n]; ; b = best[b.from] {
		unk := b.tok == t.unk
		if !(prevUnk && unk) {
			out = append(out, b.tok)
		}
		if b.from == 0 {
			break
		}
		prevUnk = unk
	}
	slices.Reverse(out[start:])
	return out, best
}

// minTokensUGM bounds UGM's encodings from below. A character of the
// normalised text that some token spells alone is never part of an UNK,
// and every other id stands for at most MaxTokenBytes bytes of the
// normalised text, so a fragment needs ceil(known / MaxTokenBytes) ids,
// known counting the bytes of such characters; a special token cut out of
// the text is one id. The text is normalised (cheaply, in pieces), not
// segmented.
func (t *Tokenizer) minTokensUGM(s string, opt EncodeOptions) int {
	need := 0
	if opt.AddSpecial && t.addBOS {
		need++
	}
	if opt.AddSpecial && t.addEOS {
		need++
	}
	if t.maxTokenBytes == 0 || s == "" {
		return need
	}
	var buf []byte
	for _, f := range t.partition(s, opt.ParseSpecial) {
		if f.tok != NoToken {
			need++
			continue
		}
		known := 0
		z := ugmNormalizer{u: &t.ugm, s: f.text}
		buf = buf[:0]
		for {
			end := z.done()
			if !end {
				buf = z.next(buf)
				if len(buf) < 4096 {
					continue
				}
			}
			var off int
			known, off = t.ugmKnown(buf, end, known)
			buf = buf[:copy(buf, buf[off:])]
			if end {
				break
			}
		}
		need += (known + t.maxTokenBytes - 1) / t.maxTokenBytes
	}
	return need
}

// ugmKnown adds to known the bytes of the characters of s (stepped through
// as the Viterbi steps) that a token spells alone, and returns the offset
// of the first character it did not read: one that may go on past s,
// unless s is the end of the text.
func (t *Tokenizer) ugmKnown(s []byte, end bool, known int) (int, int) {
	tr := &t.ugm.tokens
	off := 0
	for off < len(s) {
		cl := utf8Len(s[off])
		if off+cl > len(s) {
			if !end {
				break
			}
			cl = len(s) - off
		}
		node := int32(0)
		for k := off; k < off+cl && node >= 0; k++ {
			node = tr.child(node, s[k])
		}
		if node >= 0 && tr.val[node] >= 0 {
			known += cl
		}
		off += cl
	}
	return known, off
}
