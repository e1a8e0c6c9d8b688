package quant_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/quant"
)

// Benchmarks report weight bytes read per second (GB/s) and, as
// x_memcpy, that rate over the rate copy() moves the same number of bytes
// on this machine in the same run: 1.0 would be running at memory speed.
// The MatVec benchmarks also report x_go: the rate over that of the
// pure-Go kernels on the same data, timed in the same run (1 where there
// are no assembly kernels). ggml's own speed on this machine is printed by
// BENCH=1 testdata/goldens.sh, for the 256×4096 shape of BenchmarkMatVec.

const benchCols, benchRows = 4096, 256

var memcpyRate = sync.OnceValue(func() float64 {
	src := make([]byte, 16<<20)
	dst := make([]byte, len(src))
	best := 0.0
	for range 5 {
		start := time.Now()
		for range 4 {
			copy(dst, src)
		}
		best = max(best, float64(4*len(src))/time.Since(start).Seconds())
	}
	return best
})

func benchMatrix(b *testing.B, typ quant.Type) ([]byte, []float32) {
	rng := rand.New(rand.NewPCG(3, 4))
	w := normal(rng, benchCols*benchRows)
	q := make([]byte, mustRowSize(b, typ, len(w)))
	if err := quant.Quantize(typ, w, q); err != nil {
		b.Fatal(err)
	}
	return q, normal(rng, benchCols)
}

func report(b *testing.B, bytes int) {
	rate := float64(bytes) * float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate/1e9, "GB/s")
	b.ReportMetric(rate/memcpyRate(), "x_memcpy")
}

func BenchmarkMatVec(b *testing.B) {
	for _, typ := range goldenTypes {
		b.Run(typ.String(), func(b *testing.B) {
			q, x := benchMatrix(b, typ)
			a, _ := quant.NewActivation(typ, benchCols)
			if err := a.Quantize(x); err != nil {
				b.Fatal(err)
			}
			benchMatVec(b, typ, [][]byte{q}, a, benchRows)
		})
	}
}

// BenchmarkMatVec1B times the mat-vec shapes of a 1B-parameter llama
// (TinyLlama: attention 2048×2048, feed-forward up/gate 5632×2048 and down
// 2048×5632, rows×columns) for the types llama.cpp models ship in. Each
// iteration takes the next of enough copies of the matrix to fill 256 MiB,
// so weights stream from memory as they do in decoding. The blocks are
// random bytes with finite scales: the kernels' speed does not depend on
// the values.
func BenchmarkMatVec1B(b *testing.B) {
	for _, shape := range []struct{ rows, cols int }{{2048, 2048}, {5632, 2048}, {2048, 5632}} {
		for _, typ := range []quant.Type{quant.F16, quant.Q8_0, quant.Q6_K, quant.Q5_K, quant.Q4_K, quant.Q4_0} {
			b.Run(fmt.Sprintf("%dx%d/%s", shape.rows, shape.cols, typ), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(13, 14))
				m := make([]byte, mustRowSize(b, typ, shape.rows*shape.cols))
				randomBlocks(rng, typ, m, false)
				copies := make([][]byte, max(1, (256<<20)/len(m)))
				for i := range copies {
					copies[i] = bytes.Clone(m)
				}
				a, _ := quant.NewActivation(typ, shape.cols)
				if err := a.Quantize(normal(rng, shape.cols)); err != nil {
					b.Fatal(err)
				}
				benchMatVec(b, typ, copies, a, shape.rows)
			})
		}
	}
}

// benchMatVec times MatVec over the matrices ws in turn, then reports as
// report does, and x_go.
func benchMatVec(b *testing.B, typ quant.Type, ws [][]byte, a *quant.Activation, rows int) {
	out := make([]float32, rows)
	b.SetBytes(int64(len(ws[0])))
	goRate := pureGoRate(b.Name(), func(w []byte) { quant.MatVec(typ, w, a, out) }, ws)
	i := 0
	b.ResetTimer()
	for b.Loop() {
		quant.MatVec(typ, ws[i], a, out)
		i = (i + 1) % len(ws)
	}
	report(b, len(ws[0]))
	rate := float64(len(ws[0])) * float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate/goRate, "x_go")
}

