package modeltest

import (
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/model"
)

// Load opens the GGUF file at path and loads its model on be, failing tb
// on either error; the file is closed when tb ends (after the test's own
// deferred calls, so after a backend they close).
func Load(tb testing.TB, path string, be backend.Backend) (*gguf.File, *model.Model) {
	tb.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	m, err := model.Load(f, be)
	if err != nil {
		tb.Fatal(err)
	}
	return f, m
}
