package jinja

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// Integers are Python's: unbounded. A value is an int64 while it fits
// one and a *big.Int past it (a literal, a JSON number, a product), so a
// template prints 2 ** 70 and a tool call's 20-digit id exactly, and the
// common case costs what it did. Where an integer is a count or an index
// (a slice bound, a repeat) it is read saturated (AsInt): no such count
// fits in memory anyway, and the render's limits stop it.

// maxIntBits bounds an integer's size: a product or power past it stops
// the render (Python would compute it, but print no more than 4300
// digits of it either), so that no arithmetic on a template's numbers
// runs long.
const maxIntBits = 1 << 16

// errIntTooLarge is an integer result past maxIntBits.
var errIntTooLarge = errors.New("integer too large")

// newIntBig is x as a Value: an int64 where it fits.
func newIntBig(x *big.Int) Value {
	if x.IsInt64() {
		return NewInt(x.Int64())
	}
	return Value{kind: KindInt, v: x}
}

// intBig is an int's or a bool's value as a *big.Int (a copy).
func intBig(v Value) *big.Int {
	switch n := v.v.(type) {
	case int64:
		return big.NewInt(n)
	case *big.Int:
		return new(big.Int).Set(n)
	case bool:
		if n {
			return big.NewInt(1)
		}
	}
	return new(big.Int)
}

// isIntegral reports whether v takes part in integer arithmetic: an int
// or a bool (Python's bools are ints).
func isIntegral(v Value) bool { return v.kind == KindInt || v.kind == KindBool }

// int64Of is v's int64, for an integral v that holds one.
func int64Of(v Value) (int64, bool) {
	switch n := v.v.(type) {
	case int64:
		return n, true
	case bool:
		if n {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// intValue is v, a bool made the int it counts as (True is 1).
func intValue(v Value) Value {
	if v.IsBool() {
		n, _ := int64Of(v)
		return NewInt(n)
	}
	return v
}

// intString is an int's decimal digits.
func intString(v Value) string {
	if n, ok := v.v.(int64); ok {
		return strconv.FormatInt(n, 10)
	}
	return v.v.(*big.Int).String()
}

// intCmp compares two integral values.
func intCmp(a, b Value) int {
	x, okx := int64Of(a)
	y, oky := int64Of(b)
	if okx && oky {
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	}
	return intBig(a).Cmp(intBig(b))
}

// intFloat is an integral value as the nearest float64 (±Inf past its
// range).
func intFloat(v Value) float64 {
	if n, ok := int64Of(v); ok {
		return float64(n)
	}
	f, _ := new(big.Float).SetInt(v.v.(*big.Int)).Float64()
	return f
}

// floatInt is Python's int(f): f truncated toward zero, exactly; false
// for Inf and NaN.
func floatInt(f float64) (Value, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return Undefined(), false
	}
	if f > -(1<<63) && f < 1<<63 {
		return NewInt(int64(f)), true
	}
	x, _ := new(big.Float).SetFloat64(math.Trunc(f)).Int(nil)
	return newIntBig(x), true
}

// parseInt is a decimal integer's value (an optional sign, digits), or
// false.
func parseInt(s string) (Value, bool) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return NewInt(n), true
	}
	if len(s) > maxIntBits/3 { // more digits than maxIntBits holds
		return Undefined(), false
	}
	x, ok := new(big.Int).SetString(s, 10)
	if !ok || x.BitLen() > maxIntBits {
		return Undefined(), false
	}
	return newIntBig(x), true
}

// pyParseInt is Python's int(s, base) of a string: spaces around, a
// sign, the base's prefix (0x, 0o, 0b; base 0 takes the base from it, and
// decimal then has no leading zeros), single underscores between digits;
// false where Python raises.
func pyParseInt(s string, base int) (Value, bool) {
	s = strings.TrimSpace(s)
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	if len(s) >= 2 && s[0] == '0' {
		prefixed := map[byte]int{'x': 16, 'X': 16, 'o': 8, 'O': 8, 'b': 2, 'B': 2}[s[1]]
		if prefixed != 0 && (base == 0 || base == prefixed) {
			base, s = prefixed, strings.TrimPrefix(s[2:], "_")
		}
	}
	if base == 0 {
		base = 10
		if strings.TrimLeft(s, "0_") != "" && s[0] == '0' {
			return Undefined(), false // 010 is no base-0 literal
		}
	}
	if s == "" || strings.ContainsAny(s[:1], "_+-") || s[len(s)-1] == '_' || strings.Contains(s, "__") || len(s) > maxIntBits {
		return Undefined(), false
	}
	x, ok := new(big.Int).SetString(strings.ReplaceAll(s, "_", ""), base)
	if !ok || x.BitLen() > maxIntBits {
		return Undefined(), false
	}
	if neg {
		x.Neg(x)
	}
	return newIntBig(x), true
}

