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
// range, and that Decode and the stream agree. The vocabularies are
// written by packVocab (below): small SentencePiece and BPE ones, a BPE
// one for each pre-tokenizer, and the first tokens of a real one.
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
	f.Fuzz(func(t *testing.T, packed []byte, text string) {
		v := unpackVocab(packed)
		tk, err := New(v)
		if err != nil {
			return
		}
		for _, special := range []bool{false, true} {
			ids := tk.Encode(text, EncodeOptions{AddSpecial: special, ParseSpecial: special})
			for _, id := range ids {
				if id >= uint32(tk.NumTokens()) {
					t.Fatalf("id %d of %d tokens", id, tk.NumTokens())
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

// packVocab writes v for FuzzVocab: a byte for the model, the
// pre-tokenizer, the special ids and flags, then the tokens (each with
// its type byte) and the merges, each ended by a zero byte, the two lists
// parted by an empty entry (a token's type byte has its top bit set, so
// that no entry is empty).
func packVocab(v *Vocab) []byte {
	models := []string{ModelSPM, ModelBPE, ModelGemma4}
	b := []byte{byte(slices.Index(models, v.Model))}
	b = append(b, v.Pre...)
	b = append(b, 0)
	for _, id := range []uint32{v.BOS, v.EOS, v.UNK} {
		b = append(b, byte(min(id, 255)))
	}
	b = append(b, flagBits(v.AddBOS, v.AddEOS, v.AddSpacePrefix))
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
	v.Model = []string{ModelSPM, ModelBPE, ModelGemma4}[int(b[0])%3]
	pre, rest, _ := bytes.Cut(b[1:], []byte{0})
	v.Pre = string(pre)
	if len(rest) < 4 {
		return v
	}
	id := func(x byte) uint32 {
		if x == 255 {
			return NoToken
		}
		return uint32(x)
	}
	v.BOS, v.EOS, v.UNK = id(rest[0]), id(rest[1]), id(rest[2])
	v.AddBOS, v.AddEOS, v.AddSpacePrefix = rest[3]&1 != 0, rest[3]&2 != 0, rest[3]&4 != 0
	toks, merges, _ := bytes.Cut(rest[4:], []byte{0, 0})
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
