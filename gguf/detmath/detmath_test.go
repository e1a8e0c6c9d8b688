package detmath

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/big"
	"math/rand/v2"
	"runtime"
	"testing"

	"golang.org/x/sys/cpu"
)

// mathExpIsFMA says whether math.Exp takes its FMA path here: amd64's
// assembly checks for FMA; arm64's is another algorithm.
var mathExpIsFMA = runtime.GOARCH == "amd64" && cpu.X86.HasFMA

// TestExpIsMathExpFMA: Exp is math.Exp's amd64 FMA path to the bit —
// ordinary arguments, the subnormal results, the range's edges and past
// them, NaN and the infinities — checked where math.Exp takes that path.
func TestExpIsMathExpFMA(t *testing.T) {
	if !mathExpIsFMA {
		t.Skip("math.Exp takes another path here: TestGolden checks Exp")
	}
	rng := rand.New(rand.NewPCG(11, 12))
	xs := []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 1e-300, -1e-300, 5e-324, 709.78, 709.7827128933839, 709.79, 710, 1e300,
		-708.39, -708.4, -709.08, -709.09, -720, -744.44, -745.13, -745.14, -746, -1100, -1e10, -1e300,
		math.Inf(1), math.Inf(-1), math.NaN()}
	for range 200000 {
		xs = append(xs, (rng.Float64()*2-1)*750)
	}
	for range 20000 {
		xs = append(xs, (rng.Float64()*2-1)*1e-3)
	}
	for _, x := range xs {
		got, want := Exp(x), math.Exp(x)
		if math.Float64bits(got) != math.Float64bits(want) && !(math.IsNaN(got) && math.IsNaN(want)) {
			t.Fatalf("Exp(%v) = %v (%#x), math.Exp %v (%#x)", x, got, math.Float64bits(got), want, math.Float64bits(want))
		}
	}
}

// logULPs is how far got is from ln x, in ulps of got, by the 200-bit
// reference.
func logULPs(x, got float64) float64 {
	ref := bigLog(x)
	diff, _ := new(big.Float).Sub(new(big.Float).SetPrec(200).SetFloat64(got), ref).Float64()
	return math.Abs(diff) / math.Abs(math.Nextafter(got, math.Inf(1))-got)
}

// TestLog: the special cases are math.Log's, and over random arguments
// across float64's range (subnormals too) and near 1, Log equals math.Log
// or, where they differ, is within 1 ulp of the 200-bit logarithm
// (amd64's math.Log is not, for subnormals: it gives ln 5e-324 as
// −709.09, the logarithm of 2^−1023).
func TestLog(t *testing.T) {
	for _, x := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1, math.Copysign(0, -1), 0, 1, 2, math.E, math.MaxFloat64} {
		got, want := Log(x), math.Log(x)
		if math.Float64bits(got) != math.Float64bits(want) && !(math.IsNaN(got) && math.IsNaN(want)) {
			t.Errorf("Log(%v) = %v, math.Log %v", x, got, want)
		}
	}
	if u := logULPs(5e-324, Log(5e-324)); u > 1 {
		t.Errorf("Log(5e-324) = %v, %.2f ulp from ln", Log(5e-324), u)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	differ := 0
	const n = 300000
	for i := range n {
		var x float64
		switch i % 3 {
		case 0:
			x = math.Float64frombits(rng.Uint64() &^ (1 << 63)) // any positive float64
		case 1:
			x = 1 + (rng.Float64()*2-1)*1e-3
		default:
			x = rng.Float64() * 100
		}
		if math.IsNaN(x) || math.IsInf(x, 0) || x == 0 {
			continue
		}
		got := Log(x)
		if got == math.Log(x) {
			continue
		}
		differ++
		if u := logULPs(x, got); u > 1 {
			t.Fatalf("Log(%v) = %v, %.2f ulp from ln (math.Log %v)", x, got, u, math.Log(x))
		}
	}
	t.Logf("Log differs from math.Log in %d of %d arguments, each within 1 ulp of ln", differ, n)
}

