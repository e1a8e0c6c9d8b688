package greedyhead

import (
	"errors"
	"fmt"
	"math"

	"github.com/meshnode/meshnode/gguf/quant"
)

// MaxCandidates is the most rows a token's bound may leave open before
// ArgMax leaves it to the full head: past it the exact dots cost more
// than they save.
const MaxCandidates = 256

// group is how many weight rows the kernels take at once (a 512-bit
// register of int32 sums).
const group = 16

// ErrUnsupported is New's answer for a head it cannot shadow.
var ErrUnsupported = errors.New("greedyhead: unsupported head")

// Head is the int8 shadow of an output head.
type Head struct {
	t       quant.Type
	w       []byte // the head, rows of rs bytes
	rows, n int
	rs      int
	blocks  int
	packed  []byte    // blocks of 16 rows: n/4 groups of 64 bytes, row i's four quants+128 at 4i
	scale   []float32 // a row's quants times its scale are its weights, to within errNorm
	errNorm float64   // the largest ‖w − scale·q‖₂ of any row
	normQ   float64   // the largest ‖scale·q‖₂ of any row
	maxAbsW float64   // the largest |w|
	gamma   float64   // for the exact dot's float32 sums over n terms
}

// Bytes is the memory the shadow holds beside the head it shadows: its
// quants (rows padded to whole blocks) and their scales.
func (h *Head) Bytes() int64 { return int64(len(h.packed)) + 4*int64(len(h.scale)) }

// Supports says whether New can shadow a head of rows rows of n
// elements of type t on this machine, short of its weights: New also
// refuses a head holding a weight that is not finite.
func Supports(t quant.Type, rows, n int) error {
	if !Available() {
		return fmt.Errorf("%w: no int8 kernels on this CPU", ErrUnsupported)
	}
	switch t {
	case quant.F32, quant.F16, quant.BF16, quant.Q8_0:
	default:
		return fmt.Errorf("%w: %s weights", ErrUnsupported, t)
	}
	if n <= 0 || n%8 != 0 || n > 1<<16 || rows <= 0 {
		return fmt.Errorf("%w: %d×%d", ErrUnsupported, rows, n)
	}
	return nil
}

// Size is the memory a shadow of rows rows of n elements holds (its
// Bytes), known before it is built.
func Size(rows, n int) int64 {
	padded := int64((rows + group - 1) / group * group)
	return padded*int64(n) + 4*padded
}

// Available reports whether this machine has the shadow's kernels
// (amd64 with AVX512-VNNI). Elsewhere the Go arithmetic would be far
// slower than the head's own kernels, and New refuses.
func Available() bool { return haveKernels || slowOK }

// slowOK lets the tests build shadows on the Go kernels.
var slowOK = false

