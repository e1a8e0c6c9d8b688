package tokenizer

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// seedTexts adds every vector input of a vocabulary to the corpus.
func seedTexts(f *testing.F, name string) {
	_, inp, out := loadVocab(f, name)
	for _, v := range parseVectors(f, inp, out) {
		f.Add(v.text, false)
		f.Add(v.text, true)
	}
	f.Add("\xff\xfe<s>\xe2\x82", true)
}

// fuzzEncode checks, for any input, that encoding does not panic, yields
// ids in range, decodes back to the input where llama.cpp guarantees it
// (valid UTF-8; the vocabulary's own escape character excepted on SPM; on
// WPM, whose decoding gives the normalised words, back to text that
// encodes to the same ids; on UGM to the normalised text), and streams to
// the same text as Decode.
func fuzzEncode(f *testing.F, name string) {
	seedTexts(f, name)
	tk, _, _ := loadVocab(f, name)
	f.Fuzz(func(t *testing.T, s string, special bool) {
		opt := EncodeOptions{AddSpecial: special, ParseSpecial: special}
		ids := tk.Encode(s, opt)
		if lo := tk.MinTokens(s, opt); lo > len(ids) {
			t.Fatalf("MinTokens(%q) = %d, above Encode's %d ids", s, lo, len(ids))
		}
		if limit := len(ids) / 2; len(ids) > 0 {
			got, complete := tk.EncodeLimit(s, opt, limit)
			if complete && !equalIDs(got, ids) || !complete && (len(got) <= limit || !equalIDs(got, ids[:len(got)])) {
				t.Fatalf("EncodeLimit(%q, %d): %d ids, complete %v; want Encode's %d ids or a prefix of them past the limit", s, limit, len(got), complete, len(ids))
			}
		}
		for _, id := range ids {
			if id >= uint32(tk.NumTokens()) {
				t.Fatalf("Encode(%q) gave id %d of %d", s, id, tk.NumTokens())
			}
		}
		text, err := tk.Decode(ids, DecodeOptions{RemoveSpecial: special})
		if err != nil {
			t.Fatal(err)
		}
		if got := streamAll(t, tk, ids, DecodeOptions{}); got != validUTF8([]byte(mustDecode(t, tk, ids))) {
			t.Fatalf("stream %q differs from Decode", got)
		}
		if special || !utf8.ValidString(s) || tk.kind != kindBPE && strings.Contains(s, "▁") {
			return
		}
		if tk.kind == kindUGM {
			// Decoding gives the normalised text, "▁" as a space; an UNK
			// decodes to nothing.
			if slices.Contains(ids, tk.unk) {
				return
			}
			var want []byte
			for _, fr := range tk.partition(s, false) {
				if fr.tok != NoToken {
					want = append(want, tk.pieces[fr.tok]...)
					continue
				}
				want = append(want, strings.ReplaceAll(string(tk.ugm.normalize(nil, fr.text)), "▁", " ")...)
			}
			if w := tk.stripPrefix(string(want)); text != w {
				t.Fatalf("Decode(Encode(%q)) = %q, want the normalised %q", s, text, w)
			}
			return
		}
		if tk.kind == kindWPM {
			// An [UNK] decodes to nothing, so its word is gone.
			if !slices.Contains(ids, tk.unk) && !equalIDs(tk.Encode(text, opt), ids) {
				t.Fatalf("Decode(Encode(%q)) = %q, which encodes to other ids", s, text)
			}
			return
		}
		want := s
		if tk.cleanSpaces {
			want = string(cleanSpaces([]byte(s)))
		}
		if text != want {
			t.Fatalf("Decode(Encode(%q)) = %q", s, text)
		}
	})
}

func mustDecode(t *testing.T, tk *Tokenizer, ids []uint32) string {
	s, err := tk.Decode(ids, DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func FuzzEncodeSPM(f *testing.F)    { fuzzEncode(f, "llama-spm") }
func FuzzEncodeLlama3(f *testing.F) { fuzzEncode(f, "llama-bpe") }
func FuzzEncodeQwen2(f *testing.F)  { fuzzEncode(f, "qwen2") }

func FuzzEncodeWPM(f *testing.F) {
	f.Add("[CLS] Héllo,\u00a0[SEP]wörld!\t[MASK]中文字 İ\u0301 \U0002B820x", true)
	fuzzEncode(f, "bert-bge")
}

// FuzzDecoder streams arbitrary id sequences (including out-of-range ids,
// stray byte tokens and control tokens): every chunk is valid UTF-8 and the
// whole equals Decode with invalid bytes replaced.
func FuzzDecoder(f *testing.F) {
	tks := []*Tokenizer{}
	for _, name := range []string{"llama-spm", "gpt-2", "qwen2", "bert-bge"} {
		tk, inp, out := loadVocab(f, name)
		tks = append(tks, tk)
		for _, v := range parseVectors(f, inp, out) {
			b := []byte{byte(len(tks) - 1), 0}
			for _, id := range v.ids {
				b = binary.LittleEndian.AppendUint32(b, id)
			}
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 2 {
			return
		}
		tk := tks[int(b[0])%len(tks)]
		opt := DecodeOptions{RenderSpecial: b[1]&1 != 0, Continue: b[1]&2 != 0}
		var ids []uint32
		for b = b[2:]; len(b) >= 4; b = b[4:] {
			ids = append(ids, binary.LittleEndian.Uint32(b)%uint32(tk.NumTokens()+1))
		}
		want, err := tk.Decode(ids, opt)
		d := tk.NewDecoder(opt)
		var sb strings.Builder
		for _, id := range ids {
			s, err := d.Next(id)
			if err != nil {
				if id < uint32(tk.NumTokens()) {
					t.Fatalf("Next(%d): %v", id, err)
				}
				continue
			}
			if !utf8.ValidString(s) {
				t.Fatalf("chunk %q is not valid UTF-8", s)
			}
			sb.WriteString(s)
		}
		sb.WriteString(d.Flush())
		if err != nil {
			return // an out-of-range id: Decode rejects the whole sequence
		}
		if got := sb.String(); got != validUTF8([]byte(want)) {
			t.Fatalf("stream %q, Decode %q", got, want)
		}
	})
}
