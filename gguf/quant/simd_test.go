package quant_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/gguf/quant"
)

// halfFields are the byte offsets of the fp16 scales in one block of each
// format, so that random blocks can be given finite scales.
var halfFields = map[quant.Type][]int{
	quant.F16: nil, quant.BF16: nil, quant.F32: nil,
	quant.Q4_0: {0}, quant.Q5_0: {0}, quant.Q8_0: {0}, quant.IQ4_NL: {0},
	quant.Q4_1: {0, 2}, quant.Q5_1: {0, 2}, quant.Q8_1: {0, 2},
	quant.Q2_K: {80, 82}, quant.Q3_K: {108}, quant.Q4_K: {0, 2}, quant.Q5_K: {0, 2},
	quant.Q6_K: {208}, quant.IQ4_XS: {0},
}

// randomBlocks fills b with random bytes; unless raw, every scale is then
// made a finite fp16 (a float32 for Q8_K) between 2^-10 and 1 in size, and
// float elements finite, so that the dot is an ordinary number.
func randomBlocks(rng *rand.Rand, typ quant.Type, b []byte, raw bool) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	if raw {
		return
	}
	scale := func() float32 {
		return float32(math.Ldexp(1+rng.Float64(), -rng.IntN(10))) * float32(1-2*rng.IntN(2))
	}
	bs := typ.TypeSize()
	for o := 0; o+bs <= len(b); o += bs {
		switch typ {
		case quant.Q8_K:
			binary.LittleEndian.PutUint32(b[o:], math.Float32bits(scale()))
		case quant.F32:
			binary.LittleEndian.PutUint32(b[o:], math.Float32bits(float32(rng.NormFloat64())))
		case quant.F16:
			binary.LittleEndian.PutUint16(b[o:], quant.FP32ToFP16(float32(rng.NormFloat64())))
		case quant.BF16:
			binary.LittleEndian.PutUint16(b[o:], quant.FP32ToBF16(float32(rng.NormFloat64())))
		}
		for _, f := range halfFields[typ] {
			binary.LittleEndian.PutUint16(b[o+f:], quant.FP32ToFP16(scale()))
		}
	}
}

// sameFloat is bit equality, with any NaN equal to any other.
func sameFloat(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b)
}

// dotBoth returns VecDot with the assembly kernels and with the Go ones.
func dotBoth(typ quant.Type, row []byte, a *quant.Activation) (asm, pure float32) {
	asm = quant.VecDot(typ, row, a)
	defer quant.SetSIMD(false)()
	return asm, quant.VecDot(typ, row, a)
}

// TestSIMDMatchesGo holds every assembly kernel to its Go kernel, bit for
// bit, on lengths that exercise whole rounds and tails, on quantised
// normal data, random blocks with finite scales, and raw random bytes.
func TestSIMDMatchesGo(t *testing.T) {
	types := quant.SIMDTypes()
	if len(types) == 0 {
		t.Skip("no assembly kernels on this machine (or built with purego)")
	}
	t.Logf("assembly kernels for %v", types)
	rng := rand.New(rand.NewPCG(7, 8))
	for _, typ := range types {
		at, _ := quant.VecDotType(typ)
		qk := max(typ.BlockSize(), at.BlockSize())
		for _, blocks := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 15, 16, 17, 31, 33, 63, 64, 130} {
			n := blocks * qk
			if qk == 1 { // float types: lengths around their 32 lanes
				n = blocks*32 + blocks%5
			}
			row := make([]byte, mustRowSize(t, typ, n))
			a, err := quant.NewActivation(typ, n)
			if err != nil {
				t.Fatal(err)
			}
			for _, kind := range []string{"quantised", "random", "raw"} {
				for trial := range 4 {
					switch kind {
					case "quantised":
						if err := quant.Quantize(typ, normal(rng, n), row); err != nil {
							t.Fatal(err)
						}
						if err := a.Quantize(normal(rng, n)); err != nil {
							t.Fatal(err)
						}
					default:
						randomBlocks(rng, typ, row, kind == "raw")
						randomBlocks(rng, at, a.Data, kind == "raw")
					}
					if asm, pure := dotBoth(typ, row, a); !sameFloat(asm, pure) {
						t.Errorf("%s n=%d %s #%d: assembly %g (%#08x), Go %g (%#08x)", typ, n, kind, trial,
							asm, math.Float32bits(asm), pure, math.Float32bits(pure))
					}
				}
			}
		}
	}
}

// specialFloats makes activations that probe a quantiser's corners: exact
// halves after scaling (a block whose largest magnitude is 127 has d = 1),
// signed zeros, subnormals, huge values, Inf and NaN, whole blocks of
// zeros, and a largest magnitude held by two elements of opposite sign.
func specialFloats(rng *rand.Rand, n int) []float32 {
	x := normal(rng, n)
	specials := []float32{0, float32(math.Copysign(0, -1)), 1e-40, -1e-45, 3e38, -3e38,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}
	for b := 0; b+32 <= n; b += 32 {
		blk := x[b : b+32]
		switch rng.IntN(7) {
		case 0: // halves: ties must round away from zero
			for i := range blk {
				blk[i] = float32(rng.IntN(254)-127) + 0.5*float32(rng.IntN(2))
			}
			blk[rng.IntN(32)] = 127
		case 1:
			clear(blk)
		case 2:
			blk[rng.IntN(32)] = specials[rng.IntN(len(specials))]
		case 3:
			for i := range blk {
				blk[i] *= float32(math.Ldexp(1, rng.IntN(80)-40))
			}
		case 4: // the largest magnitude twice, with both signs: the first wins
			big := float32(1000 + rng.IntN(1000))
			i, j := rng.IntN(32), rng.IntN(32)
			blk[i], blk[j] = big, -big
		}
	}
	return x
}

