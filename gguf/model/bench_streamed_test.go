package model_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
)

// BenchmarkStreamedPacked times models larger than the last-level cache
// on a CPU backend that packs their Q8_0 weights once (the default) and
// on one that repacks them at every product (cpu.Options.RepackStreamed),
// in the same run, alternating: 16 decoded tokens after a 16-token prompt,
// and a step of 5 tokens at that point (a window's rows; the last row's
// logits). tg_tok/s is the packed decode's
// rate, x_decode and x_window the repacked times over the packed ones, and
// v and v_repacked each window's extra rows over a one-token step; least
// wall time of BENCH_REPS (5) rounds. The models: an LFM2-350M-shaped
// Q8_0 made here, and the 1B-shaped Q8_0 files of make bench-engine and
// make bench-spec where BENCH_CACHE (default the user cache dir's
// meshnode-bench) holds them.
func BenchmarkStreamedPacked(b *testing.B) {
	if os.Getenv("MESHNODE_BENCH_ENGINE") == "" {
		b.Skip("set MESHNODE_BENCH_ENGINE=1: loads 1B models twice and takes minutes")
	}
	md, err := vocabSource()
	if err != nil {
		b.Fatal(err)
	}
	cache, err := benchCacheDir()
	if err != nil {
		b.Fatal(err)
	}
	lfm2 := filepath.Join(b.TempDir(), "lfm2-350m-q8_0.gguf")
	spec := modeltest.Spec{Arch: "lfm2", FileType: "Q8_0", Embd: 1024, Layers: 16, Heads: 16, KVHeads: 8, FF: 4608,
		AttnLayers: []int{2, 5, 8, 10, 12, 14}, Context: 4096, Seed: 1}
	if err := modeltest.WriteRandomFile(lfm2, spec, md); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	threads := envInt("BENCH_THREADS", 0)
	for _, path := range []string{lfm2, filepath.Join(cache, "llama-1b-q8_0.gguf"), filepath.Join(cache, "meshnode-fortunes-1b-shape-q8_0.gguf")} {
		name := filepath.Base(path)
		if _, err := os.Stat(path); err != nil {
			b.Logf("%s: skipped (%v): make bench-engine and make bench-spec make it", name, err)
			continue
		}
		b.Run(name, func(b *testing.B) {
			// A model loaded on its own backend, and the least decode and
			// window times of its rounds.
			type timer struct {
				decode, window time.Duration
				round          func()
			}
			load := func(repack bool) *timer {
				be := cpu.New(cpu.Options{Threads: threads, RepackStreamed: repack})
				b.Cleanup(func() { be.Close() })
				_, m := modeltest.Load(b, path, be)
				s, err := m.NewSession(model.SessionOptions{Context: 64})
				if err != nil {
					b.Fatal(err)
				}
				vocab := m.Config().VocabSize
				prompt := make([]uint32, 16)
				for i := range prompt {
					prompt[i] = uint32(1 + i*997%(vocab-1))
				}
				t := &timer{decode: math.MaxInt64, window: math.MaxInt64}
				t.round = func() {
					s.Truncate(0)
					tok, err := s.EvalArgMax(ctx, prompt)
					if err != nil {
						b.Fatal(err)
					}
					start := time.Now()
					for range 16 {
						if tok, err = s.EvalArgMax(ctx, []uint32{tok}); err != nil {
							b.Fatal(err)
						}
					}
					t.decode = min(t.decode, time.Since(start)/16)
					s.Truncate(len(prompt))
					start = time.Now()
					if _, err := s.EvalArgMax(ctx, prompt[:5]); err != nil {
						b.Fatal(err)
					}
					t.window = min(t.window, time.Since(start))
				}
				return t
			}
			packed, repacked := load(false), load(true)
			for range envInt("BENCH_REPS", 5) {
				packed.round()
				repacked.round()
			}
			for b.Loop() {
				packed.round()
			}
			b.ReportMetric(1/packed.decode.Seconds(), "tg_tok/s")
			b.ReportMetric(float64(repacked.decode)/float64(packed.decode), "x_decode")
			b.ReportMetric(float64(repacked.window)/float64(packed.window), "x_window")
			b.ReportMetric((float64(packed.window)/float64(packed.decode)-1)/4, "v")
			b.ReportMetric((float64(repacked.window)/float64(repacked.decode)-1)/4, "v_repacked")
		})
	}
}
