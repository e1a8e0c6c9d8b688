package cpu

import (
	"math"
	"testing"
)

// TestExpf bounds expf against math.Exp: within 2.5 ulp over the float32
// range (ggml documents 1.45 ulp plus rounding), exact at 0, 0 and +Inf
// beyond it.
func TestExpf(t *testing.T) {
	worst := 0.0
	for x := float32(-103); x < 88.7; x += 0.000731 {
		want := math.Exp(float64(x))
		got := float64(expf(x))
		ulp := float64(math.Nextafter32(float32(want), float32(math.Inf(1)))) - float64(float32(want))
		if want < 0x1p-126 {
			ulp = 0x1p-149 // subnormal spacing
		}
		if e := math.Abs(got-want) / ulp; e > worst {
			worst = e
		}
	}
	if worst > 2.5 {
		t.Fatalf("expf is %.2f ulp from e^x at worst", worst)
	}
	for _, tc := range []struct{ x, want float32 }{
		{0, 1}, {89, float32(math.Inf(1))}, {-200, 0}, {float32(math.Inf(-1)), 0},
	} {
		if got := expf(tc.x); got != tc.want {
			t.Errorf("expf(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
	if nan := float32(math.NaN()); !math.IsNaN(float64(expf(nan))) {
		t.Error("expf(NaN) is a number")
	}
}

func TestTanhf(t *testing.T) {
	for x := float32(-12); x < 12; x += 0.00137 {
		want := math.Tanh(float64(x))
		if d := math.Abs(float64(tanhf(x)) - want); d > 3e-7*math.Max(1e-3, math.Abs(want)) && d > 1e-9 {
			t.Fatalf("tanhf(%v) = %v, want %v", x, tanhf(x), want)
		}
	}
}
