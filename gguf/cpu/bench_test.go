package cpu_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/quant"
	"github.com/meshnode/meshnode/gguf/sample"
)

// BenchmarkMatMul measures the threaded matrix product on a 2048 × 2048
// weight, for one token (decode) and a batch of 32 (prefill), against one
// thread of quant.MatVec over the same rows in the same run: speedup is
// what the worker pool adds (ideally the thread count), times what
// quant.MatMul's tile kernels add for a batch and its one-row kernels for
// a token.
func BenchmarkMatMul(b *testing.B) {
	const rows, cols = 2048, 2048
	rng := rand.New(rand.NewPCG(1, 1))
	w := normals(rng, rows*cols, 0.02)
	be := newBackend(b, 0)
	for _, typ := range []quant.Type{quant.F16, quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q6_K} {
		data := quantized(b, typ, w)
		wt, err := be.Weight(typ, rows, cols, data)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/n=%d", typ, n), func(b *testing.B) {
				x := tensor(be, n, cols, normals(rng, n*cols, 1))
				dst := be.NewTensor(n, rows)
				single := singleThread(b, typ, data, read(be, x), n, rows, cols)
				b.SetBytes(int64(len(data)))
				b.ReportAllocs()
				for b.Loop() {
					be.MatMul(dst, wt, x)
				}
				per := b.Elapsed() / time.Duration(b.N)
				b.ReportMetric(float64(len(data))/per.Seconds()/1e9, "GB/s")
				b.ReportMetric(float64(single)/float64(per), "speedup")
			})
		}
	}
}

// singleThread times quant.MatVec over every row for each of n inputs.
func singleThread(b *testing.B, typ quant.Type, data []byte, x []float32, n, rows, cols int) time.Duration {
	a, err := quant.NewActivation(typ, cols)
	if err != nil {
		b.Fatal(err)
	}
	out := make([]float32, rows)
	best := time.Duration(1 << 62)
	for range 3 {
		start := time.Now()
		for i := range n {
			if err := a.Quantize(x[i*cols : (i+1)*cols]); err != nil {
				b.Fatal(err)
			}
			quant.MatVec(typ, data, a, out)
		}
		best = min(best, time.Since(start))
	}
	return best
}

// BenchmarkSmallMatMul times the products of small models (the built-in
// model's and its draft's shapes, one to eight activation rows) on two
// threads as MatMul chooses (matmulChunk: alone below its threshold) and handed to
// the workers whatever their size, in the same run: x_workers is the
// workers' time over the choice's (above 1: the choice is faster).
func BenchmarkSmallMatMul(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	be := newBackend(b, 2)
	for _, sh := range [][2]int{{64, 64}, {96, 192}, {192, 192}, {512, 192}, {192, 512}, {1024, 192}, {2048, 192}} {
		rows, cols := sh[0], sh[1]
		w := normals(rng, rows*cols, 0.02)
		for _, typ := range []quant.Type{quant.F16, quant.Q8_0} {
			wt, err := be.Weight(typ, rows, cols, quantized(b, typ, w))
			if err != nil {
				b.Fatal(err)
			}
			for _, n := range []int{1, 2, 3, 5, 8} {
				b.Run(fmt.Sprintf("%s/%dx%d/n=%d", typ, rows, cols, n), func(b *testing.B) {
					x := tensor(be, n, cols, normals(rng, n*cols, 1))
					dst := be.NewTensor(n, rows)
					op := func() { be.MatMul(dst, wt, x) }
					ratio := splitOverChosen(op, cpu.SetParallelProduct)
					for b.Loop() {
						op()
					}
					b.ReportMetric(ratio, "x_workers")
				})
			}
		}
	}
}

// BenchmarkGLU times the built-in model's SwiGLU gate (512 units a row)
// for one to eight rows on two threads as GLU chooses (alone below
// parallelElems' weighted measure) against split between the workers
// whatever its size, in the same run: x_split is the split's time over
// the choice's (above 1: the choice is faster).
func BenchmarkGLU(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	be := newBackend(b, 2)
	for _, n := range []int{1, 2, 3, 4, 5, 8} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			g, u := tensor(be, n, 512, normals(rng, n*512, 1)), tensor(be, n, 512, normals(rng, n*512, 1))
			dst := be.NewTensor(n, 512)
			op := func() { be.GLU(dst, g, u, backend.SiLU) }
			ratio := splitOverChosen(op, cpu.SetParallelElems)
			for b.Loop() {
				op()
			}
			b.ReportMetric(ratio, "x_split")
		})
	}
}

