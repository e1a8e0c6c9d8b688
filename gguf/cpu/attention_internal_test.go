package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// TestGroupedAttentionSameBits: grouped attention (attGroup) gives every
// query the bits the per-query path gives it, and each row of a window
// the bits it gets alone: over F16 and F32 caches, grouped-query ratios
// of 1 to 8, head sizes on and off rounds of 32, sliding windows (whose
// rows start at different keys), softcaps and sinks, windows of 1 to 7
// rows, and a cache holding an infinite value that a window's earlier
// rows do not see.
func TestGroupedAttentionSameBits(t *testing.T) {
	if !quant.WideRowsFor(quant.F16) {
		t.Skip("no WideRows kernels on this machine: attention is per query")
	}
	rng := rand.New(rand.NewPCG(41, 42))
	be := New(Options{Threads: 2})
	defer be.Close()
	f32 := func(x []float32) []float32 { return x }
	for _, tc := range []struct {
		name string
		typ  quant.Type
		a    backend.Attention
		inf  bool
	}{
		{"f16 gqa2 48", quant.F16, backend.Attention{Heads: 4, KVHeads: 2, HeadDimK: 48, HeadDimV: 48, Scale: 0.14}, false},
		{"f16 gqa4 64", quant.F16, backend.Attention{Heads: 8, KVHeads: 2, HeadDimK: 64, HeadDimV: 64, Scale: 0.125}, false},
		{"f16 mha 80/24", quant.F16, backend.Attention{Heads: 3, KVHeads: 3, HeadDimK: 80, HeadDimV: 24, Scale: 0.11}, false},
		{"f16 gqa8 window", quant.F16, backend.Attention{Heads: 8, KVHeads: 1, HeadDimK: 32, HeadDimV: 16, Scale: 0.18, Window: 5}, false},
		{"f16 softcap", quant.F16, backend.Attention{Heads: 4, KVHeads: 2, HeadDimK: 16, HeadDimV: 16, Scale: 0.25, Softcap: 2}, false},
		{"f16 sinks window", quant.F16, backend.Attention{Heads: 4, KVHeads: 2, HeadDimK: 48, HeadDimV: 48, Scale: 0.14, Window: 7,
			Sinks: []float32{-30, 0, 1.5, 40}}, false},
		{"f32 gqa2 48", quant.F32, backend.Attention{Heads: 4, KVHeads: 2, HeadDimK: 48, HeadDimV: 40, Scale: 0.14}, false},
		{"f16 infinite value", quant.F16, backend.Attention{Heads: 4, KVHeads: 2, HeadDimK: 48, HeadDimV: 48, Scale: 0.14}, true},
		{"f32 infinite value", quant.F32, backend.Attention{Heads: 4, KVHeads: 2, HeadDimK: 48, HeadDimV: 48, Scale: 0.14}, true},
	} {
		a := tc.a
		kd, vd := a.KVHeads*a.HeadDimK, a.KVHeads*a.HeadDimV
		// 1300 keys make the long context's groups of four (attGroupSize).
		for _, pos0 := range []int{0, 3, 37, 70, 1300} {
			for rows := 1; rows <= 7; rows++ {
				t.Run(fmt.Sprintf("%s/at %d/%d rows", tc.name, pos0, rows), func(t *testing.T) {
					shape := backend.KVShape{KVHeads: a.KVHeads, HeadDimK: a.HeadDimK, HeadDimV: a.HeadDimV}
					cache, err := be.NewKVCache(tc.typ, pos0+rows, []backend.KVShape{shape})
					if err != nil {
						t.Fatal(err)
					}
					n := pos0 + rows
					ks, vs := normals(rng, n*kd), normals(rng, n*vd)
					if tc.inf {
						// A value the window's last row stores, which only
						// it sees.
						vs[(n-1)*vd+rng.IntN(vd)] = float32(math.Inf(1))
					}
					be.StoreKV(cache, 0, 0, tensorOf(be, n, kd, ks), tensorOf(be, n, vd, vs))
					q := normals(rng, rows*a.Heads*a.HeadDimK)
					attend := func(grouped bool, from, to int) []float32 {
						old := groupAttention
						groupAttention = grouped
						defer func() { groupAttention = old }()
						dst := be.NewTensor(to-from, a.Heads*a.HeadDimV)
						qs := f32(q[from*a.Heads*a.HeadDimK : to*a.Heads*a.HeadDimK])
						be.Attend(dst, tensorOf(be, to-from, a.Heads*a.HeadDimK, qs), cache, 0, pos0+from, &a)
						out := make([]float32, dst.Len())
						be.Read(out, dst)
						return out
					}
					grouped, each := attend(true, 0, rows), attend(false, 0, rows)
					w := a.Heads * a.HeadDimV
					for i := range rows {
						alone := attend(true, i, i+1)
						for d := range w {
							g, e, o := grouped[i*w+d], each[i*w+d], alone[d]
							if math.Float32bits(g) != math.Float32bits(e) || math.Float32bits(g) != math.Float32bits(o) {
								t.Fatalf("row %d [%d]: grouped %v (%#08x), per query %v (%#08x), alone %v (%#08x)",
									i, d, g, math.Float32bits(g), e, math.Float32bits(e), o, math.Float32bits(o))
							}
						}
					}
					if tc.inf && rows > 1 && math.IsNaN(float64(grouped[0])) {
						t.Fatalf("row 0 is NaN: it does not see the infinite value")
					}
				})
			}
		}
	}
}

