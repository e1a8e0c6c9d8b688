package cuda_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/meshnode/meshnode/cuda"
	"github.com/meshnode/meshnode/cuda/cudaemu"
	"github.com/meshnode/meshnode/cuda/driver"
	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
)

// BenchmarkCUDA is make bench-cuda: on the GPU, prefill and decode tokens
// per second for the parity fixtures and for models of Llama 3.2 1B's
// shape (random Q4_0 and Q8_0 blocks, made at bench time), and the memory
// bandwidth a decode achieves — the weight bytes one token reads × tokens
// per second — against the device's measured device-to-device copy
// bandwidth. The goal is half of it at batch 1. Each 1B model runs again
// with its attention in one kernel however long the context (the -att1
// rows), and the decode ratio of the two says what splitting a long
// context's attention over blocks (Options.AttendSplitKeys) buys.
//
// It needs MESHNODE_BENCH_CUDA=1 and a device. Knobs: BENCH_PP, BENCH_TG
// (prompt and generated tokens for the 1B models, default 512 and 128),
// BENCH_FIXTURE_PP, BENCH_FIXTURE_TG (the same for the fixtures, default
// 64 and 64), BENCH_1B=0 (skip them), BENCH_FIXTURES=0 (skip the
// fixtures), MESHNODE_CUDA_LIBRARY (another driver library; "stand-in"
// for the CPU stand-in, to try the benchmark itself).
func BenchmarkCUDA(b *testing.B) {
	if os.Getenv("MESHNODE_BENCH_CUDA") == "" {
		b.Skip("set MESHNODE_BENCH_CUDA=1 (make bench-cuda): needs a GPU, takes a minute or two")
	}
	lib := cudaemu.Library(b)
	be := newGPU(b, cuda.Options{})
	info := be.Info()
	be.Close()
	copyBW, err := copyBandwidth(lib, 512<<20, 5)
	if err != nil {
		b.Fatal(err)
	}
	fmt.Printf("device: %s (cc %d.%d, %s), %d SMs, %.1f GiB, driver %d\n", info.Name, info.Major, info.Minor, info.Arch,
		info.SMs, float64(info.MemoryBytes)/(1<<30), info.DriverVersion)
	fmt.Printf("device-to-device copy: %.0f GB/s (bytes read + written); theoretical peak %.0f GB/s\n", copyBW/1e9, info.PeakBandwidth/1e9)

	md, err := vocabSource()
	if err != nil {
		b.Fatal(err)
	}
	type job struct {
		name         string
		f            *gguf.File
		pp, tg, reps int
		opt          cuda.Options
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
					envInt("BENCH_FIXTURE_PP", 64), envInt("BENCH_FIXTURE_TG", 64), 2, cuda.Options{}})
			}
		}
	}
	if os.Getenv("BENCH_1B") != "0" {
		dir := b.TempDir()
		for _, ft := range []string{"Q4_0", "Q8_0"} {
			f := modeltest.OpenLlama1B(b, dir, ft, md)
			defer f.Close()
			name, pp, tg := "llama-1b-"+strings.ToLower(ft), envInt("BENCH_PP", 512), envInt("BENCH_TG", 128)
			jobs = append(jobs, job{name, f, pp, tg, 3, cuda.Options{}},
				// The same with attention in one kernel however long the
				// context (the split's reference: Options.AttendSplitKeys).
				job{name + "-att1", f, pp, tg, 3, cuda.Options{AttendSplitKeys: -1}})
		}
	}

	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tweights MB\tpp\tprefill tok/s\ttg\tdecode tok/s\tdecode GB/s\tof copy BW\tgraphs\t")
	decode := map[string]float64{}
	for _, j := range jobs {
		opt := j.opt
		opt.Library = lib
		r, err := benchModel(opt, j.f, j.pp, j.tg, j.reps)
		if err != nil {
			b.Fatalf("%s: %v", j.name, err)
		}
		bw := r.weightBytes * r.decode
		fmt.Fprintf(tw, "%s\t%.1f\t%d\t%.0f\t%d\t%.1f\t%.0f\t%.0f%%\t%d/%d\t\n", j.name, r.weightBytes/1e6, j.pp, r.prefill, j.tg, r.decode,
			bw/1e9, 100*bw/copyBW, r.stats.Graphs, r.stats.Steps)
		decode[j.name] = r.decode
		if strings.HasPrefix(j.name, "llama-1b") && !strings.HasSuffix(j.name, "-att1") {
			b.ReportMetric(r.decode, j.name+"-decode-tok/s")
			b.ReportMetric(100*bw/copyBW, j.name+"-%copyBW")
		}
	}
	tw.Flush()
	// The long context's attention in three launches against one kernel,
	// in this run: what attSplitKeys buys a decode after the prompt.
	for _, j := range jobs {
		if one, ok := decode[j.name+"-att1"]; ok && one > 0 {
			fmt.Printf("%s: decode after %d positions, attention split / one kernel: %.2f×\n", j.name, j.pp, decode[j.name]/one)
			b.ReportMetric(decode[j.name]/one, j.name+"-att-split-x")
		}
	}
}

