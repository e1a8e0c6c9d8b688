// Package backend is the kernel set a model's forward pass is written
// against: quantised matrix products, RMSNorm, RoPE, gated activations,
// attention over a KV cache and a few elementwise operations, on
// activations that live wherever the backend keeps them. The architecture
// code (package model) is written once against Backend; the CPU, CUDA and
// Metal backends differ only in how they implement it.
//
// Activations are float32 row-major matrices (one row per token). Weights
// are ggml-typed matrices whose bytes the backend is handed once, at load;
// a backend that can read the caller's memory (the CPU) keeps them where
// they are, in the model file's mapping.
//
// A kernel called with shapes that do not fit panics: shapes are fixed by
// the model's configuration, which is checked when it loads, so a misfit is
// a programming error rather than bad input.
package backend

import (
	"math"
	"math/bits"

	"github.com/meshnode/meshnode/gguf/quant"
)

// Buffer is backend memory holding float32 activations. Only the backend
// that made it knows what it is.
type Buffer interface {
	// Len is the buffer's size in float32 elements.
	Len() int
}

// Tensor is a rows × cols float32 matrix stored contiguously (row stride
// cols) at element offset Off of Buf. It is a value: slicing it makes no
// allocation, so the decode loop can take views freely.
type Tensor struct {
	Buf        Buffer
	Off        int
	Rows, Cols int
}

// Slice returns the view of rows [r0, r1).
func (t Tensor) Slice(r0, r1 int) Tensor {
	if r0 < 0 || r1 < r0 || r1 > t.Rows {
		panic("backend: tensor slice out of range")
	}
	return Tensor{Buf: t.Buf, Off: t.Off + r0*t.Cols, Rows: r1 - r0, Cols: t.Cols}
}

// Len is the number of elements.
func (t Tensor) Len() int { return t.Rows * t.Cols }

// Weight is a rows × cols matrix of one ggml type, prepared by the backend
// (a vector is a 1-row weight).
type Weight interface {
	Type() quant.Type
	Rows() int
	Cols() int
}

// KVShape is one layer's attention geometry, as the KV cache stores it.
type KVShape struct {
	KVHeads            int
	HeadDimK, HeadDimV int
}

// KVCache holds the keys and values of every layer for positions
// [0, Capacity()) of one sequence.
type KVCache interface {
	// Type is the element type of the stored keys and values (F16 or F32).
	Type() quant.Type
	// Capacity is the number of positions the cache holds.
	Capacity() int
}

// GLU selects a gated linear unit's gate function.
type GLU int

// The gate functions of the architectures this project runs.
const (
	// SiLU: silu(gate) · up (SwiGLU: llama, qwen2, phi3).
	SiLU GLU = iota
	// GELUTanh: gelu(gate) · up with GELU's tanh approximation, evaluated
	// as ggml does through a table over fp16 inputs (GeGLU: gemma).
	GELUTanh
	// SwiGLUOAI: gpt-oss's clamped SwiGLU (ggml_swiglu_oai with α = 1.702,
	// limit 7, as llama.cpp fixes them): g = min(gate, 7), u = clamp(up,
	// ±7), g·σ(α·g)·(u + 1).
	SwiGLUOAI
)

// Feature is a kernel capability that not every backend has; a model that
// needs one checks for it when it loads rather than computing without it.
type Feature int

// The optional features.
const (
	// AttentionSinks: Attend honours Attention.Sinks.
	AttentionSinks Feature = iota
	// GLUSwiOAI: GLU takes SwiGLUOAI.
	GLUSwiOAI
)

// FullAttender is implemented by a backend that attends without a cache
// or a causal mask, as an encoder does (package encoder): every row of q
// over the rows of k and v its FullAttention lets it see, heads side by
// side in each row (q and dst Heads·d wide, k and v KVHeads·d, each KV
// head serving Heads/KVHeads query heads in turn), softmax(scale · q·k +
// bias) weighting v, into dst. dst must not alias q, k or v.
type FullAttender interface {
	AttendFull(dst, q, k, v Tensor, a *FullAttention)
}

// FullAttention is how a FullAttender attends.
type FullAttention struct {
	Heads int
	// KVHeads is the key and value heads (grouped-query attention); 0 is
	// Heads.
	KVHeads int
	Scale   float32
	// MaxALiBi, where it is not 0, adds ALiBi's bias as ggml's
	// soft_max_ext adds it: head h's slope (ALiBiSlope) times −|i − j| for
	// query row i and key row j, added to the scaled score.
	MaxALiBi float32
	// Window, where it is not 0, masks the key rows more than Window/2
	// from the query row (llama.cpp's symmetric sliding window, as
	// ModernBERT's local layers attend).
	Window int
}

// ALiBiSlope is head h's ALiBi slope of heads heads for a maximum bias of
// maxBias, as ggml computes it (in float32, powf): the first 2^⌊log₂
// heads⌋ heads take m0^(h+1), m0 = 2^(−maxBias/n); the rest take the
// odd powers of m1 = 2^(−maxBias/2n), interleaved between them.
func ALiBiSlope(h, heads int, maxBias float32) float32 {
	if maxBias <= 0 {
		return 1
	}
	n := 1 << bits.Len(uint(heads)>>1) // the largest power of two ≤ heads
	if h < n {
		m0 := float32(math.Pow(2, float64(-maxBias/float32(n))))
		return float32(math.Pow(float64(m0), float64(h+1)))
	}
	m1 := float32(math.Pow(2, float64(-(maxBias/2)/float32(n))))
	return float32(math.Pow(float64(m1), float64(2*(h-n)+1)))
}

