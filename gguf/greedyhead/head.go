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

// Head is the int8 shadow of a float output head.
type Head struct {
	t          quant.Type
	w          []byte // the head, rows of rs bytes
	rows, n    int
	rs         int
	blocks     int
	packed     []byte    // blocks of 16 rows: n/4 groups of 64 bytes, row i's four quants+128 at 4i
	scale      []float32 // a row's quants times its scale are its weights, to within errW
	errW       float64   // the largest |w − scale·q| of any weight
	maxScale   float64   // the largest scale
	maxAbsW    float64   // the largest |w|
	roundTerms float64   // γ for the exact dot's float32 sums over n terms
}

// New builds the shadow of w, rows rows of n elements of type t (F32,
// F16 or BF16). n must be a multiple of 8 and at most 65536 (the int32
// sums stay exact); every weight must be finite.
func New(t quant.Type, w []byte, rows, n int) (*Head, error) {
	switch t {
	case quant.F32, quant.F16, quant.BF16:
	default:
		return nil, fmt.Errorf("%w: %s weights", ErrUnsupported, t)
	}
	if n <= 0 || n%8 != 0 || n > 1<<16 || rows <= 0 {
		return nil, fmt.Errorf("%w: %d×%d", ErrUnsupported, rows, n)
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
		m := 0.0
		for _, v := range row {
			a := math.Abs(float64(v))
			if math.IsInf(a, 0) || math.IsNaN(a) {
				return nil, fmt.Errorf("%w: row %d holds %v", ErrUnsupported, j, v)
			}
			m = max(m, a)
		}
		h.maxAbsW = max(h.maxAbsW, m)
		s := float32(m / 127)
		h.scale[j] = s
		h.maxScale = max(h.maxScale, float64(s))
		base := (j/group)*group*n + (j%group)*4
		for k, v := range row {
			q := 0.0
			if s > 0 {
				q = max(-127, min(127, math.RoundToEven(float64(v)/float64(s))))
			}
			h.packed[base+(k/4)*group*4+k%4] = byte(int(q) + 128)
			h.errW = max(h.errW, math.Abs(float64(v)-q*float64(s)))
		}
	}
	const u = 0x1p-24
	h.roundTerms = 2 * float64(n) * u // twice the γ_n of any summation order, for the kernels' own
	return h, nil
}

// Type is the head's weight type (its activations are VecDotType's).
func (h *Head) Type() quant.Type { return h.t }

// Bytes is the shadow's size.
func (h *Head) Bytes() int { return len(h.packed) + 4*len(h.scale) }

// Scratch is ArgMax's working memory; one per goroutine.
type Scratch struct {
	x      []float32 // an activation's values
	q      []int8    // the activations' quants, 4 rows
	corr   [4]int32
	t      [4]float32
	approx []float32 // 4 rows of blocks·16
	max    [4 * group]float32
	cands  []int32
	// Candidates counts the rows dotted exactly, over every token
	// settled; Tokens those tokens; Unsettled the ones left to the caller.
	Candidates, Tokens, Unsettled int
}

// ArgMax sets dst[r] to the argmax of the head's logits for acts[r] (an
// activation of the head's VecDotType, N = n), as the full head followed
// by backend.ArgMax gives it, or to −1 where it cannot settle it.
func (h *Head) ArgMax(acts []*quant.Activation, dst []int, s *Scratch) {
	if len(s.q) != 4*h.n {
		s.x = make([]float32, h.n)
		s.q = make([]int8, 4*h.n)
		s.approx = make([]float32, 4*h.blocks*group)
	}
	for r0 := 0; r0 < len(acts); {
		// Two or three rows take the four-row kernel too (the spare
		// rows' sums are left unread): it reads the shadow once.
		k := min(4, len(acts)-r0)
		var bound [4]float64
		live := [4]bool{}
		for i := range k {
			bound[i], live[i] = s.quantize(h, acts[r0+i], i)
		}
		h.approximate(s, k)
		os := h.blocks * group
		for i := range k {
			dst[r0+i] = -1
			if live[i] {
				dst[r0+i] = h.settle(acts[r0+i], s.approx[i*os:i*os+h.rows], s.max[i*group:(i+1)*group], bound[i], s)
			}
			if dst[r0+i] < 0 {
				s.Unsettled++
			} else {
				s.Tokens++
			}
		}
		r0 += k
	}
}

