package cpu

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// AttendFull implements backend.FullAttender: an encoder's attention,
// every row of q over every row of k and v, no cache and no causal mask,
// head by head, as ggml's mul_mat, soft_max_ext and mul_mat compute it:
// the scores q·k as an F32 matrix product (the head's keys its weight
// matrix), scaled, ALiBi's bias added where maxBias > 0 (each product
// rounded, as ggml scales the row and then adds slope·mask), the softmax
// as Attend's (ggml's expf, the sum in float64 in a fixed order), then
// the weights times the values (the head's values, transposed, the weight
// matrix). The heads are shared out among goroutines of their own; each
// head's arithmetic is the same whoever computes it.
func (b *Backend) AttendFull(dst, q, k, v backend.Tensor, heads int, scale, maxBias float32) {
	n, w := q.Rows, q.Cols
	if k.Rows != n || v.Rows != n || dst.Rows != n || k.Cols != w || v.Cols != w || dst.Cols != w || heads < 1 || w%heads != 0 {
		panic(fmt.Sprintf("cpu: AttendFull of q %d×%d, k %d×%d, v %d×%d into %d×%d over %d heads",
			q.Rows, q.Cols, k.Rows, k.Cols, v.Rows, v.Cols, dst.Rows, dst.Cols, heads))
	}
	d := w / heads
	qs, ks, vs, out := data(q), data(k), data(v), data(dst)
	next := make(chan int, heads)
	for h := range heads {
		next <- h
	}
	close(next)
	var wg sync.WaitGroup
	for range min(heads, b.threads, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			kh := make([]float32, n*d) // the head's keys, row by row
			vt := make([]float32, d*n) // its values, transposed
			p := make([]float32, n*n)  // scores, then weights
			oh := make([]float32, n*d) // its outputs
			qb, err := quant.NewBatch(quant.F32, d, n)
			if err != nil {
				panic(err) // F32 batches of any size exist
			}
			pb, err := quant.NewBatch(quant.F32, n, n)
			if err != nil {
				panic(err)
			}
			for h := range next {
				off := h * d
				for j := range n {
					copy(kh[j*d:(j+1)*d], ks[j*w+off:j*w+off+d])
					for t, x := range vs[j*w+off : j*w+off+d] {
						vt[t*n+j] = x
					}
				}
				for i := range n {
					qb.Quantize(i, qs[i*w+off:i*w+off+d]) // F32: a copy, of the batch's own width
				}
				quant.MatMul(quant.F32, floatBytes(kh), qb, p, n) // p[i*n+j] = q_i·k_j
				slope := backend.ALiBiSlope(h, heads, maxBias)
				for i := range n {
					row := p[i*n : (i+1)*n]
					var m float32
					if maxBias > 0 {
						m = alibiScaleMax(row, i, scale, slope)
					} else {
						m = scaleMax(row, scale)
					}
					expSub(row, row, m)
					scaleBy(row, float32(1/softmaxSum(row)))
					pb.Quantize(i, row)
				}
				quant.MatMul(quant.F32, floatBytes(vt), pb, oh, d) // oh[i*d+t] = Σ_j p_ij·v_jt
				for i := range n {
					copy(out[i*w+off:i*w+off+d], oh[i*d:(i+1)*d])
				}
			}
		})
	}
	wg.Wait()
}

// alibiScaleMax scales row i's scores and adds ALiBi's bias, slope times
// −|i − j|, returning the row's maximum.
func alibiScaleMax(row []float32, i int, scale, slope float32) float32 {
	m := float32(math.Inf(-1))
	for j, v := range row {
		d := float32(-abs(i - j))
		v = float32(v*scale) + float32(slope*d) // rounded apart: Go fuses a·b+c on arm64
		row[j] = v
		m = max(m, v)
	}
	return m
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// floatBytes views float32s as the little-endian bytes an F32 weight is
// (every target this builds for is little-endian).
func floatBytes(f []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f))
}
