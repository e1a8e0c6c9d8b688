package cpu

import (
	"cmp"
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// fullBlock is how many query rows AttendFull scores at once: its score
// memory is a block's rows by the keys they see, not the whole input's
// square (an 8192-token input would need 256 MiB a head).
const fullBlock = 128

// AttendFull implements backend.FullAttender: an encoder's attention,
// every row of q over the rows of k and v it sees, no cache and no causal
// mask, head by head, as ggml's mul_mat, soft_max_ext and mul_mat compute
// it: the scores q·k as an F32 matrix product (the head's keys its weight
// matrix), scaled, ALiBi's bias added where a.MaxALiBi is set (each
// product rounded, as ggml scales the row and then adds slope·mask), the
// keys outside a symmetric window left out where a.Window is set (ggml's
// −∞, whose exponential is 0), the softmax as Attend's (ggml's expf, the
// sum in float64 in a fixed order), then the weights times the values
// (the values, transposed, the weight matrix). Query rows go fullBlock at
// a time, over the keys the block's window spans; the heads are shared
// out among goroutines of their own; a row's arithmetic is the same
// whoever computes it and whatever block it is in.
func (b *Backend) AttendFull(dst, q, k, v backend.Tensor, a *backend.FullAttention) {
	n, w, heads, kvh := q.Rows, q.Cols, a.Heads, cmp.Or(a.KVHeads, a.Heads)
	if heads < 1 || kvh < 1 || w%heads != 0 || heads%kvh != 0 || k.Rows != n || v.Rows != n || dst.Rows != n ||
		k.Cols != w/heads*kvh || v.Cols != k.Cols || dst.Cols != w || a.Window < 0 {
		panic(fmt.Sprintf("cpu: AttendFull of q %d×%d, k %d×%d, v %d×%d into %d×%d over %d heads (%d KV), window %d",
			q.Rows, q.Cols, k.Rows, k.Cols, v.Rows, v.Cols, dst.Rows, dst.Cols, heads, kvh, a.Window))
	}
	d, kw := w/heads, k.Cols
	half := n // the keys a query sees on either side
	if a.Window > 0 {
		half = a.Window / 2
	}
	qs, ks, vs, out := data(q), data(k), data(v), data(dst)
	next := make(chan int, heads)
	for h := range heads {
		next <- h
	}
	close(next)
	var wg sync.WaitGroup
	for range min(heads, b.threads, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			bs := min(n, fullBlock)
			span := min(n, bs+2*half)     // the most keys a block sees
			kh := make([]float32, n*d)    // the head's keys, row by row
			vt := make([]float32, d*span) // the block's values, transposed
			p := make([]float32, bs*span) // scores, then weights
			oh := make([]float32, bs*d)   // the block's outputs
			var qb, pb quant.Batch
			for h := range next {
				off, kvOff := h*d, h/(heads/kvh)*d // query head h reads KV head h/(heads/kvh), as ggml broadcasts
				for j := range n {
					copy(kh[j*d:(j+1)*d], ks[j*kw+kvOff:j*kw+kvOff+d])
				}
				slope := backend.ALiBiSlope(h, heads, a.MaxALiBi)
				for i0 := 0; i0 < n; i0 += bs {
					i1 := min(n, i0+bs)
					j0, j1 := max(0, i0-half), min(n, i1-1+half+1)
					rows, keys := i1-i0, j1-j0
					if err := qb.Reset(quant.F32, d, rows); err != nil {
						panic(err) // F32 batches of any size exist
					}
					for i := range rows {
						r := (i0 + i) * w
						qb.Quantize(i, qs[r+off:r+off+d]) // F32: a copy, of the batch's own width
					}
					quant.MatMul(quant.F32, floatBytes(kh[j0*d:j1*d]), &qb, p, keys) // p[i*keys+j] = q_i·k_(j0+j)
					if err := pb.Reset(quant.F32, keys, rows); err != nil {
						panic(err)
					}
					for i := range rows {
						row := p[i*keys : (i+1)*keys]
						m := scoreRow(row, i0+i, j0, half, a, slope)
						expSub(row, row, m)
						scaleBy(row, float32(1/softmaxSum(row)))
						pb.Quantize(i, row)
					}
					for j := range keys {
						r := (j0 + j) * kw
						for t, x := range vs[r+kvOff : r+kvOff+d] {
							vt[t*keys+j] = x
						}
					}
					quant.MatMul(quant.F32, floatBytes(vt[:d*keys]), &pb, oh, d) // oh[i*d+t] = Σ_j p_ij·v_jt
					for i := range rows {
						r := (i0 + i) * w
						copy(out[r+off:r+off+d], oh[i*d:(i+1)*d])
					}
				}
			}
		})
	}
	wg.Wait()
}

// scoreRow scales query row i's scores over keys j0… and adds ALiBi's
// bias, slope times −|i − j|, where a has one; keys more than half from i
// become −∞. It returns the row's maximum (row i's own key is always in).
func scoreRow(row []float32, i, j0, half int, a *backend.FullAttention, slope float32) float32 {
	if a.MaxALiBi == 0 && a.Window == 0 {
		return scaleMax(row, a.Scale)
	}
	m := float32(math.Inf(-1))
	for c, v := range row {
		j := j0 + c
		switch {
		case a.Window > 0 && abs(i-j) > half:
			v = float32(math.Inf(-1))
		case a.MaxALiBi != 0:
			v = float32(v*a.Scale) + float32(slope*float32(-abs(i-j))) // rounded apart: Go fuses a·b+c on arm64
		default:
			v *= a.Scale
		}
		row[c] = v
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