// bigLog is ln x to 200 bits: ln x = e·ln2 + ln m, ln m by atanh's series
// 2·Σ z^(2k+1)/(2k+1), z = (m−1)/(m+1).
func bigLog(x float64) *big.Float {
	const prec = 200
	m, e := math.Frexp(x)
	series := func(v *big.Float) *big.Float {
		one := new(big.Float).SetPrec(prec).SetInt64(1)
		z := new(big.Float).SetPrec(prec).Quo(new(big.Float).SetPrec(prec).Sub(v, one), new(big.Float).SetPrec(prec).Add(v, one))
		z2 := new(big.Float).SetPrec(prec).Mul(z, z)
		sum, term := new(big.Float).SetPrec(prec), new(big.Float).SetPrec(prec).Set(z)
		for k := 0; k < 400; k++ {
			sum.Add(sum, new(big.Float).SetPrec(prec).Quo(term, new(big.Float).SetPrec(prec).SetInt64(int64(2*k+1))))
			term.Mul(term, z2)
		}
		return sum.Mul(sum, new(big.Float).SetPrec(prec).SetInt64(2))
	}
	ln2 := series(new(big.Float).SetPrec(prec).SetInt64(2))
	r := series(new(big.Float).SetPrec(prec).SetFloat64(m))
	return r.Add(r, new(big.Float).SetPrec(prec).Mul(ln2, new(big.Float).SetPrec(prec).SetInt64(int64(e))))
}

// TestSinCos: Sin and Cos are math.Sin and math.Cos to the bit where Go
// compiles math without fused multiply-adds (amd64 below v3), over the
// special cases and random arguments below 2^29; past it, within 1e-15
// of them (both reduce exactly, by other means).
func TestSinCos(t *testing.T) {
	if !mathUnfused {
		t.Skip("Go's math is fused here: TestGolden checks Sin and Cos")
	}
	same := func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) || a != a && b != b }
	rng := rand.New(rand.NewPCG(5, 6))
	xs := []float64{0, math.Copysign(0, -1), math.Pi / 4, math.Pi / 2, math.Pi, -math.Pi, 1e-300, 5e-324, math.Inf(1), math.Inf(-1), math.NaN(), reduceThreshold - 1}
	for range 200000 {
		xs = append(xs, (rng.Float64()*2-1)*math.Ldexp(1, rng.IntN(30)))
	}
	for _, x := range xs {
		if !same(Sin(x), math.Sin(x)) || !same(Cos(x), math.Cos(x)) {
			t.Fatalf("x = %v: Sin %v Cos %v, math %v %v", x, Sin(x), Cos(x), math.Sin(x), math.Cos(x))
		}
	}
	for _, x := range []float64{reduceThreshold, 1e10, -3e12, 1e15, 1e300, math.MaxFloat64} {
		if math.Abs(Sin(x)-math.Sin(x)) > 1e-15 || math.Abs(Cos(x)-math.Cos(x)) > 1e-15 {
			t.Errorf("x = %v: Sin %v Cos %v, math %v %v", x, Sin(x), Cos(x), math.Sin(x), math.Cos(x))
		}
	}
}

// TestQuarterPi: Machin's 1300-bit π/4 rounds to math.Pi/4 and begins
// with π's known bits.
func TestQuarterPi(t *testing.T) {
	if f, _ := quarterPi().Float64(); f != math.Pi/4 {
		t.Fatalf("quarterPi rounds to %v, want %v", f, math.Pi/4)
	}
	// Its first 128 bits against π's known binary digits.
	want, _ := new(big.Int).SetString("c90fdaa22168c234c4c6628b80dc1cd1", 16)
	got, _ := new(big.Float).SetMantExp(quarterPi(), 128).Int(nil) // ⌊π/4·2^128⌋ = ⌊π·2^126⌋
	if got.Cmp(want) != 0 {
		t.Errorf("π's first 128 bits: %x, want %x", got, want)
	}
}

