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
