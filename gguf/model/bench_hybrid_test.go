package model_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
)

// BenchmarkHybridDecode times qwen35 decode steps with the CPU backend's
// delta-net kernels (two states per session, swapped: no checkpoint copy)
// against the host path (a copy of every delta-net state each step, and a
// read-back per block) in the same run, on Qwen3.5-0.8B's block shapes (16
// delta heads of 128, 8 attention heads of 256) with BENCH_LAYERS blocks
// (default 4: three delta nets, one attention). It reports each path's
// tokens per second and host/kernels, the time ratio.
func BenchmarkHybridDecode(b *testing.B) {
	md, err := vocabSource()
	if err != nil {
		b.Fatal(err)
	}
	spec := modeltest.Spec{Arch: "qwen35", FileType: "Q8_0", Embd: 1024, Layers: envInt("BENCH_LAYERS", 4), Heads: 8, KVHeads: 2,
		HeadDim: 256, FF: 3584, SSMHeads: 16, SSMGroups: 16, SSMState: 128, FullAttn: 4, Context: 4096, Seed: 1}
	path := filepath.Join(b.TempDir(), "qwen35.gguf")
	if err := modeltest.WriteRandomFile(path, spec, md); err != nil {
		b.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	be := cpu.New(cpu.Options{Threads: envInt("BENCH_THREADS", 0)})
	defer be.Close()
	ctx := context.Background()
	var sess [2]*model.Session
	var took [2]time.Duration
	for i, bk := range []backend.Backend{be, hostDelta{be}} {
		m, err := model.Load(f, bk)
		if err != nil {
			b.Fatal(err)
		}
		if sess[i], err = m.NewSession(model.SessionOptions{Context: 512}); err != nil {
			b.Fatal(err)
		}
		defer sess[i].Close()
		if _, err := sess[i].Eval(ctx, benchTokens(16, m.Config().VocabSize)); err != nil {
			b.Fatal(err)
		}
	}
	n := 0
	for b.Loop() {
		n++
		for i, s := range sess {
			if s.Len() == s.Context() {
				b.Fatal("the sessions' context is full: lower -benchtime")
			}
			start := time.Now()
			if _, err := s.Eval(ctx, []uint32{uint32(1 + (n*7919)%1000)}); err != nil {
				b.Fatal(err)
			}
			took[i] += time.Since(start)
		}
	}
	b.ReportMetric(float64(n)/took[0].Seconds(), "kernels-tok/s")
	b.ReportMetric(float64(n)/took[1].Seconds(), "host-tok/s")
	b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "host/kernels")
}
