package model_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
)

// BenchmarkDecode measures single-token decoding and batched prefill of
// the built-in model in this process, with allocations per token.
func BenchmarkDecode(b *testing.B) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	_, m := modeltest.Load(b, filepath.Join("..", "..", "models", "meshnode-fortunes-q8_0.gguf"), be)
	ctx := context.Background()
	b.Run("decode", func(b *testing.B) {
		s, err := m.NewSession(model.SessionOptions{Context: 256})
		if err != nil {
			b.Fatal(err)
		}
		tok := []uint32{1}
		b.ReportAllocs()
		for b.Loop() {
			if s.Len() == s.Context() {
				s.Truncate(0)
			}
			if _, err := s.Eval(ctx, tok); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
	})
	b.Run("prefill64", func(b *testing.B) {
		s, err := m.NewSession(model.SessionOptions{Context: 256})
		if err != nil {
			b.Fatal(err)
		}
		prompt := benchTokens(64, m.Config().VocabSize)
		b.ReportAllocs()
		for b.Loop() {
			s.Truncate(0)
			if _, err := s.Eval(ctx, prompt); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(64*b.N)/b.Elapsed().Seconds(), "tok/s")
	})
}

func benchTokens(n, vocab int) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = uint32(1 + (i*7919)%(vocab-1))
	}
	return ids
}

