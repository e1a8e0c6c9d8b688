// Package tokenizer turns text into a model's token ids and back, the way
// llama.cpp does for the vocabulary kinds GGUF models mostly carry:
// SentencePiece-style merges over scored pieces (tokenizer.ggml.model
// "llama"), GPT-2 byte-level BPE over ranked merges ("gpt2"), the
// WordPiece of BERT-style embedding models ("bert") and SentencePiece
// Unigram ("t5": T5 and XLM-RoBERTa models), with the
// pre-tokenizers that tokenizer.ggml.pre names, special-token matching, BOS
// and EOS handling, byte fallback, and a streaming detokeniser that only
// ever emits whole UTF-8 characters.
//
// llama.cpp's test vectors (models/ggml-vocab-*.gguf.inp/.out) are the
// judge of exactness; see the package tests.
package tokenizer

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// NoToken marks an absent special token id.
const NoToken = ^uint32(0)

// TokenType is a token's tokenizer.ggml.token_type value.
type TokenType int32

// Token types as GGUF stores them.
const (
	TypeUndefined   TokenType = 0
	TypeNormal      TokenType = 1
	TypeUnknown     TokenType = 2
	TypeControl     TokenType = 3
	TypeUserDefined TokenType = 4
	TypeUnused      TokenType = 5
	TypeByte        TokenType = 6
)

// Vocabulary kinds (tokenizer.ggml.model).
const (
	ModelSPM    = "llama"  // SentencePiece: scored pieces, ▁ for space, <0xNN> byte fallback
	ModelBPE    = "gpt2"   // byte-level BPE with ranked merges
	ModelGemma4 = "gemma4" // BPE over raw UTF-8 with ▁ for space (Gemma 4)
	ModelWPM    = "bert"   // WordPiece: greedy longest match over normalised words (BERT, bge, MiniLM)
	ModelUGM    = "t5"     // SentencePiece Unigram: best-scored segmentation of charsmap-normalised text (T5, XLM-R)
)

// Vocab is everything a tokenizer is built from: the tokenizer.* metadata
// of a GGUF file after defaults are resolved (FromGGUF does that), or a
// hand-made vocabulary.
type Vocab struct {
	Model  string      // ModelSPM, ModelBPE, ModelGemma4, ModelWPM or ModelUGM
	Pre    string      // tokenizer.ggml.pre (BPE only): selects the pre-tokenizer
	Name   string      // general.name: llama.cpp keys a Phi-3 special-token fix on it
	Tokens []string    // id → text
	Scores []float32   // SPM merge priority, UGM log probability, by id; nil means all 0
	Types  []TokenType // by id; nil means all normal
	Merges []string    // BPE merges "left right", rank = index

	BOS, EOS, EOT, EOM, UNK, PAD uint32 // NoToken when absent
	// FIMPre, FIMSuf and FIMMid are fill-in-the-middle's prefix, suffix
	// and middle tokens (NoToken when the file names none: they are then
	// found by their text, as llama.cpp finds them).
	FIMPre, FIMSuf, FIMMid uint32
	// FIMRep and FIMSep are repo-level fill-in-the-middle's repository
	// and file-separator tokens (Qwen2.5-Coder's <|repo_name|> and
	// <|file_sep|>), found by their text likewise.
	FIMRep, FIMSep uint32

	AddBOS         bool // Encode with AddSpecial prepends BOS
	AddEOS         bool // Encode with AddSpecial appends EOS
	AddSpacePrefix bool // SPM, UGM: a space goes before text that starts a fragment; decoding drops it

	// SEP is the separator token ([SEP] on BERT vocabularies; NoToken
	// when absent) and AddSEP tokenizer.ggml.add_sep_token, which
	// AddsSEP reports. WPM's Encode with AddSpecial puts BOS ([CLS])
	// first and SEP last whatever AddBOS and AddSEP say, as llama.cpp
	// does, so New refuses a WPM vocabulary without both; AddBOS still
	// decides what Decode's RemoveSpecial drops.
	SEP    uint32
	AddSEP bool
	// KeepCase and KeepAccents switch off WPM's lower-casing and accent
	// stripping (tokenizer.ggml.normalizer.lowercase and strip_accents
	// set to false).
	KeepCase, KeepAccents bool

	// CharsMap is UGM's tokenizer.ggml.precompiled_charsmap, the
	// normalisation SentencePiece compiled into the model (nil: none),
	// and RemoveExtraSpaces tokenizer.ggml.remove_extra_whitespaces:
	// leading and trailing spaces dropped, runs of them made one, and a
	// space put before the text whatever AddSpacePrefix says.
	CharsMap          []byte
	RemoveExtraSpaces bool
}