// goRates caches pureGoRate per benchmark: the framework runs a benchmark
// function more than once.
var goRates = map[string]float64{}

// pureGoRate is the bytes per second of f over ws with the pure-Go
// kernels: the best of at least three calls and 50 ms.
func pureGoRate(name string, f func([]byte), ws [][]byte) float64 {
	if r, ok := goRates[name]; ok {
		return r
	}
	defer quant.SetSIMD(false)()
	best := 0.0
	start := time.Now()
	for i := 0; i < 3 || time.Since(start) < 50*time.Millisecond; i++ {
		t0 := time.Now()
		f(ws[i%len(ws)])
		best = max(best, float64(len(ws[0]))/time.Since(t0).Seconds())
	}
	goRates[name] = best
	return best
}

func BenchmarkDequantize(b *testing.B) {
	for _, typ := range goldenTypes {
		b.Run(typ.String(), func(b *testing.B) {
			q, _ := benchMatrix(b, typ)
			dst := make([]float32, benchCols*benchRows)
			b.SetBytes(int64(len(q)))
			b.ResetTimer()
			for b.Loop() {
				if err := quant.Dequantize(typ, q, dst); err != nil {
					b.Fatal(err)
				}
			}
			report(b, len(q))
		})
	}
}

// BenchmarkQuantizeActivation times rounding a row of activations to each
// activation type, and reports x_go, the rate over the Go conversion's
// (SetSIMD(false)) in the same run. F16 also runs on rows of 48 and 24
// floats: attention rounds each query and each head's weights to halves,
// a short row at a time, so there a call's fixed cost is what counts (a
// legacy-SSE move among the F16C kernel's VEX instructions made it
// 130 ns, ten times the 48 conversions; quant_f16_amd64.s).
func BenchmarkQuantizeActivation(b *testing.B) {
	cases := []struct {
		typ  quant.Type
		cols int
	}{{quant.Q8_0, benchCols}, {quant.Q8_1, benchCols}, {quant.Q8_K, benchCols}, {quant.F16, benchCols}, {quant.F16, 48}, {quant.F16, 24}}
	for _, c := range cases {
		b.Run(fmt.Sprintf("%s/n=%d", c.typ, c.cols), func(b *testing.B) {
			x := normal(rand.New(rand.NewPCG(5, 6)), c.cols)
			dst := make([]byte, mustRowSize(b, c.typ, c.cols))
			round := func() {
				if err := quant.Quantize(c.typ, x, dst); err != nil {
					b.Fatal(err)
				}
			}
			// A thousand rows a timing: one short row takes nanoseconds.
			many := func() {
				for range 1000 {
					round()
				}
			}
			fast, slow := math.Inf(1), math.Inf(1)
			for range 3 {
				fast = min(fast, bestOf(many))
				restore := quant.SetSIMD(false)
				slow = min(slow, bestOf(many))
				restore()
			}
			b.SetBytes(int64(4 * c.cols))
			b.ResetTimer()
			for b.Loop() {
				round()
			}
			b.ReportMetric(slow/fast, "x_go")
		})
	}
}

