package quant_test

import (
	"testing"

	"github.com/meshnode/meshnode/gguf/quant"
)

// TestTypeCapabilities holds Supported and VecDotType to what the kernels
// actually do, for every type ggml defines.
func TestTypeCapabilities(t *testing.T) {
	supported := map[quant.Type]bool{}
	for _, typ := range goldenTypes {
		supported[typ] = true
	}
	supported[quant.Q8_1], supported[quant.Q8_K] = true, true
	for _, typ := range quant.Types() {
		n := typ.BlockSize()
		row := make([]byte, typ.TypeSize())
		x := make([]float32, n)
		qErr := quant.Quantize(typ, x, row)
		dErr := quant.Dequantize(typ, row, x)
		if got := typ.Supported(); got != supported[typ] || got != (qErr == nil) || got != (dErr == nil) {
			t.Errorf("%s: Supported %v, Quantize err %v, Dequantize err %v", typ, got, qErr, dErr)
		}
		at, ok := quant.VecDotType(typ)
		isWeight := supported[typ] && typ != quant.Q8_1 && typ != quant.Q8_K
		if ok != isWeight {
			t.Errorf("%s: VecDotType ok = %v", typ, ok)
		}
		if ok {
			a, err := quant.NewActivation(typ, max(n, at.BlockSize()))
			if err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			row := make([]byte, typ.TypeSize()*a.N/n)
			if got := quant.VecDot(typ, row, a); got != 0 {
				t.Errorf("%s: zero row dots to %g", typ, got)
			}
		}
		if back, ok := quant.ParseType(typ.String()); !ok || back != typ {
			t.Errorf("ParseType(%q) = %v, %v", typ.String(), back, ok)
		}
	}
	if _, ok := quant.ParseType("q4_k"); !ok {
		t.Error("ParseType is case-sensitive")
	}
	if s := quant.Type(4).String(); s != "type(4)" {
		t.Errorf("removed type prints as %q", s)
	}
	// Unknown types, in the table's range and past it (a hostile file's
	// type field), are unknown with no sizes.
	for _, typ := range []quant.Type{4, 31, 63, 64, 1 << 31} {
		if typ.Known() || typ.BlockSize() != 0 || typ.TypeSize() != 0 {
			t.Errorf("%v: known %v, block %d, bytes %d", typ, typ.Known(), typ.BlockSize(), typ.TypeSize())
		}
		if _, err := typ.RowSize(32); err == nil {
			t.Errorf("%v: RowSize without an error", typ)
		}
	}
}

func TestVecDotRejectsMisuse(t *testing.T) {
	a, _ := quant.NewActivation(quant.Q4_0, 64)
	for name, f := range map[string]func(){
		"wrong activation": func() { quant.VecDot(quant.Q4_K, make([]byte, 144), a) },
		"short row":        func() { quant.VecDot(quant.Q4_0, make([]byte, 18), a) },
		"MatVec size":      func() { quant.MatVec(quant.Q4_0, make([]byte, 36*3-1), a, make([]float32, 3)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
	if _, err := quant.NewActivation(quant.Q4_K, 100); err == nil {
		t.Error("NewActivation accepted 100 elements of Q8_K")
	}
	if err := a.Quantize(make([]float32, 63)); err == nil {
		t.Error("Quantize accepted the wrong length")
	}
}
