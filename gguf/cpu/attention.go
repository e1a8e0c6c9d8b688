package cpu

import (
	"encoding/binary"
	"fmt"
	"math"

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
	for i := range k.Rows {
		p := pos + i
		for h := range s.KVHeads {
			off := (h*cp + p) * dk * es
			if err := quant.Quantize(c.typ, kx[i*kd+h*dk:i*kd+(h+1)*dk], kl[off:off+dk*es]); err != nil {
				panic(err) // sizes fixed above
			}
		}
		for d, x := range vx[i*vd : (i+1)*vd] {
			off := (d*cp + p) * es
			if c.typ == quant.F16 {
				binary.LittleEndian.PutUint16(vl[off:], quant.FP32ToFP16(x))
			} else {
				binary.LittleEndian.PutUint32(vl[off:], math.Float32bits(x))
			}
		}
	}
}

// attendJob computes one (query row, head) pair per task.
type attendJob struct {
	dst, q  []float32
	c       *kvCache
	layer   int
	pos     int
	a       *backend.Attention
	scratch [][]float32
	bytes   [][]byte
}

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
	b.growScratch(n)
	b.growBytes((n + a.HeadDimK) * c.es)
	b.att = attendJob{dst: data(dst), q: data(q), c: c, layer: layer, pos: pos, a: a, scratch: b.scratch, bytes: b.bytes}
	b.pool.run(q.Rows*a.Heads, &b.att)
	b.att = attendJob{}
}

func (j *attendJob) do(w, t int) {
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

	maxScore := float32(math.Inf(-1))
	for k, s := range scores {
		if a.Softcap > 0 {
			s = a.Softcap * tanhf(s/a.Softcap)
		}
		s *= a.Scale
		scores[k] = s
		maxScore = max(maxScore, s)
	}
	// A sink (ggml_soft_max_ext's third source) joins the max and the
	// sum, unscaled, and weights no value.
	var sink float32
	if a.Sinks != nil {
		sink = a.Sinks[h]
		maxScore = max(maxScore, sink)
	}
	expSub(scores, scores, maxScore)
	var sum float64
	for _, e := range scores {
		sum += float64(e)
	}
	if a.Sinks != nil {
		sum += float64(libmExpf(sink - maxScore)) // ggml calls the C library's expf here
	}
	inv := float32(1 / sum)
	for k := range scores {
		scores[k] *= inv
	}
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
