package tokenizer

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// texts is the vocabulary text of each id, to state expectations readably.
func texts(t *testing.T, tk *Tokenizer, ids []uint32) []string {
	t.Helper()
	out := make([]string, len(ids))
	for i, id := range ids {
		s, err := tk.Text(id)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = s
	}
	return out
}

// TestWPMPreprocess pins BERT's normalisation and word splitting as
// llama.cpp does them, on bge's vocabulary: accents and case dropped,
// punctuation, ASCII symbols and CJK ideographs words of their own,
// control characters dropped without ending a word, whitespace runs
// ending words, and a word with an unmatched part becoming [UNK] whole.
func TestWPMPreprocess(t *testing.T) {
	tk, _, _ := loadVocab(t, "bert-bge")
	plain, special, parse := EncodeOptions{}, EncodeOptions{AddSpecial: true}, EncodeOptions{ParseSpecial: true}
	for _, tc := range []struct {
		in   string
		opt  EncodeOptions
		want []string
	}{
		{"Café Déjà vu", plain, []string{"▁cafe", "▁de", "ja", "▁vu"}},         // precomposed accents
		{"Cafe\u0301 Dé\u0301ja\u0300", plain, []string{"▁cafe", "▁de", "ja"}}, // combining marks
		{"HELLO İstanbul", plain, []string{"▁hello", "▁istanbul"}},
		{"Äpfel", plain, []string{"▁ap", "fe", "l"}},
		{"hello,world!", plain, []string{"▁hello", "▁,", "▁world", "▁!"}},
		{"don't", plain, []string{"▁don", "▁'", "▁t"}},
		{"a+b$c", plain, []string{"▁a", "▁+", "▁b", "▁$", "▁c"}},
		{"a€b", plain, []string{"▁a", "€", "b"}}, // a symbol past ASCII stays in the word
		{"中文", plain, []string{"▁中", "▁文"}},
		{"中文字", plain, []string{"▁中", "▁文", "[UNK]"}}, // each ideograph is a word: only its own is unknown
		{"a\U0002B920b", plain, []string{"▁a", "[UNK]", "▁b"}},
		{"a\U0002B820b", plain, []string{"[UNK]"}}, // below Hugging Face's 0x2B920: not a word of its own
		{"he\x00l\u200blo\x07", plain, []string{"▁hello"}},
		{"hel\uFFFDlo\xff", plain, []string{"▁hello"}},
		{"  hello \t\n\u3000\u00a0 world  ", plain, []string{"▁hello", "▁world"}},
		{"   ", plain, []string{}},
		{"\t\n\r\n", plain, []string{}},
		{"hello🦙world", plain, []string{"[UNK]"}},       // not "▁hello" then [UNK]
		{"a\u1FEFb", plain, []string{"▁a", "▁`", "▁b"}}, // U+1FEF decomposes to an ASCII symbol
		{"Ω ﬁ", plain, []string{"▁ω", "▁ﬁ"}},            // a compatibility decomposition is not applied
		{"가", plain, []string{"▁ᄀ"}},                    // a Hangul syllable keeps its leading jamo only
		{"hello", special, []string{"[CLS]", "▁hello", "[SEP]"}},
		{"", special, []string{"[CLS]", "[SEP]"}},
		{"  \n ", special, []string{"[CLS]", "[SEP]"}},
		{"[CLS] hi", plain, []string{"▁[", "▁cl", "s", "▁]", "▁hi"}},
		{"[CLS] hi", parse, []string{"[CLS]", "▁hi"}},
		{"x[SEP]y", parse, []string{"▁x", "[SEP]", "▁y"}},
	} {
		got := texts(t, tk, tk.Encode(tc.in, tc.opt))
		if !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q, %+v) = %q, want %q", tc.in, tc.opt, got, tc.want)
		}
	}
}

