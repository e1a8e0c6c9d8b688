package model_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
)

// TestGemma4KV: on the gemma4 parity fixture (SWA layers of 2 KV heads of
// 64, full layers of 1 of 128, the last two sharing the first two's KV),
// each block attends over the right cache, and the cache holds the first
// two blocks only, at their own sizes.
func TestGemma4KV(t *testing.T) {
	file := fixtureBytes(t, "gemma4", "Q8_0")
	f, err := gguf.Parse(file)
	if err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	m, err := model.Load(f, be)
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config()
	var src, elems []int
	for l := range c.Layers {
		src, elems = append(src, c.KVSource(l)), append(elems, c.LayerKVElems(l))
	}
	if !slices.Equal(src, []int{0, 1, 0, 1}) || !slices.Equal(elems, []int{2 * 128, 1 * 256, 0, 0}) {
		t.Fatalf("KV sources %v, floats per position %v; want [0 1 0 1], [256 256 0 0]", src, elems)
	}
	if got, want := m.KVBytes(64, model.KVF16), int64(64*2*(256+256)); got != want {
		t.Errorf("KVBytes(64, f16) = %d, want %d", got, want)
	}
}

// TestGemma4ConfigErrors: gemma4 files whose Gemma 4 keys contradict
// themselves are refused by name.
func TestGemma4ConfigErrors(t *testing.T) {
	file := fixtureBytes(t, "gemma4", "Q8_0")
	for _, tc := range []struct {
		name string
		meta map[string]any
		want error
	}{
		{"three of four layers share KV", map[string]any{"gemma4.attention.shared_kv_layers": uint32(3)}, model.ErrInvalid},
		{"no SWA head size", map[string]any{"gemma4.attention.key_length_swa": nil}, model.ErrInvalid},
		{"no per-layer width", map[string]any{"gemma4.embedding_length_per_layer_input": nil}, model.ErrInvalid},
		{"SWA flags for 3 layers", map[string]any{"gemma4.attention.sliding_window_pattern": []bool{true, false, true}}, model.ErrInvalid},
		{"KV heads not dividing the heads", map[string]any{"gemma4.attention.head_count_kv": []uint32{2, 3, 2, 1}}, model.ErrInvalid},
		{"no sliding window", map[string]any{"gemma4.attention.sliding_window": nil}, model.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := gguf.Parse(rewrite(t, file, tc.meta, nil, nil))
			if err != nil {
				t.Fatal(err)
			}
			_, err = model.ParseConfig(f.Metadata)
			if !errors.Is(err, tc.want) {
				t.Fatalf("ParseConfig: %v, want %v", err, tc.want)
			}
			t.Log(err)
		})
	}
}