// BenchmarkMatMul times MatMul of a 2048×2048 matrix (1B-model attention
// shape) by a batch of 64 activation rows, as a prefill does, and by one,
// as decoding does. It reports x_rows: the rate over that of the same
// product by VecDot's kernels a weight row and an activation row at a
// time (MatMul without its tile kernels for the batch, MatVec for one
// row), timed in the same run; and for a batch, x_tile8: the rate over
// that of MatMul with the eight-row tiles one activation row at a time
// (no band kernels), where this machine has band kernels for the type.
func BenchmarkMatMul(b *testing.B) {
	const rows, cols = 2048, 2048
	for _, typ := range []quant.Type{quant.Q4_0, quant.Q8_0, quant.Q4_K, quant.Q6_K, quant.F16, quant.BF16, quant.F32} {
		batches := []int{64, 1}
		if typ.BlockSize() == 1 {
			// The float band kernels: a speculative window, prefill.
			batches = []int{16, 8, 4, 1}
		}
		for _, batch := range batches {
			b.Run(fmt.Sprintf("%s/n=%d", typ, batch), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(17, 18))
				w := make([]byte, mustRowSize(b, typ, rows*cols))
				if err := quant.Quantize(typ, normal(rng, rows*cols), w); err != nil {
					b.Fatal(err)
				}
				ab := benchBatch(b, typ, normal(rng, batch*cols), cols, batch)
				out := make([]float32, rows*batch)
				run := func() { quant.MatMul(typ, w, ab, out, rows) }
				base := func() { quant.MatVec(typ, w, ab.Row(0), out[:rows]) }
				if batch > 1 {
					base = func() {
						defer quant.SetTiles(false)()
						run()
					}
				}
				baseline := bestOf(base)
				tile8 := 0.0
				if batch > 1 && quant.HaveBand(typ) && typ.BlockSize() > 1 {
					tile8 = bestOf(func() {
						defer quant.SetZ(false)()
						defer quant.SetY(false)()
						run()
					})
				}
				b.ResetTimer()
				for b.Loop() {
					run()
				}
				per := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(float64(rows*batch)/per/1e6, "Mdots/s")
				b.ReportMetric(baseline/per, "x_rows")
				if tile8 > 0 {
					b.ReportMetric(tile8/per, "x_tile8")
				}
			})
		}
	}
}

// bestCPU is the least thread CPU time (threadTime) of f over at least
// five calls and 30 ms of it, f's goroutine locked to its thread.
func bestCPU(f func()) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	best, spent := time.Duration(math.MaxInt64), time.Duration(0)
	for i := 0; i < 5 || spent < 30*time.Millisecond; i++ {
		t0 := threadTime()
		f()
		d := threadTime() - t0
		best, spent = min(best, d), spent+d
	}
	return best.Seconds()
}

// bestOf is the least time of f over at least three calls and 50 ms.
func bestOf(f func()) float64 {
	best := math.Inf(1)
	start := time.Now()
	for i := 0; i < 3 || time.Since(start) < 50*time.Millisecond; i++ {
		t0 := time.Now()
		f()
		best = min(best, time.Since(t0).Seconds())
	}
	return best
}

// BenchmarkMatMulFloatBand times MatMul of F16, BF16 and F32 matrices
// (the built-in model's output head, 32000×192, and 2048×2048) by one
// row (a decode step) and batches of 2 to 16 rows, as a speculative
// window or a short prefill does, against the one-row kernels (x_rows) and, where the AVX-512
// forms run, the AVX2 band kernels against the one-row kernels
// (x_rows_avx2) and the AVX-512 row kernels against the AVX-512 band
// kernels they replace on rows of whole rounds of 32 (x_band; at n=1,
// the row kernels against the one-row kernels):
// each the best of five alternating rounds of bestOf, which a loaded
// machine disturbs less than b.N runs' mean.
func BenchmarkMatMulFloatBand(b *testing.B) {
	for _, sh := range [][2]int{{32000, 192}, {2048, 2048}} {
		rows, cols := sh[0], sh[1]
		for _, typ := range []quant.Type{quant.F16, quant.BF16, quant.F32} {
			for _, batch := range []int{1, 2, 4, 5, 8, 16} {
				b.Run(fmt.Sprintf("%dx%d/%s/n=%d", rows, cols, typ, batch), func(b *testing.B) {
					rng := rand.New(rand.NewPCG(17, 18))
					w := make([]byte, mustRowSize(b, typ, rows*cols))
					if err := quant.Quantize(typ, normal(rng, rows*cols), w); err != nil {
						b.Fatal(err)
					}
					ab := benchBatch(b, typ, normal(rng, batch*cols), cols, batch)
					out := make([]float32, rows*batch)
					run := func() { quant.MatMul(typ, w, ab, out, rows) }
					band, one, avx2, zband := math.Inf(1), math.Inf(1), math.Inf(1), math.Inf(1)
					for range 5 {
						band = min(band, bestOf(run))
						one = min(one, bestOf(func() { defer quant.SetTiles(false)(); run() }))
						if quant.HaveZ() {
							avx2 = min(avx2, bestOf(func() { defer quant.SetZ(false)(); run() }))
							zband = min(zband, bestOf(func() { defer quant.SetFloatRows(false)(); run() }))
						}
					}
					b.ResetTimer()
					for b.Loop() {
						run()
					}
					b.ReportMetric(float64(rows*batch)/band/1e6, "Mdots/s")
					b.ReportMetric(one/band, "x_rows")
					if quant.HaveZ() {
						b.ReportMetric(one/avx2, "x_rows_avx2")
						b.ReportMetric(zband/band, "x_band")
					}
				})
			}
		}
	}
}

