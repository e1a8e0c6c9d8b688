package quant_test

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/quant"
)

// goldens is testdata/ggml-goldens.gguf, written by testdata/goldens.c
// against llama.cpp's ggml (regenerate with testdata/goldens.sh).
type goldens struct {
	f          *gguf.File
	ncol, nrow int
}

func loadGoldens(t *testing.T) *goldens {
	t.Helper()
	f, err := gguf.Open("testdata/ggml-goldens.gguf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	nc, _ := f.Metadata.Uint32("goldens.ncol")
	nr, _ := f.Metadata.Uint32("goldens.nrow")
	return &goldens{f, int(nc), int(nr)}
}

func (g *goldens) bytes(t *testing.T, name string) ([]byte, quant.Type) {
	t.Helper()
	ti, ok := g.f.Tensor(name)
	if !ok {
		t.Fatalf("golden tensor %q missing", name)
	}
	b, err := g.f.TensorData(ti)
	if err != nil {
		t.Fatal(err)
	}
	return b, ti.Type
}

func (g *goldens) floats(t *testing.T, name string) []float32 {
	t.Helper()
	b, typ := g.bytes(t, name)
	if typ != quant.F32 {
		t.Fatalf("%s is %s, want F32", name, typ)
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// goldenTypes are the weight types the goldens cover.
var goldenTypes = []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1,
	quant.Q8_0, quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.IQ4_NL, quant.IQ4_XS, quant.MXFP4}

func ggmlName(t quant.Type) string {
	s := strings.ToLower(t.String())
	return strings.Replace(s, "_k", "_K", 1) // ggml spells the K-quants q4_K
}

func TestTypeTraitsMatchGGML(t *testing.T) {
	g := loadGoldens(t)
	traits, ok := g.f.Metadata.Int32s("goldens.type_traits")
	if !ok {
		t.Fatal("goldens.type_traits missing")
	}
	for id := range len(traits) / 2 {
		typ := quant.Type(id)
		blck, size := int(traits[2*id]), int(traits[2*id+1])
		if blck == 0 { // removed from ggml
			if typ.Known() {
				t.Errorf("type %d is removed in ggml but Known here", id)
			}
			continue
		}
		if typ.BlockSize() != blck || typ.TypeSize() != size {
			t.Errorf("%s: block %d×%d bytes, ggml says %d×%d", typ, typ.BlockSize(), typ.TypeSize(), blck, size)
		}
	}
}

func sameBits(a, b []float32) (int, bool) {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) && !(a[i] != a[i] && b[i] != b[i]) {
			return i, false
		}
	}
	return 0, true
}

