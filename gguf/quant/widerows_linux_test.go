package quant_test

import (
	"syscall"
	"testing"

	"github.com/meshnode/meshnode/gguf/quant"
)

// TestWideRowsReadsNothingPast: a weight row that ends, mid-chunk, where
// its memory ends (a page followed by one that may not be read) is
// multiplied without a fault: the partial chunk's masked-off elements are
// not read.
func TestWideRowsReadsNothingPast(t *testing.T) {
	page := syscall.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, 2*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Skipf("mmap: %v", err)
	}
	defer syscall.Munmap(mem)
	if err := syscall.Mprotect(mem[page:], syscall.PROT_NONE); err != nil {
		t.Skipf("mprotect: %v", err)
	}
	for _, typ := range []quant.Type{quant.F16, quant.BF16, quant.F32} {
		if !quant.WideRowsFor(typ) {
			t.Skipf("no WideRows kernels here")
		}
		const n, rows = 37, 3
		es := typ.TypeSize()
		w := mem[page-rows*n*es : page]
		src := make([]float32, rows*n)
		for i := range src {
			src[i] = float32(i%11) - 5
		}
		if err := quant.Quantize(typ, src, w); err != nil {
			t.Fatal(err)
		}
		x := make([]float32, 64)
		for i := range n {
			x[i] = 1
		}
		out := make([]float32, rows)
		quant.WideRows(typ, w, n*es, n, rows, x, 64, 1, out, rows)
		for r := range rows {
			var want float32
			for _, v := range src[r*n : (r+1)*n] {
				want += v
			}
			if out[r] != want {
				t.Fatalf("%s row %d: %g, want %g", typ, r, out[r], want)
			}
		}
	}
}