// BenchmarkMatMulRows times MatMul by a batch of k = 2 to 9 activation
// rows, a speculative window's verify pass, against one row (a decode
// step) on the same matrix in the same run: the built-in model's output
// head (32000×192, its largest matrix; not for Q4_K, whose blocks are
// 256 wide) and 2048×2048. It reports t/t1, the k-row product's time over
// the one-row product's, and v, what each extra row costs as a share of
// the one-row product ((t − t1)/((k − 1)·t1)); with _before, the same
// with the band kernels' forms of two, three and five to nine rows off
// (a batch four rows a call, its last rows one at a time, as before they
// existed), where this machine has them; t/t1_cached, t/t1 with both batches told their weights are
// cached (Batch.SetCached: no prefetching), and t1_cached/t1, the one-row
// product's time so over its time prefetching. Each time is the least
// thread CPU time (bestCPU: MatMul runs on
// the calling thread) over four alternating rounds, which other jobs on a
// loaded machine disturb far less than wall time.
func BenchmarkMatMulRows(b *testing.B) {
	for _, sh := range [][2]int{{32000, 192}, {2048, 2048}} {
		rows, cols := sh[0], sh[1]
		for _, typ := range []quant.Type{quant.F16, quant.Q8_0, quant.Q4_0, quant.Q4_K} {
			if cols%typ.BlockSize() != 0 {
				continue
			}
			rng := rand.New(rand.NewPCG(19, 20))
			w := make([]byte, mustRowSize(b, typ, rows*cols))
			if err := quant.Quantize(typ, normal(rng, rows*cols), w); err != nil {
				b.Fatal(err)
			}
			x := normal(rng, 9*cols)
			batch := func(k int) *quant.Batch { return benchBatch(b, typ, x, cols, k) }
			out := make([]float32, rows*9)
			one := batch(1)
			for k := 2; k <= 9; k++ {
				b.Run(fmt.Sprintf("%dx%d/%s/k=%d", rows, cols, typ, k), func(b *testing.B) {
					ab := batch(k)
					run := func() { quant.MatMul(typ, w, ab, out, rows) }
					before := func() { defer quant.SetBandTails(false)(); run() }
					cached := func(b *quant.Batch) func() {
						return func() {
							b.SetCached(true)
							defer b.SetCached(false)
							quant.MatMul(typ, w, b, out, rows)
						}
					}
					t1, tk, tb := math.Inf(1), math.Inf(1), math.Inf(1)
					t1c, tkc := math.Inf(1), math.Inf(1)
					for range 4 {
						t1 = min(t1, bestCPU(func() { quant.MatMul(typ, w, one, out, rows) }))
						tk = min(tk, bestCPU(run))
						if quant.HaveBand(typ) && typ.BlockSize() > 1 {
							tb = min(tb, bestCPU(before))
							t1c = min(t1c, bestCPU(cached(one)))
							tkc = min(tkc, bestCPU(cached(ab)))
						}
					}
					b.ResetTimer()
					for b.Loop() {
						run()
					}
					v := func(t float64) float64 { return (t - t1) / float64(k-1) / t1 }
					b.ReportMetric(t1*1e6, "t1_us")
					b.ReportMetric(tk/t1, "t/t1")
					b.ReportMetric(v(tk), "v")
					if !math.IsInf(tb, 1) {
						b.ReportMetric(tb/t1, "t/t1_before")
						b.ReportMetric(v(tb), "v_before")
						// Without prefetching (weights in cache), k rows
						// and one, against one with it.
						b.ReportMetric(tkc/t1c, "t/t1_cached")
						b.ReportMetric(t1c/t1, "t1_cached/t1")
					}
				})
			}
		}
	}
}

