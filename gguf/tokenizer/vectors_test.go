package tokenizer

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/gguf"
)

// llamaModels is where a llama.cpp checkout keeps its vocab-only files and
// their test vectors; vocabularies not committed under testdata are tested
// from there when it exists.
const llamaModels = "/root/.cache/llamacpp-ref/src/models"

// vocabFiles finds ggml-vocab-NAME.gguf (gzipped under testdata, or plain
// in llamaModels) and its .inp/.out vectors.
func vocabFiles(t testing.TB, name string) (model, inp, out []byte) {
	t.Helper()
	base := "ggml-vocab-" + name + ".gguf"
	if gz, err := os.ReadFile(filepath.Join("testdata", base+".gz")); err == nil {
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			t.Fatal(err)
		}
		if model, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
		inp, err = os.ReadFile(filepath.Join("testdata", base+".inp"))
		if err != nil {
			t.Fatal(err)
		}
		out, err = os.ReadFile(filepath.Join("testdata", base+".out"))
		if err != nil {
			t.Fatal(err)
		}
		return model, inp, out
	}
	var err error
	if model, err = os.ReadFile(filepath.Join(llamaModels, base)); err != nil {
		t.Skipf("%s is neither in testdata nor in %s", base, llamaModels)
	}
	if inp, err = os.ReadFile(filepath.Join(llamaModels, base+".inp")); err != nil {
		t.Skipf("no vectors for %s: %v", base, err)
	}
	if out, err = os.ReadFile(filepath.Join(llamaModels, base+".out")); err != nil {
		t.Skipf("no vectors for %s: %v", base, err)
	}
	return model, inp, out
}