// TestSIMDQuantizeMatchesGo holds every assembly quantiser to its Go
// kernel, byte for byte.
func TestSIMDQuantizeMatchesGo(t *testing.T) {
	types := quant.SIMDQuantTypes()
	if len(types) == 0 {
		t.Skip("no assembly quantisers on this machine (or built with purego)")
	}
	rng := rand.New(rand.NewPCG(15, 16))
	for _, typ := range types {
		for _, blocks := range []int{1, 2, 7, 8, 9, 33} {
			for trial := range 20 {
				x := specialFloats(rng, blocks*typ.BlockSize())
				asm := make([]byte, mustRowSize(t, typ, len(x)))
				pure := make([]byte, len(asm))
				if err := quant.Quantize(typ, x, asm); err != nil {
					t.Fatal(err)
				}
				restore := quant.SetSIMD(false)
				if err := quant.Quantize(typ, x, pure); err != nil {
					t.Fatal(err)
				}
				restore()
				if i := firstDiff(asm, pure); i >= 0 {
					bs := typ.TypeSize()
					t.Fatalf("%s %d blocks #%d: byte %d differs: assembly % x, Go % x (input %v)", typ, blocks, trial, i,
						asm[i/bs*bs:i/bs*bs+bs], pure[i/bs*bs:i/bs*bs+bs], x[i/bs*typ.BlockSize():(i/bs+1)*typ.BlockSize()])
				}
			}
		}
	}
}

// TestSIMDMatVec checks MatVec takes the same kernels as VecDot.
func TestSIMDMatVec(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, typ := range quant.SIMDTypes() {
		const n, rows = 1024, 5
		w := make([]byte, mustRowSize(t, typ, n*rows))
		if err := quant.Quantize(typ, normal(rng, n*rows), w); err != nil {
			t.Fatal(err)
		}
		a, _ := quant.NewActivation(typ, n)
		if err := a.Quantize(normal(rng, n)); err != nil {
			t.Fatal(err)
		}
		out := make([]float32, rows)
		quant.MatVec(typ, w, a, out)
		rs := len(w) / rows
		restore := quant.SetSIMD(false)
		for r := range rows {
			if want := quant.VecDot(typ, w[r*rs:(r+1)*rs], a); !sameFloat(out[r], want) {
				t.Errorf("%s row %d: MatVec %g, Go VecDot %g", typ, r, out[r], want)
			}
		}
		restore()
	}
}

// FuzzSIMDMatchesGo: any row and activation bytes dot to the same bits
// with the assembly kernels as with the Go ones.
func FuzzSIMDMatchesGo(f *testing.F) {
	addDotSeeds(f, quant.SIMDTypes(), rand.New(rand.NewPCG(11, 12)))
	f.Fuzz(func(t *testing.T, pick uint8, row, act []byte) {
		typ, at, n, rs, as, ok := dotCase(t, quant.SIMDTypes(), pick, row, act)
		if !ok {
			return
		}
		a := &quant.Activation{Type: at, N: n, Data: act[:as]}
		if asm, pure := dotBoth(typ, row[:rs], a); !sameFloat(asm, pure) {
			t.Fatalf("%s n=%d: assembly %g, Go %g", typ, n, asm, pure)
		}
	})
}

// TestMatVecRows holds MatVecRows, whole-row kernels and all, to the Go
// VecDot of each row: on lengths around the 32 lanes (the last partial
// chunk is done apart; a tail of whole eights in place), rows further
// apart than their length, and
// normal, random and raw elements.
func TestMatVecRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	for _, typ := range []quant.Type{quant.F16, quant.F32, quant.BF16, quant.Q8_0} {
		for _, n := range []int{1, 2, 5, 8, 16, 24, 31, 32, 33, 40, 47, 48, 56, 64, 80, 95, 120, 130} {
			if n%typ.BlockSize() != 0 {
				continue
			}
			const rows = 5
			rs := mustRowSize(t, typ, n)
			stride := rs + 2*typ.TypeSize() + 2
			w := make([]byte, (rows-1)*stride+rs)
			a, err := quant.NewActivation(typ, n)
			if err != nil {
				t.Fatal(err)
			}
			for _, kind := range []string{"normal", "random", "raw"} {
				if kind == "normal" {
					for r := range rows {
						if err := quant.Quantize(typ, normal(rng, n), w[r*stride:r*stride+rs]); err != nil {
							t.Fatal(err)
						}
					}
					if err := a.Quantize(normal(rng, n)); err != nil {
						t.Fatal(err)
					}
				} else {
					randomBlocks(rng, typ, w, kind == "raw")
					randomBlocks(rng, typ, a.Data, kind == "raw")
				}
				out := make([]float32, rows)
				quant.MatVecRows(typ, w, stride, a, out)
				restore := quant.SetSIMD(false)
				for r := range rows {
					if want := quant.VecDot(typ, w[r*stride:r*stride+rs], a); !sameFloat(out[r], want) {
						t.Errorf("%s n=%d %s row %d: MatVecRows %g (%#08x), Go VecDot %g (%#08x)", typ, n, kind, r,
							out[r], math.Float32bits(out[r]), want, math.Float32bits(want))
					}
				}
				restore()
			}
		}
	}
}

