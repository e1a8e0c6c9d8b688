package model_test

import (
	"bufio"
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
	"testing"
	"text/tabwriter"
	"time"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
)

// batchSizes are the parallel sequence counts make bench-batch compares.
var batchSizes = []int{1, 2, 4, 8}

// BenchmarkBatchedVsLlamaCpp is make bench-batch: llama.cpp's
// llama-batched-bench and this engine's model.Batch on the same file and
// thread count, in one run. For each B of 1, 2, 4, 8 sequences, as
// llama-batched-bench measures them: S_PP, the B prompts of PP tokens
// evaluated together (one step of B×PP tokens, B logits rows), and S_TG,
// TG steps of one token for each of the B sequences; both in tokens per
// second over all sequences, and our/llama.cpp ratios; and the share of
// our decode steps spent in the kernels run once per sequence (RoPE, the
// cache writes, attention: what keeping each sequence's arithmetic its
// own costs beyond the shared matrix products). Rounds alternate
// the two engines and keep each one's best (a shared machine's bursts
// skew neither more than the other).
//
// The model is Llama 3.2 1B's shape (untied) with llama.cpp's Llama 3
// tokenizer (128256 tokens), random weights, made by the reference tools'
// gen_model.py and quantised to Q4_0 by llama-quantize (which makes the
// output head Q6_K), kept in BENCH_CACHE (default the user cache dir's
// meshnode-bench) for the next run; BENCH_MODEL names another file. It needs
// MESHNODE_BENCH_BATCH=1 and llama.cpp in $LLAMACPP. Knobs: BENCH_THREADS
// (default: all CPUs), BENCH_PP (64), BENCH_TG (32), BENCH_REPS (2),
// BENCH_B (a comma list, default 1,2,4,8).
func BenchmarkBatchedVsLlamaCpp(b *testing.B) {
	if os.Getenv("MESHNODE_BENCH_BATCH") == "" {
		b.Skip("set MESHNODE_BENCH_BATCH=1 (make bench-batch): runs llama.cpp and takes minutes")
	}
	bin := filepath.Join(llamaCppDir(), "bin", "llama-batched-bench")
	if _, err := os.Stat(bin); err != nil {
		b.Skipf("llama-batched-bench not found (%v): build llama.cpp with tools/llamacpp-ref/build.sh, set LLAMACPP", err)
	}
	threads := envInt("BENCH_THREADS", runtime.NumCPU())
	pp, tg, reps := envInt("BENCH_PP", 64), envInt("BENCH_TG", 32), envInt("BENCH_REPS", 2)
	sizes := batchSizes
	if v := os.Getenv("BENCH_B"); v != "" {
		sizes = nil
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("BENCH_B %q", v)
			}
			sizes = append(sizes, n)
		}
	}
	path := os.Getenv("BENCH_MODEL")
	if path == "" {
		var err error
		if path, err = llama1BQ4_0(b); err != nil {
			b.Skipf("the 1B-shaped model: %v", err)
		}
	}

	var ref, ours []batchRate
	for round := range reps {
		r, err := runBatchedBench(bin, path, threads, pp, tg, sizes)
		if err != nil {
			b.Fatal(err)
		}
		ref = bestRates(ref, r)
		o, err := runOurBatchBench(path, threads, pp, tg, sizes)
		if err != nil {
			b.Fatal(err)
		}
		ours = bestRates(ours, o)
		b.Logf("round %d (load %s): llama.cpp %v, ours %v", round+1, loadAverage(), r, o)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "B\tthreads\tPP\tTG\tours S_PP\tllama S_PP\tPP ratio\tours S_TG\tllama S_TG\tTG ratio\tper-seq ops\tload avg\t\n")
	for i, n := range sizes {
		o, r := ours[i], ref[i]
		b.ReportMetric(o.PP/r.PP, fmt.Sprintf("pp_ratio_B%d", n))
		b.ReportMetric(o.TG/r.TG, fmt.Sprintf("tg_ratio_B%d", n))
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.3f\t%.1f\t%.1f\t%.3f\t%.1f%%\t%s\t\n", n, threads, pp, tg, o.PP, r.PP, o.PP/r.PP, o.TG, r.TG, o.TG/r.TG, 100*o.PerSeq, loadAverage())
	}
	tw.Flush()
}

