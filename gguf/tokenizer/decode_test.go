package tokenizer

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// committedVocabs are the vocabularies under testdata, so tests that use
// them run everywhere.
var committedVocabs = []string{"llama-spm", "phi-3", "gpt-2", "llama-bpe", "qwen2", "starcoder", "deepseek-coder", "falcon", "bert-bge"}

// TestRoundTrip decodes the encoding of every vector input: the text comes
// back exactly, up to the space clean-up that byte-level BPE vocabularies
// apply when decoding (and the whitespace Phi-3 strips after "</s>").
func TestRoundTrip(t *testing.T) {
	for _, name := range committedVocabs {
		t.Run(name, func(t *testing.T) {
			tk, inp, out := loadVocab(t, name)
			if tk.kind == kindWPM {
				t.Skip("WPM normalises the text (TestWPMRoundTrip)")
			}
			for _, v := range parseVectors(t, inp, out) {
				if name == "phi-3" && strings.Contains(v.text, "</s>") {
					continue
				}
				ids := tk.Encode(v.text, EncodeOptions{})
				got, err := tk.Decode(ids, DecodeOptions{})
				if err != nil {
					t.Fatal(err)
				}
				want := v.text
				if tk.cleanSpaces {
					want = string(cleanSpaces([]byte(want)))
				}
				if got != want {
					t.Errorf("Decode(Encode(%q)) = %q", v.text, got)
				}
			}
		})
	}
}

// TestDecodeSpecialRules pins llama_detokenize's handling of BOS/EOS,
// control tokens and the leading space.
func TestDecodeSpecialRules(t *testing.T) {
	spm, _, _ := loadVocab(t, "llama-spm")
	ids := spm.Encode("Hello world", EncodeOptions{AddSpecial: true}) // <s> ▁Hello ▁world
	ids = append(ids, spm.EOS())
	for _, tc := range []struct {
		opt  DecodeOptions
		want string
	}{
		{DecodeOptions{}, " Hello world"}, // BOS takes the strip and renders as nothing
		{DecodeOptions{RenderSpecial: true}, "<s> Hello world</s>"},
		{DecodeOptions{RemoveSpecial: true}, " Hello world"}, // llama.cpp keeps the space after a removed BOS
		{DecodeOptions{RemoveSpecial: true, RenderSpecial: true}, " Hello world</s>"},
	} {
		got, err := spm.Decode(ids, tc.opt)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("Decode(%v, %+v) = %q, want %q", ids, tc.opt, got, tc.want)
		}
	}
	if got, _ := spm.Decode(ids[1:3], DecodeOptions{}); got != "Hello world" {
		t.Errorf("without BOS the first space is stripped: got %q", got)
	}
	if got, _ := spm.Decode(ids[1:3], DecodeOptions{Continue: true}); got != " Hello world" {
		t.Errorf("a continuation keeps its space: got %q", got)
	}

	qwen, _, _ := loadVocab(t, "qwen2")
	chat := qwen.Encode("<|im_start|>user\nhi<|im_end|>", EncodeOptions{ParseSpecial: true})
	if chat[0] != 151644 || chat[len(chat)-1] != 151645 {
		t.Fatalf("special tokens not matched: %v", chat)
	}
	if !qwen.IsEOG(151645) || !qwen.IsControl(151644) || qwen.IsEOG(151644) {
		t.Error("<|im_end|> must end generation, <|im_start|> is control only")
	}
	// EOG lists every id IsEOG reports, ascending.
	var eog []uint32
	for id := range uint32(qwen.NumTokens()) {
		if qwen.IsEOG(id) {
			eog = append(eog, id)
		}
	}
	if got := qwen.EOG(); !slices.Equal(got, eog) || !slices.Contains(got, 151645) {
		t.Errorf("EOG %v, IsEOG's %v", got, eog)
	}
	if got, _ := qwen.Decode(chat, DecodeOptions{}); got != "user\nhi" {
		t.Errorf("control tokens hidden: got %q", got)
	}
	if got, _ := qwen.Decode(chat, DecodeOptions{RenderSpecial: true}); got != "<|im_start|>user\nhi<|im_end|>" {
		t.Errorf("control tokens rendered: got %q", got)
	}
	if plain := qwen.Encode("<|im_start|>", EncodeOptions{}); len(plain) < 2 {
		t.Errorf("without ParseSpecial a control token's text is plain text: %v", plain)
	}

	for _, id := range []uint32{uint32(qwen.NumTokens()), NoToken} {
		if _, err := qwen.Decode([]uint32{id}, DecodeOptions{}); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("Decode(%d): err = %v, want ErrInvalidToken", id, err)
		}
		if _, err := qwen.NewDecoder(DecodeOptions{}).Next(id); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("Decoder.Next(%d): err = %v, want ErrInvalidToken", id, err)
		}
	}
}

// streamAll feeds ids one at a time and checks that every chunk is valid
// UTF-8; it returns the concatenation.
func streamAll(t testing.TB, tk *Tokenizer, ids []uint32, opt DecodeOptions) string {
	t.Helper()
	d := tk.NewDecoder(opt)
	var sb strings.Builder
	for _, id := range ids {
		s, err := d.Next(id)
		if err != nil {
			t.Fatal(err)
		}
		if !utf8.ValidString(s) {
			t.Fatalf("chunk %q is not valid UTF-8", s)
		}
		sb.WriteString(s)
	}
	s := d.Flush()
	if !utf8.ValidString(s) {
		t.Fatalf("flush %q is not valid UTF-8", s)
	}
	sb.WriteString(s)
	return sb.String()
}

