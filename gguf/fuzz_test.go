package gguf

import (
	"bytes"
	"testing"

	"github.com/meshnode/meshnode/gguf/quant"
)

// rewrite parses b and writes what it read back out with the Writer.
func rewrite(t *testing.T, f *File) []byte {
	t.Helper()
	w := NewWriter()
	w.Version = f.Version
	for k, v := range f.Metadata.All() {
		if err := w.Set(k, v); err != nil {
			t.Fatalf("re-setting %q = %v: %v", k, v, err)
		}
	}
	for _, ti := range f.Tensors {
		d, err := f.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.AddTensor(ti.Name, ti.Type, ti.Dims, d); err != nil {
			t.Fatalf("re-adding tensor %q: %v", ti.Name, err)
		}
	}
	b, err := w.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzParse feeds the reader arbitrary bytes, seeded from Writer output.
// Whatever parses must be readable in full and survive a write/parse round
// trip unchanged.
func FuzzParse(f *testing.F) {
	f.Add(sampleFile(f))
	w := NewWriter()
	w.Set(KeyAlignment, uint32(64))
	w.Set("general.architecture", "llama")
	w.AddTensor("q4k", quant.Q4_K, []int64{256, 2}, make([]byte, 288))
	w.AddTensor("empty", quant.F32, []int64{0, 7}, nil)
	b, _ := w.Bytes()
	f.Add(b)
	f.Add([]byte(rawHeader(2, 0, 0)))
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse(b)
		if err != nil {
			return
		}
		for _, ti := range file.Tensors {
			d, err := file.TensorData(ti)
			if err != nil || uint64(len(d)) != ti.Size {
				t.Fatalf("tensor %q: %d bytes, %v", ti.Name, len(d), err)
			}
		}
		once := rewrite(t, file)
		again, err := Parse(once)
		if err != nil {
			t.Fatalf("rewritten file does not parse: %v", err)
		}
		if twice := rewrite(t, again); !bytes.Equal(once, twice) {
			t.Fatal("write(parse(write(parse(b)))) != write(parse(b))")
		}
		_ = file.Facts() // must not panic on any parsed file
	})
}
