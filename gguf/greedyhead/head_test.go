package greedyhead

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// TestMain builds shadows on the Go kernels too (purego, arm64), which
// New refuses outside the tests as too slow to pay.
func TestMain(m *testing.M) {
	slowOK = true
	os.Exit(m.Run())
}

func normal(rng *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * scale)
	}
	return x
}

// encode stores x as rows of type t.
func encode(t testing.TB, typ quant.Type, x []float32) []byte {
	t.Helper()
	rs, err := typ.RowSize(len(x))
	if err != nil {
		t.Fatal(err)
	}
	w := make([]byte, rs)
	if err := quant.Quantize(typ, x, w); err != nil {
		t.Fatal(err)
	}
	return w
}

func activation(t testing.TB, typ quant.Type, x []float32) *quant.Activation {
	t.Helper()
	a, err := quant.NewActivation(typ, len(x))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Quantize(x); err != nil {
		t.Fatal(err)
	}
	return a
}

// fullArgMax is what the shadow must reproduce: every logit by
// quant.MatVec, then backend.ArgMax.
func fullArgMax(typ quant.Type, w []byte, rows int, a *quant.Activation) int {
	out := make([]float32, rows)
	quant.MatVec(typ, w, a, out)
	return backend.ArgMax(out)
}

// TestKernelsMatchGo: the assembly kernels give rows16Go's bits, sums,
// roundings and lane maxima alike, for one to eight activation rows.
func TestKernelsMatchGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	// n/4 groups: 2 (the two-group step alone), 6 (it, then four at a
	// time), 16, 48.
	for _, n := range []int{8, 24, 64, 192} {
		blocks := 5
		packed := make([]byte, blocks*group*n)
		for i := range packed {
			packed[i] = byte(1 + rng.IntN(255))
		}
		scale := normal(rng, blocks*group, 0.01)
		x, xi := make([]int8, 8*n), make([]int8, 8*n)
		for i := range x {
			x[i] = int8(rng.IntN(255) - 127)
		}
		corr := []int32{rng.Int32N(1000), -rng.Int32N(1000), 7, 0, 1 << 20, -5, rng.Int32N(1000), 3}
		ts := []float32{0.1, 0.02, 3, 1e-3, 7e-5, 0.5, 1, 2e-2}
		os := blocks * group
		for k := 1; k <= 8; k++ {
			want, got := make([]float32, 8*os), make([]float32, 8*os)
			wl, gl := make([]float32, 8*group), make([]float32, 8*group)
			for i := range wl {
				wl[i], gl[i] = float32(math.Inf(-1)), float32(math.Inf(-1))
			}
			interleave8(xi, x, k, n)
			rows16Go(packed, scale, blocks, n, x, k, corr, ts, want, os, wl)
			rows16(packed, scale, blocks, n, x, xi, k, corr, ts, got, os, gl)
			for i := range want {
				if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
					t.Fatalf("n=%d k=%d: approx[%d] = %v, want %v", n, k, i, got[i], want[i])
				}
			}
			for i := range wl {
				if math.Float32bits(wl[i]) != math.Float32bits(gl[i]) {
					t.Fatalf("n=%d k=%d: lane max %d = %v, want %v", n, k, i, gl[i], wl[i])
				}
			}
		}
	}
}