// wpmVocab is a small WordPiece vocabulary.
func wpmVocab() *Vocab {
	toks := []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "▁un", "▁unaff", "able", "aff", "a", "ble", "▁e", "▁E", "▁é", "▁É", "▁,"}
	types := slices.Repeat([]TokenType{TypeNormal}, len(toks))
	types[0], types[1], types[2], types[3] = TypeControl, TypeControl, TypeControl, TypeControl
	return &Vocab{Model: ModelWPM, Tokens: toks, Types: types, BOS: 2, SEP: 3, UNK: 1, PAD: 0,
		EOS: NoToken, EOT: NoToken, EOM: NoToken, FIMPre: NoToken, FIMSuf: NoToken, FIMMid: NoToken,
		FIMRep: NoToken, FIMSep: NoToken, AddBOS: true, AddSEP: true}
}

// TestWPMGreedy: each position takes the longest token that matches
// there, and a word that cannot be covered becomes one UNK (nothing
// without an UNK token); the normaliser switches work.
func TestWPMGreedy(t *testing.T) {
	tk, err := New(wpmVocab())
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string][]uint32{
		"unaffable":       {5, 6},           // ▁unaff able, not ▁un aff able
		"unaffa":          {5, 8},           // ▁unaff a
		"unaffablez":      {1},              // z matches nothing: the whole word is [UNK]
		"unaffable, UNAF": {5, 6, 14, 1},    // ▁unaff able ▁, [UNK]
		"É é E e":         {10, 10, 10, 10}, // all ▁e
	} {
		if got := tk.Encode(in, EncodeOptions{}); !equalIDs(got, want) {
			t.Errorf("Encode(%q) = %v, want %v", in, got, want)
		}
	}
	for _, tc := range []struct {
		keepCase, keepAccents bool
		want                  []uint32
	}{
		{false, false, []uint32{10, 10}},
		{true, false, []uint32{11, 10}},
		{false, true, []uint32{12, 10}},
		{true, true, []uint32{13, 10}},
	} {
		v := wpmVocab()
		v.KeepCase, v.KeepAccents = tc.keepCase, tc.keepAccents
		tk, err := New(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := tk.Encode("É e", EncodeOptions{}); !equalIDs(got, tc.want) {
			t.Errorf("KeepCase %v, KeepAccents %v: %v, want %v", tc.keepCase, tc.keepAccents, got, tc.want)
		}
	}

	v := wpmVocab()
	v.UNK = NoToken
	if tk, err = New(v); err != nil {
		t.Fatal(err)
	}
	if got := tk.Encode("unaffablez unaffable", EncodeOptions{AddSpecial: true}); !equalIDs(got, []uint32{2, 5, 6, 3}) {
		t.Errorf("without UNK an unknown word gives nothing: %v", got)
	}
	if lo := tk.MinTokens("unaffablez unaffable", EncodeOptions{AddSpecial: true}); lo != 2 {
		t.Errorf("without UNK no word is sure to give an id: MinTokens %d, want 2", lo)
	}
}

// TestWPMNew: WPM's Encode adds [CLS] and [SEP] whatever the flags say,
// so both must exist; no EOS is needed even with AddEOS.
func TestWPMNew(t *testing.T) {
	for name, edit := range map[string]func(*Vocab){
		"no SEP":           func(v *Vocab) { v.SEP = NoToken },
		"SEP out of range": func(v *Vocab) { v.SEP = 99 },
		"no BOS":           func(v *Vocab) { v.BOS, v.AddBOS = NoToken, false },
	} {
		v := wpmVocab()
		edit(v)
		if _, err := New(v); !errors.Is(err, ErrInvalidVocab) {
			t.Errorf("%s: err = %v, want ErrInvalidVocab", name, err)
		}
	}
	v := wpmVocab()
	v.AddEOS, v.AddBOS, v.AddSEP = true, false, false
	tk, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.Encode("a", EncodeOptions{AddSpecial: true}); !equalIDs(got, []uint32{2, 1, 3}) {
		t.Errorf("Encode with AddSpecial: %v, want [CLS] [UNK] [SEP]", got)
	}
	if tk.AddsBOS() || tk.AddsSEP() || tk.SEP() != 3 {
		t.Errorf("AddsBOS %v, AddsSEP %v, SEP %d", tk.AddsBOS(), tk.AddsSEP(), tk.SEP())
	}
}