// TestStreamMatchesDecode streams every vector's ids and compares with
// Decode, so streaming never changes the text.
func TestStreamMatchesDecode(t *testing.T) {
	for _, name := range committedVocabs {
		t.Run(name, func(t *testing.T) {
			tk, inp, out := loadVocab(t, name)
			for _, v := range parseVectors(t, inp, out) {
				for _, opt := range []DecodeOptions{{}, {Continue: true, RenderSpecial: true}} {
					want, err := tk.Decode(v.ids, opt)
					if err != nil {
						t.Fatal(err)
					}
					if got := streamAll(t, tk, v.ids, opt); got != validUTF8([]byte(want)) {
						t.Errorf("stream of %q (%+v) = %q, Decode = %q", v.text, opt, got, want)
					}
				}
			}
		})
	}
}

// TestStreamHoldsPartialUTF8 feeds an emoji that SentencePiece spells as
// four byte tokens: nothing comes out until the last one.
func TestStreamHoldsPartialUTF8(t *testing.T) {
	tk, _, _ := loadVocab(t, "llama-spm")
	ids := tk.Encode("🦙!", EncodeOptions{})
	var bytes []uint32
	for _, id := range ids {
		if p, _ := tk.Piece(id, false); len(p) == 1 && p[0] >= 0x80 {
			bytes = append(bytes, id)
		}
	}
	if len(bytes) != 4 {
		t.Fatalf("want the llama as 4 byte tokens, got %v", ids)
	}
	d := tk.NewDecoder(DecodeOptions{Continue: true})
	var got []string
	last := -1
	for i, id := range ids {
		s, err := d.Next(id)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
		if id == bytes[3] {
			last = i
		}
	}
	if last < 3 || got[last] != "🦙" || got[last-1]+got[last-2]+got[last-3] != "" {
		t.Errorf("chunks %q: want three empty chunks, then the whole llama", got)
	}
	if strings.Join(got, "")+d.Flush() != " 🦙!" {
		t.Errorf("chunks %q", got)
	}
	// A lone continuation byte can never complete: it is flushed as U+FFFD.
	d = tk.NewDecoder(DecodeOptions{Continue: true})
	s, _ := d.Next(bytes[1])
	if s != "\uFFFD" {
		t.Errorf("stray continuation byte: got %q", s)
	}
	if s, _ = d.Next(bytes[0]); s != "" {
		t.Errorf("a lead byte is held: got %q", s)
	}
	if s = d.Flush(); s != "\uFFFD" {
		t.Errorf("flushed lead byte: got %q", s)
	}
}

// TestStreamCleanSpaces streams text whose clean-up depends on the next
// token, on a vocabulary that cleans spaces.
func TestStreamCleanSpaces(t *testing.T) {
	tk, _, _ := loadVocab(t, "gpt-2")
	for _, s := range []string{"a , b", "he 's here", "we 're ok", "' ' quote", "end .", "x ' y", "word 've"} {
		var ids []uint32
		for _, r := range s { // one token per character: every boundary is a token boundary
			ids = append(ids, tk.Encode(string(r), EncodeOptions{})...)
		}
		want, err := tk.Decode(ids, DecodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := streamAll(t, tk, ids, DecodeOptions{}); got != want {
			t.Errorf("%q: stream %q, Decode %q", s, got, want)
		}
	}
}

func TestNewErrors(t *testing.T) {
	base := func() *Vocab {
		return &Vocab{Model: ModelBPE, Pre: "gpt-2", Tokens: []string{"a", "b", "ab"}, Merges: []string{"a b"},
			BOS: NoToken, EOS: NoToken, EOT: NoToken, EOM: NoToken, UNK: NoToken, PAD: NoToken}
	}
	for name, tc := range map[string]struct {
		edit func(*Vocab)
		err  error
	}{
		"unknown model":  {func(v *Vocab) { v.Model = "rwkv" }, ErrUnsupported},
		"UGM no UNK":     {func(v *Vocab) { v.Model = ModelUGM }, ErrInvalidVocab},
		"UGM charsmap":   {func(v *Vocab) { v.Model, v.UNK, v.CharsMap = ModelUGM, 0, []byte{1, 0} }, ErrInvalidVocab},
		"unknown pre":    {func(v *Vocab) { v.Pre = "chameleon" }, ErrUnsupported},
		"no tokens":      {func(v *Vocab) { v.Tokens = nil }, ErrInvalidVocab},
		"short scores":   {func(v *Vocab) { v.Scores = []float32{0} }, ErrInvalidVocab},
		"short types":    {func(v *Vocab) { v.Types = []TokenType{1} }, ErrInvalidVocab},
		"add BOS no BOS": {func(v *Vocab) { v.AddBOS = true }, ErrInvalidVocab},
	} {
		v := base()
		tc.edit(v)
		if _, err := New(v); !errors.Is(err, tc.err) {
			t.Errorf("%s: err = %v, want %v", name, err, tc.err)
		}
	}
	tk, err := New(base())
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.Encode("abba", EncodeOptions{}); !equalIDs(got, []uint32{2, 1, 0}) {
		t.Errorf("tiny BPE: %v", got)
	}
}
