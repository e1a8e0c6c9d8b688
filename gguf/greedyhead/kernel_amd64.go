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

//go:noescape
func rows16x4VNNI(packed *byte, scale *float32, blocks, groups int, x *int8, xs int, corr *int32, t *float32, approx *float32, os int, lanes *float32)

//go:noescape
func rows16x1VNNI(packed *byte, scale *float32, blocks, groups int, x *int8, corr int32, t float32, approx *float32, lanes *float32)

func rows16x4(packed []byte, scale []float32, blocks, n int, x []int8, corr []int32, t []float32, approx []float32, os int, lanes []float32) {
	if !haveKernels {
		rows16Go(packed, scale, blocks, n, x, 4, corr, t, approx, os, lanes)
		return
	}
	_ = packed[blocks*group*n-1]
	_ = scale[blocks*group-1]
	_ = x[4*n-1]
	_, _ = corr[3], t[3]
	_ = approx[3*os+blocks*group-1]
	_ = lanes[4*group-1]
	rows16x4VNNI(&packed[0], &scale[0], blocks, n/4, &x[0], n, &corr[0], &t[0], &approx[0], 4*os, &lanes[0])
}

func rows16x1(packed []byte, scale []float32, blocks, n int, x []int8, corr int32, t float32, approx []float32, lanes []float32) {
	if !haveKernels {
		rows16Go(packed, scale, blocks, n, x, 1, []int32{corr}, []float32{t}, approx, 0, lanes)
		return
	}
	_ = packed[blocks*group*n-1]
	_ = scale[blocks*group-1]
	_ = x[n-1]
	_ = approx[blocks*group-1]
	_ = lanes[group-1]
	rows16x1VNNI(&packed[0], &scale[0], blocks, n/4, &x[0], corr, t, &approx[0], &lanes[0])
}