// BenchmarkEngineVsLlamaCpp is make bench-engine: llama.cpp's llama-bench
// and this engine on the same files, with the same thread count, prompt
// and generation lengths, in one run. It prints prefill (pp) and decode
// (tg) tokens per second, our/llama.cpp ratios and peak RSS for the parity
// fixtures and for models of Llama 3.2 1B's shape made at bench time
// (random Q4_0, Q8_0 and Q4_K_M blocks; the 32000-token vocabulary of the
// built-in model). Our side runs in a child process so its RSS is the engine's.
//
// It needs MESHNODE_BENCH_ENGINE=1 (it takes minutes) and llama.cpp in
// $LLAMACPP. Knobs: BENCH_THREADS (default: all CPUs), BENCH_PP/BENCH_TG/
// BENCH_REPS (rounds) for the 1B and MoE models (default 64/16/3), BENCH_1B=0
// to skip the 1B models, BENCH_MOE=0 the Qwen3-30B-A3B-shaped MoE (Q4_0,
// BENCH_MOE_LAYERS layers, default 2), BENCH_FIXTURES=0 the fixtures; BENCH_QWEN35=1 adds a
// Qwen3.5-0.8B-shaped Q8_0 model, BENCH_LFM2=1 LFM2-350M-shaped Q8_0 and
// Q4_0 ones; BENCH_ONEROW=band, rows or ahead fixes the kernels of our one-row
// products by weights read from memory (cpu.Options.OneRow; default
// tuned), and BENCH_REPACK=1 repacks the weights read from memory at
// every product rather than packing them once (cpu.Options.RepackStreamed).
// Each round's figures
// are logged too, beside the best (which the table and metrics give).
func BenchmarkEngineVsLlamaCpp(b *testing.B) {
	if os.Getenv("MESHNODE_BENCH_ENGINE") == "" {
		b.Skip("set MESHNODE_BENCH_ENGINE=1 (make bench-engine): runs llama.cpp and takes minutes")
	}
	llamaBench := filepath.Join(llamaCppDir(), "bin", "llama-bench")
	if _, err := os.Stat(llamaBench); err != nil {
		b.Skipf("llama-bench not found (%v): build llama.cpp with tools/llamacpp-ref/build.sh, set LLAMACPP", err)
	}
	md, err := vocabSource()
	if err != nil {
		b.Fatal(err)
	}
	threads := envInt("BENCH_THREADS", runtime.NumCPU())
	dir := b.TempDir()

	type job struct {
		name         string
		path         string
		pp, tg, reps int
	}
	var jobs []job
	for _, arch := range modeltest.Archs {
		if os.Getenv("BENCH_FIXTURES") == "0" {
			break
		}
		for _, ft := range modeltest.FileTypes {
			name := fixtureName(arch, ft)
			file, err := modeltest.Generate(modeltest.Fixture(arch, ft), md)
			if err != nil {
				b.Fatal(err)
			}
			path := filepath.Join(dir, name+".gguf")
			if err := os.WriteFile(path, file, 0o644); err != nil {
				b.Fatal(err)
			}
			jobs = append(jobs, job{name, path, 128, 64, 3})
		}
	}
	if os.Getenv("BENCH_1B") != "0" {
		for _, ft := range []string{"Q4_0", "Q8_0", "Q4_K_M"} {
			start := time.Now()
			path, err := modeltest.WriteLlama1B(dir, ft, md)
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("made %s in %v", filepath.Base(path), time.Since(start).Round(time.Millisecond))
			jobs = append(jobs, job{"llama-1b-" + strings.ToLower(ft), path,
				envInt("BENCH_PP", 64), envInt("BENCH_TG", 16), envInt("BENCH_REPS", 3)})
		}
	}

	if os.Getenv("BENCH_QWEN35") == "1" {
		// Qwen3.5-0.8B's blocks (3 delta nets per gated attention block,
		// 16 delta heads of 128, 8 attention heads of 256 over 2 KV heads),
		// with the fixtures' small vocabulary.
		spec := modeltest.Spec{Arch: "qwen35", FileType: "Q8_0", Embd: 1024, Layers: 24, Heads: 8, KVHeads: 2, HeadDim: 256,
			FF: 3584, SSMHeads: 16, SSMGroups: 16, SSMState: 128, FullAttn: 4, Context: 4096, Seed: 1}
		path := filepath.Join(dir, "qwen35-0.8b-q8_0.gguf")
		if err := modeltest.WriteRandomFile(path, spec, md); err != nil {
			b.Fatal(err)
		}
		jobs = append(jobs, job{"qwen35-0.8b-q8_0", path, envInt("BENCH_PP", 64), envInt("BENCH_TG", 16), envInt("BENCH_REPS", 3)})
	}
	if os.Getenv("BENCH_LFM2") == "1" {
		// LFM2-350M's blocks (10 gated convolutions of 3 taps, 6 attention
		// blocks of 16 heads of 64 over 8 KV heads, FFN 4608), with the
		// fixtures' vocabulary (32000 tokens; the real one has 65536).
		spec := modeltest.Spec{Arch: "lfm2", FileType: "Q8_0", Embd: 1024, Layers: 16, Heads: 16, KVHeads: 8, FF: 4608,
			AttnLayers: []int{2, 5, 8, 10, 12, 14}, Context: 4096, Seed: 1}
		for _, ft := range []string{"Q8_0", "Q4_0"} {
			spec.FileType = ft
			name := "lfm2-350m-" + strings.ToLower(ft)
			path := filepath.Join(dir, name+".gguf")
			if err := modeltest.WriteRandomFile(path, spec, md); err != nil {
				b.Fatal(err)
			}
			jobs = append(jobs, job{name, path, envInt("BENCH_PP", 64), envInt("BENCH_TG", 16), envInt("BENCH_REPS", 3)})
		}
	}
	if os.Getenv("BENCH_MOE") != "0" {
		// Qwen3-30B-A3B's layout (width 2048, 32 query heads of 128, 4 KV
		// heads, 128 experts of width 768, 8 per token) with fewer layers
		// (48 in the real model), so that it fits a small machine: a
		// decode step reads its 8 experts of each layer, not the 128.
		layers := envInt("BENCH_MOE_LAYERS", 2)
		spec := modeltest.Spec{Arch: "qwen3moe", FileType: "Q4_0", Embd: 2048, Layers: layers, Heads: 32, KVHeads: 4,
			HeadDim: 128, Experts: 128, ExpertsUsed: 8, ExpertFF: 768, FF: 8 * 768, Context: 4096, Seed: 1}
		name := fmt.Sprintf("qwen3moe-30b-a3b-shape-%dl-q4_0", layers)
		path := filepath.Join(dir, name+".gguf")
		start := time.Now()
		if err := modeltest.WriteRandomFile(path, spec, md); err != nil {
			b.Fatal(err)
		}
		b.Logf("made %s in %v", filepath.Base(path), time.Since(start).Round(time.Millisecond))
		jobs = append(jobs, job{name, path, envInt("BENCH_PP", 64), envInt("BENCH_TG", 16), envInt("BENCH_REPS", 3)})
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "model\tthreads\tpp\ttg\tours pp t/s\tllama pp t/s\tpp ratio\tours tg t/s\tllama tg t/s\ttg ratio\tours RSS load MB\tours peak MB\tllama peak MB\tload avg\t\n")
	for _, j := range jobs {
		b.Run(j.name, func(b *testing.B) {
			// Rounds alternate the two engines and keep each one's best,
			// so that a burst of other work on a shared machine skews
			// neither more than the other.
			var ref, ours benchResult
			for range j.reps {
				r, err := runLlamaBench(llamaBench, j.path, threads, j.pp, j.tg)
				if err != nil {
					b.Fatal(err)
				}
				ref = ref.best(r)
				o, err := runOurBench(j.path, threads, j.pp, j.tg)
				if err != nil {
					b.Fatal(err)
				}
				ours = ours.best(o)
				b.Logf("round: ours pp %.1f tg %.1f (one-row products: %d weights on the band kernels, %d on the rows, %d on the rows asking ahead; %d packed once), llama.cpp pp %.1f tg %.1f (load %s)",
					o.PP, o.TG, o.Band, o.Rows, o.Ahead, o.Packed, r.PP, r.TG, loadAverage())
			}
			b.ReportMetric(ours.PP, "pp_tok/s")
			b.ReportMetric(ours.TG, "tg_tok/s")
			b.ReportMetric(ref.PP, "llama_pp_tok/s")
			b.ReportMetric(ref.TG, "llama_tg_tok/s")
			b.ReportMetric(ours.PP/ref.PP, "pp_ratio")
			b.ReportMetric(ours.TG/ref.TG, "tg_ratio")
			b.ReportMetric(ours.PeakMB, "peak_MB")
			b.ReportMetric(ref.PeakMB, "llama_peak_MB")
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.1f\t%.1f\t%.3f\t%.1f\t%.1f\t%.3f\t%.1f\t%.1f\t%.1f\t%s\t\n", j.name, threads, j.pp, j.tg,
				ours.PP, ref.PP, ours.PP/ref.PP, ours.TG, ref.TG, ours.TG/ref.TG, ours.LoadMB, ours.PeakMB, ref.PeakMB, loadAverage())
		})
	}
	tw.Flush()
}

