package cpu_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/quant"
)

// scriptedClock returns instants that make the timed products take, in
// turn, the durations given (two readings each), then stands still.
func scriptedClock(durations ...time.Duration) func() time.Time {
	var now time.Time
	i, start := 0, true
	return func() time.Time {
		if !start && i < len(durations) {
			now = now.Add(durations[i])
			i++
		}
		start = !start
		return now
	}
}

// TestOneRowTuning: a weight read from memory, multiplied by one row at a
// time, takes the band and the row kernels in turn on its first products
// (after one untimed) and keeps the faster by its least time, a tie for
// the band kernels; every product, whichever kernels, gives the same
// bits, as do the fixed choices.
func TestOneRowTuning(t *testing.T) {
	const rows, cols = 64, 2048
	if !quant.StreamedBand(quant.Q4_0, cols) {
		t.Skip("skipping: this CPU has no band kernel for a one-row Q4_0 product (AVX-512 VNNI)")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	wb := quantized(t, quant.Q4_0, normals(rng, rows*cols, 1))
	x := normals(rng, cols, 1)
	product := func(be *cpu.Backend, times int) [][]float32 {
		w, err := be.Weight(quant.Q4_0, rows, cols, wb)
		if err != nil {
			t.Fatal(err)
		}
		var out [][]float32
		for range times {
			dst := be.NewTensor(1, rows)
			be.MatMul(dst, w, tensor(be, 1, cols, x))
			out = append(out, read(be, dst))
		}
		return out
	}
	ms := time.Millisecond
	for _, tc := range []struct {
		name      string
		durations []time.Duration // band, rows, band, …
		rows      bool
	}{
		{"rows faster", []time.Duration{9 * ms, 5 * ms, 4 * ms, 6 * ms, 7 * ms, 3 * ms}, true},
		{"band faster", []time.Duration{2 * ms, 5 * ms, 9 * ms, 3 * ms, 7 * ms, 8 * ms}, false},
		{"a tie", []time.Duration{5 * ms, 5 * ms, 6 * ms, 7 * ms, 8 * ms, 9 * ms}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := cpu.New(cpu.Options{Threads: 2, CacheBytes: -1})
			defer be.Close()
			cpu.SetClock(be, scriptedClock(tc.durations...))
			out := product(be, 7)
			if band, rows := be.OneRowChoices(); band+rows != 1 || (rows == 1) != tc.rows {
				t.Fatalf("after 7 products: %d weights on the band kernels, %d on the rows; want the rows %v", band, rows, tc.rows)
			}
			out = append(out, product(be, 2)...) // a second weight: its untimed first product, then the band kernels
			for i, o := range out {
				if !slices.Equal(o, out[0]) {
					t.Fatalf("product %d differs from the first", i)
				}
			}
		})
	}
	for _, mode := range []cpu.OneRow{cpu.OneRowBand, cpu.OneRowRows} {
		be := cpu.New(cpu.Options{Threads: 2, CacheBytes: -1, OneRow: mode})
		out := product(be, 2)
		ref := cpu.New(cpu.Options{Threads: 1, CacheBytes: -1})
		want := product(ref, 1)
		if band, rows := be.OneRowChoices(); band+rows != 0 || !slices.Equal(out[0], want[0]) || !slices.Equal(out[1], want[0]) {
			t.Errorf("OneRow %d: %d and %d weights tuned, or other bits", mode, band, rows)
		}
		be.Close()
		ref.Close()
	}
}
