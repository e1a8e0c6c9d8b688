//go:build amd64 && !purego

package greedyhead

import "golang.org/x/sys/cpu"

// haveKernels: the shadow's assembly needs AVX-512 with VNNI (512-bit
// VPDPBUSD; see Available).
var haveKernels = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VNNI

//go:noescape
func aboveVNNI(x *float32, n int, floor float32, idx *int32, limit int) int

// above appends to idx the i with x[i] ≥ floor, in order, and reports
// false (idx unspecified) once there would be more than limit.
func above(x []float32, floor float32, idx []int32, limit int) ([]int32, bool) {
	head := 0
	if haveKernels {
		head = len(x) &^ (group - 1)
	}
	if head > 0 {
		idx = idx[:cap(idx)]
		if len(idx) < limit+group {
			idx = make([]int32, limit+group)
		}
		c := aboveVNNI(&x[0], head, floor, &idx[0], limit)
		if c < 0 {
			return nil, false
		}
		idx = idx[:c]
	} else {
		idx = idx[:0]
	}
	return aboveGo(x, head, floor, idx, limit)
}

// rowsKernel is the signature of the VNNI kernels for one to four
// activation rows (rows16Go's arithmetic).
type rowsKernel func(packed *byte, scale *float32, blocks, groups int, x *int8, xs int, corr *int32, t *float32, approx *float32, os int, lanes *float32)

//go:noescape
func rows16x1VNNI(packed *byte, scale *float32, blocks, groups int, x *int8, xs int, corr *int32, t *float32, approx *float32, os int, lanes *float32)

//go:noescape
func rows16x2VNNI(packed *byte, scale *float32, blocks, groups int, x *int8, xs int, corr *int32, t *float32, approx *float32, os int, lanes *float32)

//go:noescape
func rows16x3VNNI(packed *byte, scale *float32, blocks, groups int, x *int8, xs int, corr *int32, t *float32, approx *float32, os int, lanes *float32)

//go:noescape
func rows16x4VNNI(packed *byte, scale *float32, blocks, groups int, x *int8, xs int, corr *int32, t *float32, approx *float32, os int, lanes *float32)

// wideKernel is the signature of the VNNI kernels for five to eight
// activation rows, interleaved (interleave8).
type wideKernel func(packed *byte, scale *float32, blocks, groups int, xi *int8, corr *int32, t *float32, approx *float32, os int, lanes *float32)

//go:noescape
func rows16x5VNNI(packed *byte, scale *float32, blocks, groups int, xi *int8, corr *int32, t *float32, approx *float32, os int, lanes *float32)

//go:noescape
func rows16x6VNNI(packed *byte, scale *float32, blocks, groups int, xi *int8, corr *int32, t *float32, approx *float32, os int, lanes *float32)

//go:noescape
func rows16x7VNNI(packed *byte, scale *float32, blocks, groups int, xi *int8, corr *int32, t *float32, approx *float32, os int, lanes *float32)

//go:noescape
func rows16x8VNNI(packed *byte, scale *float32, blocks, groups int, xi *int8, corr *int32, t *float32, approx *float32, os int, lanes *float32)

// rowsKernels[k-1] and wideKernels[k-5] take k activation rows in one
// pass over the shadow: a window's rows pay for themselves only (three
// rows once took the four-row kernel's time, five a second pass).
var (
	rowsKernels = [4]rowsKernel{rows16x1VNNI, rows16x2VNNI, rows16x3VNNI, rows16x4VNNI}
	wideKernels = [4]wideKernel{rows16x5VNNI, rows16x6VNNI, rows16x7VNNI, rows16x8VNNI}
)

// rows16 is rows16Go for k ≤ 8 activation rows (x, and for k > 4 the
// same rows interleaved in xi), by the kernels where they run.
func rows16(packed []byte, scale []float32, blocks, n int, x, xi []int8, k int, corr []int32, t []float32, approx []float32, os int, lanes []float32) {
	if !haveKernels {
		rows16Go(packed, scale, blocks, n, x, k, corr, t, approx, os, lanes)
		return
	}
	_ = packed[blocks*group*n-1]
	_ = scale[blocks*group-1]
	_, _ = corr[k-1], t[k-1]
	_ = approx[(k-1)*os+blocks*group-1]
	_ = lanes[k*group-1]
	if k > 4 {
		_ = wideKernels[k-5]
		_ = xi[8*n-1]
		wideKernels[k-5](&packed[0], &scale[0], blocks, n/4, &xi[0], &corr[0], &t[0], &approx[0], 4*os, &lanes[0])
		return
	}
	_ = rowsKernels[k-1]
	_ = x[k*n-1]
	rowsKernels[k-1](&packed[0], &scale[0], blocks, n/4, &x[0], n, &corr[0], &t[0], &approx[0], 4*os, &lanes[0])
}