// TestArgMaxMatchesFullHead: every token the shadow settles is the full
// head's, on heads of each type it takes (F32, F16, BF16, Q8_0), with rows that are not a whole
// number of blocks, windows of one to thirteen activations (every kernel,
// and eight then five),
// activations aimed at a row (a clear winner), random ones (close
// calls), and rows tied exactly or within an ulp (the lowest index wins).
func TestArgMaxMatchesFullHead(t *testing.T) {
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0} {
		for _, sh := range [][2]int{{1003, 64}, {512, 192}, {7, 8}} {
			rows, n := sh[0], sh[1]
			if n%typ.BlockSize() != 0 {
				continue
			}
			rng := rand.New(rand.NewPCG(uint64(rows), uint64(n)))
			wf := normal(rng, rows*n, 0.1)
			// Row 5 is row 2 again, and row 4 row 3 nudged by an ulp;
			// rows 10 to 109 are row 9 give or take a thousandth, whose
			// exact order the int8 copy cannot tell.
			if rows > 5 {
				copy(wf[5*n:6*n], wf[2*n:3*n])
				copy(wf[4*n:5*n], wf[3*n:4*n])
				wf[4*n] = math.Nextafter32(wf[4*n], float32(math.Inf(1)))
			}
			cluster := rows > 110
			if cluster {
				for j := 10; j < 110; j++ {
					for e := range n {
						wf[j*n+e] = wf[9*n+e] * float32(1+rng.NormFloat64()*1e-3)
					}
				}
			}
			w := encode(t, typ, wf)
			h, err := New(typ, w, rows, n)
			if err != nil {
				t.Fatal(err)
			}
			var s Scratch
			settled, total := 0, 0
			for trial := range 26 {
				k := 1 + trial%13
				acts := make([]*quant.Activation, k)
				for i := range acts {
					var x []float32
					switch (trial + i) % 3 {
					case 0:
						x = normal(rng, n, 1)
					case 1: // aimed at a row, so it wins clearly
						j := rng.IntN(rows)
						x = make([]float32, n)
						for e := range x {
							x[e] = 10*wf[j*n+e] + float32(rng.NormFloat64()*0.1)
						}
					default: // aimed at the tied rows, or the cluster
						j := min(2+rng.IntN(2), rows-1)
						if cluster && trial%2 == 0 {
							j = 9
						}
						x = make([]float32, n)
						for e := range x {
							x[e] = 20 * wf[j*n+e]
						}
					}
					acts[i] = activation(t, typ, x)
				}
				dst := make([]int, k)
				h.ArgMax(acts, dst, &s)
				// In parts, as a backend's workers run it: the same.
				var sp Scratch
				parted := make([]int, k)
				h.Prepare(acts, &sp, 3)
				for p := sp.Parts() - 1; p >= 0; p-- {
					h.Approximate(&sp, p)
				}
				h.Settle(acts, parted, &sp)
				if !slices.Equal(parted, dst) {
					t.Fatalf("%s %dx%d trial %d: in three parts %v, in one %v", typ, rows, n, trial, parted, dst)
				}
				for i, a := range acts {
					want := fullArgMax(typ, w, rows, a)
					total++
					if dst[i] < 0 {
						continue
					}
					settled++
					if dst[i] != want {
						t.Fatalf("%s %dx%d trial %d row %d: argmax %d, the full head's %d", typ, rows, n, trial, i, dst[i], want)
					}
				}
			}
			t.Logf("%s %dx%d: %d of %d settled, %d rows dotted exactly for %d tokens", typ, rows, n, settled, total, s.Candidates, s.Tokens)
			if settled < total*2/3 {
				t.Fatalf("%s %dx%d: only %d of %d tokens settled", typ, rows, n, settled, total)
			}
		}
	}
}

// TestUnsettled: an activation that is not finite, or a head that is not,
// is left to the full head; a head of an unsupported type or shape is
// refused.
func TestUnsettled(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	wf := normal(rng, 40*16, 1)
	w := encode(t, quant.F32, wf)
	h, err := New(quant.F32, w, 40, 16)
	if err != nil {
		t.Fatal(err)
	}
	x := normal(rng, 16, 1)
	x[3] = float32(math.NaN())
	dst := []int{7}
	var s Scratch
	h.ArgMax([]*quant.Activation{activation(t, quant.F32, x)}, dst, &s)
	if dst[0] != -1 || s.Unsettled != 1 {
		t.Fatalf("NaN activation: %d (unsettled %d), want −1", dst[0], s.Unsettled)
	}
	wf[17] = float32(math.Inf(1))
	if _, err := New(quant.F32, encode(t, quant.F32, wf), 40, 16); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("an Inf weight: %v, want ErrUnsupported", err)
	}
	if _, err := New(quant.Q4_0, make([]byte, 18), 1, 32); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Q4_0: %v, want ErrUnsupported", err)
	}
	if _, err := New(quant.F32, make([]byte, 4*12), 1, 12); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("12 columns: %v, want ErrUnsupported", err)
	}
	if _, err := New(quant.F32, make([]byte, 4*16), 2, 16); err == nil {
		t.Fatal("a short head was accepted")
	}
}