// addDotSeeds seeds a fuzz target that takes (pick, row, act) with a row
// of nine blocks (of 32 elements at least) of each type, and an
// activation, random with finite scales.
func addDotSeeds(f *testing.F, types []quant.Type, rng *rand.Rand) {
	for i, typ := range types {
		at, _ := quant.VecDotType(typ)
		n := 9 * max(typ.BlockSize(), at.BlockSize(), 32)
		row := make([]byte, mustRowSize(f, typ, n))
		act := make([]byte, mustRowSize(f, at, n))
		randomBlocks(rng, typ, row, false)
		randomBlocks(rng, at, act, false)
		f.Add(uint8(i), row, act)
	}
}

// dotCase turns a fuzz input into a case: the type picked, its
// activation type, the elements the row's bytes hold (whole blocks of
// both), their bytes in the row and in the activation; ok is false where
// the input holds no case.
func dotCase(t *testing.T, types []quant.Type, pick uint8, row, act []byte) (typ, at quant.Type, n, rs, as int, ok bool) {
	if len(types) == 0 {
		t.Skip("no assembly kernels")
	}
	typ = types[int(pick)%len(types)]
	at, _ = quant.VecDotType(typ)
	qk := max(typ.BlockSize(), at.BlockSize())
	n = len(row) / typ.TypeSize() * typ.BlockSize() / qk * qk
	rs, _ = typ.RowSize(n)
	as, _ = at.RowSize(n)
	return typ, at, n, rs, as, n > 0 && len(act) >= as
}

// TestSIMDMXFP4SmallExponents: MXFP4 blocks whose exponents are 0 … 3,
// whose halved scales are float32 subnormals (e < 2) or the smallest
// normals, which random blocks almost never give, dot the same in the
// assembly kernel as in Go.
func TestSIMDMXFP4SmallExponents(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const n = 32 * 24
	row := make([]byte, mustRowSize(t, quant.MXFP4, n))
	a, err := quant.NewActivation(quant.MXFP4, n)
	if err != nil {
		t.Fatal(err)
	}
	for trial := range 8 {
		randomBlocks(rng, quant.MXFP4, row, true)
		for b := 0; b < len(row); b += 17 {
			row[b] = byte((b/17 + trial) % 4)
		}
		if err := a.Quantize(normal(rng, n)); err != nil {
			t.Fatal(err)
		}
		asm, pure := dotBoth(quant.MXFP4, row, a)
		if !sameFloat(asm, pure) {
			t.Fatalf("trial %d: assembly %g (%#08x), Go %g (%#08x)", trial, asm, math.Float32bits(asm), pure, math.Float32bits(pure))
		}
		if pure == 0 {
			t.Fatalf("trial %d: a zero dot: the test exercises nothing", trial)
		}
	}
}

// FuzzSIMDQuantizeMatchesGo: any floats (any bits: NaNs of every payload,
// infinities, subnormals, halves' overflow and underflow) quantise to the
// same bytes with the assembly quantisers as with the Go ones.
func FuzzSIMDQuantizeMatchesGo(f *testing.F) {
	types := quant.SIMDQuantTypes()
	rng := rand.New(rand.NewPCG(31, 32))
	for i, typ := range types {
		x := specialFloats(rng, 2*typ.BlockSize()+min(typ.BlockSize(), 8)-1)
		b := make([]byte, 4*len(x))
		for j, v := range x {
			binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(v))
		}
		f.Add(uint8(i), b)
	}
	f.Fuzz(func(t *testing.T, pick uint8, b []byte) {
		if len(types) == 0 {
			return
		}
		typ := types[int(pick)%len(types)]
		n := len(b) / 4 / typ.BlockSize() * typ.BlockSize()
		if n == 0 {
			return
		}
		x := make([]float32, n)
		for j := range x {
			x[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
		}
		asm := make([]byte, mustRowSize(t, typ, n))
		pure := make([]byte, len(asm))
		if err := quant.Quantize(typ, x, asm); err != nil {
			t.Fatal(err)
		}
		restore := quant.SetSIMD(false)
		defer restore()
		if err := quant.Quantize(typ, x, pure); err != nil {
			t.Fatal(err)
		}
		if i := firstDiff(asm, pure); i >= 0 {
			t.Fatalf("%s of %d: byte %d differs: assembly %#x, Go %#x", typ, n, i, asm[i], pure[i])
		}
	})
}