// TestPow: the special cases are math.Pow's, and, where math.Exp is
// Exp (amd64 with FMA), Pow is within 1 ulp of math.Pow elsewhere (equal
// but where Log and math.Log differ), over RoPE's bases and exponents and
// random arguments. (On arm64 math.Pow takes math.Exp's other algorithm:
// TestGolden checks Pow there.)
func TestPow(t *testing.T) {
	for _, c := range [][2]float64{{0, -1}, {math.Copysign(0, -1), -3}, {2, 0}, {1, math.NaN()}, {math.NaN(), 2}, {-2, 3}, {-2, 0.5},
		{2, math.Inf(1)}, {0.5, math.Inf(1)}, {math.Inf(-1), -3}, {4, 0.5}, {4, -0.5}, {-1, math.Inf(1)}, {3, 1 << 63}} {
		got, want := Pow(c[0], c[1]), math.Pow(c[0], c[1])
		if math.Float64bits(got) != math.Float64bits(want) && !(got != got && want != want) {
			t.Errorf("Pow(%v, %v) = %v, math.Pow %v", c[0], c[1], got, want)
		}
	}
	if !mathExpIsFMA {
		t.Skip("math.Pow takes another exponential here: TestGolden checks Pow")
	}
	ulps := func(got, want float64) float64 {
		if got == want {
			return 0
		}
		return math.Abs(got-want) / math.Abs(math.Nextafter(want, math.Inf(1))-want)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	differ := 0
	check := func(x, y float64) {
		got, want := Pow(x, y), math.Pow(x, y)
		if got != want {
			differ++
		}
		if u := ulps(got, want); u > 1 && !math.IsInf(want, 0) && want != 0 {
			t.Fatalf("Pow(%v, %v) = %v, %.1f ulp from math.Pow %v", x, y, got, u, want)
		}
	}
	for _, base := range []float64{10000, 500000, 1e6, 5e6, 8e6, 1e4 * 4} {
		for dims := 2; dims <= 512; dims += 2 {
			check(base, float64(-2/float32(dims)))
		}
	}
	for range 100000 {
		check(rng.Float64()*1000, (rng.Float64()*2-1)*20)
	}
	t.Logf("Pow differs from math.Pow in %d cases, each by 1 ulp", differ)
}

// goldenInputs are the arguments TestGolden digests. The products are
// converted so that no platform fuses them into the sums, and the
// arguments are the same everywhere.
func goldenInputs() (exps, logs, trig []float64) {
	exps = []float64{0, math.Copysign(0, -1), 709.78, 710, -708.4, -709.1, -745.1, -745.2, -1e10, math.Inf(1), math.Inf(-1)}
	for i := range 146000 {
		exps = append(exps, -750+float64(float64(i)*0.01)+float64(float64(i%7)*1e-9))
	}
	for i := range 2000 {
		exps = append(exps, float64(float64(i-1000)*1.7e-7))
	}
	logs = []float64{0, 1, 2, 5e-324, 1e-310, math.MaxFloat64, math.Inf(1)}
	for i := range 100000 {
		logs = append(logs, math.Ldexp(1+float64(float64(i%1000)*0.001), i/1000-50))
	}
	for i := range 2000 {
		logs = append(logs, 1+float64(float64(i-1000)*1.3e-7))
	}
	for i := range 100000 {
		trig = append(trig, float64(float64(i-50000)*0.0123)+float64(float64(i%13)*1e-9))
	}
	for i := range 2000 {
		trig = append(trig, math.Ldexp(1+float64(float64(i)*1e-3), i%60))
	}
	return exps, logs, trig
}

// digest is the SHA-256 of vs' bits, in hex.
func digest(vs []float64) string {
	h := sha256.New()
	var b [8]byte
	for _, v := range vs {
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(v))
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestGolden: Exp, Log, Sin, Cos and Pow give the same bits on every platform — amd64
// with or without FMA, arm64, purego builds (make qemu-arm64 and
// qemu-amd64 run it) — as on the amd64 machine that made the digests.
func TestGolden(t *testing.T) {
	const (
		wantExp  = "db95e534135cac34b75e4c2e9f3286a9b22b41fc910cdb570b82ff0dd8897128"
		wantLog  = "a36e06a31f5eb32e9406bc01e6e0de3adf1ee8e79dc34ff8b4e0586bd685ecdd"
		wantTrig = "3784b7028b34c2f770087e7402768a56c3220f2dbd527ab3854bffb3aff88894"
	)
	exps, logs, trig := goldenInputs()
	var trigOut []float64
	for i, x := range trig {
		trigOut = append(trigOut, Sin(x), Cos(x), Pow(math.Abs(x)+1e-3, float64(x*1e-3)),
			Pow(0.3+float64(math.Abs(x)*1e-5), float64(i%40)+0.25)) // the squarings too
	}
	if d := digest(trigOut); d != wantTrig {
		t.Errorf("Sin, Cos and Pow over %d arguments: digest %s, want %s", len(trig), d, wantTrig)
	}
	for i, x := range exps {
		exps[i] = Exp(x)
	}
	for i, x := range logs {
		logs[i] = Log(x)
	}
	if d := digest(exps); d != wantExp {
		t.Errorf("Exp over %d arguments: digest %s, want %s", len(exps), d, wantExp)
	}
	if d := digest(logs); d != wantLog {
		t.Errorf("Log over %d arguments: digest %s, want %s", len(logs), d, wantLog)
	}
}
