package cuda_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/meshnode/meshnode/cuda"
	"github.com/meshnode/meshnode/cuda/cudaemu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
)

// BenchmarkWindows is the GPU's price of a speculative window: the step
// of a Llama-3.2-1B-shaped random Q8_0 model (BenchmarkCUDA's) over 1 …
// 9 rows after a 64-token prompt, every row's token picked on the device
// (Batch.ArgMaxAt, as a greedy verify picks them), graphs on as in a
// serve, the session trimmed back after each step. Each count's steps run
// back to back and the table gives the median step, and its ratio to the
// one-row step: spec.Prices.Steps, whose increments are v.
//
// It needs MESHNODE_BENCH_CUDA=1 and a device. BENCH_ROWS picks the row
// counts (default 1,2,3,4,5,6,8,9; the ratios need 1 first), BENCH_STEPS
// the steps timed for each (default 200), BENCH_PROMPT the prompt's
// tokens (default 64), BENCH_ATT_SPLIT the backend's
// Options.AttendSplitKeys (1: every step's attention in three launches,
// -1: in one kernel). scripts/gpu-check.sh --profile runs it so, and under
// Nsight Compute, for each kernel's share of a step.
func BenchmarkWindows(b *testing.B) {
	if os.Getenv("MESHNODE_BENCH_CUDA") == "" {
		b.Skip("set MESHNODE_BENCH_CUDA=1: needs a GPU")
	}
	rows, err := benchRows(os.Getenv("BENCH_ROWS"))
	if err != nil {
		b.Fatal(err)
	}
	steps := envInt("BENCH_STEPS", 200)
	// On the stand-in (a rehearsal of the benchmark itself) the llama
	// fixture, whose steps take seconds there, not a 1B model's minutes.
	name, f := "llama-Q8_0 fixture", fixture(b, "llama", "Q8_0")
	if os.Getenv("MESHNODE_CUDA_LIBRARY") != "stand-in" {
		md, err := vocabSource()
		if err != nil {
			b.Fatal(err)
		}
		f = modeltest.OpenLlama1B(b, b.TempDir(), "Q8_0", md)
		defer f.Close()
		name = "Llama-3.2-1B-shaped random Q8_0"
	}
	split, _ := strconv.Atoi(os.Getenv("BENCH_ATT_SPLIT"))
	be, err := cuda.New(cuda.Options{Library: cudaemu.Library(b), AttendSplitKeys: split})
	if err != nil {
		b.Skipf("no CUDA device: %v", err)
	}
	defer be.Close()
	m, err := model.Load(f, be)
	if err != nil {
		b.Fatal(err)
	}
	most := 0
	for _, r := range rows {
		most = max(most, r)
	}
	promptLen := envInt("BENCH_PROMPT", 64)
	s, err := m.NewSession(model.SessionOptions{Context: promptLen + most})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	bt, err := m.NewBatch(model.BatchOptions{Tokens: most, Seqs: most})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	prompt := make([]uint32, promptLen)
	for i := range prompt {
		prompt[i] = uint32(1 + (i*7919)%(m.Config().VocabSize-1))
	}
	if _, err := s.Eval(ctx, prompt); err != nil {
		b.Fatal(err)
	}
	step := func(n int) (time.Duration, error) {
		start := time.Now()
		if err := bt.Step(ctx, []model.Seq{{Session: s, Tokens: prompt[:n], Logits: n}}); err != nil {
			return 0, err
		}
		for j := range n {
			bt.ArgMaxAt(0, j)
		}
		d := time.Since(start)
		s.Truncate(promptLen)
		return d, nil
	}
	info := be.Info()
	fmt.Printf("device: %s (cc %d.%d, %s); %s, %d-token prompt, %d steps a count, AttendSplitKeys %d\n", info.Name, info.Major, info.Minor,
		info.Arch, name, promptLen, steps, split)
	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rows\tmedian step µs\tof a one-row step\tper extra row\t")
	var one float64
	for _, n := range rows {
		times := make([]float64, 0, steps)
		for i := range steps + 3 { // three to capture and warm its graph
			d, err := step(n)
			if err != nil {
				b.Fatal(err)
			}
			if i >= 3 {
				times = append(times, float64(d.Microseconds()))
			}
		}
		slices.Sort(times)
		med := times[len(times)/2]
		if n == 1 {
			one = med
		}
		// The ratios need the one-row step, measured first (BENCH_ROWS
		// without 1, as a profile of one count runs, prints times only).
		ratio, perRow := "–", "–"
		if one > 0 {
			ratio = fmt.Sprintf("%.2f", med/one)
			b.ReportMetric(med/one, fmt.Sprintf("rows%d-steps", n))
			if n > 1 {
				perRow = fmt.Sprintf("%.3f", (med/one-1)/float64(n-1))
			}
		}
		fmt.Fprintf(tw, "%d\t%.0f\t%s\t%s\t\n", n, med, ratio, perRow)
	}
	tw.Flush()
	fmt.Printf("stats: %+v\n", be.Stats())
}

// benchRows parses BENCH_ROWS: row counts from 1 to 64, comma-separated.
func benchRows(s string) ([]int, error) {
	if s == "" {
		return []int{1, 2, 3, 4, 5, 6, 8, 9}, nil
	}
	var rows []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 64 {
			return nil, fmt.Errorf("BENCH_ROWS %q: %q is not a row count from 1 to 64", s, f)
		}
		rows = append(rows, n)
	}
	return rows, nil
}