// New builds the shadow of w, rows rows of n elements of type t (F32,
// F16, BF16 or Q8_0, whose exact dots VecDot takes with the activation
// in the format the head's own product uses). n must be a multiple of 8
// and at most 65536 (the int32 sums stay exact); every weight must be
// finite.
func New(t quant.Type, w []byte, rows, n int) (*Head, error) {
	if err := Supports(t, rows, n); err != nil {
		return nil, err
	}
	rs, err := t.RowSize(n)
	if err != nil {
		return nil, err
	}
	if len(w) != rows*rs {
		return nil, fmt.Errorf("greedyhead: %d rows of %d %s are %d bytes, got %d", rows, n, t, rows*rs, len(w))
	}
	h := &Head{t: t, w: w, rows: rows, n: n, rs: rs, blocks: (rows + group - 1) / group}
	h.packed = make([]byte, h.blocks*group*n)
	h.scale = make([]float32, h.blocks*group)
	for i := range h.packed {
		h.packed[i] = 128 // the padding rows: quants 0
	}
	row := make([]float32, n)
	for j := range rows {
		if err := quant.Dequantize(t, w[j*rs:(j+1)*rs], row); err != nil {
			return nil, err
		}
		var m float32
		for _, v := range row {
			a := float32(math.Abs(float64(v)))
			if !(a <= math.MaxFloat32) {
				return nil, fmt.Errorf("%w: row %d holds %v", ErrUnsupported, j, v)
			}
			m = max(m, a)
		}
		h.maxAbsW = max(h.maxAbsW, float64(m))
		s := m / 127
		h.scale[j] = s
		// Any rounding of w/s to a quant will do: the errors are measured
		// from the quants chosen, exactly in float64.
		inv := float32(0)
		if s > 0 {
			inv = 1 / s
		}
		out := h.packed[(j/group)*group*n+(j%group)*4:]
		var e2, q2 float64
		for k := 0; k < n; k += 4 {
			for e, v := range row[k : k+4] {
				qf := float32(v * inv) // rounded: Go would fuse it into the add on arm64
				q := int32(qf + float32(math.Copysign(0.5, float64(qf))))
				q = max(-127, min(127, q))
				out[k*group+e] = byte(q + 128)
				ws := float64(float64(q) * float64(s))
				d := float64(v) - ws
				e2 += float64(d * d)
				q2 += float64(ws * ws)
			}
		}
		h.errNorm = max(h.errNorm, math.Sqrt(e2))
		h.normQ = max(h.normQ, math.Sqrt(q2))
	}
	const u = 0x1p-24
	h.gamma = 2 * float64(n) * u // twice the γ_n of any summation order, for the kernels' own
	return h, nil
}

// Type is the head's weight type (its activations are VecDotType's).
func (h *Head) Type() quant.Type { return h.t }

// Scratch is the working memory of one ArgMax (or Prepare, Approximate
// and Settle); reuse one across calls.
type Scratch struct {
	k, pad, parts int       // rows prepared, rounded up to whole eights; parts of the blocks
	x             []float32 // an activation's values
	q             []int8    // the activations' quants, pad rows of n
	qi            []int8    // q's eights of rows interleaved (interleave8), where more than four
	corr          []int32
	t             []float32
	bound         []float64 // −1: the row is left to the full head
	approx        []float32 // pad rows of blocks·16
	lanes         []float32 // per part, per row, each lane's largest approximation
	cands         [][]int32 // per row
	dotted        []int     // per row: the rows it dotted exactly
	// Candidates counts the rows dotted exactly, over every token
	// settled; Tokens those tokens; Unsettled the ones left to the caller.
	Candidates, Tokens, Unsettled int
}

// ArgMax sets dst[r] to the argmax of the head's logits for acts[r] (an
// activation of the head's VecDotType, N = n), as the full head followed
// by backend.ArgMax gives it, or to −1 where it cannot settle it. It is
// Prepare, Approximate of the one part, and Settle.
func (h *Head) ArgMax(acts []*quant.Activation, dst []int, s *Scratch) {
	h.Prepare(acts, s, 1)
	h.Approximate(s, 0)
	h.Settle(acts, dst, s)
}

// Prepare quantises acts into s and splits the shadow into parts for
// Approximate.
func (h *Head) Prepare(acts []*quant.Activation, s *Scratch, parts int) {
	k := len(acts)
	pad := (k + 7) &^ 7
	os := h.blocks * group
	parts = max(1, min(parts, h.blocks))
	s.k, s.pad, s.parts = k, pad, parts
	if len(s.x) != h.n {
		s.x = make([]float32, h.n)
	}
	s.q = grow(s.q, pad*h.n)
	s.qi = grow(s.qi, pad*h.n)
	s.corr = grow(s.corr, pad)
	s.t = grow(s.t, pad)
	s.bound = grow(s.bound, k)
	s.dotted = grow(s.dotted, k)
	for len(s.cands) < k {
		s.cands = append(s.cands, nil)
	}
	s.approx = grow(s.approx, pad*os)
	s.lanes = grow(s.lanes, parts*pad*group)
	for i, a := range acts {
		s.bound[i] = s.quantize(h, a, i)
	}
	for c := 0; c+4 < k; c += 8 {
		interleave8(s.qi[c*h.n:(c+8)*h.n], s.q[c*h.n:], min(k-c, 8), h.n)
	}
}

