package tokenizer

import (
	"strings"
	"testing"
)

// limitOptions are the encodings a server makes: raw text with BOS and
// EOS, chat-template output with special tokens parsed, and neither.
var limitOptions = []EncodeOptions{{}, {AddSpecial: true}, {AddSpecial: true, ParseSpecial: true}}

// limitInputs are llama.cpp's vectors for tk's vocabulary, plus texts
// long enough for a limit to cut: many words, and special tokens between
// them.
func limitInputs(t *testing.T, name string, inp, out []byte) []string {
	var texts []string
	for _, v := range parseVectors(t, inp, out) {
		texts = append(texts, v.text)
	}
	texts = append(texts,
		strings.Repeat("The quick brown fox jumps over the lazy dog. ", 40),
		strings.Repeat("<s>hello </s> world <|im_start|>user\n   spaced\t\tout <|endoftext|>", 20),
	)
	return texts
}

// TestEncodeLimit: EncodeLimit gives exactly Encode's ids when they fit
// the limit, and otherwise gives up with a prefix of them holding more
// than limit ids, on every committed vocabulary and encoding option.
func TestEncodeLimit(t *testing.T) {
	for _, name := range vectorVocabs[:10] {
		t.Run(name, func(t *testing.T) {
			tk, inp, out := loadVocab(t, name)
			for _, opt := range limitOptions {
				for _, text := range limitInputs(t, name, inp, out) {
					full := tk.Encode(text, opt)
					for _, limit := range []int{0, 1, 2, 3, 7, len(full) / 2, len(full) - 1, len(full), len(full) + 5} {
						if limit < 0 {
							continue
						}
						got, complete := tk.EncodeLimit(text, opt, limit)
						switch {
						case complete && !equalIDs(got, full):
							t.Fatalf("%+v limit %d on %.40q: complete with %d ids, Encode gives %d", opt, limit, text, len(got), len(full))
						case !complete && (len(got) <= limit || len(got) > len(full) || !equalIDs(got, full[:len(got)])):
							t.Fatalf("%+v limit %d on %.40q: gave up with %d ids, not a prefix of Encode's %d longer than the limit",
								opt, limit, text, len(got), len(full))
						case !complete && len(full) <= limit:
							t.Fatalf("%+v limit %d on %.40q: gave up, yet Encode gives only %d ids", opt, limit, text, len(full))
						}
					}
				}
			}
		})
	}
}

// TestEncodeLimitStopsEarly: on a text far longer than its limit,
// EncodeLimit stops long before the end where the vocabulary's merges are
// local (BPE: word by word).
func TestEncodeLimitStopsEarly(t *testing.T) {
	tk, _, _ := loadVocab(t, "gpt-2")
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 10_000)
	ids, complete := tk.EncodeLimit(text, EncodeOptions{}, 100)
	if complete || len(ids) > 200 {
		t.Fatalf("EncodeLimit(100) on %d bytes: %d ids, complete %v; want it to stop just past 100", len(text), len(ids), complete)
	}
}

// TestMinTokens: the length bound never exceeds what Encode gives, on every
// committed vocabulary, option and input, including whitespace beside
// tokens that strip it (Phi-3) and invalid UTF-8; and every committed
// vocabulary has a bound, so that a huge text is refused by its length.
func TestMinTokens(t *testing.T) {
	for _, name := range vectorVocabs[:10] {
		t.Run(name, func(t *testing.T) {
			tk, inp, out := loadVocab(t, name)
			if tk.MaxTokenBytes() == 0 {
				t.Fatalf("%s: no length bound", name)
			}
			texts := append(limitInputs(t, name, inp, out),
				strings.Repeat(" ", 300)+"<|endoftext|>"+strings.Repeat("\n", 300)+"</s>"+strings.Repeat("\t", 300),
				"\xff\xfe\xc3(\xe2\x82 invalid \xf4\x90\x80\x80 bytes \xc0\xc1\xf5\xf8\x80\x80\x80",
				strings.Repeat("\xc0\xc1\xf5\xff", 200),
				strings.Repeat("x", 5000),
			)
			for _, opt := range limitOptions {
				for _, text := range texts {
					if lo, n := tk.MinTokens(text, opt), len(tk.Encode(text, opt)); lo > n {
						t.Errorf("%+v on %.40q: MinTokens %d > Encode's %d ids (longest token %d bytes)", opt, text, lo, n, tk.MaxTokenBytes())
					}
				}
			}
			huge := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 4<<20/45)
			if lo := tk.MinTokens(huge, EncodeOptions{AddSpecial: true}); lo < len(huge)/tk.MaxTokenBytes() {
				t.Errorf("MinTokens of %d bytes is %d with a longest token of %d bytes", len(huge), lo, tk.MaxTokenBytes())
			}
		})
	}
}

// TestMinTokensDroppedBytes: bytes a vocabulary drops for want of a token
// count for nothing, so the bound stays below what Encode gives.
func TestMinTokensDroppedBytes(t *testing.T) {
	tk, err := New(&Vocab{Model: ModelSPM, Tokens: []string{"a", "b", "▁"}, BOS: NoToken, EOS: NoToken, EOT: NoToken,
		EOM: NoToken, UNK: NoToken, PAD: NoToken})
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"zzzz", "azzzzzzzzzzzzzzzzb", "ab ab"} {
		if lo, n := tk.MinTokens(text, EncodeOptions{}), len(tk.Encode(text, EncodeOptions{})); lo > n {
			t.Errorf("%q: MinTokens %d > Encode's %d", text, lo, n)
		}
	}
	if lo := tk.MinTokens("aaaaaa", EncodeOptions{}); lo != 2 {
		t.Errorf("MinTokens of six covered bytes with a longest token of 3 bytes: %d, want 2", lo)
	}
}