// TestWPMDecode: pieces show "▁" as a space, there is no space prefix to
// strip, spaces before punctuation are cleaned, and RemoveSpecial drops
// the leading [CLS] only (llama_detokenize's behaviour).
func TestWPMDecode(t *testing.T) {
	tk, _, _ := loadVocab(t, "bert-bge")
	ids := tk.Encode("Hello, World! Äpfel don't", EncodeOptions{AddSpecial: true})
	for _, tc := range []struct {
		opt  DecodeOptions
		want string
	}{
		{DecodeOptions{}, " hello, world! apfel don't"},
		{DecodeOptions{RemoveSpecial: true}, " hello, world! apfel don't"},
		{DecodeOptions{RenderSpecial: true}, "[CLS] hello, world! apfel don't[SEP]"},
		{DecodeOptions{RenderSpecial: true, RemoveSpecial: true}, " hello, world! apfel don't[SEP]"},
	} {
		got, err := tk.Decode(ids, tc.opt)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("Decode(%+v) = %q, want %q", tc.opt, got, tc.want)
		}
		if s := streamAll(t, tk, ids, tc.opt); !tc.opt.RemoveSpecial && s != tc.want {
			t.Errorf("stream (%+v) = %q, want %q", tc.opt, s, tc.want)
		}
	}
	for id, want := range map[uint32]string{7592: " hello", 7959: "fe", 1010: " ,", 101: ""} {
		if p, err := tk.Piece(id, false); err != nil || p != want {
			t.Errorf("Piece(%d) = %q, %v; want %q", id, p, err, want)
		}
	}
}

// TestWPMRoundTrip: the decoded text is the normalised words, so encoding
// it again gives the same ids, wherever no word became [UNK] (which
// decodes to nothing).
func TestWPMRoundTrip(t *testing.T) {
	tk, inp, out := loadVocab(t, "bert-bge")
	n := 0
	for _, v := range parseVectors(t, inp, out) {
		if slices.Contains(v.ids, tk.UNK()) {
			continue
		}
		text, err := tk.Decode(v.ids, DecodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if again := tk.Encode(text, EncodeOptions{}); !equalIDs(again, v.ids) {
			t.Errorf("%q decodes to %q, which encodes to %v, not %v", v.text, text, again, v.ids)
		}
		n++
	}
	if n < 30 {
		t.Errorf("only %d vectors without [UNK]", n)
	}
}

// TestWPMMinTokens: the bound counts words, so it is exact on text whose
// words are each one token, never above Encode (whitespace alone, special
// tokens cut out of the text, unknown words), and far from trivial on a
// long text.
func TestWPMMinTokens(t *testing.T) {
	tk, _, _ := loadVocab(t, "bert-bge")
	parse := EncodeOptions{AddSpecial: true, ParseSpecial: true}
	for _, tc := range []struct {
		in   string
		opt  EncodeOptions
		want int
	}{
		{"hello world, again", EncodeOptions{}, 4},
		{"hello world, again", EncodeOptions{AddSpecial: true}, 6},
		{strings.Repeat(" ", 1000), EncodeOptions{}, 0},
		{strings.Repeat(" \t\n", 100), EncodeOptions{AddSpecial: true}, 2},
		{"hello🦙world", EncodeOptions{}, 1},
		{"[CLS][CLS][CLS]", parse, 2}, // three ids, but the words "[", "cls", "]" may be swallowed
		{"[CLS][CLS][CLS]", EncodeOptions{}, 9},
	} {
		n := len(tk.Encode(tc.in, tc.opt))
		lo := tk.MinTokens(tc.in, tc.opt)
		if lo > n {
			t.Errorf("MinTokens(%.30q, %+v) = %d, above Encode's %d", tc.in, tc.opt, lo, n)
		}
		if lo != tc.want {
			t.Errorf("MinTokens(%.30q, %+v) = %d, want %d", tc.in, tc.opt, lo, tc.want)
		}
	}
	for _, s := range []string{"[CLS] hello [SEP] world [MASK]", "x[PAD]y[UNK]z", "a[CLS]", "CLS SEP PAD", "[[CLS]]", "\xff[SEP]\xc3"} {
		for _, opt := range limitOptions {
			if lo, n := tk.MinTokens(s, opt), len(tk.Encode(s, opt)); lo > n {
				t.Errorf("MinTokens(%q, %+v) = %d, above Encode's %d", s, opt, lo, n)
			}
		}
	}

	// A user-defined token is cut out of every text: its words cannot count.
	v := wpmVocab()
	v.Tokens = append(v.Tokens, "able,able")
	v.Types = append(v.Types, TypeUserDefined)
	utk, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"able,able", "able,able,able", "unaff able,able"} {
		if lo, n := utk.MinTokens(s, EncodeOptions{}), len(utk.Encode(s, EncodeOptions{})); lo > n {
			t.Errorf("user-defined token: MinTokens(%q) = %d, above Encode's %d", s, lo, n)
		}
	}

	huge := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 1000)
	if lo, n := tk.MinTokens(huge, EncodeOptions{}), len(tk.Encode(huge, EncodeOptions{})); lo != n || n != 10_000 {
		t.Errorf("MinTokens %d, Encode %d ids; want both 10000", lo, n)
	}
}

