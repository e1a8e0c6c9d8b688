// Package greedyhead finds an output head's argmax — the greedy token —
// without computing every logit exactly. An int8 copy of the head (a
// scale per row) gives every logit to within a bound worked out from the
// quantisation and rounding errors; only the rows that the bound cannot
// rule out are dotted exactly, with quant.VecDot, so the token is the one
// the full head and backend.ArgMax give, bit for bit.
//
// It pays twice on a small model: one row reads half an F16 head's bytes,
// and a speculative window's extra rows, bound by arithmetic on a model in
// cache, cost a VPDPBUSD pass (four times the multiply-adds of an FMA)
// instead of the head's own kernel. Anything it cannot settle (a
// non-finite activation, too many rows within the bound) it leaves to the
// caller's full head.
package greedyhead