// Errors returned by New and the decoders.
var (
	ErrUnsupported  = errors.New("tokenizer: unsupported vocabulary")
	ErrInvalidVocab = errors.New("tokenizer: invalid vocabulary")
	ErrInvalidToken = errors.New("tokenizer: token id out of range")
)

// Token attributes, as llama.cpp derives them from token types and names.
type attr uint16

const (
	attrUnknown attr = 1 << iota
	attrUnused
	attrNormal
	attrControl
	attrUserDefined
	attrByte
	attrLStrip
	attrRStrip

	attrSpecial = attrUnknown | attrControl // hidden unless rendering specials
)

type kind uint8

const (
	kindSPM kind = iota
	kindBPE
	kindWPM
	kindUGM
)

// Tokenizer encodes and decodes text for one vocabulary. It is immutable
// after New and safe for concurrent use.
type Tokenizer struct {
	kind   kind
	pre    preTokenizer
	tokens []string
	scores []float32
	attrs  []attr
	ids    map[string]uint32
	ranks  map[string]int32 // "left right" → merge rank

	bos, eos, eot, eom, unk, pad, sep uint32
	fim                               [5]uint32 // prefix, suffix, middle, repo, file separator
	eog                               map[uint32]bool

	addBOS, addEOS, addSEP, addSpacePrefix bool
	escapeSpaces, cleanSpaces              bool
	wpm                                    wpmConfig
	ugm                                    ugmConfig

	special []uint32 // partition candidates, longest text first
	pieces  []string // id → decoded bytes with specials rendered

	// maxTokenBytes, the longest token's length, bounds encodings from
	// below (MinTokens), counting the input bytes that counted marks; 0:
	// no byte is sure to end in a token.
	maxTokenBytes int
	counted       [256]bool
	// stripsUser: a token matched in every input strips whitespace beside
	// it; stripsSpecial: one matched only with ParseSpecial does.
	stripsUser, stripsSpecial bool
}

// New builds a tokenizer from v. It does not keep references to v's slices.
func New(v *Vocab) (*Tokenizer, error) {
	n := len(v.Tokens)
	if n == 0 {
		return nil, fmt.Errorf("%w: no tokens", ErrInvalidVocab)
	}
	if n >= int(NoToken) {
		return nil, fmt.Errorf("%w: %d tokens", ErrInvalidVocab, n)
	}
	if v.Scores != nil && len(v.Scores) < n {
		return nil, fmt.Errorf("%w: %d scores for %d tokens", ErrInvalidVocab, len(v.Scores), n)
	}
	if v.Types != nil && len(v.Types) < n {
		return nil, fmt.Errorf("%w: %d token types for %d tokens", ErrInvalidVocab, len(v.Types), n)
	}
	t := &Tokenizer{
		tokens:         make([]string, n),
		scores:         make([]float32, n),
		attrs:          make([]attr, n),
		ids:            make(map[string]uint32, n),
		addBOS:         v.AddBOS,
		addEOS:         v.AddEOS,
		addSEP:         v.AddSEP,
		addSpacePrefix: v.AddSpacePrefix,
	}
	switch v.Model {
	case ModelSPM:
		t.kind = kindSPM
		t.escapeSpaces = true
	case ModelBPE, ModelGemma4:
		t.kind = kindBPE
		pre := v.Pre
		if v.Model == ModelGemma4 {
			pre = "gemma4"
		}
		p, ok := preTokenizers[pre]
		if !ok {
			return nil, fmt.Errorf("%w: pre-tokenizer %q", ErrUnsupported, v.Pre)
		}
		t.pre = p
		t.escapeSpaces = p.escapeSpaces
		t.cleanSpaces = !p.keepSpaces
		t.ranks = make(map[string]int32, len(v.Merges))
		for i, m := range v.Merges {
			// llama.cpp splits at the first space after the first byte.
			if k := strings.IndexByte(m[min(1, len(m)):], ' '); k >= 0 {
				if _, dup := t.ranks[m]; !dup {
					t.ranks[m] = int32(i)
				}
			}
		}
	case ModelWPM:
		t.kind = kindWPM
		t.escapeSpaces = true // for decoding: a piece's "▁" is a space
		t.cleanSpaces = true
		t.wpm = wpmConfig{lower: !v.KeepCase, stripAccents: !v.KeepAccents}
	case ModelUGM:
		t.kind = kindUGM
		t.escapeSpaces = true // for decoding: a piece's "▁" is a space
	default:
		return nil, fmt.Errorf("%w: model %q", ErrUnsupported, v.Model)
	}

	for i, tok := range v.Tokens {
		if tok == "" { // as llama.cpp: keep ids dense, make the text unmatchable
			tok = fmt.Sprintf("[EMPTY_%d]", i)
		}
		t.tokens[i] = tok
		t.ids[tok] = uint32(i) // a later duplicate wins, as in llama.cpp
		if v.Scores != nil {
			t.scores[i] = v.Scores[i]
		}
		typ := TypeNormal
		if v.Types != nil {
			typ = v.Types[i]
		}
		t.attrs[i] = attrOfType(typ)
	}

	inRange := func(id uint32) uint32 {
		if id >= uint32(n) {
			return NoToken
		}
		return id
	}
	t.bos, t.eos, t.eot, t.eom, t.unk, t.pad = inRange(v.BOS), inRange(v.EOS), inRange(v.EOT), inRange(v.EOM), inRange(v.UNK), inRange(v.PAD)
	t.sep = inRange(v.SEP)
	t.fim = [5]uint32{inRange(v.FIMPre), inRange(v.FIMSuf), inRange(v.FIMMid), inRange(v.FIMRep), inRange(v.FIMSep)}
	if t.kind == kindBPE && t.pre.noBOS {
		t.bos = NoToken
	}
	if t.addBOS && t.bos == NoToken {
		return nil, fmt.Errorf("%w: add_bos is set but there is no BOS token", ErrInvalidVocab)
	}
	if t.addEOS && t.eos == NoToken && t.kind != kindWPM { // WPM never appends EOS
		return nil, fmt.Errorf("%w: add_eos is set but there is no EOS token", ErrInvalidVocab)
	}
	if t.kind == kindWPM && (t.bos == NoToken || t.sep == NoToken) {
		return nil, fmt.Errorf("%w: a WPM vocabulary needs BOS ([CLS]) and SEP ([SEP]) tokens", ErrInvalidVocab)
	}
	if t.kind == kindUGM {
		if t.unk == NoToken { // llama.cpp would emit id -1 for an unknown character
			return nil, fmt.Errorf("%w: a UGM vocabulary needs an UNK token", ErrInvalidVocab)
		}
		if err := t.buildUGM(v); err != nil {
			return nil, err
		}
	}
	t.fixSpecialTokens(v.Name)
	t.buildCaches()
	return t, nil
}

