package tokenizer

import (
	"strings"
)

// EncodeOptions are the two switches of llama.cpp's llama_tokenize.
type EncodeOptions struct {
	// AddSpecial adds BOS and EOS where the vocabulary asks for them
	// (tokenizer.ggml.add_bos_token / add_eos_token).
	AddSpecial bool
	// ParseSpecial matches the text of control tokens ("<|im_start|>") in
	// the input. User-defined tokens are always matched, as llama.cpp and
	// Hugging Face tokenizers do.
	ParseSpecial bool
}

// Encode returns the token ids of s.
func (t *Tokenizer) Encode(s string, opt EncodeOptions) []uint32 {
	return t.AppendEncode(nil, s, opt)
}

// AppendEncode appends the token ids of s to dst.
func (t *Tokenizer) AppendEncode(dst []uint32, s string, opt EncodeOptions) []uint32 {
	dst, _ = t.appendEncode(dst, s, opt, -1)
	return dst
}

// EncodeLimit is Encode for a caller that can use no more than limit ids
// (a context): it gives up as soon as the ids pass limit, rather than
// encoding the rest of a text too long to use. complete reports whether
// ids is the whole encoding; when it is not, ids is a prefix of it holding
// more than limit ids. Encoding stops early between special tokens and
// between pre-tokenized words; a SentencePiece fragment is merged whole
// (its merges are not local), and a Unigram one segmented whole, so only
// its output is cut. A complete
// encoding may itself be longer than limit (an EOS appended last).
func (t *Tokenizer) EncodeLimit(s string, opt EncodeOptions, limit int) (ids []uint32, complete bool) {
	return t.appendEncode(nil, s, opt, max(limit, 0))
}

// appendEncode appends the ids of s to dst, stopping once dst holds more
// than limit ids when limit is not negative.
func (t *Tokenizer) appendEncode(dst []uint32, s string, opt EncodeOptions, limit int) ([]uint32, bool) {
	var frags []fragment
	if s != "" {
		frags = t.partition(s, opt.ParseSpecial)
	}
	switch t.kind {
	case kindWPM:
		return t.appendWPM(dst, frags, opt.AddSpecial, limit)
	case kindUGM:
		return t.appendUGM(dst, frags, opt.AddSpecial, limit)
	}
	if opt.AddSpecial && t.addBOS {
		dst = append(dst, t.bos)
	}
	over := func() bool { return limit >= 0 && len(dst) > limit }
	var st state
	st.limit = limit
	prevSpecial := true // SPM: text that starts the input or follows a token gets a space prefix
	for _, f := range frags {
		if over() {
			return dst, false
		}
		if f.tok != NoToken {
			dst = append(dst, f.tok)
			prevSpecial = true
			continue
		}
		text := f.text
		if t.kind == kindSPM && t.addSpacePrefix && prevSpecial {
			text = " " + text
		}
		if t.escapeSpaces {
			text = strings.ReplaceAll(text, " ", "▁")
		}
		if t.kind == kindSPM {
			dst = st.spm(t, text, dst)
		} else {
			dst = st.bpe(t, text, dst)
		}
		prevSpecial = false
	}
	if over() {
		return dst, false
	}
	if opt.AddSpecial && t.addEOS {
		dst = append(dst, t.eos)
	}
	return dst, true
}

// MinTokens is a lower bound on len(Encode(s, opt)) that reads s without
// encoding it, so that a caller with a limit can refuse a text that cannot
// fit before paying to encode it. Every id stands for at most
// MaxTokenBytes bytes of the text as the merges see it (never shorter
// than s), so s needs at least ceil(n / MaxTokenBytes) ids, where n counts
// the bytes of s that always end in some token: not a byte the vocabulary
// would drop for want of a token, nor whitespace a special token strips.
// On a WPM vocabulary, where one [UNK] stands for a whole word, it counts
// words instead; on a UGM one, where one UNK stands for a run of unknown
// characters and the charsmap may normalise characters away, it counts
// the bytes of the normalised text that no UNK can stand for.
func (t *Tokenizer) MinTokens(s string, opt EncodeOptions) int {
	switch t.kind {
	case kindWPM:
		return t.minTokensWPM(s, opt)
	case kindUGM:
		return t.minTokensUGM(s, opt)
	}
	need := 0
	if t.maxTokenBytes > 0 {
		strips := t.stripsUser || opt.ParseSpecial && t.stripsSpecial
		n := 0
		for i := 0; i < len(s); i++ {
			if c := s[i]; t.counted[c] && !(strips && cSpace(c)) {
				n++
			}
		}
		need = (n + t.maxTokenBytes - 1) / t.maxTokenBytes
	}
	if opt.AddSpecial && t.addBOS {
		need++
	}
	if opt.AddSpecial && t.addEOS {
		need++
	}
	return need
}