func normals(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

func tensorOf(be *Backend, rows, cols int, x []float32) backend.Tensor {
	t := be.NewTensor(rows, cols)
	be.Write(t, x)
	return t
}

// BenchmarkAttend times attention of a window of rows over an F16 cache,
// grouped (attGroup) against the per-query path and against groups of at
// most four queries in the same run (x_per_query, x_four: their time over
// the grouped one's, each the best of five alternating rounds): the
// built-in model's heads (4 queries over 2 KV heads of 48) and a
// 1B-shaped model's (32 over 8 of 64), at 150 and 1000 keys, for a decode
// step, speculative windows and a prefill chunk.
func BenchmarkAttend(b *testing.B) {
	be := New(Options{Threads: 2})
	defer be.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, a := range []backend.Attention{
		{Heads: 4, KVHeads: 2, HeadDimK: 48, HeadDimV: 48, Scale: 0.14},
		{Heads: 32, KVHeads: 8, HeadDimK: 64, HeadDimV: 64, Scale: 0.125},
	} {
		for _, keys := range []int{150, 1000} {
			for _, rows := range []int{1, 2, 5, 8, 32} {
				b.Run(fmt.Sprintf("%dx%d/keys=%d/rows=%d", a.Heads, a.HeadDimK, keys, rows), func(b *testing.B) {
					shape := backend.KVShape{KVHeads: a.KVHeads, HeadDimK: a.HeadDimK, HeadDimV: a.HeadDimV}
					cache, err := be.NewKVCache(quant.F16, keys+rows, []backend.KVShape{shape})
					if err != nil {
						b.Fatal(err)
					}
					n, kd, vd := keys+rows, a.KVHeads*a.HeadDimK, a.KVHeads*a.HeadDimV
					be.StoreKV(cache, 0, 0, tensorOf(be, n, kd, normals(rng, n*kd)), tensorOf(be, n, vd, normals(rng, n*vd)))
					q := tensorOf(be, rows, a.Heads*a.HeadDimK, normals(rng, rows*a.Heads*a.HeadDimK))
					dst := be.NewTensor(rows, a.Heads*a.HeadDimV)
					run := func() { be.Attend(dst, q, cache, 0, keys, &a) }
					best := func(grouped bool, limit int) time.Duration {
						old, oldLimit := groupAttention, attGroupLimit
						groupAttention, attGroupLimit = grouped, limit
						defer func() { groupAttention, attGroupLimit = old, oldLimit }()
						d := time.Duration(math.MaxInt64)
						for range 20 {
							t0 := time.Now()
							run()
							d = min(d, time.Since(t0))
						}
						return d
					}
					grouped, four, each := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
					for range 5 {
						grouped = min(grouped, best(true, attGroupMax))
						four = min(four, best(true, 4))
						each = min(each, best(false, attGroupMax))
					}
					for b.Loop() {
						run()
					}
					b.ReportMetric(float64(each)/float64(grouped), "x_per_query")
					b.ReportMetric(float64(four)/float64(grouped), "x_four")
				})
			}
		}
	}
}

// TestStoreKVRounds: StoreKV keeps each key and value as the cache's type
// rounds it (quant.FP32ToFP16 for F16, the bits for F32), values at their
// transposed places, and marks the cache non-finite exactly when a value
// stored is ±Inf or NaN — a finite float32 past the half's range included.
func TestStoreKVRounds(t *testing.T) {
	be := New(Options{Threads: 2})
	defer be.Close()
	shape := backend.KVShape{KVHeads: 2, HeadDimK: 12, HeadDimV: 20}
	kd, vd := shape.KVHeads*shape.HeadDimK, shape.KVHeads*shape.HeadDimV
	rng := rand.New(rand.NewPCG(7, 8))
	for _, typ := range []quant.Type{quant.F16, quant.F32} {
		for _, odd := range []float32{0, 1e5, float32(math.Inf(-1)), float32(math.NaN()), 3e-6} {
			name := fmt.Sprintf("%s/%v", typ, odd)
			const capacity, pos, rows = 16, 5, 3
			cache, err := be.NewKVCache(typ, capacity, []backend.KVShape{shape})
			if err != nil {
				t.Fatal(err)
			}
			ks, vs := normals(rng, rows*kd), normals(rng, rows*vd)
			vs[rows*vd-3] = odd
			be.StoreKV(cache, 0, pos, tensorOf(be, rows, kd, ks), tensorOf(be, rows, vd, vs))
			c := cache.(*kvCache)
			stored := func(b []byte) uint32 {
				if typ == quant.F16 {
					return uint32(binary.LittleEndian.Uint16(b))
				}
				return binary.LittleEndian.Uint32(b)
			}
			want := func(x float32) uint32 {
				if typ == quant.F16 {
					return uint32(quant.FP32ToFP16(x))
				}
				return math.Float32bits(x)
			}
			isNaN := func(u uint32) bool {
				if typ == quant.F16 {
					return u&0x7c00 == 0x7c00 && u&0x3ff != 0
				}
				return u&0x7f800000 == 0x7f800000 && u&0x7fffff != 0
			}
			for i := range rows {
				p := pos + i
				for h := range shape.KVHeads {
					for e := range shape.HeadDimK {
						got := stored(c.k[0][((h*capacity+p)*shape.HeadDimK+e)*c.es:])
						if x := ks[i*kd+h*shape.HeadDimK+e]; got != want(x) {
							t.Fatalf("%s: key %d of head %d at %d: %#x, want %#x (%v)", name, e, h, p, got, want(x), x)
						}
					}
				}
				for d := range vd {
					got := stored(c.v[0][(d*capacity+p)*c.es:])
					x := vs[i*vd+d]
					if w := want(x); got != w && !(isNaN(got) && isNaN(w)) {
						t.Fatalf("%s: value %d at %d: %#x, want %#x (%v)", name, d, p, got, w, x)
					}
				}
			}
			inf := typ == quant.F16 && odd == 1e5 || math.IsInf(float64(odd), 0) || odd != odd
			if c.nonFinite != inf {
				t.Errorf("%s: non-finite %v, want %v", name, c.nonFinite, inf)
			}
		}
	}
}
