package jinja

import (
	"fmt"
	"math"
	"strings"
)

// Limits bound what one render may spend. A template that would spend
// more stops with a *LimitError, and nothing it made outlives the render.
type Limits struct {
	// Work bounds the render's steps: one per template node and
	// expression it evaluates, per value a builtin walks, and per 64
	// bytes a builtin scans or writes. It bounds the time a render holds
	// a core, loops over loops and walks of shared values included.
	Work int64
	// Bytes bounds the bytes of the strings, lists and dicts a render
	// makes, counted as they are made, over the whole render: garbage
	// counts too, so this bounds what the render can have live at once.
	Bytes int64
	// Depth bounds how deeply macro and caller() calls nest, whatever
	// name a macro is called by: each call costs the Go stack.
	Depth int
}

// DefaultLimits bound a render whatever its input. Real chat templates
// spend some ten thousand steps and kilobytes on a short conversation;
// a caller that renders long input should add to Work and Bytes in
// proportion (gguf/chat adds 4 steps and 32 bytes a byte of input: real
// templates make up to 4.5 times their input in values).
func DefaultLimits() Limits {
	return Limits{Work: 1 << 24, Bytes: 64 << 20, Depth: 256}
}

// maxNesting bounds how deeply a walk of one value (printing it, comparing
// it, encoding it) follows lists and dicts into each other. A list that
// holds itself (list.append(list)) nests without end; chat input nests
// far less deeply than this.
const maxNesting = 512

// iterationSteps and callSteps are what a loop's iteration (its loop
// variables, set afresh) and a macro's call (its scope and output) cost
// beyond the steps of their bodies, in steps of an expression's cost:
// without them a loop of empty loops ran some ten times as long as the
// work limit means.
const (
	iterationSteps = 16
	callSteps      = 16
)

// valueBytes is what one Value slot of a list or dict is charged: the
// tagged union and the box its payload lives in.
const valueBytes = 32

// LimitError is a render stopped by one of its Limits.
type LimitError struct {
	Limit string // "work", "bytes", "depth" or "nesting"
	Max   int64
}

func (e *LimitError) Error() string {
	switch e.Limit {
	case "work":
		return fmt.Sprintf("render stopped: more than %d steps of work", e.Max)
	case "bytes":
		return fmt.Sprintf("render stopped: more than %d bytes of values made", e.Max)
	case "depth":
		return fmt.Sprintf("render stopped: macro calls nest deeper than %d", e.Max)
	default:
		return fmt.Sprintf("render stopped: a value nests deeper than %d (a list or dict that holds itself?)", e.Max)
	}
}

// budget is one render's account of its Limits. Builtins charge it before
// they allocate, so no single step can allocate past the limit, and it
// stops the render by panicking with a *LimitError, which render recovers:
// the walks that charge it (printing, comparing) have no error to return.
type budget struct {
	lim   Limits
	work  int64
	bytes int64
	depth int
}

func newBudget(l Limits) *budget { return &budget{lim: l} }

// step charges one step of work.
func (b *budget) step() { b.steps(1) }

// steps charges n steps of work.
func (b *budget) steps(n int64) {
	if n > b.lim.Work-b.work {
		panic(&LimitError{Limit: "work", Max: b.lim.Work})
	}
	b.work += n
}

// scan charges the work of reading or writing n bytes.
func (b *budget) scan(n int64) {
	if n < 0 || n/64+1 > b.lim.Work-b.work {
		panic(&LimitError{Limit: "work", Max: b.lim.Work})
	}
	b.work += n/64 + 1
}

// alloc charges n bytes about to be allocated (and the work of writing
// them). Each charge is checked against what is left, not added first,
// so a size that saturated at MaxInt64 (see size) cannot wrap the count.
func (b *budget) alloc(n int64) {
	if n < 0 || n > b.lim.Bytes-b.bytes {
		panic(&LimitError{Limit: "bytes", Max: b.lim.Bytes})
	}
	b.bytes += n
	b.scan(n)
}

// allocCased charges a case change of s (strings.ToUpper, ToLower): a
// rune can grow from one byte to three.
func (b *budget) allocCased(s string) { b.alloc(size(len(s), 3)) }

// allocRunes charges s converted to runes (four bytes a rune at most)
// and the string made back from them.
func (b *budget) allocRunes(s string) { b.alloc(size(len(s), 8)) }

// allocValues charges n list or dict slots.
func (b *budget) allocValues(n int) { b.alloc(size(n, valueBytes)) }

// enter charges one level of call nesting, and the call's work; leave
// returns the level.
func (b *budget) enter() {
	b.steps(callSteps)
	if b.depth++; b.depth > b.lim.Depth {
		panic(&LimitError{Limit: "depth", Max: int64(b.lim.Depth)})
	}
}

func (b *budget) leave() { b.depth-- }

// nest charges one value visited at nesting depth d.
func (b *budget) nest(d int) {
	if d > maxNesting {
		panic(&LimitError{Limit: "nesting", Max: maxNesting})
	}
	b.step()
}

// size is a·b, saturated at MaxInt64 (for a count or a width from a
// template, which may be anything) and at 0 below.
func size(a, b int) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	if int64(a) > math.MaxInt64/int64(b) {
		return math.MaxInt64
	}
	return int64(a) * int64(b)
}

// builder is a strings.Builder whose writes are charged to a budget.
type builder struct {
	b  *budget
	sb strings.Builder
}

func (w *builder) WriteString(s string) {
	w.b.alloc(int64(len(s)))
	w.sb.WriteString(s)
}

func (w *builder) WriteByte(c byte) error {
	w.b.alloc(1)
	return w.sb.WriteByte(c)
}

func (w *builder) Write(p []byte) {
	w.b.alloc(int64(len(p)))
	w.sb.Write(p)
}

func (w *builder) Len() int       { return w.sb.Len() }
func (w *builder) String() string { return w.sb.String() }

// recoverLimit turns a budget's panic into the error it carries; any other
// panic goes on.
func recoverLimit(err *error) {
	if r := recover(); r != nil {
		le, ok := r.(*LimitError)
		if !ok {
			panic(r)
		}
		*err = le
	}
}

// replacedSize is len(strings.Replace(s, old, repl, n)), worked out before
// it allocates: a template's replace can multiply a string's length.
func replacedSize(s, old, repl string, n int) int64 {
	if old == repl || n == 0 {
		return 0 // Replace returns s itself
	}
	m := strings.Count(s, old)
	if n > 0 {
		m = min(m, n)
	}
	return int64(len(s)) + int64(m)*(int64(len(repl))-int64(len(old)))
}

// Meter is the budget of the render that calls a callable made by
// NewMeteredCallable: what the callable spends, it charges here first. A
// charge past the render's Limits stops the render: it panics with the
// *LimitError, which the render recovers and returns.
type Meter struct{ b *budget }

// Alloc charges n bytes about to be allocated, and the work of writing
// them.
func (m Meter) Alloc(n int64) { m.b.alloc(n) }

// Step charges one step of work.
func (m Meter) Step() { m.b.step() }

// NewMeteredCallable is a callable whose spending counts against the
// Limits of the render that calls it; called from outside a render, it
// spends within DefaultLimits.
func NewMeteredCallable(name string, fn func(m Meter, args []Value, kwargs map[string]Value) (Value, error)) Value {
	return newBuiltin(name, func(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
		return fn(Meter{b}, args, kwargs)
	})
}
