package tokenizer

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// FuzzVocab builds tokenizers from arbitrary vocabularies, as a model
// file's tokenizer.ggml arrays give them, and checks that none makes New,
// Encode, Decode or the streaming decoder panic, that Encode's ids are in
// range, and that Decode and the stream agree; on WordPiece ones also that
// MinTokens stays at or below Encode and EncodeLimit gives a prefix of
// it. The vocabularies are written by packVocab (below): small
// SentencePiece, BPE and WordPiece ones, a BPE one for each
// pre-tokenizer, and the first tokens of real ones.
func FuzzVocab(f *testing.F) {
	pres := slices.Sorted(func(yield func(string) bool) {
		for name := range preTokenizers {
			if !yield(name) {
				return
			}
		}
	})
	words := []string{"▁the", "▁a", "he", "llo", "▁hello", "<s>", "</s>", "<0x0A>", "<0x20>", "ab", "a", "b", " ", "Ġ", "Ġthe", "\n"}
	spm := &Vocab{Model: ModelSPM, Tokens: words, BOS: 5, EOS: 6, UNK: NoToken, EOT: NoToken, EOM: NoToken, PAD: NoToken, AddBOS: true, AddSpacePrefix: true}
	spm.Types = slices.Repeat([]TokenType{TypeNormal}, len(words))
	spm.Types[5], spm.Types[6], spm.Types[7], spm.Types[8] = TypeControl, TypeControl, TypeByte, TypeByte
	add := func(v *Vocab, text string) {
		// A seed is a vocabulary New takes, or it tests nothing.
		if _, err := New(unpackVocab(packVocab(v))); err != nil {
			f.Fatalf("seed vocabulary (%s %q): %v", v.Model, v.Pre, err)
		}
		f.Add(packVocab(v), text)
	}
	add(spm, "hello the world\n")
	for i, pre := range pres {
		bpe := &Vocab{Model: ModelBPE, Pre: pre, Tokens: words, Merges: []string{"a b", "h e", "Ġ the", "l lo"}, BOS: 5, EOS: 6, UNK: NoToken, EOT: NoToken, EOM: NoToken, PAD: NoToken}
		if i%3 == 0 {
			bpe.Model = ModelGemma4
		}
		add(bpe, "Hello, the world 123 ab\t!")
	}
	real, _, _ := loadVocab(f, "llama-spm")
	head := &Vocab{Model: ModelSPM, Tokens: real.tokens[:400], Scores: real.scores[:400], BOS: 1, EOS: 2, UNK: 0, EOT: NoToken, EOM: NoToken, PAD: NoToken, AddSpacePrefix: true}
	add(head, "A man walks into a bar")
	wpm := &Vocab{Model: ModelWPM, Tokens: append(slices.Clone(words), "[UNK]", "[CLS]", "[SEP]", "▁,", "▁hel", "lo", "é", "<user>"),
		BOS: 17, SEP: 18, UNK: 16, EOS: NoToken, EOT: NoToken, EOM: NoToken, PAD: NoToken, AddBOS: true, AddSEP: true}
	wpm.Types = slices.Repeat([]TokenType{TypeNormal}, len(wpm.Tokens))
	wpm.Types[16], wpm.Types[17], wpm.Types[18], wpm.Types[23] = TypeUnknown, TypeControl, TypeControl, TypeUserDefined
	add(wpm, "Hello, the wörld [CLS] <user>ab\t!")
	wpm.KeepCase, wpm.UNK = true, NoToken
	add(wpm, "HELLO hello [SEP]")
	bert, _, _ := loadVocab(f, "bert-bge")
	bertHead := &Vocab{Model: ModelWPM, Tokens: bert.tokens[:512], BOS: 101, SEP: 102, UNK: 100, EOS: NoToken, EOT: NoToken, EOM: NoToken, PAD: 0}
	add(bertHead, "a man walks into a bar, [CLS]")
	f.Fuzz(func(t *testing.T, packed []byte, text string) {
		v := unpackVocab(packed)
		tk, err := New(v)
		if err != nil {
			return
		}
		for _, special := range []bool{false, true} {
			opt := EncodeOptions{AddSpecial: special, ParseSpecial: special}
			ids := tk.Encode(text, opt)
			for _, id := range ids {
				if id >= uint32(tk.NumTokens()) {
					t.Fatalf("id %d of %d tokens", id, tk.NumTokens())
				}
			}
			if tk.kind == kindWPM {
				if lo := tk.MinTokens(text, opt); lo > len(ids) {
					t.Fatalf("MinTokens(%q) = %d, above Encode's %d ids", text, lo, len(ids))
				}
				limit := len(ids) / 2
				if got, complete := tk.EncodeLimit(text, opt, limit); complete && !equalIDs(got, ids) ||
					!complete && (len(got) <= limit || len(got) > len(ids) || !equalIDs(got, ids[:len(got)])) {
					t.Fatalf("EncodeLimit(%q, %d): %v, complete %v; Encode %v", text, limit, got, complete, ids)
				}
			}
			got, err := tk.Decode(ids, DecodeOptions{})
			if err != nil {
				t.Fatalf("Decode of Encode's ids: %v", err)
			}
			if s := streamAll(t, tk, ids, DecodeOptions{}); s != validUTF8([]byte(got)) {
				t.Fatalf("stream %q, Decode %q", s, got)
			}
		}
	})
}