type benchResult struct {
	prefill, decode float64 // tok/s, the best round's
	weightBytes     float64 // read per decoded token
	stats           cuda.Stats
}

// benchModel loads f on a fresh backend and times reps rounds of a pp-token
// prefill and tg greedy decode steps, each copying back only its token
// (Session.EvalArgMax, as the engine's greedy decode does).
func benchModel(opt cuda.Options, f *gguf.File, pp, tg, reps int) (benchResult, error) {
	be, err := cuda.New(opt)
	if err != nil {
		return benchResult{}, err
	}
	defer be.Close()
	if _, err := be.MapHost(f.Bytes()); err != nil {
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
		start = time.Now()
		for range tg {
			if next, err = s.EvalArgMax(ctx, []uint32{next}); err != nil {
				return r, err
			}
		}
		r.decode = max(r.decode, float64(tg)/time.Since(start).Seconds())
	}
	r.stats = be.Stats()
	return r, nil
}

// copyBandwidth times device-to-device copies of size bytes and returns
// the best rate of bytes read plus written per second.
func copyBandwidth(lib string, size, reps int) (float64, error) {
	l, err := driver.Load(lib)
	if err != nil {
		return 0, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := l.Init(); err != nil {
		return 0, err
	}
	d, err := l.Device(0)
	if err != nil {
		return 0, err
	}
	ctx, err := l.PrimaryCtxRetain(d)
	if err != nil {
		return 0, err
	}
	defer l.PrimaryCtxRelease(d)
	if err := l.CtxSetCurrent(ctx); err != nil {
		return 0, err
	}
	src, err := l.MemAlloc(size)
	if err != nil {
		return 0, err
	}
	defer l.MemFree(src)
	dst, err := l.MemAlloc(size)
	if err != nil {
		return 0, err
	}
	defer l.MemFree(dst)
	s, err := l.StreamCreate(0)
	if err != nil {
		return 0, err
	}
	defer l.StreamDestroy(s)
	e0, _ := l.EventCreate(driver.EventDefault)
	e1, _ := l.EventCreate(driver.EventDefault)
	defer l.EventDestroy(e0)
	defer l.EventDestroy(e1)
	best := 0.0
	for i := range reps + 1 {
		if err := l.EventRecord(e0, s); err != nil {
			return 0, err
		}
		if err := l.MemcpyDtoDAsync(dst, src, size, s); err != nil {
			return 0, err
		}
		if err := l.EventRecord(e1, s); err != nil {
			return 0, err
		}
		if err := l.EventSynchronize(e1); err != nil {
			return 0, err
		}
		ms, err := l.EventElapsedTime(e0, e1)
		if err != nil {
			return 0, err
		}
		if i > 0 && ms > 0 { // the first is a warm-up
			best = max(best, 2*float64(size)/(float64(ms)/1e3))
		}
	}
	return best, nil
}

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}
