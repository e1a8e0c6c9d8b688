package cpu

import (
	"fmt"
	"math"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// kvCache stores each layer's keys and values position-major: position p's
// key is k[layer][p·kDim : (p+1)·kDim], heads side by side. Exactly one of
// the f16 and f32 sets is used. The slices are allocated whole but Go
// leaves pages it has not touched unbacked, so memory grows with the
// positions actually written.
type kvCache struct {
	typ          quant.Type
	capacity     int
	kDims, vDims []int
	k16, v16     [][]uint16
	k32, v32     [][]float32
}

func (c *kvCache) Type() quant.Type { return c.typ }
func (c *kvCache) Capacity() int    { return c.capacity }

// NewKVCache implements backend.Backend.
func (b *Backend) NewKVCache(typ quant.Type, capacity int, kDims, vDims []int) (backend.KVCache, error) {
	if typ != quant.F16 && typ != quant.F32 {
		return nil, fmt.Errorf("cpu: KV cache type %s (want F16 or F32)", typ)
	}
	if capacity <= 0 || len(kDims) != len(vDims) {
		return nil, fmt.Errorf("cpu: KV cache of %d positions, %d key and %d value layers", capacity, len(kDims), len(vDims))
	}
	c := &kvCache{typ: typ, capacity: capacity, kDims: kDims, vDims: vDims}
	for l := range kDims {
		if typ == quant.F16 {
			c.k16 = append(c.k16, make([]uint16, capacity*kDims[l]))
			c.v16 = append(c.v16, make([]uint16, capacity*vDims[l]))
		} else {
			c.k32 = append(c.k32, make([]float32, capacity*kDims[l]))
			c.v32 = append(c.v32, make([]float32, capacity*vDims[l]))
		}
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

// StoreKV implements backend.Backend.
func (b *Backend) StoreKV(cache backend.KVCache, layer, pos int, k, v backend.Tensor) {
	c := asCache(cache)
	kd, vd := c.kDims[layer], c.vDims[layer]
	if k.Cols != kd || v.Cols != vd || k.Rows != v.Rows || pos < 0 || pos+k.Rows > c.capacity {
		panic(fmt.Sprintf("cpu: StoreKV of %d rows at %d (k %d, v %d wide) into a %d-position cache (%d, %d)", k.Rows, pos, k.Cols, v.Cols, c.capacity, kd, vd))
	}
	kx, vx := data(k), data(v)
	if c.typ == quant.F32 {
		copy(c.k32[layer][pos*kd:], kx)
		copy(c.v32[layer][pos*vd:], vx)
		return
	}
	ks, vs := c.k16[layer][pos*kd:pos*kd+len(kx)], c.v16[layer][pos*vd:pos*vd+len(vx)]
	for i, f := range kx {
		ks[i] = quant.FP32ToFP16(f)
	}
	for i, f := range vx {
		vs[i] = quant.FP32ToFP16(f)
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
}

// Attend implements backend.Backend. It follows llama.cpp's attention
// without flash attention: scores Q·K (with an fp16 cache, Q rounded to
// fp16 first, as ggml converts it for the product), softcap, scale, the
// causal and sliding-window mask, softmax with the sum in float64, and the
// weighted sum of values (with an fp16 cache, the weights rounded to
// fp16).
func (b *Backend) Attend(dst, q backend.Tensor, cache backend.KVCache, layer, pos int, a *backend.Attention) {
	c := asCache(cache)
	if a.Heads <= 0 || a.KVHeads <= 0 || a.Heads%a.KVHeads != 0 ||
		q.Cols != a.Heads*a.HeadDimK || dst.Cols != a.Heads*a.HeadDimV || dst.Rows != q.Rows ||
		c.kDims[layer] != a.KVHeads*a.HeadDimK || c.vDims[layer] != a.KVHeads*a.HeadDimV ||
		pos < 0 || pos+q.Rows > c.capacity {
		panic(fmt.Sprintf("cpu: Attend %d × %d queries at %d over layer %d of a %d-position cache, %+v", q.Rows, q.Cols, pos, layer, c.capacity, *a))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// Scratch: scores for every position, the query, the output.
	b.growScratch(pos + q.Rows + a.HeadDimK + a.HeadDimV)
	b.att = attendJob{dst: data(dst), q: data(q), c: c, layer: layer, pos: pos, a: a, scratch: b.scratch}
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
	kvh := h / (a.Heads / a.KVHeads)
	dk, dv := a.HeadDimK, a.HeadDimV
	kd, vd := c.kDims[j.layer], c.vDims[j.layer]

	s := j.scratch[w]
	scores := s[:p+1-lo]
	qh := s[p+1-lo : p+1-lo+dk]
	out := s[p+1-lo+dk : p+1-lo+dk+dv]
	copy(qh, j.q[i*a.Heads*dk+h*dk:][:dk])
	f16 := c.typ == quant.F16
	if f16 {
		for d, v := range qh {
			qh[d] = roundFP16(v)
		}
	}

	maxScore := float32(math.Inf(-1))
	for jp := lo; jp <= p; jp++ {
		var dot float32
		if f16 {
			dot = dotF16(qh, c.k16[j.layer][jp*kd+kvh*dk:][:dk])
		} else {
			dot = dotF32(qh, c.k32[j.layer][jp*kd+kvh*dk:][:dk])
		}
		if a.Softcap > 0 {
			dot = a.Softcap * tanhf(dot/a.Softcap)
		}
		dot *= a.Scale
		scores[jp-lo] = dot
		maxScore = max(maxScore, dot)
	}
	var sum float64
	for k, v := range scores {
		e := expf(v - maxScore)
		scores[k] = e
		sum += float64(e)
	}
	inv := float32(1 / sum)
	clear(out)
	for jp := lo; jp <= p; jp++ {
		pw := scores[jp-lo] * inv
		if f16 {
			pw = roundFP16(pw)
			axpyF16(out, pw, c.v16[j.layer][jp*vd+kvh*dv:][:dv])
		} else {
			axpyF32(out, pw, c.v32[j.layer][jp*vd+kvh*dv:][:dv])
		}
	}
	copy(j.dst[i*a.Heads*dv+h*dv:][:dv], out)
}

func dotF16(x []float32, y []uint16) float32 {
	tab := fp16Table()
	var acc [4]float32
	n := len(x) &^ 3
	for i := 0; i < n; i += 4 {
		acc[0] += float32(x[i] * tab[y[i]])
		acc[1] += float32(x[i+1] * tab[y[i+1]])
		acc[2] += float32(x[i+2] * tab[y[i+2]])
		acc[3] += float32(x[i+3] * tab[y[i+3]])
	}
	for i := n; i < len(x); i++ {
		acc[0] += float32(x[i] * tab[y[i]])
	}
	return (acc[0] + acc[1]) + (acc[2] + acc[3])
}

func dotF32(x, y []float32) float32 {
	var acc [4]float32
	n := len(x) &^ 3
	for i := 0; i < n; i += 4 {
		acc[0] += float32(x[i] * y[i])
		acc[1] += float32(x[i+1] * y[i+1])
		acc[2] += float32(x[i+2] * y[i+2])
		acc[3] += float32(x[i+3] * y[i+3])
	}
	for i := n; i < len(x); i++ {
		acc[0] += float32(x[i] * y[i])
	}
	return (acc[0] + acc[1]) + (acc[2] + acc[3])
}

func axpyF16(out []float32, a float32, y []uint16) {
	tab := fp16Table()
	for d, h := range y {
		out[d] += float32(a * tab[h])
	}
}

func axpyF32(out []float32, a float32, y []float32) {
	for d, v := range y {
		out[d] += float32(a * v)
	}
}
