package encoder

import (
	"bytes"
	"compress/gzip"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/encoder/encodertest"
)

// writeFixtures writes the fixture encoders to a directory, for
// llama.cpp's llama-embedding to make the goldens from (testdata/README.md).
var writeFixtures = flag.String("write-fixtures", "", "write the fixture encoders' GGUF files into this directory")

// mustFixture is encodertest.Fixture, failing t on an error.
func mustFixture(t testing.TB, arch string) []byte {
	t.Helper()
	b, err := encodertest.Fixture(arch)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// openFixture writes arch's fixture to a temporary file and opens it.
func openFixture(t testing.TB, arch string) *gguf.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), arch+".gguf")
	if err := os.WriteFile(path, mustFixture(t, arch), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestWriteFixtures writes the fixtures where -write-fixtures names.
func TestWriteFixtures(t *testing.T) {
	if *writeFixtures == "" {
		t.Skip("-write-fixtures names no directory")
	}
	for _, arch := range []string{"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v3"} {
		if err := os.WriteFile(filepath.Join(*writeFixtures, arch+".gguf"), mustFixture(t, arch), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, build := range map[string]func() ([]byte, error){
		"bert-reranker": encodertest.Reranker, "jina": encodertest.Jina, "jina-reranker": encodertest.JinaReranker,
	} {
		b, err := build()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(*writeFixtures, name+".gguf"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(*writeFixtures, "xlmr.gguf"), xlmrFixture(t), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, dense := range map[string]bool{"gemma-embedding": false, "gemma-embedding-dense": true} {
		b, err := encodertest.Gemma(dense)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(*writeFixtures, name+".gguf"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, reranker := range map[string]bool{"modern-bert": false, "modern-bert-reranker": true} {
		if err := os.WriteFile(filepath.Join(*writeFixtures, name+".gguf"), modernFixture(t, reranker), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// xlmrFixture is a bge-m3-shaped fixture: the bert fixture's shape with
// an XLM-RoBERTa vocabulary (SentencePiece Unigram, 250k tokens:
// gguf/tokenizer's testdata copy of llama.cpp's nomic-bert-moe vocabulary)
// and one token type.
func xlmrFixture(t testing.TB) []byte {
	t.Helper()
	b, err := encodertest.Build(encodertest.Spec{Arch: "bert", Embd: encodertest.Embd, Layers: encodertest.Layers,
		Heads: encodertest.Heads, FF: encodertest.FF, Context: encodertest.Context, Tokenizer: vocabFile(t, "nomic-bert-moe").Metadata})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// modernFixture is encodertest.Modern with GPT-2's vocabulary.
func modernFixture(t testing.TB, reranker bool) []byte {
	t.Helper()
	b, err := encodertest.Modern(vocabFile(t, "gpt-2"), reranker)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// vocabFile is one of gguf/tokenizer's testdata vocabularies (llama.cpp's
// ggml-vocab-NAME.gguf, gzipped), parsed.
func vocabFile(t testing.TB, name string) *gguf.File {
	t.Helper()
	gz, err := os.ReadFile(filepath.Join("..", "tokenizer", "testdata", "ggml-vocab-"+name+".gguf.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