func TestQuantizeMatchesGGML(t *testing.T) {
	g := loadGoldens(t)
	in := g.floats(t, "input")
	for _, typ := range goldenTypes {
		want, _ := g.bytes(t, ggmlName(typ)+".q")
		got := make([]byte, len(want))
		if err := quant.Quantize(typ, in, got); err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if i := firstDiff(got, want); i >= 0 {
			bs := typ.TypeSize()
			t.Errorf("%s: byte %d (block %d) differs from ggml: got % x, want % x", typ, i, i/bs,
				got[i/bs*bs:i/bs*bs+bs], want[i/bs*bs:i/bs*bs+bs])
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

func TestDequantizeMatchesGGML(t *testing.T) {
	g := loadGoldens(t)
	for _, typ := range goldenTypes {
		q, _ := g.bytes(t, ggmlName(typ)+".q")
		want := g.floats(t, ggmlName(typ)+".deq")
		got := make([]float32, len(want))
		if err := quant.Dequantize(typ, q, got); err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if i, ok := sameBits(got, want); !ok {
			t.Errorf("%s: element %d = %g, ggml %g", typ, i, got[i], want[i])
		}
	}
	q, _ := g.bytes(t, "q8_K.ref")
	want := g.floats(t, "q8_K.deq")
	got := make([]float32, len(want))
	if err := quant.Dequantize(quant.Q8_K, q, got); err != nil {
		t.Fatal(err)
	}
	if i, ok := sameBits(got, want); !ok {
		t.Errorf("Q8_K: element %d = %g, ggml %g", i, got[i], want[i])
	}
}

func TestActivationFormatsMatchGGML(t *testing.T) {
	g := loadGoldens(t)
	in := g.floats(t, "input")
	for _, c := range []struct {
		typ  quant.Type
		name string
	}{{quant.Q8_1, "q8_1.ref"}, {quant.Q8_K, "q8_K.ref"}} {
		want, _ := g.bytes(t, c.name)
		got := make([]byte, len(want))
		if err := quant.Quantize(c.typ, in, got); err != nil {
			t.Fatal(err)
		}
		if i := firstDiff(got, want); i >= 0 {
			t.Errorf("%s: byte %d differs from ggml (block %d)", c.typ, i, i/c.typ.TypeSize())
		}
	}
	act := g.floats(t, "act")
	for _, typ := range goldenTypes {
		want, wantType := g.bytes(t, ggmlName(typ)+".act")
		a, err := quant.NewActivation(typ, len(act))
		if err != nil {
			t.Fatal(err)
		}
		if a.Type != wantType {
			t.Errorf("%s: activation format %s, ggml's vec_dot_type is %s", typ, a.Type, wantType)
			continue
		}
		if err := a.Quantize(act); err != nil {
			t.Fatal(err)
		}
		if i := firstDiff(a.Data, want); i >= 0 {
			t.Errorf("%s: activation byte %d differs from ggml", typ, i)
		}
	}
}

func TestHalfConversionsMatchGGML(t *testing.T) {
	g := loadGoldens(t)
	in := g.floats(t, "half.in")
	f16, _ := g.bytes(t, "half.f16")
	bf16, _ := g.bytes(t, "half.bf16")
	for i, f := range in {
		if got, want := quant.FP32ToFP16(f), binary.LittleEndian.Uint16(f16[2*i:]); got != want {
			t.Errorf("FP32ToFP16(%g) = %#04x, ggml %#04x", f, got, want)
		}
		if got, want := quant.FP32ToBF16(f), binary.LittleEndian.Uint16(bf16[2*i:]); got != want {
			t.Errorf("FP32ToBF16(%g) = %#04x, ggml %#04x", f, got, want)
		}
	}
}

// TestFP16Exhaustive checks every half against a float64 decoding and that
// narrowing it back is the identity.
func TestFP16Exhaustive(t *testing.T) {
	for h := range 1 << 16 {
		f := quant.FP16ToFP32(uint16(h))
		exp, mant := (h>>10)&0x1f, h&0x3ff
		var want float64
		switch exp {
		case 0x1f:
			if mant != 0 {
				if f == f {
					t.Fatalf("%#04x: want NaN, got %g", h, f)
				}
				continue
			}
			want = math.Inf(1)
		case 0:
			want = math.Ldexp(float64(mant), -24)
		default:
			want = math.Ldexp(float64(mant|0x400), exp-25)
		}
		if h&0x8000 != 0 {
			want = -want
		}
		if float64(f) != want || math.Signbit(float64(f)) != (h&0x8000 != 0) {
			t.Fatalf("FP16ToFP32(%#04x) = %g, want %g", h, f, want)
		}
		if back := quant.FP32ToFP16(f); back != uint16(h) {
			t.Fatalf("FP32ToFP16(FP16ToFP32(%#04x)) = %#04x", h, back)
		}
	}
}

func finite(f float32) bool { return !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) }

func TestVecDotMatchesGGML(t *testing.T) {
	g := loadGoldens(t)
	act := g.floats(t, "act")
	for _, typ := range goldenTypes {
		q, _ := g.bytes(t, ggmlName(typ)+".q")
		want := g.floats(t, ggmlName(typ)+".dot")
		wantCPU := g.floats(t, ggmlName(typ)+".dot_cpu")
		deq := g.floats(t, ggmlName(typ)+".deq")
		a, _ := quant.NewActivation(typ, g.ncol)
		if err := a.Quantize(act); err != nil {
			t.Fatal(err)
		}
		rs, _ := typ.RowSize(g.ncol)
		var worst, worstCPU float64
		for r := range g.nrow {
			got := quant.VecDot(typ, q[r*rs:(r+1)*rs], a)
			// The scale of the sum, against which float32 rounding is judged.
			var mag float64
			for i, w := range deq[r*g.ncol : (r+1)*g.ncol] {
				mag += math.Abs(float64(w) * float64(act[i]))
			}
			if mag == 0 {
				mag = 1
			}
			if !finite(want[r]) || !finite(got) {
				// Row 7 overflows fp16 scales: both must agree on the non-finite result.
				if !(got != got && want[r] != want[r]) && got != want[r] {
					t.Errorf("%s row %d: VecDot = %g, ggml vec_dot = %g", typ, r, got, want[r])
				}
				continue
			}
			rel := math.Abs(float64(got)-float64(want[r])) / mag
			worst = max(worst, rel)
			worstCPU = max(worstCPU, math.Abs(float64(got)-float64(wantCPU[r]))/mag)
			// Same quantised inputs, so only float summation order differs.
			if rel > 2e-6 {
				t.Errorf("%s row %d: VecDot = %g, ggml vec_dot = %g (%.2g of Σ|w·x|)", typ, r, got, want[r], rel)
			}
		}
		t.Logf("%-6s worst |Δ|/Σ|w·x|: %.2g vs ggml on the same activation, %.2g vs ggml's SIMD-quantised activation", typ, worst, worstCPU)
	}
}

// TestMXFP4Spec decodes hand-made blocks against the OCP MX spec: element =
// E2M1(code) × 2^(e−127), E2M1 codes 0..7 being 0, ½, 1, 1½, 2, 3, 4, 6 and
// bit 3 the sign; low nibbles are elements 0..15, high nibbles 16..31.
// Products beyond float32 are ±Inf, and e = 255 (the spec's NaN) is 2^128,
// as ggml decodes it.
func TestMXFP4Spec(t *testing.T) {
	e2m1 := [8]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	for _, e := range []byte{0, 1, 2, 100, 127, 128, 200, 254, 255} {
		b := make([]byte, 17)
		b[0] = e
		for j := range 16 {
			b[1+j] = byte(j) | byte(15-j)<<4
		}
		got := make([]float32, 32)
		if err := quant.Dequantize(quant.MXFP4, b, got); err != nil {
			t.Fatal(err)
		}
		for i, g := range got {
			code := i
			if i >= 16 {
				code = 15 - (i - 16)
			}
			want := e2m1[code&7] * math.Ldexp(1, int(e)-127)
			if code&8 != 0 {
				want = -want
			}
			if g != float32(want) {
				t.Errorf("e=%d element %d (code %d): %g, want %g", e, i, code, g, want)
			}
		}
	}
}