// fuzzModels are the vocabulary kinds packVocab numbers.
var fuzzModels = []string{ModelSPM, ModelBPE, ModelGemma4, ModelWPM}

// packVocab writes v for FuzzVocab: a byte for the model, the
// pre-tokenizer, the special ids (BOS, EOS, UNK, SEP) and flags, then the
// tokens (each with its type byte) and the merges, each ended by a zero
// byte, the two lists parted by an empty entry (a token's type byte has
// its top bit set, so that no entry is empty).
func packVocab(v *Vocab) []byte {
	b := []byte{byte(slices.Index(fuzzModels, v.Model))}
	b = append(b, v.Pre...)
	b = append(b, 0)
	for _, id := range []uint32{v.BOS, v.EOS, v.UNK, v.SEP} {
		b = append(b, byte(min(id, 255)))
	}
	b = append(b, flagBits(v.AddBOS, v.AddEOS, v.AddSpacePrefix, v.AddSEP, v.KeepCase, v.KeepAccents))
	for i, tok := range v.Tokens {
		typ := TypeNormal
		if v.Types != nil {
			typ = v.Types[i]
		}
		b = append(b, 0x80|byte(typ)) // never 0, which ends the lists
		b = append(b, tok...)
		b = append(b, 0)
	}
	b = append(b, 0)
	for _, m := range v.Merges {
		b = append(b, m...)
		b = append(b, 0)
	}
	return b
}

func flagBits(fs ...bool) byte {
	var b byte
	for i, f := range fs {
		if f {
			b |= 1 << i
		}
	}
	return b
}

// unpackVocab reads what packVocab writes, taking any bytes: at most 512
// tokens and 512 merges, ids 255 meaning none.
func unpackVocab(b []byte) *Vocab {
	v := &Vocab{EOT: NoToken, EOM: NoToken, PAD: NoToken}
	if len(b) == 0 {
		return v
	}
	v.Model = fuzzModels[int(b[0])%len(fuzzModels)]
	pre, rest, _ := bytes.Cut(b[1:], []byte{0})
	v.Pre = string(pre)
	if len(rest) < 5 {
		return v
	}
	id := func(x byte) uint32 {
		if x == 255 {
			return NoToken
		}
		return uint32(x)
	}
	v.BOS, v.EOS, v.UNK, v.SEP = id(rest[0]), id(rest[1]), id(rest[2]), id(rest[3])
	fl := rest[4]
	v.AddBOS, v.AddEOS, v.AddSpacePrefix = fl&1 != 0, fl&2 != 0, fl&4 != 0
	v.AddSEP, v.KeepCase, v.KeepAccents = fl&8 != 0, fl&16 != 0, fl&32 != 0
	toks, merges, _ := bytes.Cut(rest[5:], []byte{0, 0})
	for _, e := range bytes.Split(toks, []byte{0}) {
		if len(v.Tokens) == 512 || len(e) == 0 {
			break
		}
		v.Types = append(v.Types, TokenType(e[0]&0x7f%7))
		v.Tokens = append(v.Tokens, string(e[1:]))
	}
	for _, m := range strings.Split(string(merges), "\x00") {
		if len(v.Merges) == 512 {
			break
		}
		if m != "" {
			v.Merges = append(v.Merges, m)
		}
	}
	return v
}