// approximate fills s.approx and s.max for the first k activation rows
// of s.q. The padding rows of a last block that is not full approximate
// to 0, which must not count as a row's: that block's maxima are taken
// over its real rows.
func (h *Head) approximate(s *Scratch, k int) {
	for i := range s.max {
		s.max[i] = float32(math.Inf(-1))
	}
	os := h.blocks * group
	full := h.blocks
	if h.rows%group != 0 {
		full--
	}
	run := func(from, to int, approx, lanes []float32) {
		if to == from {
			return
		}
		p, sc := h.packed[from*group*h.n:to*group*h.n], h.scale[from*group:to*group]
		if k > 1 {
			rows16x4(p, sc, to-from, h.n, s.q, s.corr[:], s.t[:], approx, os, lanes)
		} else {
			rows16x1(p, sc, to-from, h.n, s.q, s.corr[0], s.t[0], approx, lanes[:group])
		}
	}
	run(0, full, s.approx, s.max[:])
	if full == h.blocks {
		return
	}
	var spare [4 * group]float32
	run(full, h.blocks, s.approx[full*group:], spare[:])
	for i := range k {
		for _, v := range s.approx[i*os+full*group : i*os+h.rows] {
			if v > s.max[i*group] {
				s.max[i*group] = v
			}
		}
	}
}

// quantize writes activation a's int8 quants into row i of s.q, with its
// correction and scale, and returns the bound on |exact − approximate|
// of every logit, or false where a is not finite or too large to bound.
func (s *Scratch) quantize(h *Head, a *quant.Activation, i int) (float64, bool) {
	x := s.x
	if err := quant.Dequantize(a.Type, a.Data, x); err != nil {
		panic(fmt.Sprintf("greedyhead: activation: %v", err))
	}
	m, l1 := 0.0, 0.0
	for _, v := range x {
		a := math.Abs(float64(v))
		if !(a <= math.MaxFloat32) {
			return 0, false
		}
		m = max(m, a)
		l1 += a
	}
	q := s.q[i*h.n : (i+1)*h.n]
	t := float32(m / 127)
	sum, eta := int32(0), 0.0
	for k, v := range x {
		p := 0.0
		if t > 0 {
			p = max(-127, min(127, math.RoundToEven(float64(v)/float64(t))))
		}
		q[k] = int8(p)
		sum += int32(p)
		eta += math.Abs(float64(v) - p*float64(t))
	}
	s.corr[i], s.t[i] = 128*sum, t
	if h.maxAbsW*l1 > 1e30 {
		return 0, false // the exact sums could overflow float32
	}
	// |exact − approx| ≤ the weights' quantisation (errW·‖x‖₁), the
	// activation's (maxScale·127·η), the exact dot's float32 sums
	// (γ·maxAbsW·‖x‖₁), the approximation's three roundings (4u of its
	// size) and flushed subnormals; the float64 arithmetic here is
	// covered by the last factor.
	const u = 0x1p-24
	b := (h.errW+h.roundTerms*h.maxAbsW)*l1 + h.maxScale*127*eta + 4*u*h.maxScale*127*(l1+eta) + float64(h.n)*0x1p-125
	return b * (1 + 1e-9), true
}

// settle finds the argmax among the rows whose approximations come
// within twice the bound of the largest, or returns −1.
func (h *Head) settle(a *quant.Activation, approx, lanes []float32, bound float64, s *Scratch) int {
	top := math.Inf(-1)
	for _, v := range lanes {
		top = max(top, float64(v))
	}
	// The row with the largest approximation has an exact logit of at
	// least top − bound, and a row whose approximation is below
	// top − 2·bound has one below that.
	floor := top - 2*bound
	// In float32, rounded down: more rows, never fewer.
	f := float32(floor)
	if float64(f) > floor {
		f = math.Nextafter32(f, float32(math.Inf(-1)))
	}
	cands, ok := above(approx, f, s.cands, MaxCandidates)
	if !ok {
		return -1
	}
	s.cands = cands
	best, at := float32(math.Inf(-1)), -1
	for _, j32 := range s.cands {
		j := int(j32)
		l := quant.VecDot(h.t, h.w[j*h.rs:(j+1)*h.rs], a)
		if l > best {
			best, at = l, j
		}
	}
	s.Candidates += len(s.cands)
	return at
}