// loadAverage is the 1-minute load average (Linux), printed beside each
// result: on a shared machine, other work skews both engines, llama.cpp's
// spin-waiting threads the more.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}

// benchResult is one engine's figures on one model.
type benchResult struct {
	PP, TG         float64 // tokens per second
	LoadMB, PeakMB float64 // RSS after loading (ours only), peak RSS
	// The weights whose decoded tokens' products kept the band kernels,
	// took the row kernels, and took the row kernels asking ahead
	// (cpu.Backend.OneRowChoices; ours only).
	Band, Rows, Ahead int `json:",omitempty"`
	// The weights read from memory packed once for every product
	// (cpu.Backend.StreamedPacked; ours only).
	Packed int `json:",omitempty"`
}

// best keeps the higher rates and the higher RSS of two rounds.
func (r benchResult) best(o benchResult) benchResult {
	return benchResult{PP: max(r.PP, o.PP), TG: max(r.TG, o.TG), LoadMB: max(r.LoadMB, o.LoadMB), PeakMB: max(r.PeakMB, o.PeakMB),
		Band: max(r.Band, o.Band), Rows: max(r.Rows, o.Rows), Ahead: max(r.Ahead, o.Ahead), Packed: max(r.Packed, o.Packed)}
}

// runLlamaBench runs one round of llama-bench (after its own warm-up).
func runLlamaBench(bin, path string, threads, pp, tg int) (benchResult, error) {
	cmd := exec.Command(bin, "-m", path, "-t", strconv.Itoa(threads), "-fa", "0",
		"-p", strconv.Itoa(pp), "-n", strconv.Itoa(tg), "-r", "1", "-o", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return benchResult{}, err
	}
	peak := watchPeakRSS(cmd.Process.Pid)
	if err := cmd.Wait(); err != nil {
		return benchResult{}, fmt.Errorf("llama-bench: %v\n%s", err, stderr.String())
	}
	out := stdout.Bytes()
	var runs []struct {
		NPrompt int     `json:"n_prompt"`
		NGen    int     `json:"n_gen"`
		AvgTS   float64 `json:"avg_ts"`
	}
	if err := json.Unmarshal(out, &runs); err != nil {
		return benchResult{}, fmt.Errorf("llama-bench output: %v", err)
	}
	var r benchResult
	for _, run := range runs {
		if run.NGen == 0 {
			r.PP = run.AvgTS
		} else {
			r.TG = run.AvgTS
		}
	}
	r.PeakMB = peak()
	return r, nil
}