// TestWPMEncodeLimit: EncodeLimit stops between words once past its
// limit, giving a prefix of Encode's ids.
func TestWPMEncodeLimit(t *testing.T) {
	tk, _, _ := loadVocab(t, "bert-bge")
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 10_000)
	ids, complete := tk.EncodeLimit(text, EncodeOptions{AddSpecial: true}, 100)
	if complete || len(ids) != 101 {
		t.Fatalf("EncodeLimit(100): %d ids, complete %v; want to stop at 101", len(ids), complete)
	}
	full := tk.Encode(text[:2000], EncodeOptions{AddSpecial: true})
	if !equalIDs(ids, full[:101]) {
		t.Errorf("EncodeLimit's ids are not a prefix of Encode's")
	}
	// A word of many tokens is encoded whole before the limit is checked.
	ids, complete = tk.EncodeLimit("unaffable unaffable", EncodeOptions{}, 1)
	if complete || !equalIDs(ids, tk.Encode("unaffable", EncodeOptions{})) {
		t.Errorf("EncodeLimit(1) on two 3-token words: %v, %v", ids, complete)
	}
	ids, complete = tk.EncodeLimit("a b", EncodeOptions{AddSpecial: true}, 4)
	if !complete || len(ids) != 4 {
		t.Errorf("EncodeLimit(4) of 4 ids: %v, %v", ids, complete)
	}
}