func attrOfType(typ TokenType) attr {
	switch typ {
	case TypeNormal:
		return attrNormal
	case TypeUnknown:
		return attrUnknown
	case TypeControl:
		return attrControl
	case TypeUserDefined:
		return attrUserDefined
	case TypeUnused:
		return attrUnused
	case TypeByte:
		return attrByte
	default:
		return 0
	}
}

// Texts llama.cpp recognises as end-of-turn and end-of-generation tokens
// when the file does not say (llama_vocab::impl::load).
var (
	eotTexts = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
		"<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"}
	eogTexts = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
		"<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]",
		"[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
		"<｜end▁of▁sentence｜>", "[e~["}
	// Fill-in-the-middle tokens: prefix, suffix, middle, pad, repo, file
	// sep; fimSlot is where each is kept in Tokenizer.fim (pad is not).
	fimSlot  = [6]int{0, 1, 2, -1, 3, 4}
	fimTexts = [6][]string{
		{"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"},
		{"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"},
		{"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"},
		{"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"},
		{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"},
		{"<|file_sep|>"},
	}
)

// fixSpecialTokens applies llama.cpp's by-name corrections: EOT/EOM
// detection, end-of-generation ids, control-looking tokens forced to
// control, "unused" control tokens, and per-model strip attributes.
func (t *Tokenizer) fixSpecialTokens(name string) {
	forceControl := func(id uint32) { t.attrs[id] |= attrControl }
	t.eog = map[uint32]bool{}
	// Where several candidates exist llama.cpp takes whichever its hash map
	// yields first; the lists' order decides here.
	if t.eot == NoToken {
		for _, s := range eotTexts {
			if id, ok := t.ids[s]; ok {
				t.eot = id
				forceControl(id)
				break
			}
		}
	}
	if t.eom == NoToken {
		if id, ok := t.ids["<|eom_id|>"]; ok {
			t.eom = id
			forceControl(id)
		}
	}
	for i, names := range fimTexts {
		slot := fimSlot[i]
		if slot >= 0 && t.fim[slot] != NoToken {
			continue // named by the file
		}
		for _, s := range names {
			if id, ok := t.ids[s]; ok {
				forceControl(id)
				if slot >= 0 {
					t.fim[slot] = id
				}
				if i >= 3 { // pad, repo and file separator end generation
					t.eog[id] = true
				}
				break
			}
		}
	}
	for id, a := range t.attrs {
		if a&attrControl != 0 && strings.Contains(t.tokens[id], "unused") {
			t.attrs[id] |= attrUnused
		}
	}
	for _, s := range eogTexts {
		if id, ok := t.ids[s]; ok {
			t.eog[uint32(id)] = true
			forceControl(id)
		}
	}
	for _, s := range []string{"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"} {
		if id, ok := t.ids[s]; ok { // gpt-oss renders these always
			t.attrs[id] = attrUserDefined
		}
	}
	for _, id := range []uint32{t.eos, t.eot, t.eom} {
		if id != NoToken {
			t.eog[id] = true
		}
	}
	// gpt-oss and solar-open: "<|end|>" ends a message, not the generation.
	has := func(s string) bool { id, ok := t.ids[s]; return ok && t.eog[id] }
	if end, ok := t.ids["<|end|>"]; ok && t.eog[end] &&
		(has("<|return|>") && has("<|call|>") || has("<|calls|>") && has("<|flush|>")) {
		delete(t.eog, end)
		t.attrs[end] = attrUserDefined
	}
	if s, ok := t.ids["</s>"]; ok && t.eog[s] && has("<|tool_response>") { // gemma4
		delete(t.eog, s)
		t.attrs[s] = attrNormal
	}

	// Phi-3 strips whitespace after its special tokens.
	lname := strings.ToLower(name)
	if strings.Contains(lname, "phi-3") || strings.Contains(lname, "phi3") {
		for id, a := range t.attrs {
			if a&(attrControl|attrUserDefined|attrUnknown) != 0 {
				t.attrs[id] |= attrRStrip
			}
		}
		if id, ok := t.ids["</s>"]; ok {
			t.attrs[id] |= attrRStrip
		}
		for _, s := range []string{"<unk>", "<s>", "<|endoftext|>"} {
			if id, ok := t.ids[s]; ok {
				t.attrs[id] &^= attrRStrip
			}
		}
	}
}

