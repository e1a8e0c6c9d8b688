package quant_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/gguf/quant"
)

// TestWideRowsMatchesVecDot holds WideRows to VecDot of every weight row
// with every activation row, bit for bit, on rows of any length (whole
// chunks of 32, a partial chunk, or both), one to four activation rows,
// and weights that are normal, raw bits, or hold ±Inf, NaN and ±0.
func TestWideRowsMatchesVecDot(t *testing.T) {
	for _, typ := range []quant.Type{quant.F16, quant.BF16, quant.F32} {
		if !quant.WideRowsFor(typ) {
			t.Logf("%s: no WideRows kernels here", typ)
			if quant.WideRows(typ, nil, 0, 0, 0, nil, 0, 0, nil, 0) {
				t.Fatalf("%s: WideRows ran where WideRowsFor says no", typ)
			}
			continue
		}
		rng := rand.New(rand.NewPCG(31, 32))
		es := typ.TypeSize()
		for _, n := range []int{1, 7, 16, 31, 32, 33, 48, 64, 80, 150, 191, 256, 300} {
			for live := 1; live <= quant.WideRowsMax; live++ {
				for _, kind := range []string{"random", "raw", "specials"} {
					rows := 1 + rng.IntN(20)
					rs := n*es + 2*rng.IntN(3)*es // rows may be packed or apart
					w := make([]byte, (rows-1)*rs+n*es)
					fillBlocks(rng, typ, w, kind)
					padded := (n + 31) &^ 31
					xs := padded + 32*rng.IntN(2)
					x := make([]float32, (live-1)*xs+padded)
					acts := make([]*quant.Activation, live)
					for j := range live {
						a, err := quant.NewActivation(typ, n)
						if err != nil {
							t.Fatal(err)
						}
						if err := a.Quantize(normal(rng, n)); err != nil {
							t.Fatal(err)
						}
						quant.Widen(typ, x[j*xs:j*xs+n], a.Data)
						acts[j] = a
					}
					os := rows + rng.IntN(3)
					out := make([]float32, (live-1)*os+rows)
					if !quant.WideRows(typ, w, rs, n, rows, x, xs, live, out, os) {
						t.Fatalf("%s: WideRows did not run where WideRowsFor says it does", typ)
					}
					for j := range live {
						for r := range rows {
							want := quant.VecDot(typ, w[r*rs:r*rs+n*es], acts[j])
							if got := out[j*os+r]; !sameFloat(got, want) {
								t.Fatalf("%s n=%d live=%d %s: out[%d][%d] = %g (%#08x), VecDot %g (%#08x)",
									typ, n, live, kind, j, r, got, math.Float32bits(got), want, math.Float32bits(want))
							}
						}
					}
				}
			}
		}
	}
}

// FuzzWideRowsMatchesVecDot: any weight and activation bits (NaNs,
// infinities, subnormals) give WideRows VecDot's bits, for one to
// WideRowsMax activation rows of any length.
func FuzzWideRowsMatchesVecDot(f *testing.F) {
	rng := rand.New(rand.NewPCG(51, 52))
	for _, pick := range []uint8{0, 1, 2, 4, 9, 11, 12, 21} {
		typ, live := wideCase(pick)
		n := 1 + rng.IntN(200)
		w := make([]byte, (1+rng.IntN(8))*n*typ.TypeSize())
		randomBlocks(rng, typ, w, pick%2 == 0)
		act := make([]byte, live*n*typ.TypeSize())
		randomBlocks(rng, typ, act, pick%2 == 0)
		f.Add(pick, w, act)
	}
	f.Fuzz(func(t *testing.T, pick uint8, w, act []byte) {
		typ, live := wideCase(pick)
		if !quant.WideRowsFor(typ) {
			t.Skip("no WideRows kernels here")
		}
		es := typ.TypeSize()
		n := min(len(act)/(es*live), 2048)
		if n == 0 {
			return
		}
		rows := min(len(w)/(n*es), 64)
		if rows == 0 {
			return
		}
		padded := (n + 31) &^ 31
		x := make([]float32, live*padded)
		acts := make([]*quant.Activation, live)
		for j := range live {
			acts[j] = &quant.Activation{Type: typ, N: n, Data: act[j*n*es : (j+1)*n*es]}
			quant.Widen(typ, x[j*padded:j*padded+n], acts[j].Data)
		}
		out := make([]float32, live*rows)
		quant.WideRows(typ, w, n*es, n, rows, x, padded, live, out, rows)
		for j := range live {
			for r := range rows {
				want := quant.VecDot(typ, w[r*n*es:(r+1)*n*es], acts[j])
				if got := out[j*rows+r]; !sameFloat(got, want) {
					t.Fatalf("%s n=%d live=%d: out[%d][%d] = %g (%#08x), VecDot %g (%#08x)",
						typ, n, live, j, r, got, math.Float32bits(got), want, math.Float32bits(want))
				}
			}
		}
	})
}

// wideCase is a fuzz input's weight type and activation rows.
func wideCase(pick uint8) (quant.Type, int) {
	return []quant.Type{quant.F16, quant.BF16, quant.F32}[pick%3], 1 + int(pick/3)%quant.WideRowsMax
}