// TestWPMFromGGUF: a "bert" file gets llama.cpp's WPM defaults, and its
// keys override them; the add_bos/add_sep flags do not change what
// Encode adds, as in llama.cpp.
func TestWPMFromGGUF(t *testing.T) {
	tk, _, _ := loadVocab(t, "bert-bge")
	if tk.BOS() != 101 || tk.SEP() != 102 || tk.UNK() != 100 || tk.EOS() != NoToken || !tk.AddsBOS() || !tk.AddsSEP() {
		t.Errorf("defaults: BOS %d SEP %d UNK %d EOS %d AddsBOS %v AddsSEP %v", tk.BOS(), tk.SEP(), tk.UNK(), tk.EOS(), tk.AddsBOS(), tk.AddsSEP())
	}
	tk = vocabWith(t, "bert-bge", map[string]any{
		"tokenizer.ggml.seperator_token_id": uint32(103),
		"tokenizer.ggml.add_bos_token":      false,
		"tokenizer.ggml.add_sep_token":      false,
	})
	if got := tk.Encode("hi", EncodeOptions{AddSpecial: true}); !equalIDs(got, []uint32{101, 7632, 103}) || tk.AddsBOS() || tk.AddsSEP() {
		t.Errorf("overridden: %v, AddsBOS %v, AddsSEP %v", got, tk.AddsBOS(), tk.AddsSEP())
	}
	cased := vocabWith(t, "bert-bge", map[string]any{"tokenizer.ggml.normalizer.lowercase": false})
	if a, b := cased.Encode("Hello", EncodeOptions{}), cased.Encode("hello", EncodeOptions{}); equalIDs(a, b) {
		t.Errorf("lowercase false: Hello and hello both %v", a)
	}
	if a, b := cased.Encode("café", EncodeOptions{}), cased.Encode("cafe", EncodeOptions{}); equalIDs(a, b) {
		t.Errorf("lowercase false keeps accents too: café and cafe both %v", a)
	}
	stripped := vocabWith(t, "bert-bge", map[string]any{"tokenizer.ggml.normalizer.lowercase": false, "tokenizer.ggml.normalizer.strip_accents": true})
	if a, b := stripped.Encode("café", EncodeOptions{}), stripped.Encode("cafe", EncodeOptions{}); !equalIDs(a, b) {
		t.Errorf("strip_accents true: café %v, cafe %v", a, b)
	}
}

// TestWPMTables: the NFD first-code-point map and lower-casing agree with
// llama.cpp's unicode-data.cpp (where a checkout is at hand), and a few
// points everywhere.
func TestWPMTables(t *testing.T) {
	for r, want := range map[rune]rune{
		'a': 'a', 'é': 'e', 'Å': 'A', 0x212B: 'A', 0x2126: 0x03A9, 0xAC00: 0x1100, 0xD7A3: 0x1112,
		0x1FEF: '`', 0xF900: 0x8C48, 0x2FA1D: 0x2A600, 0x2FA1E: 0x2FA1E, 0x10FFFF: 0x10FFFF, 0xFB01: 0xFB01,
	} {
		if got := nfdFirst(r); got != want {
			t.Errorf("nfdFirst(%U) = %U, want %U", r, got, want)
		}
	}
	f, err := os.Open(filepath.Join(filepath.Dir(llamaModels), "src", "unicode-data.cpp"))
	if err != nil {
		t.Skipf("no llama.cpp unicode-data.cpp: %v", err)
	}
	defer f.Close()
	entry := regexp.MustCompile(`^\{0x([0-9A-F]+), 0x([0-9A-F]+)(?:, 0x([0-9A-F]+))?\},`)
	var table string
	var nfd []nfdRange
	lower := map[rune]rune{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "const ") {
			table = line
			continue
		}
		m := entry.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		hex := func(s string) rune { v, _ := strconv.ParseUint(s, 16, 32); return rune(v) }
		switch {
		case strings.Contains(table, "unicode_ranges_nfd") && m[3] != "":
			if lo := hex(m[1]); lo != 0 {
				nfd = append(nfd, nfdRange{lo, hex(m[2]), hex(m[3])})
			}
		case strings.Contains(table, "unicode_map_lowercase"):
			lower[hex(m[1])] = hex(m[2])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(nfd, nfdRanges[:]) {
		t.Errorf("nfdRanges differ from llama.cpp's %d ranges", len(nfd))
	}
	if len(lower) < 1000 {
		t.Fatalf("read %d lower-case mappings", len(lower))
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		want, ok := lower[r]
		if !ok {
			want = r
		}
		if got := unicode.ToLower(r); got != want {
			t.Errorf("unicode.ToLower(%U) = %U, llama.cpp %U", r, got, want)
		}
	}
}
