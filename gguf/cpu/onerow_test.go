package cpu_test

import (
	"fmt"
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
// time, takes each candidate kind of kernels in turn on its first
// products (after one untimed) — the band kernels where its type has them,
// the row kernels, the row kernels asking ahead where they can — and keeps
// the fastest by its least time, a tie for the earlier kind; every
// product, whichever kernels, gives the same bits, as do the fixed choices.
func TestOneRowTuning(t *testing.T) {
	const rows, cols = 64, 2048
	ms := time.Millisecond
	for _, typ := range []quant.Type{quant.Q4_0, quant.Q5_0} {
		band, ahead := quant.StreamedBand(typ, cols), quant.RowsAhead(typ, cols)
		var kinds []string // the candidates, in the order they take turns
		if band {
			kinds = append(kinds, "band")
		}
		kinds = append(kinds, "rows")
		if ahead {
			kinds = append(kinds, "ahead")
		}
		if len(kinds) == 1 {
			t.Logf("%s: only the row kernels here (no band kernel, no asks): nothing to tune", typ)
			continue
		}
		rng := rand.New(rand.NewPCG(9, 10))
		wb := quantized(t, typ, normals(rng, rows*cols, 1))
		x := normals(rng, cols, 1)
		// weight makes a weight on be and returns its one-row product.
		weight := func(be *cpu.Backend) func() []float32 {
			w, err := be.Weight(typ, rows, cols, wb)
			if err != nil {
				t.Fatal(err)
			}
			return func() []float32 {
				dst := be.NewTensor(1, rows)
				be.MatMul(dst, w, tensor(be, 1, cols, x))
				return read(be, dst)
			}
		}
		choices := func(be *cpu.Backend) map[string]int {
			b, r, a := be.OneRowChoices()
			return map[string]int{"band": b, "rows": r, "ahead": a}
		}
		ref := cpu.New(cpu.Options{Threads: 1, CacheBytes: -1, OneRow: cpu.OneRowRows})
		want := weight(ref)()
		ref.Close()
		same := func(what string, got []float32) {
			t.Helper()
			if !slices.Equal(got, want) {
				t.Fatalf("%s: other bits than the row kernels'", what)
			}
		}
		decide := 1 + 3*len(kinds) // an untimed product, then three rounds
		for _, tc := range []struct {
			name  string
			least map[string]time.Duration // each kind's least time
			want  string
		}{
			{"band fastest", map[string]time.Duration{"band": 2 * ms, "rows": 5 * ms, "ahead": 4 * ms}, "band"},
			{"rows fastest", map[string]time.Duration{"band": 7 * ms, "rows": 3 * ms, "ahead": 4 * ms}, "rows"},
			{"asks fastest", map[string]time.Duration{"band": 7 * ms, "rows": 5 * ms, "ahead": 4 * ms}, "ahead"},
			{"a tie", map[string]time.Duration{"band": 5 * ms, "rows": 5 * ms, "ahead": 5 * ms}, kinds[0]},
		} {
			if !slices.Contains(kinds, tc.want) {
				continue // not a candidate here
			}
			t.Run(typ.String()+"/"+tc.name, func(t *testing.T) {
				// Three rounds of the candidates in turn, each kind's
				// least in a different round.
				var durations []time.Duration
				for round := range 3 {
					for j, k := range kinds {
						d := tc.least[k]
						if (round+j)%3 != 0 {
							d += time.Duration(1+round) * ms
						}
						durations = append(durations, d)
					}
				}
				be := cpu.New(cpu.Options{Threads: 2, CacheBytes: -1})
				defer be.Close()
				cpu.SetClock(be, scriptedClock(durations...))
				mul := weight(be)
				for i := range decide - 1 {
					same(fmt.Sprintf("product %d", i), mul())
				}
				if got := choices(be); got["band"]+got["rows"]+got["ahead"] != 0 {
					t.Fatalf("decided after %d products, before the last round: %v", decide-1, got)
				}
				same("the deciding product", mul())
				if got := choices(be); got[tc.want] != 1 || got["band"]+got["rows"]+got["ahead"] != 1 {
					t.Fatalf("after %d products: %v, want the %s kernels", decide, got, tc.want)
				}
				same("a product after", mul())
				other := weight(be) // a second weight: its untimed first product, then the candidates
				same("a second weight's first product", other())
				same("a second weight's second product", other())
			})
		}
		for _, mode := range []cpu.OneRow{cpu.OneRowBand, cpu.OneRowRows, cpu.OneRowAhead} {
			be := cpu.New(cpu.Options{Threads: 2, CacheBytes: -1, OneRow: mode})
			mul := weight(be)
			for i := range decide + 1 {
				same(fmt.Sprintf("OneRow %d, product %d", mode, i), mul())
			}
			if got := choices(be); got["band"]+got["rows"]+got["ahead"] != 0 {
				t.Errorf("OneRow %d: weights tuned: %v", mode, got)
			}
			be.Close()
		}
	}
}
