package tokenizer

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
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

// Vocabularies with llama.cpp test vectors. The first eight are committed
// (gzipped) under testdata; the rest run where a llama.cpp checkout is.
var vectorVocabs = []string{
	"llama-spm", "phi-3", "gpt-2", "llama-bpe", "qwen2", "starcoder", "deepseek-coder",
	"falcon", "mpt", "refact", "command-r", "deepseek-llm", "qwen35", "gemma-4",
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
