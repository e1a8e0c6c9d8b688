package cpu

import (
	"encoding/binary"
	"fmt"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// kvCache stores each layer's keys and values as rows that the dot
// products of package quant read directly, in the cache's type (F16 or
// F32):
//
//   - keys by head, then position: head h's key at position p is the row
//     k[layer][(h·capacity + p)·dk …], so the keys a query scores are
//     consecutive rows, one MatVec;
//   - values transposed, as llama.cpp keeps them without flash attention:
//     element d of head h at position p is v[layer][((h·dv + d)·capacity +
//     p)], so each output element is one dot product of the attention
//     weights with a row.
//
// The slices are allocated whole, but Go leaves the pages it has not
// touched unbacked, so memory grows with the positions written.
type kvCache struct {
	typ      quant.Type
	es       int // bytes per element
	capacity int
	shapes   []backend.KVShape
	k, v     [][]byte
	// nonFinite is set once a value stored is ±Inf or NaN: grouped
	// attention then groups only a row's own heads (see attGroup).
	nonFinite bool
	row       []byte // StoreKV's scratch: a row of values in the cache's type
}

func (c *kvCache) Type() quant.Type { return c.typ }
func (c *kvCache) Capacity() int    { return c.capacity }

// NewKVCache implements backend.Backend.
func (b *Backend) NewKVCache(typ quant.Type, capacity int, layers []backend.KVShape) (backend.KVCache, error) {
	if typ != quant.F16 && typ != quant.F32 {
		return nil, fmt.Errorf("cpu: KV cache type %s (want F16 or F32)", typ)
	}
	if capacity <= 0 {
		return nil, fmt.Errorf("cpu: KV cache of %d positions", capacity)
	}
	c := &kvCache{typ: typ, es: typ.TypeSize(), capacity: capacity, shapes: layers}
	for l, s := range layers {
		if s.KVHeads <= 0 || s.HeadDimK <= 0 || s.HeadDimV <= 0 {
			return nil, fmt.Errorf("cpu: KV cache layer %d of %+v", l, s)
		}
		c.k = append(c.k, make([]byte, capacity*s.KVHeads*s.HeadDimK*c.es))
		c.v = append(c.v, make([]byte, capacity*s.KVHeads*s.HeadDimV*c.es))
	}
	return c, nil
}

func asCache(c backend.KVCache) *kvCache {
	kc, ok := c.(*kvCache)
	if !ok {
		panic(fmt.Sprintf("cpu: KV cache of another backend (%T)", c))
	}
	return kc
}

// StoreKV implements backend.Backend. Keys and values are rounded to the
// cache's type, as ggml's copy into its cache rounds them.
func (b *Backend) StoreKV(cache backend.KVCache, layer, pos int, k, v backend.Tensor) {
	c := asCache(cache)
	s := c.shapes[layer]
	kd, vd := s.KVHeads*s.HeadDimK, s.KVHeads*s.HeadDimV
	if k.Cols != kd || v.Cols != vd || k.Rows != v.Rows || pos < 0 || pos+k.Rows > c.capacity {
		panic(fmt.Sprintf("cpu: StoreKV of %d rows at %d (k %d, v %d wide) into a %d-position cache (%d, %d)", k.Rows, pos, k.Cols, v.Cols, c.capacity, kd, vd))
	}
	kx, vx := data(k), data(v)
	dk, cp, es := s.HeadDimK, c.capacity, c.es
	kl, vl := c.k[layer], c.v[layer]
	if len(c.row) < vd*es {
		c.row = make([]byte, vd*es)
	}
	row := c.row[:vd*es]
	for i := range k.Rows {
		p := pos + i
		for h := range s.KVHeads {
			off := (h*cp + p) * dk * es
			if err := quant.Quantize(c.typ, kx[i*kd+h*dk:i*kd+(h+1)*dk], kl[off:off+dk*es]); err != nil {
				panic(err) // sizes fixed above
			}
		}
		// The values are rounded as a row, by the same conversion as the
		// keys (vector instructions where there are), and then scattered
		// to their transposed places: one conversion per element had
		// cost more than the rest of storing a window's rows.
		if err := quant.Quantize(c.typ, vx[i*vd:(i+1)*vd], row); err != nil {
			panic(err)
		}
		if c.typ == quant.F16 {
			for d := range vd {
				h := binary.LittleEndian.Uint16(row[2*d:])
				binary.LittleEndian.PutUint16(vl[(d*cp+p)*2:], h)
				if h&0x7c00 == 0x7c00 {
					c.nonFinite = true
				}
			}
		} else {
			for d := range vd {
				u := binary.LittleEndian.Uint32(row[4*d:])
				binary.LittleEndian.PutUint32(vl[(d*cp+p)*4:], u)
				if u&0x7f800000 == 0x7f800000 {
					c.nonFinite = true
				}
			}
		}
	}
}

// attendJob computes one (query row, head) pair per task, or, where the
// cache's type has quant.WideRows kernels, one attGroup.
type attendJob struct {
	dst, q  []float32
	c       *kvCache
	layer   int
	pos     int
	a       *backend.Attention
	groups  []attGroup // nil: a task per query
	scratch [][]float32
	bytes   [][]byte
}

// attGroup is up to attGroupMax queries (query row i, head h as
// i·Heads + h, in order) that share a KV head and their first key (lo,
// which differs only under a sliding window): their scores are one pass
// over the keys and their outputs one over the values, each chunk of keys
// or values widened once for all of them (quant.WideRows). A query of an earlier row
// sees fewer keys than the group's last: its scores past them are not
// used, and its weights past them are zero, whose products add +0 to
// lanes that are never −0, so every output is the same bits as alone —
// unless a value it does not see is ±Inf or NaN (0·Inf is NaN): once the
// cache has stored one (kvCache.nonFinite), a group holds one row's
// heads only.
type attGroup struct {
	kvh, lo, live int
	q             [attGroupMax]int
}

// attGroupMax is the most queries a group takes: eight (a verified
// window's rows of one KV head pass over its keys and values once, where
// four took two passes), or four where the context is long
// (attGroupSize).
const attGroupMax = quant.WideRowsMax

// attGroupSize is the queries a group of attention over n keys takes:
// eight where a product would take eight float rows of n elements
// (quant.WideRowsFit: their weights, n floats each, are the value pass's
// activation rows, and stay in L1 beside the values' chunks), else four —
// groups of five at 2000 keys (BenchmarkAttend with keys=2000) ran no
// faster than groups of four, 0.92–1.02×.
func attGroupSize(n int) int {
	if quant.WideRowsFit(n) == attGroupMax {
		return min(attGroupMax, attGroupLimit)
	}
	return min(4, attGroupLimit)
}

// attGroupLimit caps attGroupSize, so that benchmarks can compare groups
// of four in the same run.
var attGroupLimit = attGroupMax

// Attend implements backend.Backend. It follows llama.cpp's attention
// without flash attention: scores Q·K (the query converted to the cache's
// type, as ggml converts it for the product), softcap, scale, the causal
// and sliding-window mask, softmax with the sum in float64 (and the head's
// sink, if it has one), and the
// weighted sum of values (the weights converted to the cache's type).
func (b *Backend) Attend(dst, q backend.Tensor, cache backend.KVCache, layer, pos int, a *backend.Attention) {
	c := asCache(cache)
	s := c.shapes[layer]
	if a.Heads <= 0 || a.KVHeads != s.KVHeads || a.Heads%a.KVHeads != 0 || a.HeadDimK != s.HeadDimK || a.HeadDimV != s.HeadDimV ||
		q.Cols != a.Heads*a.HeadDimK || dst.Cols != a.Heads*a.HeadDimV || dst.Rows != q.Rows ||
		pos < 0 || pos+q.Rows > c.capacity {
		panic(fmt.Sprintf("cpu: Attend %d × %d queries at %d over layer %d (%+v) of a %d-position cache, %+v", q.Rows, q.Cols, pos, layer, s, c.capacity, *a))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := pos + q.Rows // the most keys a query sees
	b.att = attendJob{dst: data(dst), q: data(q), c: c, layer: layer, pos: pos, a: a}
	tasks := q.Rows * a.Heads
	if groupAttention && quant.WideRowsFor(c.typ) {
		b.groups = groupQueries(b.groups[:0], c, a, pos, q.Rows, attGroupSize(n))
		b.att.groups, tasks = b.groups, len(b.groups)
		b.growScratch(attGroupMax * (n + pad32(a.HeadDimK) + pad32(n) + a.HeadDimV))
		b.growBytes(max(n, a.HeadDimK) * c.es)
	} else {
		b.growScratch(n)
		b.growBytes((n + a.HeadDimK) * c.es)
	}
	b.att.scratch, b.att.bytes = b.scratch, b.bytes
	b.pool.run(tasks, &b.att)
	b.att = attendJob{}
}

// groupAttention lets tests take the per-query path where the grouped
// one would run.
var groupAttention = true

func pad32(n int) int { return (n + 31) &^ 31 }

// groupQueries appends to gs the groups of rows queries at pos (see
// attGroup): for each KV head, its queries row by row, size at a time.
func groupQueries(gs []attGroup, c *kvCache, a *backend.Attention, pos, rows, size int) []attGroup {
	per := a.Heads / a.KVHeads
	for kvh := range a.KVHeads {
		var g attGroup
		for i := range rows {
			p := pos + i
			lo := 0
			if a.Window > 0 {
				lo = max(0, p-a.Window+1)
			}
			for h := kvh * per; h < (kvh+1)*per; h++ {
				if g.live > 0 && (g.live == size || g.lo != lo || c.nonFinite && g.q[0]/a.Heads != i) {
					gs = append(gs, g)
					g = attGroup{}
				}
				g.kvh, g.lo = kvh, lo
				g.q[g.live] = i*a.Heads + h
				g.live++
			}
		}
		gs = append(gs, g)
	}
	return gs
}

func (j *attendJob) do(w, t int) {
	if j.groups != nil {
		j.doGroup(w, &j.groups[t])
		return
	}
	a, c := j.a, j.c
	i, h := t/a.Heads, t%a.Heads
	p := j.pos + i
	lo := 0
	if a.Window > 0 {
		lo = max(0, p-a.Window+1)
	}
	n := p + 1 - lo
	kvh := h / (a.Heads / a.KVHeads)
	dk, dv, cp, es := a.HeadDimK, a.HeadDimV, c.capacity, c.es

	scores := j.scratch[w][:n]
	buf := j.bytes[w]
	qa := quant.Activation{Type: c.typ, N: dk, Data: buf[:dk*es]}
	if err := qa.Quantize(j.q[i*a.Heads*dk+h*dk:][:dk]); err != nil {
		panic(err)
	}
	keys := c.k[j.layer][(kvh*cp+lo)*dk*es : (kvh*cp+p+1)*dk*es]
	quant.MatVec(c.typ, keys, &qa, scores)
	j.softmax(scores, h)
	pa := quant.Activation{Type: c.typ, N: n, Data: buf[dk*es : (dk+n)*es]}
	if err := pa.Quantize(scores); err != nil {
		panic(err)
	}
	// Output element d is the dot of the weights with row kvh·dv+d of
	// the transposed values: dv rows, a capacity apart.
	out := j.dst[i*a.Heads*dv+h*dv:][:dv]
	first := (kvh*dv*cp + lo) * es
	quant.MatVecRows(c.typ, c.v[j.layer][first:], cp*es, &pa, out)
}

// doGroup is do for a group of queries (attGroup), by quant.WideRows.
func (j *attendJob) doGroup(w int, g *attGroup) {
	a, c := j.a, j.c
	dk, dv, cp, es := a.HeadDimK, a.HeadDimV, c.capacity, c.es
	last := j.pos + g.q[g.live-1]/a.Heads // the group's last query's position
	n := last + 1 - g.lo                  // the keys it scores
	pk, pn := pad32(dk), pad32(n)
	f := j.scratch[w]
	const m = attGroupMax
	scores, f := f[:m*n], f[m*n:]
	qw, f := f[:m*pk], f[m*pk:]
	ww, f := f[:m*pn], f[m*pn:]
	outs := f[:m*dv]
	buf := j.bytes[w]

	// round puts x, rounded to the cache's type as the product takes it,
	// widened into row (zero past x, as WideRows wants).
	round := func(row, x []float32) {
		act := quant.Activation{Type: c.typ, N: len(x), Data: buf[:len(x)*es]}
		if err := act.Quantize(x); err != nil {
			panic(err)
		}
		quant.Widen(c.typ, row[:len(x)], act.Data)
		clear(row[len(x):])
	}
	for k, qi := range g.q[:g.live] {
		i, h := qi/a.Heads, qi%a.Heads
		round(qw[k*pk:(k+1)*pk], j.q[i*a.Heads*dk+h*dk:][:dk])
	}
	keys := c.k[j.layer][(g.kvh*cp+g.lo)*dk*es : (g.kvh*cp+last+1)*dk*es]
	quant.WideRows(c.typ, keys, dk*es, dk, n, qw, pk, g.live, scores, n)
	for k, qi := range g.q[:g.live] {
		i, h := qi/a.Heads, qi%a.Heads
		seen := j.pos + i + 1 - g.lo
		s := scores[k*n : k*n+seen]
		j.softmax(s, h)
		round(ww[k*pn:(k+1)*pn], s)
	}
	first := (g.kvh*dv*cp + g.lo) * es
	quant.WideRows(c.typ, c.v[j.layer][first:], cp*es, n, dv, ww, pn, g.live, outs, dv)
	for k, qi := range g.q[:g.live] {
		i, h := qi/a.Heads, qi%a.Heads
		copy(j.dst[i*a.Heads*dv+h*dv:][:dv], outs[k*dv:(k+1)*dv])
	}
}

// softmax turns head h's scores into its attention weights, in place:
// softcap, scale, and the softmax with its sum in float64 and the head's
// sink, if it has one.
func (j *attendJob) softmax(scores []float32, h int) {
	a := j.a
	if a.Softcap > 0 {
		for k, s := range scores {
			scores[k] = a.Softcap * tanhf(s/a.Softcap)
		}
	}
	maxScore := scaleMax(scores, a.Scale)
	// A sink (ggml_soft_max_ext's third source) joins the max and the
	// sum, unscaled, and weights no value.
	var sink float32
	if a.Sinks != nil {
		sink = a.Sinks[h]
		maxScore = max(maxScore, sink)
	}
	expSub(scores, scores, maxScore)
	sum := softmaxSum(scores)
	if a.Sinks != nil {
		sum += float64(libmExpf(sink - maxScore)) // ggml calls the C library's expf here
	}
	scaleBy(scores, float32(1/sum))
}
