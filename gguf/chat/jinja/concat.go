package jinja

import "unsafe"

// Strings built by concatenation (~, and + of strings) keep the buffer
// behind them, so that a template accumulating its output in a loop —
// {% set ns.out = ns.out ~ part %}, as Reka's and others' do — appends in
// place in amortised linear time and bytes, as CPython's s += t does,
// where copying the whole string each time made long conversations cost
// quadratic work and, past a few hundred turns, the render's byte limit.
//
// A buffer only grows: the bytes under any string made from it never
// change once written, so a string appends in place only when it ends
// where the buffer's written bytes end (no other string has grown it
// since) and the capacity holds the addition. Otherwise the result gets a
// new buffer: of its own length where the left side was not built (a
// one-off "a" ~ b), of twice that where it was (a string being grown,
// which will likely grow again).

// strBuf is the bytes behind built strings.
type strBuf struct{ b []byte }

// builtString is a string whose bytes are buf's first len(s).
type builtString struct {
	s   string
	buf *strBuf
}

// concat is left's text followed by r, charged to b: in place where left
// is a built string at its buffer's end with room, else copied into a
// new buffer.
func concat(b *budget, left Value, l, r string) Value {
	bs, built := left.v.(builtString)
	if built && len(bs.s) == len(bs.buf.b) && cap(bs.buf.b)-len(bs.buf.b) >= len(r) {
		b.alloc(int64(len(r)))
		bs.buf.b = append(bs.buf.b, r...) // within capacity: the same array
		return Value{kind: KindString, v: builtString{s: unsafe.String(unsafe.SliceData(bs.buf.b), len(bs.buf.b)), buf: bs.buf}}
	}
	n := len(l) + len(r)
	if n == 0 {
		return NewString("")
	}
	c := n
	if built {
		c = max(2*n, 64)
	}
	b.alloc(int64(c))
	buf := make([]byte, n, c)
	copy(buf[copy(buf, l):], r)
	return Value{kind: KindString, v: builtString{s: unsafe.String(unsafe.SliceData(buf), n), buf: &strBuf{buf}}}
}
