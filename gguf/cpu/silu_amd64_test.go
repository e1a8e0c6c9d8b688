//go:build !purego

package cpu

import "testing"

// TestSiLUGLU8DoesOrdinaryValues: the SIMD kernel hands back no chunk of
// values where expf takes its ordinary branch (so TestSiLUGLUMatchesGo
// holds the kernel itself to the Go one there, not the fallback).
func TestSiLUGLU8DoesOrdinaryValues(t *testing.T) {
	if !haveSiLU8 {
		t.Skip("no AVX2+FMA here")
	}
	ordinary, all, dense, _ := siluValues()
	up := siluUps(len(all))
	for _, xs := range [][]float32{ordinary, dense} {
		n := len(xs) / 8
		out := make([]float32, 8*n)
		if done := siluGLU8(&out[0], &xs[0], &up[0], n, &siluConsts); done != n {
			t.Fatalf("siluGLU8 did %d of %d chunks of ordinary values", done, n)
		}
	}
}

// TestExpSub8DoesOrdinaryValues: the SIMD exponentials hand back no chunk
// of a softmax's values (x − max ≤ 0, above expf's subnormal edge), so
// TestExpSubMatchesGo holds the kernel itself to the Go one there.
func TestExpSub8DoesOrdinaryValues(t *testing.T) {
	if !haveSiLU8 {
		t.Skip("no AVX2+FMA here")
	}
	_, _, dense, _ := siluValues()
	n := len(dense) / 8
	out := make([]float32, 8*n)
	if done := expSub8(&out[0], &dense[0], n, 30, &siluConsts); done != n {
		t.Fatalf("expSub8 did %d of %d chunks of ordinary values", done, n)
	}
}

// TestSIMD16DoesOrdinaryValues: the AVX-512 kernels, like the AVX2 ones,
// hand back no chunk of ordinary values.
func TestSIMD16DoesOrdinaryValues(t *testing.T) {
	if !haveSiLU16 {
		t.Skip("no AVX-512 here")
	}
	ordinary, all, dense, _ := siluValues()
	up := siluUps(len(all))
	for _, xs := range [][]float32{ordinary, dense} {
		n := len(xs) / 16
		out := make([]float32, 16*n)
		if done := siluGLU16(&out[0], &xs[0], &up[0], n, &siluConsts); done != n {
			t.Fatalf("siluGLU16 did %d of %d chunks of ordinary values", done, n)
		}
	}
	n := len(dense) / 16
	out := make([]float32, 16*n)
	if done := expSub16(&out[0], &dense[0], n, 30, &siluConsts); done != n {
		t.Fatalf("expSub16 did %d of %d chunks of ordinary values", done, n)
	}
}