// MaxTokenBytes is the length in bytes of the vocabulary's longest token
// text, the most input one id can stand for; 0 when no input byte is sure
// to end in a token, so that MinTokens bounds nothing. (On WPM an [UNK]
// stands for a whole word, however long; it is 0 there without one.)
func (t *Tokenizer) MaxTokenBytes() int { return t.maxTokenBytes }

// fragment is either raw text or a special token found in it.
type fragment struct {
	tok  uint32 // NoToken for text
	text string
}

// cSpace is C's isspace in the "C" locale, which llama.cpp uses to strip
// around tokens with the lstrip/rstrip attributes.
func cSpace(c byte) bool { return c == ' ' || c >= '\t' && c <= '\r' }

// partition cuts s at occurrences of special tokens, longest tokens first,
// each token splitting only the text the longer ones left
// (llama_vocab::impl::tokenizer_st_partition).
func (t *Tokenizer) partition(s string, parseSpecial bool) []fragment {
	frags := []fragment{{tok: NoToken, text: s}}
	for _, id := range t.special {
		a := t.attrs[id]
		if !parseSpecial && a&attrSpecial != 0 {
			continue
		}
		tok := t.tokens[id]
		if !strings.Contains(s, tok) {
			continue
		}
		next := make([]fragment, 0, len(frags)+2)
		for _, f := range frags {
			if f.tok != NoToken {
				next = append(next, f)
				continue
			}
			raw := f.text
			for raw != "" {
				i := strings.Index(raw, tok)
				if i < 0 {
					next = append(next, fragment{tok: NoToken, text: raw})
					break
				}
				left := raw[:i]
				if a&attrLStrip != 0 {
					left = strings.TrimRightFunc(left, func(r rune) bool { return r < 0x80 && cSpace(byte(r)) })
				}
				if left != "" {
					next = append(next, fragment{tok: NoToken, text: left})
				}
				next = append(next, fragment{tok: id})
				raw = raw[i+len(tok):]
				if a&attrRStrip != 0 {
					raw = strings.TrimLeftFunc(raw, func(r rune) bool { return r < 0x80 && cSpace(byte(r)) })
				}
			}
		}
		frags = next
	}
	return frags
}

// state holds the scratch buffers of one Encode call.
type state struct {
	limit   int // stop once out holds more ids (negative: never)
	syms    []symbol
	spmQ    heap[spmBigram]
	bpeQ    heap[bpeBigram]
	text    text
	words   []int
	words2  []int
	word    []byte
	rankKey []byte
}

// over reports whether out already holds more ids than the limit.
func (st *state) over(out []uint32) bool { return st.limit >= 0 && len(out) > st.limit }

// symbol is a run of bytes of the text being merged, linked to its
// neighbours; a symbol merged into its left neighbour has n == 0.
type symbol struct {
	start, n   int
	prev, next int
}

func (st *state) splitChars(s string) {
	st.syms = st.syms[:0]
	for off := 0; off < len(s); {
		n := min(utf8Len(s[off]), len(s)-off)
		i := len(st.syms)
		st.syms = append(st.syms, symbol{start: off, n: n, prev: i - 1, next: i + 1})
		off += n
	}
	if k := len(st.syms); k > 0 {
		st.syms[k-1].next = -1
	}
}

// join merges the right neighbour of symbol left into it and returns the
// merged symbol's new neighbours.
func join(syms []symbol, left int) (prev, next int) {
	l := &syms[left]
	r := &syms[l.next]
	l.n += r.n
	r.n = 0
	l.next = r.next
	if r.next >= 0 {
		syms[r.next].prev = left
	}
	return l.prev, l.next
}

type spmBigram struct {
	left, right int
	score       float32
	size        int
}