func (t *Tokenizer) buildCaches() {
	for id, a := range t.attrs {
		if a&(attrControl|attrUserDefined|attrUnknown) != 0 {
			t.special = append(t.special, uint32(id))
		}
	}
	slices.SortStableFunc(t.special, func(a, b uint32) int {
		return cmp.Compare(len(t.tokens[b]), len(t.tokens[a]))
	})
	t.pieces = make([]string, len(t.tokens))
	for id := range t.tokens {
		t.pieces[id] = t.piece(uint32(id))
	}
	for _, id := range t.special {
		if a := t.attrs[id]; a&(attrLStrip|attrRStrip) != 0 {
			if a&attrSpecial != 0 {
				t.stripsSpecial = true
			} else {
				t.stripsUser = true
			}
		}
	}
	t.buildCoverage()
}

// buildCoverage finds the input bytes that always end up in some token,
// and with them the bound MinTokens gives. Merging only ever joins symbols
// into tokens; a symbol left over is looked up byte by byte, and
// llama.cpp drops a byte that is no token, so only bytes whose leftover
// lookup finds a token count.
func (t *Tokenizer) buildCoverage() {
	if t.kind == kindWPM {
		t.buildWPM()
		return
	}
	if t.kind == kindUGM {
		t.finishUGM()
		return
	}
	var tokenByte func(b byte) bool
	if t.kind == kindSPM || t.pre.rawUTF8 {
		// A leftover character falls back to <0xNN>, the byte itself or
		// UNK, byte by byte.
		tokenByte = func(b byte) bool { return t.byteToken(b) != NoToken }
	} else {
		// GPT-2 bytes: a word is split into byte-alphabet characters and
		// merged by rank; a character that is a token is never left over
		// when every merge's result is a token too.
		for m := range t.ranks {
			k := strings.IndexByte(m[1:], ' ') + 1
			if _, ok := t.ids[m[:k]+m[k+1:]]; !ok {
				return // a merge can leave a non-token over: no bound
			}
		}
		enc, _ := byteAlphabet()
		tokenByte = func(b byte) bool {
			_, ok := t.ids[string(enc[b])]
			return ok
		}
	}
	all := func(s string) bool {
		if t.kind == kindSPM || t.pre.rawUTF8 {
			if _, ok := t.ids[s]; ok {
				return true
			}
		}
		for i := range len(s) {
			if !tokenByte(s[i]) {
				return false
			}
		}
		return true
	}
	// BPE decodes invalid UTF-8 to U+FFFD before it merges, so a high byte
	// counts only when the replacement would too.
	replacement := t.kind == kindSPM || all("\uFFFD")
	for b := range 256 {
		ok := tokenByte(byte(b))
		if b >= 0x80 {
			ok = ok && replacement
		}
		if b == ' ' && t.escapeSpaces {
			ok = all("▁")
		}
		t.counted[b] = ok
		if ok {
			t.maxTokenBytes = 1
		}
	}
	if t.maxTokenBytes == 0 {
		return
	}
	for _, tok := range t.tokens {
		t.maxTokenBytes = max(t.maxTokenBytes, len(tok))
	}
}