// benchCacheDir is where the benchmarks keep the models they make or
// find: BENCH_CACHE, default the user cache dir's meshnode-bench.
func benchCacheDir() (string, error) {
	if dir := os.Getenv("BENCH_CACHE"); dir != "" {
		return dir, nil
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(c, "meshnode-bench"), nil
}

// llama1BQ4_0 makes (or finds, made before) the benchmark's model: a
// Llama-3.2-1B-shaped F16 file by gen_model.py (the reference tools',
// beside this repository's shared tools, or $LLAMACPP_TOOLS), quantised
// by llama-quantize to Q4_0.
func llama1BQ4_0(b *testing.B) (string, error) {
	dir, err := benchCacheDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "llama-3.2-1b-shape-q4_0.gguf")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	tools := os.Getenv("LLAMACPP_TOOLS")
	if tools == "" {
		tools = "/work/shared/tools/llamacpp-ref"
	}
	gen := filepath.Join(tools, "gen_model.py")
	if _, err := os.Stat(gen); err != nil {
		return "", fmt.Errorf("gen_model.py: %w (set LLAMACPP_TOOLS, or BENCH_MODEL)", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	f16 := out + ".f16.tmp"
	defer os.Remove(f16)
	start := time.Now()
	src := filepath.Join(llamaCppDir(), "src")
	cmd := exec.Command("/usr/bin/python3", gen, "llama", filepath.Join(src, "models", "ggml-vocab-llama-bpe.gguf"), f16,
		"--dim", "2048", "--layers", "16", "--heads", "32", "--kv-heads", "8", "--ff", "8192", "--ctx", "131072",
		"--seed", "1", "--name", "llama-3.2-1b-shape")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(src, "gguf-py"))
	if o, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("gen_model.py: %v\n%s", err, o)
	}
	tmp := out + ".tmp"
	if o, err := exec.Command(filepath.Join(llamaCppDir(), "bin", "llama-quantize"), f16, tmp, "Q4_0").CombinedOutput(); err != nil {
		return "", fmt.Errorf("llama-quantize: %v\n%s", err, o)
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	b.Logf("made %s in %v", out, time.Since(start).Round(time.Second))
	return out, nil
}

// batchRate is S_PP and S_TG for one B, in tokens per second, and (ours
// only) the share of the decode steps' time spent in the operations run
// per sequence (RoPE, StoreKV, Attend).
type batchRate struct {
	B      int
	PP, TG float64
	PerSeq float64 `json:",omitempty"`
}

// timedBackend times the kernels a batched step calls once per sequence.
type timedBackend struct {
	backend.Backend
	perSeq time.Duration
}

func (b *timedBackend) RoPE(x backend.Tensor, headDim, pos int, r *backend.RoPE) {
	start := time.Now()
	b.Backend.RoPE(x, headDim, pos, r)
	b.perSeq += time.Since(start)
}

func (b *timedBackend) StoreKV(c backend.KVCache, layer, pos int, k, v backend.Tensor) {
	start := time.Now()
	b.Backend.StoreKV(c, layer, pos, k, v)
	b.perSeq += time.Since(start)
}

func (b *timedBackend) Attend(dst, q backend.Tensor, c backend.KVCache, layer, pos int, a *backend.Attention) {
	start := time.Now()
	b.Backend.Attend(dst, q, c, layer, pos, a)
	b.perSeq += time.Since(start)
}

func bestRates(a, b []batchRate) []batchRate {
	if a == nil {
		return b
	}
	out := make([]batchRate, len(a))
	for i := range a {
		out[i] = batchRate{B: a[i].B, PP: max(a[i].PP, b[i].PP), TG: max(a[i].TG, b[i].TG), PerSeq: a[i].PerSeq}
		if b[i].TG > a[i].TG {
			out[i].PerSeq = b[i].PerSeq
		}
	}
	return out
}

// runBatchedBench runs llama-batched-bench once over every B (it warms up
// first itself).
func runBatchedBench(bin, path string, threads, pp, tg int, sizes []int) ([]batchRate, error) {
	var npl []string
	most := 0
	for _, n := range sizes {
		npl = append(npl, strconv.Itoa(n))
		most = max(most, n)
	}
	cmd := exec.Command(bin, "-m", path, "-t", strconv.Itoa(threads), "-fa", "off",
		"-c", strconv.Itoa(most*(pp+tg)), "-b", "2048", "-ub", "512",
		"-npp", strconv.Itoa(pp), "-ntg", strconv.Itoa(tg), "-npl", strings.Join(npl, ","), "--output-format", "jsonl")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("llama-batched-bench: %v\n%s", err, stderr.String())
	}
	byB := map[int]batchRate{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var r struct {
			PL      int     `json:"pl"`
			SpeedPP float64 `json:"speed_pp"`
			SpeedTG float64 `json:"speed_tg"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("llama-batched-bench output %q: %w", line, err)
		}
		byB[r.PL] = batchRate{B: r.PL, PP: r.SpeedPP, TG: r.SpeedTG}
	}
	out := make([]batchRate, len(sizes))
	for i, n := range sizes {
		r, ok := byB[n]
		if !ok {
			return nil, fmt.Errorf("llama-batched-bench gave no result for B=%d:\n%s", n, stdout.String())
		}
		out[i] = r
	}
	return out, nil
}

const batchChildEnv = "MESHNODE_BATCH_BENCH_CHILD"

type batchChildJob struct {
	Path            string
	Threads, PP, TG int
	Sizes           []int
}

// runOurBatchBench runs one round of our side in a child process (a fresh
// heap and page-cache state, as llama.cpp's run has).
func runOurBatchBench(path string, threads, pp, tg int, sizes []int) ([]batchRate, error) {
	job, _ := json.Marshal(batchChildJob{path, threads, pp, tg, sizes})
	cmd := exec.Command(os.Args[0], "-test.run=^TestBatchBenchChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), batchChildEnv+"="+string(job))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("bench child: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "batch-bench-result "); ok {
			var r []batchRate
			if err := json.Unmarshal([]byte(rest), &r); err != nil {
				return nil, err
			}
			return r, nil
		}
	}
	return nil, fmt.Errorf("bench child printed no result:\n%s", out)
}

// TestBatchBenchChild is the child side of BenchmarkBatchedVsLlamaCpp:
// for each B, B fresh sequences, their prompts evaluated in one
// model.Batch step (S_PP), then TG decode steps of one greedy token each
// (S_TG), after one warm-up of each, as llama-batched-bench times them.
func TestBatchBenchChild(t *testing.T) {
	spec := os.Getenv(batchChildEnv)
	if spec == "" {
		t.Skip("the child process of BenchmarkBatchedVsLlamaCpp")
	}
	var job batchChildJob
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		t.Fatal(err)
	}
	be := &timedBackend{Backend: cpu.New(cpu.Options{Threads: job.Threads})}
	_, m := modeltest.Load(t, job.Path, be)
	ctx := context.Background()
	vocab := m.Config().VocabSize
	var out []batchRate
	var perSeq time.Duration
	for _, n := range job.Sizes {
		bt, err := m.NewBatch(model.BatchOptions{Tokens: max(n*job.PP, n), Seqs: n})
		if err != nil {
			t.Fatal(err)
		}
		sessions := make([]*model.Session, n)
		for i := range sessions {
			if sessions[i], err = m.NewSession(model.SessionOptions{Context: job.PP + job.TG + 1}); err != nil {
				t.Fatal(err)
			}
		}
		prompts := make([][]uint32, n)
		for i := range prompts {
			prompts[i] = benchTokens(job.PP+i, vocab)[i:]
		}
		seqs := make([]model.Seq, n)
		next := make([]uint32, n)
		run := func() (pp, tg time.Duration) {
			for i, s := range sessions {
				s.Truncate(0)
				seqs[i] = model.Seq{Session: s, Tokens: prompts[i], Logits: 1}
			}
			start := time.Now()
			if err := bt.Step(ctx, seqs); err != nil {
				t.Fatal(err)
			}
			for i := range seqs {
				next[i] = bt.ArgMax(i)
			}
			pp = time.Since(start)
			be.perSeq = 0
			start = time.Now()
			for range job.TG {
				for i := range seqs {
					seqs[i].Tokens = next[i : i+1]
				}
				if err := bt.Step(ctx, seqs); err != nil {
					t.Fatal(err)
				}
				for i := range seqs {
					next[i] = bt.ArgMax(i)
				}
			}
			tg = time.Since(start)
			perSeq = be.perSeq
			return pp, tg
		}
		run() // warm-up
		pp, tg := run()
		out = append(out, batchRate{B: n, PP: float64(n*job.PP) / pp.Seconds(), TG: float64(n*job.TG) / tg.Seconds(),
			PerSeq: perSeq.Seconds() / tg.Seconds()})
		for _, s := range sessions {
			s.Close()
		}
	}
	b, _ := json.Marshal(out)
	fmt.Printf("batch-bench-result %s\n", b)
}
