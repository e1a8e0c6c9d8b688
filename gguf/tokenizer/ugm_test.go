package tokenizer

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
)

// buildCharsMap writes a precompiled charsmap mapping each key to its
// replacement, the way SentencePiece lays one out: each trie state gets a
// block of 256 units of its own (block 0 holds the root unit), a child
// for byte c sits at the state's block plus c, and the value unit of a
// key at its node's block plus 0.
func buildCharsMap(t testing.TB, m map[string]string) []byte {
	t.Helper()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	block := map[string]uint32{"": 1} // prefix → its block
	order := []string{""}
	for _, k := range keys {
		for i := 1; i <= len(k); i++ {
			if _, ok := block[k[:i]]; !ok {
				block[k[:i]] = uint32(len(order) + 1)
				order = append(order, k[:i])
			}
		}
	}
	units := make([]uint32, 256*(len(order)+1))
	units[0] = 256 << 10 // the root state is block 1
	var repl []byte
	for _, p := range order[1:] {
		parent, c := block[p[:len(p)-1]]*256, uint32(p[len(p)-1])
		i := parent ^ c
		node := block[p] * 256
		u := (i^node)<<10 | c
		if r, ok := m[p]; ok {
			u |= 1 << 8
			units[node] = 1<<31 | uint32(len(repl))
			repl = append(append(repl, r...), 0)
		}
		units[i] = u
	}
	b := binary.LittleEndian.AppendUint32(nil, uint32(4*len(units)))
	for _, u := range units {
		b = binary.LittleEndian.AppendUint32(b, u)
	}
	return append(b, repl...)
}

// testCharsMap is buildCharsMap's map for the hand-made vocabularies: a
// character and a pair replaced, a tab made a space, a character dropped.
var testCharsMap = map[string]string{"A": "a", "AB": "x", "\t": " ", "Z": "", "ﬁ": "fi"}

type ugmTok struct {
	text  string
	score float32
	typ   TokenType
}

