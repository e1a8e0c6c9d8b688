package detmath

import (
	"math"
	"math/big"
	"sync"
)

// Sin and Cos are Go's math.Sin and math.Cos as they compute on amd64 (in
// Go, the Cephes polynomials after a three-part Cody–Waite reduction by
// π/4), with every product rounded on its own: arm64's compiler fuses
// those multiply-adds, so math.Cos there differs in the last bit now and
// then. Past 2^29, where math switches to a Payne–Hanek reduction, the
// argument is reduced by π/4 in 1300-bit arithmetic (math/big, the same
// bits everywhere), slower but as exact; RoPE's angles, at most a
// position, never get there.

// reduceThreshold is where math's Cody–Waite reduction stops being
// accurate.
const reduceThreshold = 1 << 29

var sinCoef = [...]float64{
	1.58962301576546568060e-10,
	-2.50507477628578072866e-8,
	2.75573136213857245213e-6,
	-1.98412698295895385996e-4,
	8.33333333332211858878e-3,
	-1.66666666666666307295e-1,
}

var cosCoef = [...]float64{
	-1.13585365213876817300e-11,
	2.08757008419747316778e-9,
	-2.75573141792967388112e-7,
	2.48015872888517045348e-5,
	-1.38888888888730564116e-3,
	4.16666666666665929218e-2,
}

// octant reduces x ≥ 0 to z in [−π/4, π/4] and its octant j (0-7).
func octant(x float64) (j uint64, z float64) {
	const (
		pi4a = 7.85398125648498535156e-1 // π/4 in three parts
		pi4b = 3.77489470793079817668e-8
		pi4c = 2.69515142907905952645e-15
	)
	if x >= reduceThreshold {
		return octantBig(x)
	}
	j = uint64(float64(x * (4 / math.Pi)))
	y := float64(j)
	if j&1 == 1 { // map zeros to the origin
		j++
		y++
	}
	j &= 7
	z = ((x - float64(y*pi4a)) - float64(y*pi4b)) - float64(y*pi4c)
	return j, z
}

// bigPrec covers any float64's reduction: its 2^1023·2^53 range, and the
// 61 bits a float64 can agree with a multiple of π/4 to.
const bigPrec = 1300

// quarterPi is π/4 to bigPrec bits, by Machin's formula π/4 =
// 4·atan(1/5) − atan(1/239), made on first use.
var quarterPi = sync.OnceValue(func() *big.Float {
	atanInv := func(n int64) *big.Float { // atan(1/n) = Σ (−1)^k / ((2k+1)·n^(2k+1))
		sum := new(big.Float).SetPrec(bigPrec + 64)
		pow := new(big.Float).SetPrec(bigPrec+64).Quo(big.NewFloat(1), new(big.Float).SetInt64(n))
		n2 := new(big.Float).SetInt64(n * n)
		eps := new(big.Float).SetMantExp(big.NewFloat(1), -bigPrec-64)
		for k := int64(0); pow.Cmp(eps) > 0; k++ {
			term := new(big.Float).SetPrec(bigPrec+64).Quo(pow, new(big.Float).SetInt64(2*k+1))
			if k%2 == 1 {
				term.Neg(term)
			}
			sum.Add(sum, term)
			pow.Quo(pow, n2)
		}
		return sum
	}
	a := atanInv(5)
	a.Mul(a, big.NewFloat(4))
	return a.Sub(a, atanInv(239)).SetPrec(bigPrec)
})

// octantBig is octant for x ≥ 2^29: j = ⌊x/(π/4)⌋, made even as octant
// makes it, and z = x − j·π/4, in bigPrec-bit arithmetic.
func octantBig(x float64) (j uint64, z float64) {
	bx := new(big.Float).SetPrec(bigPrec).SetFloat64(x)
	n, _ := new(big.Float).SetPrec(bigPrec).Quo(bx, quarterPi()).Int(nil)
	if n.Bit(0) == 1 {
		n.Add(n, big.NewInt(1))
	}
	j = new(big.Int).And(n, big.NewInt(7)).Uint64()
	r := new(big.Float).SetPrec(bigPrec).SetInt(n)
	r.Mul(r, quarterPi())
	z, _ = r.Sub(bx, r).Float64()
	return j, z
}

// poly is Cephes' (((((c0·zz + c1)·zz + c2)·zz + c3)·zz + c4)·zz + c5.
func poly(c *[6]float64, zz float64) float64 {
	p := float64(c[0] * zz)
	for _, k := range c[1:5] {
		p = float64(float64(p+k) * zz)
	}
	return p + c[5]
}

// sinPoly and cosPoly are sin z and cos z for |z| ≤ π/4.
func sinPoly(z float64) float64 {
	zz := float64(z * z)
	return z + float64(float64(z*zz)*poly(&sinCoef, zz))
}

func cosPoly(z float64) float64 {
	zz := float64(z * z)
	return (1.0 - float64(0.5*zz)) + float64(float64(zz*zz)*poly(&cosCoef, zz))
}

// Sin is sin x (see above).
func Sin(x float64) float64 {
	switch {
	case x == 0 || x != x:
		return x // ±0, NaN
	case math.IsInf(x, 0):
		return math.NaN()
	}
	sign := x < 0
	j, z := octant(math.Abs(x))
	if j > 3 { // reflect in the x axis
		sign = !sign
		j -= 4
	}
	var y float64
	if j == 1 || j == 2 {
		y = cosPoly(z)
	} else {
		y = sinPoly(z)
	}
	if sign {
		y = -y
	}
	return y
}

// Cos is cos x (see above).
func Cos(x float64) float64 {
	if x != x || math.IsInf(x, 0) {
		return math.NaN()
	}
	sign := false
	j, z := octant(math.Abs(x))
	if j > 3 {
		j -= 4
		sign = !sign
	}
	if j > 1 {
		sign = !sign
	}
	var y float64
	if j == 1 || j == 2 {
		y = sinPoly(z)
	} else {
		y = cosPoly(z)
	}
	if sign {
		y = -y
	}
	return y
}