// Featured is implemented by a backend that has optional features.
type Featured interface {
	Supports(f Feature) bool
}

// Supports reports whether be has the feature f.
func Supports(be Backend, f Feature) bool {
	fb, ok := be.(Featured)
	return ok && fb.Supports(f)
}

// RoPE describes one rotary position embedding, as ggml_rope_ext takes it.
type RoPE struct {
	// Dims is the number of rotated dimensions per head (n_rot); the rest
	// pass through.
	Dims int
	// NeoX selects the layout: false rotates adjacent pairs (x[2i],
	// x[2i+1]) as llama does, true rotates (x[i], x[i+Dims/2]) as GPT-NeoX,
	// qwen2, phi3 and gemma do.
	NeoX bool
	// Base is the frequency base θ (rope.freq_base).
	Base float32
	// FreqScale is the linear position scale (1 / rope.scaling.factor).
	FreqScale float32
	// Factors divides each pair's frequency (rope_freqs, or phi3's
	// long/short factors); nil means all 1. Length Dims/2.
	Factors []float32
	// AttnFactor scales cos and sin (YaRN's and LongRoPE's magnitude
	// correction); 1 means none.
	AttnFactor float32
	// ExtFactor is YaRN's extrapolation mix (0: no YaRN ramp); BetaFast,
	// BetaSlow and OrigCtx set the ramp's correction dimensions.
	ExtFactor, BetaFast, BetaSlow float32
	OrigCtx                       int
}

// Attention describes one layer's attention.
type Attention struct {
	Heads, KVHeads     int
	HeadDimK, HeadDimV int
	// Scale multiplies the scores Q·K before the softmax.
	Scale float32
	// Window, when > 0, limits each query at position p to keys at
	// positions p-Window+1 … p (a sliding window); 0 is full causal.
	Window int
	// Softcap, when > 0, caps the scores at ±Softcap with tanh.
	Softcap float32
	// Sinks, when set, holds a learned logit per head (gpt-oss) that joins
	// the softmax's denominator, and its max, but weights no value: the
	// head may attend to nothing. Only a backend that Supports
	// AttentionSinks honours it.
	Sinks []float32
}

// Backend is the kernel set. Its methods may be called from several
// goroutines (one per session); a backend serialises or partitions its
// work as it needs to. Tensor arguments may alias where a method says so.
type Backend interface {
	// Name is a short name for logs: "cpu", "cuda", "metal".
	Name() string
	// Threads is the parallelism the backend uses (CPU threads, or 1).
	Threads() int

	// NewTensor allocates a rows × cols activation, zeroed.
	NewTensor(rows, cols int) Tensor
	// Weight prepares a weight matrix from data, rows × cols elements of
	// typ stored row-major. data must stay valid and unchanged until
	// Close; the CPU backend reads it in place.
	Weight(typ quant.Type, rows, cols int, data []byte) (Weight, error)
	// NewKVCache allocates a cache for layers of the given shapes over
	// capacity positions.
	NewKVCache(typ quant.Type, capacity int, layers []KVShape) (KVCache, error)
	// Read copies t to dst (len t.Len()).
	Read(dst []float32, t Tensor)
	// Write copies src (len t.Len()) into t.
	Write(t Tensor, src []float32)

	// Embed sets row i of dst to row ids[i] of table, dequantised.
	Embed(dst Tensor, table Weight, ids []uint32)
	// MatMul sets dst = x · wᵀ: dst[i][r] is row r of w dotted with row i
	// of x, which is first converted to w's activation format
	// (quant.VecDotType). dst must not alias x.
	MatMul(dst Tensor, w Weight, x Tensor)
	// AddBias adds the 1-row weight b to every row of x.
	AddBias(x Tensor, b Weight)
	// RMSNorm normalises each w.Cols()-element group of each row of x (a
	// whole row, or one head) by its root mean square and multiplies it by
	// w elementwise. dst may alias x.
	RMSNorm(dst, x Tensor, w Weight, eps float32)
	// Add sets dst += a.
	Add(dst, a Tensor)
	// Scale sets x *= s.
	Scale(x Tensor, s float32)
	// Softcap sets x = c · tanh(x / c).
	Softcap(x Tensor, c float32)
	// GLU sets dst = f(gate) · up elementwise. dst may alias gate or up.
	GLU(dst, gate, up Tensor, f GLU)
	// RoPE rotates each head of each row of x in place; row i holds the
	// token at position pos+i, its heads r.Dims … head size apart.
	RoPE(x Tensor, headDim, pos int, r *RoPE)

	// StoreKV writes rows of k and v as the keys and values of positions
	// pos … pos+k.Rows-1 of layer.
	StoreKV(c KVCache, layer, pos int, k, v Tensor)
	// Attend computes causal attention for the queries q (row i at
	// position pos+i) over the keys and values of layer at positions up to
	// each query's own, which must already be stored, and writes the
	// heads' outputs side by side into dst.
	Attend(dst, q Tensor, c KVCache, layer, pos int, a *Attention)

	// Close releases the backend's workers and memory.
	Close() error
}