// newUGM builds a UGM tokenizer over <pad>, </s>, <unk> and toks.
func newUGM(t testing.TB, toks []ugmTok, edit func(*Vocab)) *Tokenizer {
	t.Helper()
	v := &Vocab{Model: ModelUGM, BOS: NoToken, EOS: 1, UNK: 2, PAD: 0, EOT: NoToken, EOM: NoToken, SEP: NoToken,
		FIMPre: NoToken, FIMSuf: NoToken, FIMMid: NoToken, FIMRep: NoToken, FIMSep: NoToken, AddEOS: true,
		Tokens: []string{"<pad>", "</s>", "<unk>"}, Scores: []float32{0, 0, 0}, Types: []TokenType{TypeControl, TypeControl, TypeUnknown}}
	for _, tok := range toks {
		typ := tok.typ
		if typ == 0 {
			typ = TypeNormal
		}
		v.Tokens, v.Scores, v.Types = append(v.Tokens, tok.text), append(v.Scores, tok.score), append(v.Types, typ)
	}
	if edit != nil {
		edit(v)
	}
	tk, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestUGMNormalize pins the normalisation on a hand-made charsmap: the
// longest prefix replaced, spaces escaped, merged or not, the prefix
// space, invalid bytes, and a user-defined token's text passing unchanged
// as far as the user-defined trie goes (llama.cpp's naive_trie quirk: its
// path, not a whole token).
func TestUGMNormalize(t *testing.T) {
	cm := buildCharsMap(t, testCharsMap)
	plain := newUGM(t, nil, func(v *Vocab) { v.CharsMap = cm })
	prefix := newUGM(t, nil, func(v *Vocab) { v.CharsMap, v.AddSpacePrefix = cm, true })
	merge := newUGM(t, nil, func(v *Vocab) { v.CharsMap, v.RemoveExtraSpaces = cm, true })
	none := newUGM(t, nil, nil)
	user := newUGM(t, []ugmTok{{"ABC", 0, TypeUserDefined}}, func(v *Vocab) { v.CharsMap = cm })
	for _, tc := range []struct {
		tk       *Tokenizer
		in, want string
	}{
		{plain, "AAAB\tZ c", "aax▁▁c"},
		{plain, "  a  ", "▁▁a▁▁"},
		{prefix, "AAAB\tZ c", "▁aax▁▁c"},
		{prefix, "  a  ", "▁▁▁a▁▁"}, // the prefix goes before the first non-space, after any spaces
		{prefix, "   ", "▁▁▁"},
		{merge, "  AAAB\tZ c  ", "▁aax▁c"},
		{merge, "a Z b", "▁a▁b"}, // a dropped character leaves its spaces one run
		{merge, " \t ", ""},
		{plain, "ﬁAB", "fix"},
		{user, "ABx", "ABx"},                                            // "AB" is on the user-defined trie's path, though no token ends there
		{user, "AAB", "AAB"},                                            // and so is "A", at each of them
		{user, "xZ\tﬁ", "x▁fi"},                                         // elsewhere the charsmap applies
		{none, "AB\tﬁ", "AB\tﬁ"},                                        // no charsmap
		{plain, "\xff\xc0\xafé\xe2\x82", "\uFFFD\xc0\xafé\uFFFD\uFFFD"}, // llama.cpp's UTF-8: lead and continuation bytes only
		{plain, "a\x00A", "a\x00a"},
	} {
		if got := string(tc.tk.ugm.normalize(nil, tc.in)); got != tc.want {
			t.Errorf("normalize(%q) = %q, want %q (prefix %v merge %v)", tc.in, got, tc.want, tc.tk.ugm.addPrefix, tc.tk.ugm.mergeSpaces)
		}
	}
}

// TestUGMNormalizeReal pins XLM-R's charsmap (NFKC-like): full-width and
// compatibility forms, composition, half-width kana, dropped format
// characters, whitespace runs merged, invalid UTF-8.
func TestUGMNormalizeReal(t *testing.T) {
	tk, _, _ := loadVocab(t, "nomic-bert-moe")
	for in, want := range map[string]string{
		"ＦＵＬＬ　ｗｉｄｔｈ！":        "▁FULL▁width!",
		"ﬁ ① ㍻ ™ ½":          "▁fi▁1▁平成▁TM▁1⁄2",
		"  a\t\tb\n\nc  ":    "▁a▁b▁c",
		"Cafe\u0301":         "▁Café",
		"ｶﾞ":                 "▁ガ",
		"a\u200bb":           "▁a▁b",
		"‘quote’ …":          "▁‘quote’▁...",
		"\xff\xc0\xafz":      "▁\uFFFD\xc0\xafz",
		"":                   "",
		" \t\n\u3000\u00a0 ": "",
	} {
		if got := string(tk.ugm.normalize(nil, in)); got != want {
			t.Errorf("normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestUGMViterbi: the segmentation is the best-scored one, not the
// greedy longest match; a character no token spells alone is UNK, scored
// 10 below the lowest normal token, and a run of them is one UNK; a
// user-defined token scores 0.
func TestUGMViterbi(t *testing.T) {
	text := func(tk *Tokenizer, s string) []string {
		return texts(t, tk, tk.Encode(s, EncodeOptions{}))
	}
	prefix := func(v *Vocab) { v.AddSpacePrefix = true }
	tk := newUGM(t, []ugmTok{{"▁", -5, 0}, {"a", -5, 0}, {"b", -5, 0}, {"c", -5, 0}, {"▁ab", -2, 0}, {"▁a", -1, 0}, {"bc", -1, 0}}, prefix)
	if got, want := text(tk, "abc"), []string{"▁a", "bc"}; !slices.Equal(got, want) {
		t.Errorf("abc: %q, want %q (greedy would take ▁ab c)", got, want)
	}
	if got, want := text(tk, "ab"), []string{"▁ab"}; !slices.Equal(got, want) {
		t.Errorf("ab: %q, want %q", got, want)
	}
	if got, want := text(tk, "a🦙🦙x b"), []string{"▁a", "<unk>", "▁", "b"}; !slices.Equal(got, want) {
		t.Errorf("unknowns: %q, want %q", got, want)
	}
	// "▁xy" against "▁" UNK(x) "y": the UNK scores -3-10, so "y" must
	// score above 11 for the second to win.
	for y, want := range map[float32][]string{10.5: {"▁xy"}, 11.5: {"▁", "<unk>", "y"}} {
		tk := newUGM(t, []ugmTok{{"▁", -1, 0}, {"y", y, 0}, {"▁xy", -3, 0}}, prefix)
		if got := text(tk, "xy"); !slices.Equal(got, want) {
			t.Errorf("y scoring %v: %q, want %q", y, got, want)
		}
	}
	// x alone is unknown even where a longer token spells it.
	tk = newUGM(t, []ugmTok{{"▁", -1, 0}, {"xy", -1, 0}, {"z", -1, 0}}, nil)
	if got, want := text(tk, "xyx zx"), []string{"xy", "<unk>", "▁", "z", "<unk>"}; !slices.Equal(got, want) {
		t.Errorf("xyx zx: %q, want %q", got, want)
	}
	// An UNK is a candidate wherever no token spells the character alone,
	// even where a longer token starts: here it wins.
	tk = newUGM(t, []ugmTok{{"▁", -1, 0}, {"xy", -1, 0}, {"yz", 20, 0}, {"z", -1, 0}}, nil)
	if got, want := text(tk, "xyz"), []string{"<unk>", "yz"}; !slices.Equal(got, want) {
		t.Errorf("xyz: %q, want %q", got, want)
	}
	// A user-defined token scores 0, beating a better-scored split: one
	// the charsmap makes ("A" → "a"), since partition cuts out those in
	// the text before normalisation.
	tk = newUGM(t, []ugmTok{{"a", -0.1, 0}, {"b", -0.1, 0}, {"ab", -5, TypeUserDefined}},
		func(v *Vocab) { v.CharsMap = buildCharsMap(t, testCharsMap) })
	if got, want := text(tk, "xAb"), []string{"<unk>", "ab"}; !slices.Equal(got, want) {
		t.Errorf("user-defined: %q, want %q", got, want)
	}
	if got, want := text(tk, "ab"), []string{"ab"}; !slices.Equal(got, want) {
		t.Errorf("user-defined in the text: %q, want %q", got, want)
	}
}

// TestUGMSpecial: llama.cpp's defaults for "t5" files (EOS 1, UNK 2, PAD
// 0, EOS appended, no BOS, no space prefix), read through the gguf
// reader; and on XLM-R's vocabulary, which asks for BOS too, the ids
// llama.cpp gives with special tokens added and parsed.
func TestUGMSpecial(t *testing.T) {
	v, err := VocabFromGGUF(metadataOf(t, map[string]any{
		keyModel:    "t5",
		keyTokens:   []string{"<pad>", "</s>", "<unk>", "▁", "a", "▁a", "<extra_id_0>"},
		keyScores:   []float32{0, 0, 0, -2, -3, -1, 0},
		keyTypes:    []int32{3, 3, 2, 1, 1, 1, 4},
		keyCharsMap: buildCharsMap(t, testCharsMap),
	}))
	if err != nil {
		t.Fatal(err)
	}
	if v.BOS != NoToken || v.EOS != 1 || v.UNK != 2 || v.PAD != 0 || v.AddBOS || !v.AddEOS || v.AddSpacePrefix || v.RemoveExtraSpaces {
		t.Errorf("defaults: %+v", v)
	}
	tk, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tk.Encode("A A<extra_id_0>", EncodeOptions{AddSpecial: true}), []uint32{4, 5, 6, 1}; !equalIDs(got, want) {
		t.Errorf("Encode with AddSpecial: %v, want %v", got, want)
	}
	if got := tk.Encode("", EncodeOptions{AddSpecial: true}); !equalIDs(got, []uint32{1}) {
		t.Errorf("empty with AddSpecial: %v, want [1]", got)
	}
	if !tk.AddsEOS() || tk.AddsBOS() || !tk.IsEOG(1) {
		t.Errorf("AddsEOS %v AddsBOS %v IsEOG(</s>) %v", tk.AddsEOS(), tk.AddsBOS(), tk.IsEOG(1))
	}

	real, _, _ := loadVocab(t, "nomic-bert-moe")
	both := EncodeOptions{AddSpecial: true, ParseSpecial: true}
	for _, tc := range []struct {
		in   string
		opt  EncodeOptions
		want []uint32
	}{
		{"Hello world", EncodeOptions{AddSpecial: true}, []uint32{0, 35378, 8999, 2}},
		{"Hello<mask> x</s>y", both, []uint32{0, 35378, 250001, 1022, 2, 113, 2}},
		{"Hello<mask> x</s>y", EncodeOptions{}, []uint32{35378, 16093, 1510, 92, 2740, 1022, 42946, 7, 2740, 53}},
		{"", both, []uint32{0, 2}},
		{"  a\t\tb\n\nc  ", both, []uint32{0, 10, 876, 501, 2}},
	} {
		if got := real.Encode(tc.in, tc.opt); !equalIDs(got, tc.want) {
			t.Errorf("Encode(%q, %+v) = %v, want %v", tc.in, tc.opt, got, tc.want)
		}
	}
}

// TestUGMDecode: "▁" shows as a space and the first piece loses one
// where the vocabulary adds a space prefix (llama.cpp's rule, a leading
// BOS taking the strip); decoding gives the normalised text. Expectations
// from llama_detokenize.
func TestUGMDecode(t *testing.T) {
	real, _, _ := loadVocab(t, "nomic-bert-moe")
	for _, tc := range []struct {
		ids  []uint32
		opt  DecodeOptions
		want string
	}{
		{[]uint32{35378, 8999}, DecodeOptions{}, "Hello world"},
		{[]uint32{0, 35378, 8999, 2}, DecodeOptions{}, " Hello world"},
		{[]uint32{0, 35378, 8999, 2}, DecodeOptions{RemoveSpecial: true}, " Hello world"},
		{[]uint32{0, 35378, 250001, 1022, 2, 113, 2}, DecodeOptions{RenderSpecial: true}, "<s> Hello<mask> x</s> y</s>"},
		{[]uint32{35378, 8999}, DecodeOptions{Continue: true}, " Hello world"},
		{real.Encode("ＦＵＬＬ　ｗｉｄｔｈ！ ﬁ①", EncodeOptions{}), DecodeOptions{}, "FULL width! fi1"},
	} {
		got, err := real.Decode(tc.ids, tc.opt)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("Decode(%v, %+v) = %q, want %q", tc.ids, tc.opt, got, tc.want)
		}
		if s := streamAll(t, real, tc.ids, tc.opt); !tc.opt.RemoveSpecial && s != got {
			t.Errorf("stream %q, Decode %q", s, got)
		}
	}
	// Without add_space_prefix the space remove_extra_whitespaces puts
	// first stays.
	tk := newUGM(t, []ugmTok{{"▁", -1, 0}, {"a", -1, 0}, {"▁a", -1, 0}}, func(v *Vocab) { v.RemoveExtraSpaces = true })
	ids := tk.Encode("a  a", EncodeOptions{})
	if got, _ := tk.Decode(ids, DecodeOptions{}); got != " a a" {
		t.Errorf("%v decodes to %q, want %q", texts(t, tk, ids), got, " a a")
	}
}

// TestUGMMinTokens: the bound stays at or below Encode where characters
// normalise away, where runs of unknown characters become one UNK and
// where special tokens are cut out; it still grows with the text; and a
// vocabulary whose scores are not finite gets none.
func TestUGMMinTokens(t *testing.T) {
	tk := newUGM(t, []ugmTok{{"▁", -1, 0}, {"a", -1, 0}, {"aa", -1, 0}, {"x", -1, 0}, {"<u>", -1, TypeUserDefined}},
		func(v *Vocab) { v.CharsMap, v.AddSpacePrefix = buildCharsMap(t, testCharsMap), true })
	if tk.MaxTokenBytes() != 3 {
		t.Fatalf("MaxTokenBytes %d, want 3", tk.MaxTokenBytes())
	}
	for _, s := range []string{"", "ZZZZZZZZZZZZ", "a" + strings.Repeat("Z", 100) + "a", strings.Repeat("🦙", 100), "a🦙🦙🦙🦙🦙🦙🦙🦙a",
		strings.Repeat("AAAA", 50), strings.Repeat("<u>", 20), "a<u>Z<u>a</s>", strings.Repeat(" ", 40), strings.Repeat("\t \t", 30),
		"\xff\xfe\xfd\xfc", strings.Repeat("é", 30)} {
		for _, opt := range limitOptions {
			if lo, n := tk.MinTokens(s, opt), len(tk.Encode(s, opt)); lo > n {
				t.Errorf("MinTokens(%q, %+v) = %d > Encode's %d", s, opt, lo, n)
			}
		}
	}
	// 8000 bytes of "a" normalise to "▁" and 8000 a's, at most 3 bytes an id.
	if lo := tk.MinTokens(strings.Repeat("a", 8000), EncodeOptions{}); lo != (8003+2)/3 {
		t.Errorf("MinTokens of 8000 a's: %d, want %d", lo, (8003+2)/3)
	}
	for _, bad := range []float32{float32(math.Inf(-1)), float32(math.NaN())} {
		tk := newUGM(t, []ugmTok{{"a", bad, 0}, {"b", -1, 0}}, nil)
		if tk.MaxTokenBytes() != 0 || tk.MinTokens("ababab", EncodeOptions{}) != 0 {
			t.Errorf("score %v: MaxTokenBytes %d, MinTokens %d; want no bound", bad, tk.MaxTokenBytes(), tk.MinTokens("ababab", EncodeOptions{}))
		}
		tk.Encode("abba🦙", EncodeOptions{}) // and no panic
	}
	real, _, _ := loadVocab(t, "nomic-bert-moe")
	long := strings.Repeat("Füll-width ＴＥＸＴ, 中文 and 🦙 emoji.  ", 200)
	if lo, n := real.MinTokens(long, EncodeOptions{}), len(real.Encode(long, EncodeOptions{})); lo > n || lo < n/20 {
		t.Errorf("XLM-R: MinTokens %d for Encode's %d", lo, n)
	}
}

// TestUGMEncodeLimit: EncodeLimit stops between fragments once past the
// limit, giving a prefix of Encode's ids longer than the limit.
func TestUGMEncodeLimit(t *testing.T) {
	tk, _, _ := loadVocab(t, "nomic-bert-moe")
	opt := EncodeOptions{AddSpecial: true, ParseSpecial: true}
	text := strings.Repeat("The quick brown fox<mask> jumps</s>", 2000)
	full := tk.Encode(text, opt)
	for _, limit := range []int{0, 1, 5, 100, len(full) - 2} {
		ids, complete := tk.EncodeLimit(text, opt, limit)
		if complete || len(ids) != limit+1 || !equalIDs(ids, full[:len(ids)]) {
			t.Errorf("limit %d: %d ids, complete %v", limit, len(ids), complete)
		}
	}
	// The EOS appended last may pass the limit: the encoding is complete.
	for _, limit := range []int{len(full) - 1, len(full)} {
		if ids, complete := tk.EncodeLimit(text, opt, limit); !complete || !equalIDs(ids, full) {
			t.Errorf("limit %d: %d ids, complete %v", limit, len(ids), complete)
		}
	}
}

// TestUGMCharsMapCorrupt: a precompiled charsmap that is short, whose
// size header overruns it, or whose array reaches outside itself or points
// outside its replacements (or at one with no end) is refused at load.
func TestUGMCharsMapCorrupt(t *testing.T) {
	good := buildCharsMap(t, testCharsMap)
	size := binary.LittleEndian.Uint32(good)
	set := func(unit int, u uint32) []byte {
		b := slices.Clone(good)
		binary.LittleEndian.PutUint32(b[4+4*unit:], u)
		return b
	}
	rootBlock := int(binary.LittleEndian.Uint32(good[4:]) >> 10)
	valueUnit := -1 // the value unit of "A"
	if u := binary.LittleEndian.Uint32(good[4+4*(rootBlock^'A'):]); u&0xFF == 'A' {
		valueUnit = (rootBlock ^ 'A') ^ int(u>>10)
	}
	if valueUnit < 0 {
		t.Fatal("no unit for A")
	}
	for name, cm := range map[string][]byte{
		"three bytes":          good[:3],
		"header past the end":  good[:4+size],
		"header huge":          binary.LittleEndian.AppendUint32(nil, 0xFFFFFFFC),
		"truncated array":      append(binary.LittleEndian.AppendUint32(nil, size), good[4:4+size/2]...),
		"root outside":         set(0, uint32(len(good))<<10),
		"child outside":        set(rootBlock^'A', 1<<20<<10|1<<8|'A'),
		"replacement outside":  set(valueUnit, 1<<31|1<<20),
		"replacement unending": append(slices.Clone(good[:len(good)-1]), 'x'),
	} {
		tk, err := New(&Vocab{Model: ModelUGM, Tokens: []string{"a", "<unk>"}, UNK: 1, BOS: NoToken, EOS: NoToken, CharsMap: cm})
		if !errors.Is(err, ErrInvalidVocab) {
			t.Errorf("%s: New gave %v, want ErrInvalidVocab", name, err)
			if tk != nil {
				tk.Encode("AB\tZ ﬁ A", EncodeOptions{})
			}
		}
	}
	if _, err := New(&Vocab{Model: ModelUGM, Tokens: []string{"a", "<unk>"}, UNK: 1, BOS: NoToken, EOS: NoToken, CharsMap: good}); err != nil {
		t.Errorf("the good charsmap: %v", err)
	}
	// Through the gguf reader: int8 is taken as llama.cpp takes it, other
	// types and a short array are refused.
	for _, tc := range []struct {
		val any
		ok  bool
	}{
		{good, true},
		{func() []int8 {
			s := make([]int8, len(good))
			for i, c := range good {
				s[i] = int8(c)
			}
			return s
		}(), true},
		{[]int32{1, 2, 3}, false},
		{"charsmap", false},
		{[]uint8{1, 0}, false},
	} {
		tk, err := FromGGUF(metadataOf(t, map[string]any{keyModel: "t5", keyTokens: []string{"<pad>", "</s>", "<unk>", "a"}, keyCharsMap: tc.val}))
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, ErrInvalidVocab) {
			t.Errorf("charsmap %T: %v", tc.val, err)
		}
		if tc.ok && err == nil && !equalIDs(tk.Encode("A", EncodeOptions{}), []uint32{3}) {
			t.Errorf("charsmap %T: A encodes to %v, want [3] (a)", tc.val, tk.Encode("A", EncodeOptions{}))
		}
	}
}

// FuzzUGMCharsMap feeds arbitrary precompiled charsmaps and texts to a
// small vocabulary: New refuses or builds a tokenizer that never panics,
// whose ids are in range, whose MinTokens stays at or below Encode and
// whose EncodeLimit gives a prefix of it.
func FuzzUGMCharsMap(f *testing.F) {
	good := buildCharsMap(f, testCharsMap)
	f.Add(good, "AB A\tZﬁ x  ", byte(0))
	f.Add(good[:len(good)/2], "A", byte(1))
	f.Add(buildCharsMap(f, map[string]string{"a": "bb", "ab": " ", "b": "", "\xe2\x96": "\x81", "c": "\xff"}), "abcab\xe2\x96", byte(3))
	f.Add([]byte{4, 0, 0, 0, 0, 4, 0, 0, 0}, "x", byte(2))
	toks := []ugmTok{{"▁", -1, 0}, {"a", -2, 0}, {"b", -1.5, 0}, {"ab", -2.5, 0}, {"▁a", -1, 0}, {"x", -3, 0}, {"\xff", -1, 0},
		{"<u>", -1, TypeUserDefined}, {"[unused]", -9, TypeUnused}}
	f.Fuzz(func(t *testing.T, cm []byte, text string, flags byte) {
		v := &Vocab{Model: ModelUGM, BOS: NoToken, EOS: 1, UNK: 2, PAD: 0, EOT: NoToken, EOM: NoToken, SEP: NoToken,
			FIMPre: NoToken, FIMSuf: NoToken, FIMMid: NoToken, FIMRep: NoToken, FIMSep: NoToken, AddEOS: flags&4 != 0,
			Tokens: []string{"<pad>", "</s>", "<unk>"}, Scores: []float32{0, 0, 0}, Types: []TokenType{TypeControl, TypeControl, TypeUnknown},
			CharsMap: cm, AddSpacePrefix: flags&1 != 0, RemoveExtraSpaces: flags&2 != 0}
		for _, tok := range toks {
			v.Tokens, v.Scores, v.Types = append(v.Tokens, tok.text), append(v.Scores, tok.score), append(v.Types, tok.typ|TokenType(max(0, 1-int(tok.typ))))
		}
		tk, err := New(v)
		if err != nil {
			if !errors.Is(err, ErrInvalidVocab) {
				t.Fatalf("New: %v", err)
			}
			return
		}
		opt := EncodeOptions{AddSpecial: flags&8 != 0, ParseSpecial: flags&16 != 0}
		ids := tk.Encode(text, opt)
		for _, id := range ids {
			if id >= uint32(tk.NumTokens()) {
				t.Fatalf("id %d", id)
			}
		}
		if lo := tk.MinTokens(text, opt); lo > len(ids) {
			t.Fatalf("MinTokens(%q) = %d > Encode's %d", text, lo, len(ids))
		}
		limit := len(ids) / 2
		if got, complete := tk.EncodeLimit(text, opt, limit); complete && !equalIDs(got, ids) ||
			!complete && (len(got) <= limit || len(got) > len(ids) || !equalIDs(got, ids[:len(got)])) {
			t.Fatalf("EncodeLimit(%q, %d): %v, complete %v; Encode %v", text, limit, got, complete, ids)
		}
		if _, err := tk.Decode(ids, DecodeOptions{}); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzEncodeUGM(f *testing.F) {
	f.Add("ＦＵＬＬ　ｗｉｄｔｈ ﬁ① Cafe\u0301 ｶﾞ a\u200bb  \t\n <mask></s>🦙🦙 \xff\xc0\xaf", true)
	fuzzEncode(f, "nomic-bert-moe")
}