// Parts is how many parts Prepare split the shadow into: fewer than
// asked where the head has fewer blocks of 16 rows.
func (s *Scratch) Parts() int { return s.parts }

func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// Approximate fills the approximations of part p of the shadow's blocks
// for every prepared row. Distinct parts may run at once.
func (h *Head) Approximate(s *Scratch, p int) {
	from, to := p*h.blocks/s.parts, (p+1)*h.blocks/s.parts
	os := h.blocks * group
	lanes := s.lanes[p*s.pad*group : (p+1)*s.pad*group]
	for i := range lanes {
		lanes[i] = float32(math.Inf(-1))
	}
	full := to
	if to == h.blocks && h.rows%group != 0 {
		full-- // the last block is not full: see below
	}
	// Rows go four at most to a kernel, or eight where more than four
	// are left (in one pass over the shadow).
	run := func(c, k, from, to int, lanes []float32) {
		if to == from {
			return
		}
		pk, sc := h.packed[from*group*h.n:to*group*h.n], h.scale[from*group:to*group]
		rows16(pk, sc, to-from, h.n, s.q[c*h.n:(c+k)*h.n], s.qi[c*h.n:], k, s.corr[c:c+k], s.t[c:c+k], s.approx[c*os+from*group:], os, lanes)
	}
	for c := 0; c < s.k; {
		k := s.k - c
		if k > 4 {
			k = min(k, 8)
		}
		run(c, k, from, full, lanes[c*group:(c+k)*group])
		if full != to {
			// The padding rows of the last block approximate to 0, which
			// must not count as a row's: its maxima are its real rows'.
			var spare [8 * group]float32
			run(c, k, full, to, spare[:])
			for i := c; i < c+k; i++ {
				for _, v := range s.approx[i*os+full*group : i*os+h.rows] {
					lanes[i*group] = max(lanes[i*group], v)
				}
			}
		}
		c += k
	}
}

// Settle sets dst from the approximations (see ArgMax).
func (h *Head) Settle(acts []*quant.Activation, dst []int, s *Scratch) {
	for i, a := range acts {
		dst[i] = h.SettleRow(a, i, s)
	}
	s.Count(dst)
}

// SettleRow is Settle's answer for row i alone, acts[i] being a.
// Distinct rows may settle at once; Count then tallies them.
func (h *Head) SettleRow(a *quant.Activation, i int, s *Scratch) int {
	if s.bound[i] < 0 {
		return -1
	}
	top := float32(math.Inf(-1))
	for p := range s.parts {
		for _, v := range s.lanes[(p*s.pad+i)*group : (p*s.pad+i+1)*group] {
			top = max(top, v)
		}
	}
	os := h.blocks * group
	at, n := h.settle(a, s.approx[i*os:i*os+h.rows], top, s.bound[i], &s.cands[i])
	s.dotted[i] = n
	return at
}

// Count adds the rows of dst, as Settle or SettleRow set them, to the
// counters.
func (s *Scratch) Count(dst []int) {
	for i, d := range dst {
		if d < 0 {
			s.Unsettled++
		} else {
			s.Tokens++
			s.Candidates += s.dotted[i]
		}
	}
}

