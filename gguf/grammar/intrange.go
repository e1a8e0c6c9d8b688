package grammar

import (
	"strconv"
	"strings"
)

// Integer ranges (a schema's minimum and maximum on an integer):
// the integers lo … hi as JSON writes them, built digit by digit as a
// range is written as a regular expression — split by length, then at
// the first digit where the bounds part — so that every integer in the
// range is taken and none outside it.

// maxJSONInteger is the largest magnitude jsonInteger writes: 16 digits.
const maxJSONInteger = 9_999_999_999_999_999

// intRange is the integers lo … hi (lo ≤ hi, each within
// ±maxJSONInteger) as JSON writes them; zero without a sign.
func intRange(lo, hi int64) Expr {
	var alts []Expr
	if lo < 0 {
		// The negatives: their magnitudes, from the least to the most.
		least := int64(1)
		if hi < 0 {
			least = -hi
		}
		alts = append(alts, Seq(Lit("-"), uintRange(uint64(least), uint64(-lo))))
	}
	if hi >= 0 {
		alts = append(alts, uintRange(uint64(max(lo, 0)), uint64(hi)))
	}
	if len(alts) == 1 {
		return alts[0]
	}
	return Alt(alts...)
}

// uintRange is a … b (a ≤ b), each length of digits on its own.
func uintRange(a, b uint64) Expr {
	var alts []Expr
	for n := len(strconv.FormatUint(a, 10)); n <= len(strconv.FormatUint(b, 10)); n++ {
		lo, hi := a, b
		if first := pow10(n - 1); n > 1 && lo < first {
			lo = first
		}
		if last := pow10(n) - 1; hi > last {
			hi = last
		}
		alts = append(alts, digitRange(strconv.FormatUint(lo, 10), strconv.FormatUint(hi, 10)))
	}
	if len(alts) == 1 {
		return alts[0]
	}
	return Alt(alts...)
}

func pow10(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}

// digitRange is lo … hi, two numbers of as many digits, lo ≤ hi.
func digitRange(lo, hi string) Expr {
	switch {
	case lo == hi:
		return Lit(lo)
	case len(lo) == 1:
		return Bytes([2]byte{lo[0], hi[0]})
	case lo[0] == hi[0]:
		return Seq(Lit(lo[:1]), digitRange(lo[1:], hi[1:]))
	}
	// The bounds part at the first digit: lo's first digit then lo's
	// tail up to all nines, the digits between then any tail, hi's first
	// digit then any tail up to hi's. A tail of all zeros (lo) or all
	// nines (hi) joins the middle.
	rest := len(lo) - 1
	first, last := lo[0], hi[0]
	var alts []Expr
	if strings.Trim(lo[1:], "0") != "" {
		alts = append(alts, Seq(Lit(lo[:1]), digitRange(lo[1:], strings.Repeat("9", rest))))
		first++
	}
	nines := strings.Trim(hi[1:], "9") == ""
	if !nines {
		last--
	}
	if first <= last {
		alts = append(alts, Seq(Bytes([2]byte{first, last}), Repeat(digit, rest, rest)))
	}
	if !nines {
		alts = append(alts, Seq(Lit(hi[:1]), digitRange(strings.Repeat("0", rest), hi[1:])))
	}
	if len(alts) == 1 {
		return alts[0]
	}
	return Alt(alts...)
}
