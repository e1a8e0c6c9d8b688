package encoder

import (
	"flag"
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
	for _, arch := range []string{"bert", "nomic-bert"} {
		if err := os.WriteFile(filepath.Join(*writeFixtures, arch+".gguf"), mustFixture(t, arch), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := encodertest.Reranker()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*writeFixtures, "bert-reranker.gguf"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
