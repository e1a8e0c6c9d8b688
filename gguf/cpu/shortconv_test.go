package cpu_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// gatedConvRef is LFM2's gated convolution of one sequence in float64,
// written from llama.cpp's graph: b ⊙ x appended to the zero state, each
// row's k-tap window dotted with the channel's weights, times c. rows
// holds the sequence's bcx rows (3·ch each).
func gatedConvRef(rows [][]float32, w []float32, ch, k int) [][]float64 {
	hist := make([][]float64, k-1, k-1+len(rows))
	for i := range hist {
		hist[i] = make([]float64, ch)
	}
	var out [][]float64
	for _, r := range rows {
		bx := make([]float64, ch)
		for i := range ch {
			bx[i] = float64(r[i]) * float64(r[2*ch+i])
		}
		hist = append(hist, bx)
		y := make([]float64, ch)
		for i := range ch {
			var s float64
			for t := range k {
				s += hist[len(hist)-k+t][i] * float64(w[i*k+t])
			}
			y[i] = float64(r[ch+i]) * s
		}
		out = append(out, y)
	}
	return out
}

// TestGatedConv holds the kernel to the float64 reference over two
// sequences interleaved in one step and a second step that continues
// them from their states, and checks that threads, and a state advanced
// in place or into another tensor, change no bits.
func TestGatedConv(t *testing.T) {
	const ch, k, n = 300, 3, 6
	rng := rand.New(rand.NewPCG(3, 4))
	w := normals(rng, ch*k, 0.5)
	step1, step2 := normals(rng, n*3*ch, 1), normals(rng, n*3*ch, 1)
	row := func(v []float32, r int) []float32 { return v[r*3*ch : (r+1)*3*ch] }
	// Sequence A has rows 0-1 and 4-5 of each step, B rows 2-3.
	var ra, rb [][]float32
	for _, v := range [][]float32{step1, step2} {
		ra = append(ra, row(v, 0), row(v, 1), row(v, 4), row(v, 5))
		rb = append(rb, row(v, 2), row(v, 3))
	}
	wantA, wantB := gatedConvRef(ra, w, ch, k), gatedConvRef(rb, w, ch, k)

	run := func(threads int, twoStates bool) (ys [2][]float32, prev []float32) {
		be := newBackend(t, threads)
		wt, err := be.Weight(quant.F32, ch, k, f32bytes(w))
		if err != nil {
			t.Fatal(err)
		}
		pa, pb := backend.DeltaState{Conv: be.NewTensor(k-1, ch)}, backend.DeltaState{Conv: be.NewTensor(k-1, ch)}
		na := pa
		if twoStates {
			na = backend.DeltaState{Conv: be.NewTensor(k-1, ch)}
		}
		for s, v := range [][]float32{step1, step2} {
			seqs := []backend.DeltaSeq{
				{Spans: [2]backend.RowSpan{{Row: 0, N: 2}, {Row: 4, N: 2}}, Prev: pa, Next: na},
				{Spans: [2]backend.RowSpan{{Row: 2, N: 2}}, Prev: pb, Next: pb},
			}
			if s == 0 && twoStates {
				prev = read(be, pa.Conv)
			}
			y := be.NewTensor(n, ch)
			be.GatedConv(y, tensor(be, n, 3*ch, v), wt, seqs)
			ys[s] = read(be, y)
			if twoStates {
				if s == 0 && !slices.Equal(read(be, pa.Conv), prev) {
					t.Error("the previous state changed")
				}
				pa, na = na, pa
			}
		}
		return ys, prev
	}
	ys, _ := run(1, false)
	var worst float64
	check := func(want [][]float64, rowsOf func(s int) []int) {
		for s := range 2 {
			for i, r := range rowsOf(s) {
				for j := range ch {
					ref := want[s*len(rowsOf(s))+i][j]
					worst = max(worst, math.Abs(float64(ys[s][r*ch+j])-ref)/max(1, math.Abs(ref)))
				}
			}
		}
	}
	check(wantA, func(int) []int { return []int{0, 1, 4, 5} })
	check(wantB, func(int) []int { return []int{2, 3} })
	t.Logf("relative error %.3g against the float64 reference", worst)
	if worst > 1e-5 {
		t.Errorf("relative error %.3g exceeds 1e-5", worst)
	}
	ys3, _ := run(3, true)
	if !slices.Equal(ys3[0], ys[0]) || !slices.Equal(ys3[1], ys[1]) {
		t.Error("two states on three threads differ from one state in place on one")
	}
}