// BenchmarkMatMulOneRow times a one-row batch (a decoded token) times
// matrices of several row widths, by MatMul's rule (t_us), against the
// kernels it took before the rule (the eight-row tiles or the row kernel),
// as that time over this one (x_rule), and against the band kernels at
// every width (x_band); _cached: with the batch told its weights are
// cached (Batch.SetCached: no prefetching), as the CPU backend does for a
// model that fits in the last-level cache. Each is the least thread CPU
// time of six alternating rounds of bestCPU; the weights are in cache.
func BenchmarkMatMulOneRow(b *testing.B) {
	shapes := [][2]int{{32, 192}, {4000, 192}, {32, 512}}
	for _, cols := range []int{256, 512, 768, 1024, 1536, 2048, 4096} {
		shapes = append(shapes, [2]int{1024, cols})
	}
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q6_K} {
		for _, sh := range shapes {
			rows, cols := sh[0], sh[1]
			if cols%typ.BlockSize() != 0 || !quant.HaveBand(typ) {
				continue
			}
			b.Run(fmt.Sprintf("%dx%d/%s", rows, cols, typ), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(21, 22))
				w := make([]byte, mustRowSize(b, typ, rows*cols))
				if err := quant.Quantize(typ, normal(rng, rows*cols), w); err != nil {
					b.Fatal(err)
				}
				ab := benchBatch(b, typ, normal(rng, cols), cols, 1)
				out := make([]float32, rows)
				// Enough products a timing that the thread CPU clock's
				// resolution does not show.
				reps := max(1, (1<<22)/(rows*cols))
				run := func() {
					for range reps {
						quant.MatMul(typ, w, ab, out, rows)
					}
				}
				with := func(mode int, cached bool) func() {
					return func() {
						defer quant.SetOneRowBand(mode)()
						ab.SetCached(cached)
						defer ab.SetCached(false)
						run()
					}
				}
				var t [5]float64 // before, rule, rule cached, band, band cached
				for i := range t {
					t[i] = math.Inf(1)
				}
				for range 6 {
					t[0] = min(t[0], bestCPU(with(-1, false)))
					t[1] = min(t[1], bestCPU(with(0, false)))
					t[2] = min(t[2], bestCPU(with(0, true)))
					t[3] = min(t[3], bestCPU(with(1, false)))
					t[4] = min(t[4], bestCPU(with(1, true)))
				}
				b.ResetTimer()
				for b.Loop() {
					run()
				}
				b.ReportMetric(t[1]*1e6/float64(reps), "t_us")
				b.ReportMetric(t[0]/t[1], "x_rule")
				b.ReportMetric(t[0]/t[2], "x_rule_cached")
				b.ReportMetric(t[0]/t[3], "x_band")
				b.ReportMetric(t[0]/t[4], "x_band_cached")
			})
		}
	}
}

