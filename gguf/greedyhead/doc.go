// Package greedyhead finds a float output head's argmax — the greedy
// token — without computing every logit exactly. An int8 copy of the
// head (a scale per row) gives every logit to within a bound worked out
// from the quantisation and rounding errors; only the rows that the
// bound cannot rule out are dotted exactly, with quant.VecDot, so the
// token is the one the full head and backend.ArgMax give, bit for bit.
//
// It pays where the head's extra rows are bound by arithmetic rather
// than by reading the weights (a speculative window's rows on a model in
// cache): VPDPBUSD does four times the multiply-adds of an FMA. Anything
// it cannot settle (a non-finite activation, too many rows within the
// bound) it leaves to the caller's full head.
package greedyhead