// quantize writes activation a's int8 quants into row i of s.q, with its
// correction and scale, and returns the bound on |exact − approximate|
// of every logit, or −1 where a is not finite or too large to bound.
func (s *Scratch) quantize(h *Head, a *quant.Activation, i int) float64 {
	x := s.x
	if err := quant.Dequantize(a.Type, a.Data, x); err != nil {
		panic(fmt.Sprintf("greedyhead: activation: %v", err))
	}
	// Every step's token waits on this, one row after another: the loops
	// keep to comparisons and arithmetic the compiler keeps inline (the
	// float min and max builtins and math.RoundToEven, with their NaN,
	// zero-sign and range cases, made it 3 µs a row of 192 on the 2-core
	// machine of docs/engine.md; now 0.74), with the same results.
	m, l1, l2 := 0.0, 0.0, 0.0
	for _, v := range x {
		a := math.Abs(float64(v))
		if a > m {
			m = a
		}
		l1 += a
		l2 += float64(a * a)
	}
	if !(l1 <= math.MaxFloat64) {
		return -1 // an infinite or NaN element
	}
	q := s.q[i*h.n : (i+1)*h.n]
	t := float32(m / 127)
	sum, e2 := int32(0), 0.0
	for k, v := range x {
		p := 0.0
		if t > 0 {
			p = roundToEven(float64(v) / float64(t))
			if p > 127 {
				p = 127
			} else if p < -127 {
				p = -127
			}
		}
		q[k] = int8(p)
		sum += int32(p)
		d := float64(v) - float64(p*float64(t))
		e2 += float64(d * d)
	}
	s.corr[i], s.t[i] = 128*sum, t
	return h.bound(l1, l2, e2)
}

// bound is the bound on |exact − approximate| of every logit for an
// activation x quantised to t·p, given ‖x‖₁ (l1), ‖x‖₂² (l2) and
// ‖x − t·p‖₂² (e2), or −1 where the exact sums could overflow float32.
func (h *Head) bound(l1, l2, e2 float64) float64 {
	if h.maxAbsW*l1 > 1e30 {
		return -1
	}
	// |exact − approx| ≤ the weights' quantisation (errNorm·‖x‖₂), the
	// activation's (normQ·‖x − t·p‖₂), both by Cauchy–Schwarz; the exact
	// dot's float32 sums (γ·maxAbsW·‖x‖₁); the approximation's three
	// roundings (4u of its size, at most normQ·‖t·p‖₂); and flushed
	// subnormals. The last factor covers this float64 arithmetic.
	const u = 0x1p-24
	x2, e := math.Sqrt(l2), math.Sqrt(e2)
	b := float64(h.errNorm*x2) + float64(h.normQ*e) + float64(h.gamma*h.maxAbsW*l1) + float64(4*u*h.normQ*(x2+e)) + float64(float64(h.n)*0x1p-125)
	return b * (1 + 1e-9)
}

// roundToEven is math.RoundToEven for |y| < 2^51, as quantize's
// quotients are (at most 127 and a rounding): adding and taking away
// 1.5·2^52 leaves no bits below the units, and the adder rounds to even.
func roundToEven(y float64) float64 {
	const magic = 0x1.8p52
	return (y + magic) - magic
}

// settle finds the argmax given a row's approximations and their
// largest, top: the first row at top is dotted exactly (L0), and every
// row whose approximation is at least L0 − bound is a candidate — one
// below it has an exact logit below L0 — and the first largest exact
// logit among them is the token. It returns −1 past MaxCandidates, and
// how many rows it dotted; buf is its candidates' memory.
func (h *Head) settle(a *quant.Activation, approx []float32, top float32, bound float64, buf *[]int32) (at, dotted int) {
	first, ok := above(approx, top, *buf, MaxCandidates)
	if !ok || len(first) == 0 {
		return -1, 0
	}
	j0 := int(first[0])
	l0 := quant.VecDot(h.t, h.w[j0*h.rs:(j0+1)*h.rs], a)
	floor := float64(l0) - bound
	// In float32, rounded down: more rows, never fewer.
	f := float32(floor)
	if float64(f) > floor {
		f = math.Nextafter32(f, float32(math.Inf(-1)))
	}
	cands, ok := above(approx, f, first, MaxCandidates)
	if !ok {
		return -1, 0
	}
	*buf = cands
	best, at := float32(math.Inf(-1)), -1
	for _, j32 := range cands {
		j := int(j32)
		l := l0
		if j != j0 {
			l = quant.VecDot(h.t, h.w[j*h.rs:(j+1)*h.rs], a)
		}
		if l > best {
			best, at = l, j
		}
	}
	return at, len(cands)
}