// NumTokens is the vocabulary size.
func (t *Tokenizer) NumTokens() int { return len(t.tokens) }

// Text is the raw vocabulary text of id ("▁Hello", "Ġworld", "<0x0A>").
func (t *Tokenizer) Text(id uint32) (string, error) {
	if id >= uint32(len(t.tokens)) {
		return "", fmt.Errorf("%w: %d of %d", ErrInvalidToken, id, len(t.tokens))
	}
	return t.tokens[id], nil
}

// Lookup returns the id whose vocabulary text is exactly s.
func (t *Tokenizer) Lookup(s string) (uint32, bool) {
	id, ok := t.ids[s]
	return id, ok
}

// BOS, EOS, EOT, UNK and SEP return the special ids (NoToken when absent).
func (t *Tokenizer) BOS() uint32 { return t.bos }
func (t *Tokenizer) EOS() uint32 { return t.eos }
func (t *Tokenizer) EOT() uint32 { return t.eot }
func (t *Tokenizer) UNK() uint32 { return t.unk }
func (t *Tokenizer) SEP() uint32 { return t.sep }

// FIM returns fill-in-the-middle's prefix, suffix and middle tokens; ok
// is false unless the vocabulary has all three.
func (t *Tokenizer) FIM() (pre, suf, mid uint32, ok bool) {
	pre, suf, mid = t.fim[0], t.fim[1], t.fim[2]
	return pre, suf, mid, pre != NoToken && suf != NoToken && mid != NoToken
}

// FIMRepo is repo-level fill-in-the-middle's repository and
// file-separator tokens, each NoToken where the vocabulary has none.
func (t *Tokenizer) FIMRepo() (rep, sep uint32) { return t.fim[3], t.fim[4] }

// AddsBOS reports whether Encode with AddSpecial prepends BOS
// (tokenizer.ggml.add_bos_token; WPM's Encode prepends it regardless).
func (t *Tokenizer) AddsBOS() bool { return t.addBOS }

// AddsEOS reports whether Encode with AddSpecial appends EOS
// (tokenizer.ggml.add_eos_token; never on WPM vocabularies, which have
// none), as llama_vocab_get_add_eos tells llama-server.
func (t *Tokenizer) AddsEOS() bool { return t.addEOS }

// AddsSEP is tokenizer.ggml.add_sep_token (true by default on WPM
// vocabularies): whether a pair of texts, such as a query and a document
// to rerank, is joined with SEP.
func (t *Tokenizer) AddsSEP() bool { return t.addSEP }

// Specials is what Encode with AddSpecial puts around a text's ids:
// before them BOS (WPM's [CLS]), after them EOS (WPM's [SEP]), each
// where the vocabulary adds it. A caller that cuts a text to fit keeps
// them: Encode(s, AddSpecial) is before, Encode(s, no specials), after.
func (t *Tokenizer) Specials() (before, after []uint32) {
	if t.kind == kindWPM {
		return []uint32{t.bos}, []uint32{t.sep}
	}
	if t.addBOS {
		before = []uint32{t.bos}
	}
	if t.addEOS {
		after = []uint32{t.eos}
	}
	return before, after
}

// IsEOG reports whether id ends generation (EOS, EOT, EOM and the
// end-of-turn tokens llama.cpp recognises by name).
func (t *Tokenizer) IsEOG(id uint32) bool { return t.eog[id] }

// EOG is the ids IsEOG reports, ascending.
func (t *Tokenizer) EOG() []uint32 {
	var ids []uint32
	for id, eog := range t.eog {
		if eog {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// IsControl reports whether id is a control token (hidden when decoding
// without RenderSpecial).
func (t *Tokenizer) IsControl(id uint32) bool {
	return id < uint32(len(t.attrs)) && t.attrs[id]&attrControl != 0
}
