package node

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/tokenizer"
)

// testVocabFile is one of gguf/tokenizer's vocabulary files (llama.cpp's),
// parsed.
func testVocabFile(t *testing.T, name string) *gguf.File {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "gguf", "tokenizer", "testdata", "ggml-vocab-"+name+".gguf.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// testVocab is testVocabFile's tokenizer.
func testVocab(t *testing.T, name string) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.FromGGUF(testVocabFile(t, name).Metadata)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