// intArith is a op b for integral a and b: + - * // % and ** (b ≥ 0), as
// Python computes them, in int64 where the result fits and exactly past
// it; // and % by zero are errZeroDivision.
func intArith(bud *budget, op string, a, b Value) (Value, error) {
	if (op == "//" || op == "%") && intCmp(b, NewInt(0)) == 0 {
		return Undefined(), fmt.Errorf("%s: %w", op, errZeroDivision)
	}
	x, okx := int64Of(a)
	y, oky := int64Of(b)
	if okx && oky {
		if r, ok := smallArith(op, x, y); ok {
			return NewInt(r), nil
		}
	}
	bx, by := intBig(a), intBig(b)
	// What the result may hold, charged, and for the products (whose
	// work grows faster than their size) bounded before it is made.
	bits := max(bx.BitLen(), by.BitLen()) + 1
	switch op {
	case "*":
		bits = bx.BitLen() + by.BitLen()
	case "**":
		// |x|^y has about y·log2|x| bits: 0, 1 and -1 stay small to any
		// power, and 2 ** 65535 fits.
		switch {
		case bx.BitLen() <= 1:
			bits = 2
		case by.BitLen() > 32:
			bits = math.MaxInt32
		default:
			bits = int(float64(by.Int64())*math.Log2(math.Abs(intFloat(newIntBig(bx))))) + 1
		}
	}
	tooLarge := fmt.Errorf("%s: %w (more than %d bits)", op, errIntTooLarge, maxIntBits)
	if bits > maxIntBits+1 {
		return Undefined(), tooLarge
	}
	bud.alloc(int64(bits/8 + 1))
	r := new(big.Int)
	switch op {
	case "+":
		r.Add(bx, by)
	case "-":
		r.Sub(bx, by)
	case "*":
		r.Mul(bx, by)
	case "//", "%":
		// Python floors: the remainder takes the divisor's sign.
		q, m := new(big.Int).DivMod(bx, by, new(big.Int)) // Euclidean: m ≥ 0
		if m.Sign() != 0 && by.Sign() < 0 {
			q.Add(q, big.NewInt(1))
			m.Add(m, by)
		}
		if op == "//" {
			r = q
		} else {
			r = m
		}
	case "**":
		r.Exp(bx, by, nil)
	default:
		return Undefined(), fmt.Errorf("unknown integer operator %q", op)
	}
	if r.BitLen() > maxIntBits {
		return Undefined(), tooLarge
	}
	return newIntBig(r), nil
}

// smallArith is intArith in int64, and false where the result does not
// fit one (or op is not one it takes).
func smallArith(op string, x, y int64) (int64, bool) {
	switch op {
	case "+":
		r := x + y
		return r, (r > x) == (y > 0)
	case "-":
		r := x - y
		return r, (r < x) == (y > 0)
	case "*":
		if !mulFits(x, y) {
			return 0, false
		}
		return x * y, true
	case "//":
		if x == math.MinInt64 && y == -1 {
			return 0, false
		}
		q := x / y
		if x%y != 0 && (x < 0) != (y < 0) {
			q--
		}
		return q, true
	case "%":
		if y == -1 {
			return 0, true
		}
		r := x % y
		if r != 0 && (r < 0) != (y < 0) {
			r += y
		}
		return r, true
	case "**":
		if y < 0 {
			return 0, false
		}
		return intPow(x, y)
	}
	return 0, false
}

// intNeg is -v for an integral v.
func intNeg(v Value) Value {
	if n, ok := int64Of(v); ok && n != math.MinInt64 {
		return NewInt(-n)
	}
	return newIntBig(new(big.Int).Neg(intBig(v)))
}

// intAbs is |v| for an integral v.
func intAbs(v Value) Value {
	if n, ok := int64Of(v); ok && n != math.MinInt64 {
		return NewInt(max(n, -n))
	}
	return newIntBig(new(big.Int).Abs(intBig(v)))
}

// intPow is base**exp by squaring, and false if it overflows an int64.
func intPow(base, exp int64) (int64, bool) {
	r := int64(1)
	for ; exp > 0; exp >>= 1 {
		if exp&1 == 1 {
			if !mulFits(r, base) {
				return 0, false
			}
			r *= base
		}
		if exp > 1 {
			if !mulFits(base, base) {
				return 0, false
			}
			base *= base
		}
	}
	return r, true
}

// mulFits is whether a·b fits in an int64.
func mulFits(a, b int64) bool {
	if a == 0 || b == 0 {
		return true
	}
	if a == -1 || b == -1 {
		return a != math.MinInt64 && b != math.MinInt64
	}
	return (a*b)/b == a
}
