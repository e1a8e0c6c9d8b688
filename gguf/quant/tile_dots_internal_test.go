//go:build (amd64 || arm64) && !purego

package quant

import (
	"slices"
	"testing"
)

// TestBandDots: how a band kernel takes a batch's rows, call by call. With
// the wide forms, a window of up to nine rows is one call and a longer
// batch goes eight rows a call, no row left alone at the end; without
// them (a kernel that has none, weights that stream unpacked where the
// kernel keeps four rows there, or the tail forms off) it goes four rows
// a call, then its last two or three together, or one.
func TestBandDots(t *testing.T) {
	var dot bandDot = func(*float32, *byte, *byte, *byte, int, int, int, int, *float32, int, *byte, int, int, int, int) {}
	four := &bandKernel{dot4: dot, dot3: dot, dot2: dot, dot1: dot}
	wide := &bandKernel{dot4: dot, dot3: dot, dot2: dot, dot1: dot, wide: []bandDot{dot, dot, dot, dot, dot}}
	five := &bandKernel{dot4: dot, dot3: dot, dot2: dot, dot1: dot, wide: []bandDot{dot}}
	calls := func(k *bandKernel, rows int, w bool) []int {
		var got []int
		for i := 0; i < rows; {
			_, n := k.dots(rows-i, w)
			got = append(got, n)
			i += n
		}
		return got
	}
	for _, c := range []struct {
		name string
		k    *bandKernel
		wide bool
		rows int
		want []int
	}{
		{"wide", wide, true, 1, []int{1}},
		{"wide", wide, true, 4, []int{4}},
		{"wide", wide, true, 5, []int{5}},
		{"wide", wide, true, 7, []int{7}},
		{"wide", wide, true, 9, []int{9}},
		{"wide", wide, true, 10, []int{8, 2}},
		{"wide", wide, true, 17, []int{8, 9}},
		{"wide", wide, true, 18, []int{8, 8, 2}},
		{"wide forms not taken", wide, false, 9, []int{4, 4, 1}},
		{"wide forms not taken", wide, false, 7, []int{4, 3}},
		{"no wide forms", four, true, 9, []int{4, 4, 1}},
		{"no wide forms", four, true, 6, []int{4, 2}},
		{"a five-row form alone", five, true, 5, []int{5}},
		{"a five-row form alone", five, true, 6, []int{4, 2}},
		{"a five-row form alone", five, true, 9, []int{4, 5}},
	} {
		if got := calls(c.k, c.rows, c.wide); !slices.Equal(got, c.want) {
			t.Errorf("%s: %d rows taken as %v, want %v", c.name, c.rows, got, c.want)
		}
	}
	defer SetBandTails(false)()
	if got := calls(wide, 9, true); !slices.Equal(got, []int{4, 4, 1}) {
		t.Errorf("tail forms off: 9 rows taken as %v, want [4 4 1]", got)
	}
	if got := calls(wide, 7, true); !slices.Equal(got, []int{4, 1, 1, 1}) {
		t.Errorf("tail forms off: 7 rows taken as %v, want [4 1 1 1]", got)
	}
}