// TestQuantizeAsDefined: Scratch.quantize gives each activation the
// quants, correction, scale and bound of its definition — the largest
// magnitude over 127 as the scale, each element's quotient rounded to even
// and clamped to ±127 (math.RoundToEven and the float min and max), the
// sums in order and Head.bound of them — on activations of normal, tiny, subnormal, halfway
// (k + 0.5 times the scale) and signed-zero elements, and −1 for one
// holding ±Inf or NaN.
func TestQuantizeAsDefined(t *testing.T) {
	const rows, n = 64, 96
	rng := rand.New(rand.NewPCG(5, 6))
	// F32 weights, so that the activations keep tiny and subnormal
	// elements (an F16 head's would round them to zero).
	h, err := New(quant.F32, encode(t, quant.F32, normal(rng, rows*n, 1)), rows, n)
	if err != nil {
		t.Fatal(err)
	}
	want := func(x []float32) (q []int8, corr int32, scale float32, bound float64) {
		m, l1, l2 := 0.0, 0.0, 0.0
		for _, v := range x {
			a := math.Abs(float64(v))
			if !(a <= math.MaxFloat32) {
				return nil, 0, 0, -1
			}
			m = max(m, a)
			l1 += a
			l2 += a * a
		}
		scale = float32(m / 127)
		e2 := 0.0
		for _, v := range x {
			p := 0.0
			if scale > 0 {
				p = max(-127, min(127, math.RoundToEven(float64(v)/float64(scale))))
			}
			q = append(q, int8(p))
			corr += 128 * int32(p)
			d := float64(v) - p*float64(scale)
			e2 += d * d
		}
		return q, corr, scale, h.bound(l1, l2, e2)
	}
	cases := map[string]func() []float32{
		"normal":    func() []float32 { return normal(rng, n, 1) },
		"tiny":      func() []float32 { return normal(rng, n, 1e-30) },
		"subnormal": func() []float32 { return normal(rng, n, 1e-42) },
		"zeros":     func() []float32 { x := make([]float32, n); x[3] = float32(math.Copysign(0, -1)); return x },
		"halfway": func() []float32 {
			// The largest is 127 scales, so the scale is 1 and every
			// other element is a half: rounding to even decides it.
			x := make([]float32, n)
			x[0] = 127
			for k := 1; k < n; k++ {
				x[k] = float32(rng.IntN(254)-127) + 0.5
			}
			return x
		},
		"inf": func() []float32 { x := normal(rng, n, 1); x[7] = float32(math.Inf(-1)); return x },
		"nan": func() []float32 { x := normal(rng, n, 1); x[9] = float32(math.NaN()); return x },
	}
	for name, mk := range cases {
		for range 20 {
			x := mk()
			a := activation(t, h.Type(), x)
			var s Scratch
			h.Prepare([]*quant.Activation{a}, &s, 1)
			q, corr, scale, bound := want(x)
			if s.bound[0] != bound {
				t.Fatalf("%s: bound %v, want %v", name, s.bound[0], bound)
			}
			if bound < 0 {
				continue
			}
			if !slices.Equal(s.q[:n], q) || s.corr[0] != corr || s.t[0] != scale {
				t.Fatalf("%s: quants %v (correction %d, scale %v), want %v (%d, %v)", name, s.q[:n], s.corr[0], s.t[0], q, corr, scale)
			}
		}
	}
}
