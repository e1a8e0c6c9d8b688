package sample

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
)

// Sorting candidates likeliest first is what top-p pays for on a flat
// distribution, whose nucleus holds most of the vocabulary: a comparison
// sort of 25000 candidates took two thirds of a 3 ms pick. sortLikeliest
// gives the same order (beforeNumber's: the logit descending, −0 and +0
// alike, ties by id) by a least-significant-digit radix sort on the
// logit's bits, radixBits a pass over only the bits the candidates do not
// all share (a logit that was a float32 leaves its 29 lowest bits zero),
// and orders the runs of tied logits by id after.

// radixMin is the length from which sortLikeliest sorts by radix: below
// it the comparison sort costs less than the passes' counting.
const radixMin = 256

// radixBits is the bits a pass sorts by. The passes cover only the bits
// the keys do not all share, from the lowest that differs: a float32
// logit's 35 (sign, exponent, mantissa as a float64's) take three. A
// pass's counts (8192 of them, measured best) stay in the first-level cache.
const radixBits = 13

// keyed is a candidate as the passes move it: its key and its id.
type keyed struct {
	k  uint64
	id uint32
}

// likeliestKey maps a logit to a key whose ascending order is the logits'
// descending one; −0 and +0 get neighbouring keys (the run of ties
// after orders them as one). It is not for NaN.
func likeliestKey(v float64) uint64 {
	b := math.Float64bits(v)
	if b>>63 != 0 {
		b = ^b // a negative number: larger magnitude, smaller
	} else {
		b |= 1 << 63
	}
	return ^b // descending
}

// likeliestValue is the logit of a key.
func likeliestValue(k uint64) float64 {
	b := ^k
	if b>>63 != 0 {
		b &^= 1 << 63
	} else {
		b = ^b
	}
	return math.Float64frombits(b)
}

// sortLikeliest sorts c, which holds no NaN, in beforeNumber's order,
// with s.radix as the passes' scratch.
func (s *Sampler) sortLikeliest(c []candidate) {
	s.radix = sortLikeliest(c, s.radix)
}

// sortLikeliest is Sampler.sortLikeliest with its scratch, buf, given and
// returned for reuse.
func sortLikeliest(c []candidate, buf []keyed) []keyed {
	n := len(c)
	if n < radixMin {
		slices.SortFunc(c, beforeNumber)
		return buf
	}
	const size = 1 << radixBits
	buf = slices.Grow(buf[:0], 2*n)[:2*n]
	src, dst := buf[:n], buf[n:]
	and, or := ^uint64(0), uint64(0)
	for i, x := range c {
		k := likeliestKey(x.v)
		src[i] = keyed{k, x.id}
		and, or = and&k, or|k
	}
	if differ := and ^ or; differ != 0 {
		lo, hi := bits.TrailingZeros64(differ), 63-bits.LeadingZeros64(differ)
		for shift := lo; shift <= hi; shift += radixBits {
			var at [size]uint32
			for _, x := range src {
				at[(x.k>>shift)&(size-1)]++
			}
			var sum uint32
			for b, k := range at {
				at[b] = sum
				sum += k
			}
			for _, x := range src {
				b := (x.k >> shift) & (size - 1)
				dst[at[b]] = x
				at[b]++
			}
			src, dst = dst, src
		}
	}
	for i, x := range src {
		c[i] = candidate{x.id, likeliestValue(x.k)}
	}
	// The passes are stable, but the candidates came in any order: a run
	// of tied logits is ordered by id.
	for i := 0; i < n; {
		j := i + 1
		for j < n && c[j].v == c[i].v {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(c[i:j], func(a, b candidate) int { return cmp.Compare(a.id, b.id) })
		}
		i = j
	}
	return buf
}
