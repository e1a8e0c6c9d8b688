package ggufengine

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/encoder"
	"github.com/meshnode/meshnode/gguf/encoder/encodertest"
	"github.com/meshnode/meshnode/node/engine"
)

// writeEncoder writes an encoder fixture with the given pooling type.
func writeEncoder(t *testing.T, arch string, pooling uint32) string {
	t.Helper()
	b, err := encodertest.Build(encodertest.Spec{Arch: arch, Embd: encodertest.Embd, Layers: encodertest.Layers,
		Heads: encodertest.Heads, FF: encodertest.FF, Context: encodertest.Context, Pooling: pooling})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), arch+".gguf")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestEncoderPools: an encoder's embedding is its hidden states pooled
// as the file says, as llama.cpp pools them (mean; cls, the first
// token's, [CLS]; last), at unit length; a file whose pooling is none or
// rank is refused at load; IsEncoder tells an encoder's file from a
// language model's.
func TestEncoderPools(t *testing.T) {
	ids := []uint32{2, 23, 6, 7, 8, 23, 9, 17, 3}
	for _, tc := range []struct {
		pooling uint32
		want    func(h []float32, e int) []float64
	}{
		{1, func(h []float32, e int) []float64 {
			v := make([]float64, e)
			for i := range len(h) / e {
				for j := range e {
					v[j] += float64(h[i*e+j]) / float64(len(h)/e)
				}
			}
			return v
		}},
		{2, func(h []float32, e int) []float64 { return widen(h[:e]) }},
		{3, func(h []float32, e int) []float64 { return widen(h[len(h)-e:]) }},
	} {
		path := writeEncoder(t, "bert", tc.pooling)
		if ok, err := IsEncoder(path); !ok || err != nil {
			t.Fatalf("IsEncoder: %v, %v", ok, err)
		}
		enc, err := LoadEncoder(path, Config{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		got, err := enc.Embed(context.Background(), [][]uint32{ids})
		if err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		be := cpu.New(cpu.Options{Threads: 1})
		m, err := encoder.Load(f, be)
		if err != nil {
			t.Fatal(err)
		}
		h, err := m.Hidden(context.Background(), ids)
		if err != nil {
			t.Fatal(err)
		}
		want := tc.want(h, encodertest.Embd)
		var norm float64
		for _, x := range want {
			norm += x * x
		}
		for j, x := range want {
			if d := math.Abs(float64(got[0][j]) - x/math.Sqrt(norm)); d > 1e-6 {
				t.Fatalf("pooling %d: component %d is %v, want %v", tc.pooling, j, got[0][j], x/math.Sqrt(norm))
			}
		}
		be.Close()
		f.Close()
		enc.Close()
	}
	for pooling, says := range map[uint32]string{0: "pooling type is none", 4: "rank"} {
		b, err := encodertest.Build(encodertest.Spec{Arch: "bert", Embd: 8, Layers: 1, Heads: 2, FF: 8, Context: 8, Pooling: 1})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "p.gguf")
		gf, err := gguf.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		w, err := gguf.Rewrite(gf, map[string]any{"bert.pooling_type": pooling})
		if err != nil {
			t.Fatal(err)
		}
		out, err := w.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadEncoder(path, Config{}); !errors.Is(err, ErrNoEmbeddings) || !strings.Contains(err.Error(), says) {
			t.Errorf("pooling %d: %v, want ErrNoEmbeddings saying %q", pooling, err, says)
		}
	}
}

// TestEncoderRefusesInputs: an empty input, one past the context (which
// Config.Context may shorten) or a token past the vocabulary is refused
// with engine.ErrRefused before anything runs.
func TestEncoderRefusesInputs(t *testing.T) {
	enc, err := LoadEncoder(writeEncoder(t, "nomic-bert", 0), Config{Context: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	if enc.ContextLength() != 16 || enc.Dimensions() != encodertest.Embd || enc.Pooling() != PoolingMean {
		t.Fatalf("context %d, dimensions %d, pooling %s", enc.ContextLength(), enc.Dimensions(), enc.Pooling())
	}
	for _, tc := range []struct {
		in   []uint32
		says string
	}{
		{nil, "input 1 is empty"},
		{make([]uint32, 17), "17 tokens, more than the model's context of 16"},
		{[]uint32{2, 999, 3}, "token 999 is outside the vocabulary"},
	} {
		if _, err := enc.Embed(context.Background(), [][]uint32{{2, 3}, tc.in}); !errors.Is(err, engine.ErrRefused) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%v: %v, want ErrRefused saying %q", tc.in, err, tc.says)
		}
	}
}

func widen(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}
