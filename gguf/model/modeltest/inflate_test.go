package modeltest_test

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/quant"
)

// inflateTolerance bounds an inflated model's logits' difference from
// the model's: the same products on the same blocks, but RMSNorm's mean
// is taken over a wider stream and its scaled weights round differently.
// The built-in model's logits span about 30; measured, they differ by
// less than 1e-6 (its weights' norms scaled 1% off differ by more than
// 0.05).
const inflateTolerance = 1e-3

// TestInflate: the built-in model inflated (more heads, KV heads,
// feed-forward units and blocks) has the shape asked for and computes
// the same function: its logits are the model's within inflateTolerance
// along a greedy generation, whose tokens are the model's. A shape that
// regroups the heads is refused.
func TestInflate(t *testing.T) {
	src := filepath.Join("..", "..", "..", "models", "meshnode-fortunes-q8_0.gguf")
	dst := filepath.Join(t.TempDir(), "inflated.gguf")
	sh := modeltest.InflateShape{Heads: 6, KVHeads: 3, FF: 1024, Layers: 6}
	if err := modeltest.Inflate(src, dst, quant.Q8_0, sh, 1); err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	load := func(path string) *model.Model {
		_, m := modeltest.Load(t, path, be)
		return m
	}
	ref, big := load(src), load(dst)
	if c := big.Config(); c.Embd != 6*48 || c.Heads != 6 || c.KVHeads != 3 || c.FF != 1024 || c.Layers != 6 {
		t.Fatalf("inflated to %+v", c)
	}
	refs, err := modeltest.ReadGreedyReference(filepath.Join("..", "..", "..", "models", "reference-greedy.txt"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range refs {
		rs, err := ref.NewSession(model.SessionOptions{Context: 128})
		if err != nil {
			t.Fatal(err)
		}
		bs, err := big.NewSession(model.SessionOptions{Context: 128})
		if err != nil {
			t.Fatal(err)
		}
		in := c.Prompt
		var got, want []uint32
		for range 16 {
			a, err := rs.Eval(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			b, err := bs.Eval(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			var worst float64
			for i := range a {
				worst = max(worst, math.Abs(float64(a[i]-b[i])))
			}
			if worst > inflateTolerance {
				t.Fatalf("prompt %v, after %v: logits differ by %.4f (tolerance %v)", c.Prompt, want, worst, inflateTolerance)
			}
			wa, wb := uint32(backend.ArgMax(a)), uint32(backend.ArgMax(b))
			want, got = append(want, wa), append(got, wb)
			in = []uint32{wa}
		}
		rs.Close()
		bs.Close()
		if !slices.Equal(got, want) {
			t.Errorf("prompt %v: inflated %v, model %v", c.Prompt, got, want)
		}
	}

	bad := modeltest.InflateShape{Heads: 8, KVHeads: 8, FF: 1024, Layers: 6}
	if err := modeltest.Inflate(src, filepath.Join(t.TempDir(), "bad.gguf"), quant.Q8_0, bad, 1); err == nil || !strings.Contains(err.Error(), "grouping") {
		t.Errorf("a shape that regroups the heads: %v", err)
	}
}
