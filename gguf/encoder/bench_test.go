package encoder

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/encoder/encodertest"
)

// benchShapes are the encoders the benchmarks run, at real models'
// geometry with random F16 weights (and the fixtures' small vocabulary,
// which only the embedding lookup reads).
var benchShapes = []struct {
	name string
	spec encodertest.Spec
}{
	{"minilm-l6", encodertest.Spec{Arch: "bert", Embd: 384, Layers: 6, Heads: 12, FF: 1536, Context: 512}},
	{"bge-base", encodertest.Spec{Arch: "bert", Embd: 768, Layers: 12, Heads: 12, FF: 3072, Context: 512}},
	{"nomic-embed", encodertest.Spec{Arch: "nomic-bert", Embd: 768, Layers: 12, Heads: 12, FF: 3072, Context: 2048}},
	{"jina-base", encodertest.Spec{Arch: "jina-bert-v2", Embd: 768, Layers: 12, Heads: 12, FF: 3072, Context: 8192}},
	{"nomic-moe", encodertest.Spec{Arch: "nomic-bert-moe", Embd: 768, Layers: 12, Heads: 12, FF: 3072, Context: 512, Experts: 8, ExpertsUsed: 2}},
	{"modernbert-base", encodertest.Spec{Arch: "modern-bert", Embd: 768, Layers: 22, Heads: 12, FF: 1152, Context: 8192, Window: 128}},
	{"embeddinggemma", encodertest.Spec{Arch: "gemma-embedding", Embd: 768, Layers: 24, Heads: 3, KVHeads: 1, HeadDim: 256, FF: 1152,
		Context: 2048, Window: 512, WindowEvery: 6, Dense: 3072}},
}

func benchIDs(n int) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = uint32(5 + i*7%60)
	}
	ids[0], ids[n-1] = 2, 3
	return ids
}

// BenchmarkHidden: tokens per second encoded, one input of 128 tokens,
// on each shape.
func BenchmarkHidden(b *testing.B) {
	for _, sh := range benchShapes {
		b.Run(sh.name, func(b *testing.B) {
			raw, err := encodertest.Build(sh.spec)
			if err != nil {
				b.Fatal(err)
			}
			f, err := gguf.Parse(raw)
			if err != nil {
				b.Fatal(err)
			}
			be := cpu.New(cpu.Options{})
			defer be.Close()
			m, err := Load(f, be)
			if err != nil {
				b.Fatal(err)
			}
			ids := benchIDs(128)
			for b.Loop() {
				if _, err := m.Hidden(context.Background(), ids); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(ids)*b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}

// BenchmarkEncoderVsLlamaCpp is make bench-encoder: llama.cpp's llama-bench
// (-embd 1) and this encoder on the same files (MiniLM-L6, bge-base,
// nomic-embed, jina-embeddings-v2-base, nomic-embed-text-v2-moe,
// ModernBERT-base and EmbeddingGemma shapes, random F16), the same
// thread count and input lengths, in one run; it prints tokens per second
// and our/llama.cpp ratios. It needs MESHNODE_BENCH_ENGINE=1 and llama.cpp
// in $LLAMACPP (default ~/.cache/llamacpp-ref). BENCH_THREADS sets the
// threads (default: all CPUs), BENCH_REPS the rounds (default 3; the best
// counts), BENCH_SHAPES the shapes run (names, comma-separated; default
// all).
func BenchmarkEncoderVsLlamaCpp(b *testing.B) {
	if os.Getenv("MESHNODE_BENCH_ENGINE") == "" {
		b.Skip("set MESHNODE_BENCH_ENGINE=1 (make bench-encoder): runs llama.cpp and takes minutes")
	}
	dir := os.Getenv("LLAMACPP")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "llamacpp-ref")
	}
	llamaBench := filepath.Join(dir, "bin", "llama-bench")
	if _, err := os.Stat(llamaBench); err != nil {
		b.Skipf("llama-bench not found (%v): build llama.cpp with tools/llamacpp-ref/build.sh, set LLAMACPP", err)
	}
	threads, reps := runtime.NumCPU(), 3
	if v, err := strconv.Atoi(os.Getenv("BENCH_THREADS")); err == nil && v > 0 {
		threads = v
	}
	if v, err := strconv.Atoi(os.Getenv("BENCH_REPS")); err == nil && v > 0 {
		reps = v
	}
	tmp := b.TempDir()
	b.Logf("%-12s %5s %12s %12s %6s", "model", "n", "ours tok/s", "llama tok/s", "ratio")
	only := strings.Split(os.Getenv("BENCH_SHAPES"), ",")
	for _, sh := range benchShapes {
		if only[0] != "" && !slices.Contains(only, sh.name) {
			continue
		}
		raw, err := encodertest.Build(sh.spec)
		if err != nil {
			b.Fatal(err)
		}
		path := filepath.Join(tmp, sh.name+".gguf")
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			b.Fatal(err)
		}
		f, err := gguf.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		be := cpu.New(cpu.Options{Threads: threads})
		m, err := Load(f, be)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{32, 128, 512} {
			ids := benchIDs(n)
			var ours, theirs float64
			for range reps {
				start := time.Now()
				if _, err := m.Hidden(context.Background(), ids); err != nil {
					b.Fatal(err)
				}
				ours = max(ours, float64(n)/time.Since(start).Seconds())
				ts, err := llamaBenchEmbd(llamaBench, path, threads, n)
				if err != nil {
					b.Fatal(err)
				}
				theirs = max(theirs, ts)
			}
			b.Logf("%-12s %5d %12.0f %12.0f %6.2f", sh.name, n, ours, theirs, ours/theirs)
			b.ReportMetric(ours/theirs, fmt.Sprintf("ratio-%s-%d", sh.name, n))
		}
		be.Close()
		f.Close()
	}
}

// llamaBenchEmbd is llama-bench's prompt tokens per second encoding n
// tokens (-embd 1, flash attention off, one repetition after its warm-up).
func llamaBenchEmbd(bin, path string, threads, n int) (float64, error) {
	cmd := exec.Command(bin, "-m", path, "-embd", "1", "-t", strconv.Itoa(threads), "-fa", "0",
		"-p", strconv.Itoa(n), "-n", "0", "-r", "1", "-o", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("llama-bench: %v\n%s", err, stderr.String())
	}
	var runs []struct {
		AvgTS float64 `json:"avg_ts"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &runs); err != nil || len(runs) == 0 {
		return 0, fmt.Errorf("llama-bench output %q: %v", stdout.String(), err)
	}
	return runs[0].AvgTS, nil
}
