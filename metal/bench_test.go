package metal_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/hw/host"
	"github.com/meshnode/meshnode/metal"
)

// BenchmarkMetal is make bench-metal: on the Mac's GPU, prefill and decode
// tokens per second for the parity fixtures and for models of Llama 3.2
// 1B's shape (random Q4_0 and Q8_0 blocks, made at bench time), and the
// memory bandwidth a decode achieves — the weight bytes one token reads ×
// tokens per second — against the chip's nominal bandwidth (hw/host's
// table). The goal is 70% of it at batch 1, and llama.cpp's Metal decode
// rate or better (scripts/metal-check.sh runs llama-bench on the same
// files).
//
// It needs MESHNODE_BENCH_METAL=1 and a device. Knobs: BENCH_PP, BENCH_TG
// (prompt and generated tokens for the 1B models, default 512 and 128),
// BENCH_FIXTURE_PP, BENCH_FIXTURE_TG (the same for the fixtures, default
// 64 and 64), BENCH_1B=0 (skip them), BENCH_FIXTURES=0 (skip the
// fixtures), BENCH_DIR (keep the 1B files there, for llama-bench),
// MESHNODE_METAL_DEVICE=stand-in (the CPU stand-in, to try the benchmark
// itself).
func BenchmarkMetal(b *testing.B) {
	if os.Getenv("MESHNODE_BENCH_METAL") == "" {
		b.Skip("set MESHNODE_BENCH_METAL=1 (make bench-metal): needs a Mac's GPU, takes a minute or two")
	}
	be := newGPU(b)
	info := be.Info()
	be.Close()
	var nominal float64 // GB/s
	if f, err := host.Gather(host.Options{}); err == nil && len(f.GPUs) > 0 {
		nominal = f.GPUs[0].MemBandwidthGBps
	}
	fmt.Printf("device: %s, MSL %s, working set %.1f GiB, unified %v\n", info.Name, info.Language, float64(info.WorkingSet)/(1<<30), info.Unified)
	if nominal > 0 {
		fmt.Printf("nominal memory bandwidth: %.0f GB/s\n", nominal)
	} else {
		fmt.Printf("nominal memory bandwidth: unknown (not in hw/host's table)\n")
	}

	md, err := vocabSource()
	if err != nil {
		b.Fatal(err)
	}
	type job struct {
		name         string
		f            *gguf.File
		pp, tg, reps int
	}
	var jobs []job
	if os.Getenv("BENCH_FIXTURES") != "0" {
		for _, arch := range modeltest.Archs {
			if why := modeltest.Unsupported(arch, be); why != "" {
				fmt.Printf("%s: skipped (%s)\n", arch, why)
				continue
			}
			for _, ft := range modeltest.FileTypes {
				jobs = append(jobs, job{arch + "-" + strings.ToLower(ft), fixture(b, arch, ft),
					envInt("BENCH_FIXTURE_PP", 64), envInt("BENCH_FIXTURE_TG", 64), 2})
			}
		}
	}
	if os.Getenv("BENCH_1B") != "0" {
		dir := os.Getenv("BENCH_DIR")
		if dir == "" {
			dir = b.TempDir()
		} else if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for _, ft := range []string{"Q4_0", "Q8_0"} {
			f := modeltest.OpenLlama1B(b, dir, ft, md)
			defer f.Close()
			jobs = append(jobs, job{"llama-1b-" + strings.ToLower(ft), f, envInt("BENCH_PP", 512), envInt("BENCH_TG", 128), 3})
		}
	}

	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tweights MB\tpp\tprefill tok/s\ttg\tdecode tok/s\tdecode GB/s\tof nominal\tdispatches/token\t")
	for _, j := range jobs {
		r, err := benchModel(b, j.f, j.pp, j.tg, j.reps)
		if err != nil {
			b.Fatalf("%s: %v", j.name, err)
		}
		bw := r.weightBytes * r.decode
		share := "-"
		if nominal > 0 {
			share = fmt.Sprintf("%.0f%%", 100*bw/(nominal*1e9))
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%d\t%.0f\t%d\t%.1f\t%.0f\t%s\t%.0f\t\n", j.name, r.weightBytes/1e6, j.pp, r.prefill, j.tg, r.decode,
			bw/1e9, share, r.dispatchesPerToken)
		if strings.HasPrefix(j.name, "llama-1b") {
			b.ReportMetric(r.decode, j.name+"-decode-tok/s")
			b.ReportMetric(r.prefill, j.name+"-prefill-tok/s")
			if nominal > 0 {
				b.ReportMetric(100*bw/(nominal*1e9), j.name+"-%nominalBW")
			}
		}
	}
	tw.Flush()
}

type benchResult struct {
	prefill, decode    float64 // tok/s, the best round's
	weightBytes        float64 // read per decoded token
	dispatchesPerToken float64
}

// benchModel loads f on a fresh backend, its file mapped as the engine
// maps it, and times reps rounds of a pp-token prefill and tg greedy
// decode steps, each reading back only its token (Session.EvalArgMax, as
// the engine's greedy decode does).
func benchModel(b *testing.B, f *gguf.File, pp, tg, reps int) (benchResult, error) {
	be, err := metal.New(metal.Options{Device: gpuDevice(b)})
	if err != nil {
		return benchResult{}, err
	}
	defer be.Close()
	if err := be.MapFile(f.Bytes(), largestTensor(f)); err != nil {
		return benchResult{}, err
	}
	m, err := model.Load(f, be)
	if err != nil {
		return benchResult{}, err
	}
	c := m.Config()
	s, err := m.NewSession(model.SessionOptions{Context: min(c.TrainContext, pp+tg+8), Batch: 128})
	if err != nil {
		return benchResult{}, err
	}
	defer s.Close()
	ctx := context.Background()
	prompt := make([]uint32, pp)
	for i := range prompt {
		prompt[i] = uint32(1 + (i*7919)%(c.VocabSize-1))
	}
	r := benchResult{weightBytes: modeltest.DecodeBytes(f)}
	for range reps {
		s.Truncate(0)
		start := time.Now()
		next, err := s.EvalArgMax(ctx, prompt)
		if err != nil {
			return r, err
		}
		r.prefill = max(r.prefill, float64(pp)/time.Since(start).Seconds())
		before := be.Stats().Dispatches
		start = time.Now()
		for range tg {
			if next, err = s.EvalArgMax(ctx, []uint32{next}); err != nil {
				return r, err
			}
		}
		r.decode = max(r.decode, float64(tg)/time.Since(start).Seconds())
		r.dispatchesPerToken = float64(be.Stats().Dispatches-before) / float64(tg)
	}
	return r, nil
}

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}