// BenchmarkMatMulStream times MatMul by batches of k activation rows
// (k=1: a decoded token; more: a speculative window, a batch of decodes)
// with the weights read from memory: BENCH_STREAM_MB (default 1024, to be
// well over the last-level cache) of matrices of a 1B model's
// feed-forward shapes, 8192×2048 and 2048×8192, each multiplied once in
// turn, and 8192×2016 (rows past whole groups of eight blocks: a
// 1B-shaped model of the built-in model's head size). For k=1 it reports
// GB/s and, as x_rows, the time of the row kernels (SetOneRowBand(-1))
// over this one's (the band kernels'), and as x_ahead the row kernels'
// time over their time asking for the rows ahead (Batch.SetRowsAhead); for k>1, v, what each extra row
// costs over a one-row pass (about 0.06 of one is a row's arithmetic
// here, so v near 0 means the reading hides it). For both, x_chunks is
// the time with each chunk's rows asked for at once (SetStreamAhead(false))
// over this one's. Where quant packs the type's rows for the band kernels
// at their blocks' size (Q8_0), x_packed is the speed of the product over
// those rows packed once (Pack, MatMulPacked, as the CPU backend packs
// weights read from memory) against the best of the others (k=1: the band
// kernels repacking, the row kernels, asking ahead or not; k>1: the band
// kernels repacking), and v_packed its v. Each figure is the least wall time of three
// alternating rounds. BENCH_STREAM_THREADS (default 1) runs each product
// on that many goroutines, as the CPU backend splits it: four tasks a
// thread in whole sixteen-row tiles, handed out in turn.
func BenchmarkMatMulStream(b *testing.B) {
	total, threads := benchEnv("BENCH_STREAM_MB", 1024), benchEnv("BENCH_STREAM_THREADS", 1)
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q6_K} {
		if !quant.HaveBand(typ) {
			continue
		}
		for _, sh := range [][2]int{{8192, 2048}, {2048, 8192}, {8192, 2016}} {
			if sh[1]%typ.BlockSize() != 0 {
				continue // 2016: a width past whole groups of eight 32-element blocks
			}
			rows, cols := sh[0], sh[1]
			rng := rand.New(rand.NewPCG(23, 24))
			one := make([]byte, mustRowSize(b, typ, rows*cols))
			if err := quant.Quantize(typ, normal(rng, rows*cols), one); err != nil {
				b.Fatal(err)
			}
			mats := make([][]byte, max(1, (total<<20)/len(one)))
			for i := range mats {
				mats[i] = bytes.Clone(one)
			}
			// The same matrices packed once for the band kernels, where
			// quant packs them (Q8_0: at their blocks' size), as the CPU
			// backend packs weights read from memory.
			var packs []*quant.Packed
			if quant.Pack(typ, one, cols, 2) != nil {
				packs = make([]*quant.Packed, len(mats))
				for i, w := range mats {
					packs[i] = quant.Pack(typ, w, cols, 2)
				}
			}
			x := normal(rng, 8*cols)
			batch := func(k int) *quant.Batch { return benchBatch(b, typ, x, cols, k) }
			out := make([]float32, rows*8)
			rs := len(one) / rows
			chunk := (rows/(4*threads) + 15) &^ 15
			packed := false // pass multiplies packs, not mats
			pass := func(ab *quant.Batch, restore func()) float64 {
				defer restore()
				t0 := time.Now()
				for m, w := range mats {
					var p *quant.Packed
					if packed {
						p = packs[m]
					}
					if threads == 1 {
						quant.MatMulPacked(typ, w, p, ab, out, rows)
						continue
					}
					var next atomic.Int64
					work := func() {
						for r0 := int(next.Add(int64(chunk))) - chunk; r0 < rows; r0 = int(next.Add(int64(chunk))) - chunk {
							r1 := min(r0+chunk, rows)
							view := p.Rows(r0, r1)
							quant.MatMulPacked(typ, w[r0*rs:r1*rs], &view, ab, out[r0:], rows)
						}
					}
					var wg sync.WaitGroup
					for range threads - 1 {
						wg.Go(work)
					}
					work()
					wg.Wait()
				}
				return time.Since(t0).Seconds()
			}
			single := batch(1)
			for _, k := range []int{1, 2, 4, 8} {
				b.Run(fmt.Sprintf("%dx%d/%s/k=%d", rows, cols, typ, k), func(b *testing.B) {
					ab := batch(k)
					t1, tk, tc, tr, ta, tp := math.Inf(1), math.Inf(1), math.Inf(1), math.Inf(1), math.Inf(1), math.Inf(1)
					for range 3 {
						t1 = min(t1, pass(single, func() {}))
						tk = min(tk, pass(ab, func() {}))
						tc = min(tc, pass(ab, quant.SetStreamAhead(false)))
						if k == 1 {
							tr = min(tr, pass(ab, quant.SetOneRowBand(-1)))
							rows := quant.SetOneRowBand(-1)
							ab.SetRowsAhead(true)
							ta = min(ta, pass(ab, func() { ab.SetRowsAhead(false); rows() }))
						}
						if packs != nil {
							packed = true
							tp = min(tp, pass(ab, func() { packed = false }))
						}
					}
					b.ResetTimer()
					for b.Loop() {
						pass(ab, func() {})
					}
					if k == 1 {
						b.ReportMetric(float64(len(one)*len(mats))/t1/1e9, "GB/s")
						b.ReportMetric(tr/tk, "x_rows")
						b.ReportMetric(tr/ta, "x_ahead")
					} else {
						b.ReportMetric(tk/t1, "t/t1")
						b.ReportMetric((tk-t1)/float64(k-1)/t1, "v")
					}
					b.ReportMetric(tc/tk, "x_chunks")
					if packs != nil {
						// The packed product's speed over the best of
						// the others (k=1: the band kernels, the row
						// kernels, asking ahead or not).
						best := tk
						if k == 1 {
							best = min(tk, tr, ta)
						}
						b.ReportMetric(best/tp, "x_packed")
						if k > 1 {
							b.ReportMetric((tp-t1)/float64(k-1)/t1, "v_packed")
						}
					}
				})
			}
			mats, packs = nil, nil
		}
	}
}

