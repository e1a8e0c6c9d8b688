package model_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
)

// BenchmarkMoEDecode is make bench-moe: decode time of qwen3moe models of
// one shape with 8, 32 and 128 experts, 8 used per token (Qwen3-30B-A3B's
// top-k and, at 128, its expert count; width, experts' width and depth
// scaled down), beside the dense qwen3 whose FFN is as wide as the 8
// active experts together. A decode step reads only its tokens' experts,
// so the time should follow the active parameters, which are the same in
// every model, not the total, which grows 16-fold. Random Q8_0 blocks
// (modeltest.WriteRandom), read through the file's mapping; the tokens
// vary, so successive steps route to different experts.
//
// It needs MESHNODE_BENCH_MOE=1 (it writes about 1 GB of models to a
// temporary directory). Knobs: BENCH_THREADS (default: all CPUs),
// BENCH_LAYERS (default 4).
func BenchmarkMoEDecode(b *testing.B) {
	if os.Getenv("MESHNODE_BENCH_MOE") == "" {
		b.Skip("set MESHNODE_BENCH_MOE=1 (make bench-moe)")
	}
	md, err := vocabSource()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	layers := envInt("BENCH_LAYERS", 4)
	const used, expertFF = 8, 512
	base := modeltest.Spec{
		FileType: "Q8_0", Embd: 1024, Layers: layers, Heads: 8, KVHeads: 4,
		FF: used * expertFF, Vocab: 2048, Context: 4096, Seed: 1,
	}
	type variant struct {
		name    string
		spec    modeltest.Spec
		experts int
	}
	var vs []variant
	dense := base
	dense.Arch = "qwen3"
	vs = append(vs, variant{"dense", dense, 0})
	for _, e := range []int{8, 32, 128} {
		s := base
		s.Arch = "qwen3moe"
		s.Experts, s.ExpertsUsed, s.ExpertFF = e, used, expertFF
		vs = append(vs, variant{fmt.Sprintf("experts=%d", e), s, e})
	}
	threads := envInt("BENCH_THREADS", 0)
	be := cpu.New(cpu.Options{Threads: threads})
	defer be.Close()
	ctx := context.Background()
	for _, v := range vs {
		b.Run(v.name, func(b *testing.B) {
			path := filepath.Join(dir, v.name+".gguf")
			if err := modeltest.WriteRandomFile(path, v.spec, md); err != nil {
				b.Fatal(err)
			}
			f, m := modeltest.Load(b, path, be)
			c := m.Config()
			// Bytes a decode step reads: everything but the unused
			// experts (and the embeddings, of which it reads one row).
			total := m.WeightBytes()
			expertBytes := int64(0)
			if v.experts > 0 {
				for _, t := range f.Tensors {
					if strings.HasSuffix(t.Name, "_exps.weight") {
						expertBytes += t.Rows() * t.RowSize()
					}
				}
			}
			active := total - expertBytes + expertBytes*int64(c.ExpertsUsed)/int64(max(c.Experts, 1))
			s, err := m.NewSession(model.SessionOptions{Context: 512})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			prompt := benchTokens(32, c.VocabSize)
			if _, err := s.Eval(ctx, prompt); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				if s.Len() == s.Context() {
					s.Truncate(len(prompt))
				}
				i++
				if _, err := s.Eval(ctx, []uint32{uint32(1 + (i*7919)%(c.VocabSize-1))}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
			b.ReportMetric(float64(total)/1e6, "total-MB")
			b.ReportMetric(float64(active)/1e6, "active-MB")
		})
	}
}