// metadataOf is a GGUF file's metadata holding keys, read back through
// the gguf reader.
func metadataOf(t *testing.T, keys map[string]any) *gguf.Metadata {
	t.Helper()
	w := gguf.NewWriter()
	for k, v := range keys {
		if err := w.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	b, err := w.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return f.Metadata
}

// vocabWith is the tokenizer of vocabulary name's file with the metadata
// in set given there (gguf.Rewrite).
func vocabWith(t *testing.T, name string, set map[string]any) *Tokenizer {
	t.Helper()
	model, _, _ := vocabFiles(t, name)
	f, err := gguf.Parse(model)
	if err != nil {
		t.Fatal(err)
	}
	w, err := gguf.Rewrite(f, set)
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	g, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := FromGGUF(g.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

var loaded sync.Map // name → *loadedVocab

type loadedVocab struct {
	tk       *Tokenizer
	inp, out []byte
}

// loadVocab parses a vocab-only GGUF through the gguf reader (once per
// test binary).
func loadVocab(t testing.TB, name string) (*Tokenizer, []byte, []byte) {
	t.Helper()
	if v, ok := loaded.Load(name); ok {
		lv := v.(*loadedVocab)
		return lv.tk, lv.inp, lv.out
	}
	model, inp, out := vocabFiles(t, name)
	f, err := gguf.Parse(model)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	tk, err := FromGGUF(f.Metadata)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	loaded.Store(name, &loadedVocab{tk, inp, out})
	return tk, inp, out
}

type vector struct {
	text string
	ids  []uint32
}

// parseVectors reads llama.cpp's test format: inputs separated by
// "\n__ggml_vocab_test__\n", one line of space-separated ids per input.
func parseVectors(t testing.TB, inp, out []byte) []vector {
	t.Helper()
	const sep = "\n__ggml_vocab_test__\n"
	raw := string(inp)
	var texts []string
	for pos := 0; pos < len(raw); {
		next := strings.Index(raw[pos:], sep)
		if next < 0 {
			texts = append(texts, raw[pos:])
			break
		}
		texts = append(texts, raw[pos:pos+next])
		pos += next + len(sep)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(texts) {
		t.Fatalf("%d inputs but %d outputs", len(texts), len(lines))
	}
	var vs []vector
	for i, line := range lines {
		v := vector{text: texts[i]}
		for _, f := range strings.Fields(line) {
			id, err := strconv.ParseUint(f, 10, 32)
			if err != nil {
				t.Fatalf("output line %d: %v", i+1, err)
			}
			v.ids = append(v.ids, uint32(id))
		}
		vs = append(vs, v)
	}
	return vs
}

// Vocabularies with llama.cpp test vectors. The first ten are committed
// (gzipped) under testdata; the rest run where a llama.cpp checkout is.
// nomic-bert-moe's vectors (XLM-R's Unigram) are not llama.cpp's: they
// are llama.cpp's output on its other vocabularies' inputs and some more
// (testdata/README.md).
var vectorVocabs = []string{
	"llama-spm", "phi-3", "gpt-2", "llama-bpe", "qwen2", "starcoder", "deepseek-coder",
	"falcon", "bert-bge", "nomic-bert-moe", "mpt", "refact", "command-r", "deepseek-llm", "qwen35", "gemma-4",
}

// TestLlamaVectors runs llama.cpp's test-tokenizer-0 vectors: encode
// without special tokens and without parsing them, compare ids exactly.
func TestLlamaVectors(t *testing.T) {
	for _, name := range vectorVocabs {
		t.Run(name, func(t *testing.T) {
			tk, inp, out := loadVocab(t, name)
			vs := parseVectors(t, inp, out)
			pass := 0
			for _, v := range vs {
				got := tk.Encode(v.text, EncodeOptions{})
				if !equalIDs(got, v.ids) {
					t.Errorf("Encode(%q)\n got %v\nwant %v", v.text, got, v.ids)
					continue
				}
				pass++
			}
			t.Logf("%s: %d/%d vectors exact", name, pass, len(vs))
		})
	}
}

func equalIDs(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestFIM: the fill-in-the-middle tokens are the file's where it names
// them, else found by their texts (llama.cpp's lists, in order): on
// DeepSeek-Coder's and StarCoder's vocabularies the ids llama-tokenize
// reads for their FIM texts; none on Llama's. A file's ids win over the
// texts.
func TestFIM(t *testing.T) {
	for name, want := range map[string][3]uint32{
		"deepseek-coder": {32016, 32015, 32017},
		"starcoder":      {1, 3, 2},
	} {
		tk, _, _ := loadVocab(t, name)
		pre, suf, mid, ok := tk.FIM()
		if !ok || [3]uint32{pre, suf, mid} != want {
			t.Errorf("%s: %d %d %d %v, want %v", name, pre, suf, mid, ok, want)
		}
	}
	if tk, _, _ := loadVocab(t, "llama-spm"); func() bool { _, _, _, ok := tk.FIM(); return ok }() {
		t.Error("llama-spm has FIM tokens")
	}
	v := &Vocab{Model: ModelSPM, Tokens: []string{"a", "<PRE>", "<SUF>", "<MID>", "x", "y", "z"}, BOS: NoToken, EOS: NoToken, EOT: NoToken, EOM: NoToken, UNK: NoToken, PAD: NoToken,
		FIMPre: 4, FIMSuf: 5, FIMMid: 6}
	tk, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	if pre, suf, mid, ok := tk.FIM(); !ok || pre != 4 || suf != 5 || mid != 6 {
		t.Errorf("the file's ids: %d %d %d %v", pre, suf, mid, ok)
	}
	v.FIMPre, v.FIMSuf, v.FIMMid = NoToken, NoToken, NoToken
	if tk, err = New(v); err != nil {
		t.Fatal(err)
	}
	if pre, suf, mid, ok := tk.FIM(); !ok || pre != 1 || suf != 2 || mid != 3 {
		t.Errorf("by their texts: %d %d %d %v", pre, suf, mid, ok)
	}
}

// TestFIMFromGGUF: the FIM ids a file names (llama.cpp's keys, and
// CodeLlama's older ones where the newer are absent) are the
// tokenizer's, over the ones its texts would give.
func TestFIMFromGGUF(t *testing.T) {
	for _, tc := range []struct {
		keys map[string]any
		want [3]uint32
	}{
		{map[string]any{"tokenizer.ggml.fim_pre_token_id": uint32(10), "tokenizer.ggml.fim_suf_token_id": uint32(11), "tokenizer.ggml.fim_mid_token_id": uint32(12)}, [3]uint32{10, 11, 12}},
		{map[string]any{"tokenizer.ggml.prefix_token_id": uint32(20), "tokenizer.ggml.suffix_token_id": uint32(21), "tokenizer.ggml.middle_token_id": uint32(22)}, [3]uint32{20, 21, 22}},
		{map[string]any{"tokenizer.ggml.fim_pre_token_id": uint32(10), "tokenizer.ggml.prefix_token_id": uint32(20)}, [3]uint32{10, 3, 2}},
	} {
		pre, suf, mid, ok := vocabWith(t, "starcoder", tc.keys).FIM()
		if !ok || [3]uint32{pre, suf, mid} != tc.want {
			t.Errorf("%v: %d %d %d %v, want %v", tc.keys, pre, suf, mid, ok, tc.want)
		}
	}
}

// TestSpecials: Encode with AddSpecial is Specials' before, the text's
// ids without them, and Specials' after, on every kind of vocabulary
// (WPM's [CLS] … [SEP], UGM's <s> … </s>, SPM's BOS, BPE's BOS where the
// file adds it), for each of llama.cpp's test inputs.
func TestSpecials(t *testing.T) {
	for _, name := range []string{"bert-bge", "nomic-bert-moe", "llama-spm", "llama-bpe", "gpt-2", "phi-3"} {
		tk, inp, _ := loadVocab(t, name)
		before, after := tk.Specials()
		for text := range strings.SplitSeq(string(inp), "\n__ggml_vocab_test__\n") {
			with := tk.Encode(text, EncodeOptions{AddSpecial: true})
			without := tk.Encode(text, EncodeOptions{})
			want := slices.Concat(before, without, after)
			if !slices.Equal(with, want) {
				t.Fatalf("%s %q: %v with its specials, %v around %v without", name, text, with, before, after)
			}
		}
		t.Logf("%s: %v … %v", name, before, after)
	}
}
