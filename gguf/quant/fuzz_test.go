package quant_test

import (
	"math"
	"testing"

	"github.com/meshnode/meshnode/gguf/quant"
)

// FuzzDequantize: any bytes and any length either decode or are refused
// with an error; the kernels never index outside what they are given.
// Seeded from Quantize output.
func FuzzDequantize(f *testing.F) {
	x := make([]float32, 512)
	for i := range x {
		x[i] = float32(math.Sin(float64(i))) * 3
	}
	for _, typ := range goldenTypes {
		b := make([]byte, mustRowSize(f, typ, len(x)))
		if err := quant.Quantize(typ, x, b); err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(typ), b, uint16(len(x)))
	}
	f.Fuzz(func(t *testing.T, typ uint8, b []byte, n uint16) {
		ty := quant.Type(typ)
		dst := make([]float32, n)
		err := quant.Dequantize(ty, b, dst)
		want, sizeErr := ty.RowSize(int(n))
		if (err == nil) != (ty.Supported() && sizeErr == nil && len(b) == want) {
			t.Fatalf("Dequantize(%s, %d bytes, n=%d) = %v", ty, len(b), n, err)
		}
		if err != nil || !ty.Supported() {
			return
		}
		// Any block bits dot without fault, and agree with the dequantised row
		// where the result is finite.
		a, err := quant.NewActivation(ty, int(n))
		if err != nil || n == 0 {
			return
		}
		ones := make([]float32, n)
		for i := range ones {
			ones[i] = 1
		}
		if err := a.Quantize(ones); err != nil {
			t.Fatal(err)
		}
		got := quant.VecDot(ty, b, a)
		var sum, mag float64
		for _, v := range dst {
			sum += float64(v)
			mag += math.Abs(float64(v))
		}
		if !math.IsInf(mag, 0) && !math.IsNaN(mag) && mag < 1e30 && !math.IsNaN(float64(got)) && math.Abs(float64(got)-sum) > 1e-3*mag+1e-30 {
			t.Fatalf("%s: VecDot with ones = %g, Σ dequantised = %g", ty, got, sum)
		}
	})
}
