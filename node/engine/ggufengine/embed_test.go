package ggufengine

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf"
)

// TestEmbeddingPooling: the pooling type comes from <arch>.pooling_type,
// mean when the file names none; none, rank, an unknown type and an
// encoder's bidirectional attention are refused, saying which.
func TestEmbeddingPooling(t *testing.T) {
	for _, tt := range []struct {
		name  string
		kvs   map[string]any
		want  Pooling
		inErr string
	}{
		{"absent", nil, PoolingMean, ""},
		{"mean", map[string]any{"qwen3.pooling_type": uint32(1)}, PoolingMean, ""},
		{"cls", map[string]any{"qwen3.pooling_type": uint32(2)}, PoolingCLS, ""},
		{"last", map[string]any{"qwen3.pooling_type": uint32(3)}, PoolingLast, ""},
		{"last, int32", map[string]any{"qwen3.pooling_type": int32(3)}, PoolingLast, ""},
		{"causal true", map[string]any{"qwen3.attention.causal": true}, PoolingMean, ""},
		{"none", map[string]any{"qwen3.pooling_type": uint32(0)}, 0, "pooling type is none"},
		{"rank", map[string]any{"qwen3.pooling_type": uint32(4)}, 0, "reranker"},
		{"unknown", map[string]any{"qwen3.pooling_type": uint32(9)}, 0, "pooling type 9"},
		{"encoder", map[string]any{"qwen3.attention.causal": false}, 0, "attention.causal is false"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kvs := []gguf.KV{{Key: "general.architecture", Value: mustValue(t, "qwen3")}}
			for k, v := range tt.kvs {
				kvs = append(kvs, gguf.KV{Key: k, Value: mustValue(t, v)})
			}
			md, err := gguf.NewMetadata(kvs)
			if err != nil {
				t.Fatal(err)
			}
			p, err := embeddingPooling(md)
			if tt.inErr == "" {
				if err != nil || p != tt.want {
					t.Fatalf("pooling %v, %v; want %v", p, err, tt.want)
				}
				return
			}
			if !errors.Is(err, ErrNoEmbeddings) || !strings.Contains(err.Error(), tt.inErr) {
				t.Fatalf("error %v, want ErrNoEmbeddings saying %q", err, tt.inErr)
			}
		})
	}
}

func mustValue(t *testing.T, x any) gguf.Value {
	t.Helper()
	v, err := gguf.ValueOf(x)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestPoolHidden: mean, first and last rows, scaled to unit length, and
// as they are where no scaling is asked.
func TestPoolHidden(t *testing.T) {
	hidden := []float32{3, 0, 0, 4, 1, 2} // three rows of two
	for _, tt := range []struct {
		p    Pooling
		want [2]float64
	}{
		{PoolingMean, [2]float64{4.0 / 3, 2}},
		{PoolingCLS, [2]float64{3, 0}},
		{PoolingLast, [2]float64{1, 2}},
	} {
		n := math.Hypot(tt.want[0], tt.want[1])
		got, raw := poolHidden(hidden, 2, tt.p, true), poolHidden(hidden, 2, tt.p, false)
		for j := range 2 {
			if math.Abs(float64(got[j])-tt.want[j]/n) > 1e-7 || math.Abs(float64(raw[j])-tt.want[j]) > 1e-6 {
				t.Fatalf("%v: %v and %v, want %v scaled to %v", tt.p, raw, got, tt.want, []float64{tt.want[0] / n, tt.want[1] / n})
			}
		}
	}
}