// childEnv carries a child's job: it is this test binary run again.
const childEnv = "MESHNODE_BENCH_CHILD"

type childJob struct {
	Path            string
	Threads, PP, TG int
	OneRow          string // BENCH_ONEROW: tuned (default), band, rows or ahead (cpu.Options.OneRow)
	Repack          bool   // BENCH_REPACK=1: cpu.Options.RepackStreamed
}

// runOurBench runs one round of our engine in a child process.
func runOurBench(path string, threads, pp, tg int) (benchResult, error) {
	job, _ := json.Marshal(childJob{path, threads, pp, tg, os.Getenv("BENCH_ONEROW"), os.Getenv("BENCH_REPACK") == "1"})
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+string(job))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return benchResult{}, fmt.Errorf("bench child: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "bench-result "); ok {
			var r benchResult
			if err := json.Unmarshal([]byte(rest), &r); err != nil {
				return benchResult{}, err
			}
			return r, nil
		}
	}
	return benchResult{}, fmt.Errorf("bench child printed no result:\n%s", out)
}

// TestBenchChild is the child side of BenchmarkEngineVsLlamaCpp: it loads
// the model, then times llama-bench's two tests — a pp-token prompt as one
// batch on an empty cache, and tg tokens decoded one by one from an empty
// cache — after one warm-up of each, and prints the rates.
func TestBenchChild(t *testing.T) {
	spec := os.Getenv(childEnv)
	if spec == "" {
		t.Skip("the child process of BenchmarkEngineVsLlamaCpp")
	}
	var job childJob
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		t.Fatal(err)
	}
	modes := map[string]cpu.OneRow{"": cpu.OneRowTuned, "tuned": cpu.OneRowTuned, "band": cpu.OneRowBand, "rows": cpu.OneRowRows, "ahead": cpu.OneRowAhead}
	mode, ok := modes[job.OneRow]
	if !ok {
		t.Fatalf("BENCH_ONEROW=%q: want tuned, band, rows or ahead", job.OneRow)
	}
	be := cpu.New(cpu.Options{Threads: job.Threads, OneRow: mode, RepackStreamed: job.Repack})
	_, m := modeltest.Load(t, job.Path, be)
	r := benchResult{LoadMB: statusMB("VmRSS:")}
	s, err := m.NewSession(model.SessionOptions{Context: job.PP + job.TG, Batch: job.PP})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	prompt := benchTokens(job.PP, m.Config().VocabSize)
	pp := func() time.Duration {
		s.Truncate(0)
		start := time.Now()
		if _, err := s.Eval(ctx, prompt); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	tg := func() time.Duration {
		s.Truncate(0)
		start := time.Now()
		for i := range job.TG {
			if _, err := s.Eval(ctx, prompt[i%len(prompt):][:1]); err != nil {
				t.Fatal(err)
			}
		}
		return time.Since(start)
	}
	rate := func(run func() time.Duration, n int) float64 {
		run() // warm-up, as llama-bench does
		return float64(n) / run().Seconds()
	}
	r.PP = rate(pp, job.PP)
	r.TG = rate(tg, job.TG)
	r.PeakMB = statusMB("VmHWM:")
	r.Band, r.Rows, r.Ahead = be.OneRowChoices()
	r.Packed = be.StreamedPacked()
	b, _ := json.Marshal(r)
	fmt.Printf("bench-result %s\n", b)
}

// Peak RSS is read from /proc (Linux): VmHWM, the high-water mark of the
// process's own memory. The rusage of a child is no use here: Go starts
// children with vfork, so their ru_maxrss includes the parent's RSS.

// statusMB reads a /proc/self/status field in MB (10^6 bytes); 0 where
// there is no /proc.
func statusMB(field string) float64 { return procStatusMB("/proc/self/status", field) }

func procStatusMB(path, field string) float64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb * 1024 / 1e6
		}
	}
	return 0
}

// watchPeakRSS polls a running process's VmHWM; the function it returns
// stops polling and gives the last value read (the process's peak, up to
// the last 20 ms of its life).
func watchPeakRSS(pid int) func() float64 {
	path := fmt.Sprintf("/proc/%d/status", pid)
	var (
		mu   sync.Mutex
		peak float64
	)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if v := procStatusMB(path, "VmHWM:"); v > 0 {
				mu.Lock()
				peak = max(peak, v)
				mu.Unlock()
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() float64 {
		close(done)
		<-stopped
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}