// benchBatch is a batch of typ's activations of the first k rows of cols
// elements in x.
func benchBatch(b *testing.B, typ quant.Type, x []float32, cols, k int) *quant.Batch {
	ab, err := quant.NewBatch(typ, cols, k)
	if err != nil {
		b.Fatal(err)
	}
	for i := range k {
		if err := ab.Quantize(i, x[i*cols:(i+1)*cols]); err != nil {
			b.Fatal(err)
		}
	}
	return ab
}

// benchEnv is the positive integer in the environment variable key, or
// def where it holds none.
func benchEnv(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkMatMulPacked times products whose weights stay in cache, as a
// small model's do, with the rows packed once (Pack, MatMulPacked) and
// repacked at every call (MatMul): the built-in model's shapes as one
// thread's share of a product (32000×192 is its output head whole), the
// trained draft's output head (32000×64), and 1024 rows of 256 and 2048,
// by 1 and 4 activation rows (a decoded token, a window). t_us is the
// packed product's time, x_packed MatMul's over it; least thread CPU time
// of six alternating rounds of bestCPU.
func BenchmarkMatMulPacked(b *testing.B) {
	shapes := [][2]int{{32000, 64}, {4000, 192}, {32000, 192}, {96, 192}, {256, 192}, {96, 512}, {1024, 256}, {1024, 2048}}
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q6_K} {
		for _, sh := range shapes {
			rows, cols := sh[0], sh[1]
			if cols%typ.BlockSize() != 0 {
				continue
			}
			for _, k := range []int{1, 4} {
				rng := rand.New(rand.NewPCG(25, 26))
				w := make([]byte, mustRowSize(b, typ, rows*cols))
				if err := quant.Quantize(typ, normal(rng, rows*cols), w); err != nil {
					b.Fatal(err)
				}
				p := quant.Pack(typ, w, cols, k)
				if p == nil {
					continue // nothing repacked: the same kernels either way
				}
				b.Run(fmt.Sprintf("%dx%d/%s/k=%d", rows, cols, typ, k), func(b *testing.B) {
					ab := benchBatch(b, typ, normal(rng, k*cols), cols, k)
					ab.SetCached(true)
					out := make([]float32, k*rows)
					reps := max(1, (1<<22)/(rows*cols))
					packed := func() {
						for range reps {
							quant.MatMulPacked(typ, w, p, ab, out, rows)
						}
					}
					repacked := func() {
						for range reps {
							quant.MatMul(typ, w, ab, out, rows)
						}
					}
					tp, tr := math.Inf(1), math.Inf(1)
					for range 6 {
						tp = min(tp, bestCPU(packed))
						tr = min(tr, bestCPU(repacked))
					}
					b.ResetTimer()
					for b.Loop() {
						packed()
					}
					b.ReportMetric(tp*1e6/float64(reps), "t_us")
					b.ReportMetric(tr/tp, "x_packed")
				})
			}
		}
	}
}
