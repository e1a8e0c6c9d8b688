package cpu

import (
	"cmp"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/gguf/backend"
)

// TestAttendFull: an encoder's attention (every row over the rows it
// sees, no cache, no causal mask) is the textbook softmax(scale·q·k +
// bias)·v computed in float64, within 1e-5 of each output's scale, for
// one to 300 rows (past a block of query rows) and one to twelve heads:
// without a bias, with ALiBi's (the paper's slopes: 2^(−8(h+1)/n) for the
// first n heads, n the largest power of two in the count, then
// 2^(−4(2(h−n)+1)/n)), and within a symmetric window (keys more than half
// of it away left out), with as many key and value heads or fewer
// (grouped: query head h reads KV head h/(heads/kvHeads)), on one and two
// threads; the same bits on either.
func TestAttendFull(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		n, heads, d int
		maxBias     float32
		window      int
		kvHeads     int // 0: heads
	}{
		{1, 1, 8, 0, 0, 0}, {5, 2, 16, 0, 0, 0}, {33, 4, 8, 0, 0, 0}, {70, 6, 24, 0, 0, 0}, {300, 2, 8, 0, 0, 0},
		{9, 1, 8, 8, 0, 0}, {33, 4, 8, 8, 0, 0}, {70, 6, 24, 8, 0, 0}, {40, 12, 8, 8, 0, 0}, {200, 3, 8, 8, 0, 0},
		{33, 2, 8, 0, 8, 0}, {300, 2, 16, 0, 64, 0}, {150, 2, 8, 8, 129, 0}, {5, 1, 8, 0, 4, 0},
		{33, 4, 8, 0, 0, 2}, {40, 3, 16, 0, 0, 1}, {140, 6, 8, 0, 32, 3},
	} {
		kvh := cmp.Or(tc.kvHeads, tc.heads)
		w, kw, group := tc.heads*tc.d, kvh*tc.d, tc.heads/kvh
		rnd := func(cols int) []float32 {
			v := make([]float32, tc.n*cols)
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
			return v
		}
		q, k, v := rnd(w), rnd(kw), rnd(kw)
		scale := float32(1 / math.Sqrt(float64(tc.d)))
		var first []float32
		for _, threads := range []int{1, 2} {
			b := New(Options{Threads: threads})
			tq, tk, tv, out := b.NewTensor(tc.n, w), b.NewTensor(tc.n, kw), b.NewTensor(tc.n, kw), b.NewTensor(tc.n, w)
			b.Write(tq, q)
			b.Write(tk, k)
			b.Write(tv, v)
			var fa backend.FullAttender = b
			fa.AttendFull(out, tq, tk, tv, &backend.FullAttention{Heads: tc.heads, KVHeads: tc.kvHeads, Scale: scale, MaxALiBi: tc.maxBias, Window: tc.window})
			got := make([]float32, tc.n*w)
			b.Read(got, out)
			b.Close()
			pow2 := 1
			for pow2*2 <= tc.heads {
				pow2 *= 2
			}
			for h := range tc.heads {
				slope := 0.0
				switch {
				case tc.maxBias == 0:
				case h < pow2:
					slope = math.Exp2(-float64(tc.maxBias) * float64(h+1) / float64(pow2))
				default:
					slope = math.Exp2(-float64(tc.maxBias) / 2 * float64(2*(h-pow2)+1) / float64(pow2))
				}
				for i := range tc.n {
					p := make([]float64, tc.n)
					top, sum := math.Inf(-1), 0.0
					for j := range tc.n {
						for x := range tc.d {
							p[j] += float64(q[i*w+h*tc.d+x]) * float64(k[j*kw+h/group*tc.d+x])
						}
						p[j] = p[j]*float64(scale) - slope*math.Abs(float64(i-j))
						if tc.window > 0 && abs(i-j) > tc.window/2 {
							p[j] = math.Inf(-1) // llama.cpp's is_masked_swa, symmetric
						}
						top = max(top, p[j])
					}
					for j := range p {
						p[j] = math.Exp(p[j] - top)
						sum += p[j]
					}
					for x := range tc.d {
						var want, mag float64
						for j := range tc.n {
							want += p[j] / sum * float64(v[j*kw+h/group*tc.d+x])
							mag = max(mag, math.Abs(float64(v[j*kw+h/group*tc.d+x])))
						}
						if g := float64(got[i*w+h*tc.d+x]); math.Abs(g-want) > 1e-5*mag {
							t.Fatalf("%+v, %d threads: head %d row %d col %d is %v, want %v", tc, threads, h, i, x, g, want)
						}
					}
				}
			}
			if first == nil {
				first = got
				continue
			}
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(first[i]) {
					t.Fatalf("%+v: %d threads give other bits at %d", tc, threads, i)
				}
			}
		}
	}
}