// splitOverChosen times op as the backend chooses and with set(0) (every
// call handed to the workers, whatever its size), each side's best of five
// alternating rounds of 200 calls, and returns the second's time over the
// first's: above 1, the choice is faster.
func splitOverChosen(op func(), set func(int) int) float64 {
	var chosen, split time.Duration = 1 << 62, 1 << 62
	round := func() time.Duration {
		start := time.Now()
		for range 200 {
			op()
		}
		return time.Since(start) / 200
	}
	for range 5 {
		chosen = min(chosen, round())
		old := set(0)
		split = min(split, round())
		set(old)
	}
	return float64(split) / float64(chosen)
}

// BenchmarkPackedModels times whole models on a backend that packs the
// rows of weights that stay in cache (weight.packed) against one that
// repacks them at every product (SetPack(false)), in the same run: the
// built-in model (models/, Q8_0) decoding 64 tokens after a reference
// prompt greedily (the engine's batched step and its pick from the head's
// shadow) and sampled (temperature 0.7, which takes every logit), and the
// trained draft ($MESHNODE_MODELS/meshnode-fortunes-draft-q8_0.gguf)
// taking 64 one-token steps with their logits, as it drafts. t_ms is the
// packed decode's time, x_packed the repacked one's over it; the least
// wall time of six alternating rounds each, prefill excluded.
func BenchmarkPackedModels(b *testing.B) {
	ctx := context.Background()
	refs, err := modeltest.ReadGreedyReference(filepath.Join("..", "..", "models", "reference-greedy.txt"))
	if err != nil || len(refs) == 0 {
		b.Fatalf("reference prompts: %d, %v", len(refs), err)
	}
	prompt := refs[0].Prompt
	builtin := filepath.Join("..", "..", "models", "meshnode-fortunes-q8_0.gguf")
	draft := filepath.Join(os.Getenv("MESHNODE_MODELS"), "meshnode-fortunes-draft-q8_0.gguf")
	load := func(b *testing.B, path string, pack bool) *model.Model {
		defer cpu.SetPack(pack)()
		be := newBackend(b, 0)
		f, err := gguf.Open(path)
		if err != nil {
			b.Skipf("%s: %v (the draft is in ../shared/models: set MESHNODE_MODELS)", path, err)
		}
		b.Cleanup(func() { f.Close() })
		m, err := model.Load(f, be)
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	// decode returns a function that decodes 64 tokens on m after the
	// prompt and returns their time.
	decode := func(b *testing.B, m *model.Model, p sample.Params, steps bool) func() time.Duration {
		s, err := m.NewSession(model.SessionOptions{Context: 256})
		if err != nil {
			b.Fatal(err)
		}
		bt, err := m.NewBatch(model.BatchOptions{Tokens: 1, Seqs: 1})
		if err != nil {
			b.Fatal(err)
		}
		return func() time.Duration {
			s.Truncate(0)
			if _, err := s.Eval(ctx, prompt); err != nil {
				b.Fatal(err)
			}
			smp := sample.New(p)
			tok := prompt[len(prompt)-1]
			start := time.Now()
			for range 64 {
				if !steps {
					logits, err := s.Eval(ctx, []uint32{tok})
					if err != nil {
						b.Fatal(err)
					}
					tok = uint32(backend.ArgMax(logits))
					continue
				}
				if err := bt.Step(ctx, []model.Seq{{Session: s, Tokens: []uint32{tok}, Logits: 1}}); err != nil {
					b.Fatal(err)
				}
				if p.ArgMax() {
					tok = bt.ArgMaxAt(0, 0)
				} else {
					tok = smp.Sample(bt.LogitsAt(0, 0), nil)
				}
			}
			return time.Since(start)
		}
	}
	for _, c := range []struct {
		name  string
		path  string
		p     sample.Params
		steps bool
	}{
		{"built-in/greedy", builtin, sample.Params{}, true},
		{"built-in/sampled", builtin, sample.Params{Temperature: 0.7, Seed: 1}, true},
		{"draft/steps", draft, sample.Params{}, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			packed := decode(b, load(b, c.path, true), c.p, c.steps)
			repacked := decode(b, load(b, c.path, false), c.p, c.steps)
			tp, tr := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
			for range 6 {
				tp, tr = min(tp, packed()), min(tr, repacked())
			}
			for b.Loop() {
				packed()
			}
			b.ReportMetric(tp.Seconds()*1e3, "t_ms")
			b.ReportMetric(tr.Seconds()/tp.Seconds(), "x_packed")
		})
	}
}