// SentencePiece merge (llm_tokenizer_spm_session): repeatedly join the
// adjacent pair whose concatenation is the highest-scored token, leftmost
// first on ties; pieces that never became tokens fall back to <0xNN> bytes.
func (st *state) spm(t *Tokenizer, s string, out []uint32) []uint32 {
	st.splitChars(s)
	syms := st.syms
	q := &st.spmQ
	q.reset(func(a, b spmBigram) bool { // a pops before b
		return a.score > b.score || a.score == b.score && a.left < b.left
	})
	tryAdd := func(l, r int) {
		if l < 0 || r < 0 {
			return
		}
		size := syms[l].n + syms[r].n
		id, ok := t.ids[s[syms[l].start:syms[l].start+size]]
		if !ok {
			return
		}
		q.push(spmBigram{left: l, right: r, score: t.scores[id], size: size})
	}
	for i := 1; i < len(syms); i++ {
		tryAdd(i-1, i)
	}
	for q.len() > 0 {
		b := q.pop()
		l, r := syms[b.left], syms[b.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != b.size {
			continue // stale: one side changed since the pair was queued
		}
		prev, next := join(syms, b.left)
		tryAdd(prev, b.left)
		tryAdd(b.left, next)
	}
	for i := 0; i >= 0 && len(syms) > 0; i = syms[i].next {
		if st.over(out) {
			break
		}
		piece := s[syms[i].start : syms[i].start+syms[i].n]
		if id, ok := t.ids[piece]; ok {
			out = append(out, id)
			continue
		}
		// Every merged symbol is a token, so only single characters get
		// here (llama.cpp's rev_merge lookup never applies to them).
		for j := 0; j < len(piece); j++ {
			if id := t.byteToken(piece[j]); id != NoToken {
				out = append(out, id)
			}
		}
	}
	return out
}

// byteToken is the SentencePiece byte-fallback token for b: "<0xNN>", else
// the byte itself as a token, else UNK (where llama.cpp would abort).
func (t *Tokenizer) byteToken(b byte) uint32 {
	const hex = "0123456789ABCDEF"
	if id, ok := t.ids[string([]byte{'<', '0', 'x', hex[b>>4], hex[b&15], '>'})]; ok {
		return id
	}
	if id, ok := t.ids[string([]byte{b})]; ok {
		return id
	}
	return t.unk
}

type bpeBigram struct {
	left, right int
	rank        int32
	ln, rn      int
}

// bpe pre-tokenizes s into words and merges each by rank
// (llm_tokenizer_bpe_session).
func (st *state) bpe(t *Tokenizer, s string, out []uint32) []uint32 {
	st.text.reset(s)
	st.words = append(st.words[:0], len(st.text.cp))
	for _, split := range t.pre.splits {
		st.words2 = split(&st.text, st.words, st.words2[:0])
		st.words, st.words2 = st.words2, st.words
	}
	enc, _ := byteAlphabet()
	start := 0
	for _, n := range st.words {
		if st.over(out) {
			break // each word merges alone, so the ids so far are a prefix
		}
		w := st.word[:0]
		for _, r := range st.text.cp[start : start+n] {
			if t.pre.rawUTF8 {
				w = appendRune(w, r)
				continue
			}
			var tmp [4]byte
			for _, b := range appendRune(tmp[:0], r) {
				w = appendRune(w, enc[b])
			}
		}
		st.word = w
		start += n
		out = st.mergeWord(t, string(w), out)
	}
	return out
}

func (st *state) mergeWord(t *Tokenizer, w string, out []uint32) []uint32 {
	if id, ok := t.ids[w]; ok && (t.pre.ignoreMerges || t.pre.wholeNewlines && strings.Trim(w, "\n") == "") {
		return append(out, id)
	}
	st.splitChars(w)
	syms := st.syms
	q := &st.bpeQ
	q.reset(func(a, b bpeBigram) bool {
		return a.rank < b.rank || a.rank == b.rank && a.left < b.left
	})
	tryAdd := func(l, r int) {
		if l < 0 || r < 0 {
			return
		}
		ls, rs := w[syms[l].start:syms[l].start+syms[l].n], w[syms[r].start:syms[r].start+syms[r].n]
		k := append(append(append(st.rankKey[:0], ls...), ' '), rs...)
		st.rankKey = k
		rank, ok := t.ranks[string(k)]
		if !ok {
			return
		}
		q.push(bpeBigram{left: l, right: r, rank: rank, ln: len(ls), rn: len(rs)})
	}
	for i := 1; i < len(syms); i++ {
		tryAdd(i-1, i)
	}
	for q.len() > 0 {
		b := q.pop()
		if syms[b.left].n != b.ln || syms[b.right].n != b.rn {
			continue // stale (a merged-away side has n == 0)
		}
		prev, next := join(syms, b.left)
		tryAdd(prev, b.left)
		tryAdd(b.left, next)
	}
	for _, sym := range syms {
		if sym.n == 0 {
			continue
		}
		piece := w[sym.start : sym.start+sym.n]
		if id, ok := t.ids[piece]; ok {
			out = append(out, id)
			continue
		}
		// Not a token: llama.cpp looks up each byte of the (byte-encoded)
		// piece on its own, and drops those that are not tokens either.
		for j := 0; j < len(piece); j++ {
			var id uint32
			var ok bool
			if t.pre.rawUTF8 {
				id = t.byteToken(piece[j])
				ok = id != NoToken
			} else {
				id, ok = t.ids[piece[j:j+1]]
			}
			if ok {
				out = append(out, id)
			}
		}
	}
	return out
}
