package cpu

import (
	"fmt"

	"github.com/meshnode/meshnode/gguf/backend"
)

// ropeJob rotates the heads of one row (one position) per task.
type ropeJob struct {
	x       []float32
	cols    int
	headDim int
	pos     int
	r       *backend.RoPE
	angles  backend.RoPEAngles
	scratch [][]float32
	// cached: row t's (cos, sin) pairs at cached[t·Dims:], computed by
	// the task (fill) or by an earlier call.
	cached []float32
	fill   bool
}

// RoPE implements backend.Backend, following ggml's rope kernel: per
// position a cache of (cos, sin) for each pair (backend.RoPEAngles).
// A decoded token's or a short window's pairs are kept for the calls that
// follow at the same positions under a RoPE of the same value (the
// queries' and keys' of every layer): the same bits, computed once a
// step instead of twice a layer.
func (b *Backend) RoPE(x backend.Tensor, headDim, pos int, r *backend.RoPE) {
	if headDim <= 0 || x.Cols%headDim != 0 || r.Dims > headDim || r.Dims%2 != 0 || (r.Factors != nil && len(r.Factors) < r.Dims/2) {
		panic(fmt.Sprintf("cpu: RoPE of %d columns, head %d, dims %d, %d factors", x.Cols, headDim, r.Dims, len(r.Factors)))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.growScratch(headDim)
	cached, fill := b.ropeAngles.lookup(r, pos, x.Rows)
	b.rope = ropeJob{x: data(x), cols: x.Cols, headDim: headDim, pos: pos, r: r, angles: r.Angles(), scratch: b.scratch, cached: cached, fill: fill}
	if x.Rows*x.Cols < parallelElems {
		// A few rows: waking the workers costs more than the work.
		for t := range x.Rows {
			b.rope.do(0, t)
		}
	} else {
		b.pool.run(x.Rows, &b.rope)
	}
	b.rope = ropeJob{}
}

// ropeCache keeps the (cos, sin) pairs of the last few (RoPE, positions)
// a RoPE call rotated, for windows of up to ropeCacheRows rows. Entries
// are found by the RoPE's value, not its address: every layer of a
// session has a RoPE of its own, most of them alike, so a step computes
// each distinct one's angles once.
type ropeCache struct {
	entries [ropeCacheEntries]ropeEntry
	next    int // the entry replaced next
}

type ropeEntry struct {
	key       ropeKey
	pos, rows int
	vals      []float32
}

// ropeKey is what a RoPE's angles depend on: its fields, the factors by
// their array (a model's, fixed once loaded).
type ropeKey struct {
	dims, origCtx                                        int
	neox                                                 bool
	base, freqScale, attnFactor, ext, betaFast, betaSlow float32
	factors                                              *float32
	nFactors                                             int
}

func keyOf(r *backend.RoPE) ropeKey {
	k := ropeKey{dims: r.Dims, origCtx: r.OrigCtx, neox: r.NeoX, base: r.Base, freqScale: r.FreqScale,
		attnFactor: r.AttnFactor, ext: r.ExtFactor, betaFast: r.BetaFast, betaSlow: r.BetaSlow, nFactors: len(r.Factors)}
	if len(r.Factors) > 0 {
		k.factors = &r.Factors[0]
	}
	return k
}

const (
	// ropeCacheEntries: the sequences of a batched step rotate at their
	// own positions, in turn, in every layer.
	ropeCacheEntries = 16
	// ropeCacheRows: a prompt's rows are rotated once a layer among far
	// more work; they are not kept.
	ropeCacheRows = 16
)

// lookup returns the pairs of rows positions from pos under r, and
// whether the caller must compute them (into the returned slice, which
// is then kept); nil where such a window is not kept.
func (c *ropeCache) lookup(r *backend.RoPE, pos, rows int) ([]float32, bool) {
	if rows > ropeCacheRows {
		return nil, false
	}
	key := keyOf(r)
	for i := range c.entries {
		if e := &c.entries[i]; e.vals != nil && e.key == key && e.pos == pos && e.rows == rows {
			return e.vals, false
		}
	}
	e := &c.entries[c.next]
	c.next = (c.next + 1) % ropeCacheEntries
	n := rows * r.Dims
	if cap(e.vals) < n {
		e.vals = make([]float32, n)
	}
	e.key, e.pos, e.rows, e.vals = key, pos, rows, e.vals[:n]
	return e.vals, true
}

func (j *ropeJob) do(w, t int) {
	r := j.r
	var cache []float32
	switch {
	case j.cached == nil:
		cache = j.scratch[w][:r.Dims]
		j.angles.At(j.pos+t, cache)
	case j.fill:
		cache = j.cached[t*r.Dims : (t+1)*r.Dims]
		j.angles.At(j.pos+t, cache)
	default:
		cache = j.cached[t*r.Dims : (t+1)*r.Dims]
	}
	row := j.x[t*j.cols : (t+1)*j.cols]
	n := r.Dims
	for h := 0; h < j.cols; h += j.headDim {
		x := row[h : h+j.headDim]
		for i0 := 0; i0 < n; i0 += 2 {
			c, s := cache[i0], cache[i0+1]
			a, b := i0, i0+1 // llama's adjacent pairs
			if r.NeoX {
				a, b = i0/2, i0/2+n/2
			}
			x0, x1 := x[a], x[b]
			x[a] = float32(x0*c) - float32(x1*s)
			x[b] = float32(x0*s) + float32(x1*c)
		}
	}
}
