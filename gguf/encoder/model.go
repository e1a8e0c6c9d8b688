package encoder

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
)

// ErrInput is wrapped by the reason an input cannot be encoded: empty,
// longer than the context, or a token outside the vocabulary.
var ErrInput = errors.New("encoder: bad input")

// Model is a loaded encoder. Hidden may be called from several goroutines.
type Model struct {
	cfg    Config
	be     backend.Backend
	tok    backend.Weight // token embeddings, Vocab rows
	pos    backend.Weight // bert's position embeddings, Context rows
	type0  backend.Weight // token type 0's embedding ("sentence A"), a row every token gets; nil where the file has none
	normW  []float32      // the embeddings' layer norm
	normB  []float32
	layers []layer
	rope   *backend.RoPE
	att    backend.FullAttender // be's attention without a cache
	moe    backend.MoE          // be's mixture of experts, for nomic-bert-moe
	// The classification head a reranker has (llama.cpp's cls, cls_b,
	// cls_out, cls_out_b): nil where the file has none. cls has clsRows
	// outputs.
	cls, clsB, clsOut, clsOutB backend.Weight
	clsRows                    int
}

type layer struct {
	q, k, v, qkv, o      backend.Weight
	qb, kb, vb, qkvb, ob backend.Weight // nil where the file has none
	attnNormW, attnNormB []float32
	up, gate, down       backend.Weight
	upb, gateb, downb    backend.Weight
	outNormW, outNormB   []float32
	// jina-bert-v2's optional norms: of the queries, of the keys, and a
	// second after attention; nil where the file has none.
	qNormW, qNormB, kNormW, kNormB, norm2W, norm2B []float32
	// nomic-bert-moe's mixture of experts, in place of up and down: the
	// router and each expert's matrices; nil in a dense layer.
	router           backend.Weight
	upExps, downExps []backend.Weight
}

// Load reads an encoder from f onto be, whose kernels it runs on. The
// weights stay in f's mapping (the CPU reads them in place): f must stay
// open while the model is used.
func Load(f *gguf.File, be backend.Backend) (*Model, error) {
	cfg, err := ParseConfig(f.Metadata)
	if err != nil {
		return nil, err
	}
	att, ok := be.(backend.FullAttender)
	if !ok {
		return nil, fmt.Errorf("%w: the %s backend has no attention without a cache (backend.FullAttender), which an encoder needs", ErrInvalid, be.Name())
	}
	ld := &loader{f: f, be: be}
	m := &Model{cfg: cfg, be: be, att: att}
	if cfg.MoEEvery > 0 {
		if m.moe, ok = be.(backend.MoE); !ok {
			return nil, fmt.Errorf("%w: the %s backend runs no mixture of experts (backend.MoE), which %s needs", ErrInvalid, be.Name(), cfg.Arch)
		}
	}
	t, ok := f.Tensor("token_embd.weight")
	if !ok || len(t.Dims) < 2 || t.Dims[0] != int64(cfg.Embd) || t.Dims[1] < 1 || t.Dims[1] > maxDim {
		return nil, fmt.Errorf("%w: token_embd.weight is missing or not %d wide", ErrInvalid, cfg.Embd)
	}
	m.cfg.Vocab = int(t.Dims[1])
	if m.tok, err = ld.matrix("token_embd.weight", m.cfg.Vocab, cfg.Embd, true); err != nil {
		return nil, err
	}
	if cfg.Positions {
		if m.pos, err = ld.matrix("position_embd.weight", cfg.Context, cfg.Embd, true); err != nil {
			return nil, err
		}
	} else {
		m.rope = &backend.RoPE{Dims: cfg.RoPEDims, NeoX: true, Base: cfg.RoPEBase, FreqScale: 1, AttnFactor: 1}
	}
	if cfg.TokenTypes > 0 {
		if m.type0, err = ld.firstRow("token_types.weight", cfg.Embd, cfg.TokenTypes); err != nil {
			return nil, err
		}
	}
	if m.type0 == nil && cfg.Arch == "jina-bert-v2" {
		return nil, fmt.Errorf("%w: jina-bert-v2 needs token type embeddings (token_types.weight, tokenizer.ggml.token_type_count)", ErrInvalid)
	}
	if m.normW, err = ld.floats("token_embd_norm.weight", cfg.Embd); err != nil {
		return nil, err
	}
	if m.normB, err = ld.floats("token_embd_norm.bias", cfg.Embd); err != nil {
		return nil, err
	}
	if err := ld.head(m); err != nil {
		return nil, err
	}
	_, fused := f.Tensor("blk.0.attn_qkv.weight")
	m.cfg.FusedQKV = fused
	if cfg.FFN == GEGLU {
		// jina-bert-v2's gate: a matrix of its own, up's first half where
		// up is twice the feed-forward's width, or none (plain GELU), as
		// llama.cpp tells them apart.
		if _, ok := f.Tensor("blk.0.ffn_gate.weight"); !ok {
			if t, ok := f.Tensor("blk.0.ffn_up.weight"); ok && len(t.Dims) == 2 && t.Dims[1] == 2*int64(cfg.FF) {
				m.cfg.FusedGate = true
			} else {
				m.cfg.FFN = GELU
			}
		}
	}
	m.layers = make([]layer, cfg.Layers)
	for i := range m.layers {
		if err := ld.layer(&m.layers[i], i, m.cfg); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Config is the model's geometry.
func (m *Model) Config() Config { return m.cfg }

// Hidden returns the final hidden state of every token of ids, row by
// row (len(ids) × Embd), every token having attended to every other.
func (m *Model) Hidden(ctx context.Context, ids []uint32) ([]float32, error) {
	n, c := len(ids), m.cfg
	switch {
	case n == 0:
		return nil, fmt.Errorf("%w: no tokens", ErrInput)
	case n > c.Context:
		return nil, fmt.Errorf("%w: %d tokens, more than the model's context of %d", ErrInput, n, c.Context)
	}
	for i, id := range ids {
		if int(id) >= c.Vocab {
			return nil, fmt.Errorf("%w: token %d (at %d) is outside the vocabulary of %d", ErrInput, id, i, c.Vocab)
		}
	}
	be := m.be
	x := be.NewTensor(n, c.Embd)
	be.Embed(x, m.tok, ids)
	// ggml adds the type row to the tokens', then the sum to the
	// positions' (a + b rounds the same either way round).
	if m.type0 != nil {
		be.AddBias(x, m.type0)
	}
	if m.pos != nil {
		p := be.NewTensor(n, c.Embd)
		positions := make([]uint32, n)
		for i := range positions {
			positions[i] = uint32(i)
		}
		be.Embed(p, m.pos, positions)
		be.Add(x, p)
	}
	host := make([]float32, n*c.Embd)
	normOn(be, x, host, c.Embd, m.normW, m.normB, c.NormEps)

	qkvW := 3 * c.Embd
	var qkv backend.Tensor
	if c.FusedQKV {
		qkv = be.NewTensor(n, qkvW)
	}
	q, k, v := be.NewTensor(n, c.Embd), be.NewTensor(n, c.Embd), be.NewTensor(n, c.Embd)
	att := be.NewTensor(n, c.Embd)
	cur := be.NewTensor(n, c.Embd)
	up := be.NewTensor(n, c.FF)
	gate := be.NewTensor(n, c.FF)
	if c.FFN == GELU {
		// GELU is a GLU whose up is 1: ggml's gelu, table and all.
		be.Write(gate, slices.Repeat([]float32{1}, n*c.FF))
	}
	var moe *moeScratch
	if m.moe != nil {
		moe = newMoEScratch(be, c, n)
	}
	var hq, hk, hv, all []float32
	if c.FusedQKV {
		hq, hk, hv = make([]float32, n*c.Embd), make([]float32, n*c.Embd), make([]float32, n*c.Embd)
		all = make([]float32, n*qkvW)
	}
	scale := float32(1 / math.Sqrt(float64(c.HeadDim)))
	for li := range m.layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ly := &m.layers[li]
		if c.FusedQKV {
			// One product, its rows split three ways on the host.
			be.MatMul(qkv, ly.qkv, x)
			if ly.qkvb != nil {
				be.AddBias(qkv, ly.qkvb)
			}
			be.Read(all, qkv)
			for i := range n {
				row := all[i*qkvW : (i+1)*qkvW]
				copy(hq[i*c.Embd:(i+1)*c.Embd], row[:c.Embd])
				copy(hk[i*c.Embd:(i+1)*c.Embd], row[c.Embd:2*c.Embd])
				copy(hv[i*c.Embd:(i+1)*c.Embd], row[2*c.Embd:])
			}
			be.Write(q, hq)
			be.Write(k, hk)
			be.Write(v, hv)
		} else {
			for _, p := range []struct {
				dst  backend.Tensor
				w, b backend.Weight
			}{{q, ly.q, ly.qb}, {k, ly.k, ly.kb}, {v, ly.v, ly.vb}} {
				be.MatMul(p.dst, p.w, x)
				if p.b != nil {
					be.AddBias(p.dst, p.b)
				}
			}
		}
		if ly.qNormW != nil {
			normOn(be, q, host, c.Embd, ly.qNormW, ly.qNormB, c.NormEps)
		}
		if ly.kNormW != nil {
			normOn(be, k, host, c.Embd, ly.kNormW, ly.kNormB, c.NormEps)
		}
		if m.rope != nil {
			be.RoPE(q, c.HeadDim, 0, m.rope)
			be.RoPE(k, c.HeadDim, 0, m.rope)
		}
		m.att.AttendFull(att, q, k, v, &backend.FullAttention{Heads: c.Heads, Scale: scale, MaxALiBi: c.ALiBi})
		be.MatMul(cur, ly.o, att)
		if ly.ob != nil {
			be.AddBias(cur, ly.ob)
		}
		be.Add(cur, x) // the layer's input added back
		normOn(be, cur, host, c.Embd, ly.attnNormW, ly.attnNormB, c.NormEps)
		if ly.norm2W != nil {
			be.Add(cur, x) // jina-bert-v2 adds the input once more
			normOn(be, cur, host, c.Embd, ly.norm2W, ly.norm2B, c.NormEps)
		}
		// cur is the feed-forward's input, added back after it.

		if ly.router != nil {
			m.mixture(moe, ly, x, cur)
			be.Add(x, cur)
			normOn(be, x, host, c.Embd, ly.outNormW, ly.outNormB, c.NormEps)
			continue
		}
		be.MatMul(up, ly.up, cur)
		if ly.upb != nil {
			be.AddBias(up, ly.upb)
		}
		switch c.FFN {
		case GELU:
			be.GLU(up, up, gate, backend.GELUTanh)
		default:
			be.MatMul(gate, ly.gate, cur)
			if ly.gateb != nil {
				be.AddBias(gate, ly.gateb)
			}
			act := backend.SiLU
			if c.FFN == GEGLU {
				act = backend.GELUTanh
			}
			be.GLU(up, gate, up, act)
		}
		be.MatMul(x, ly.down, up)
		if ly.downb != nil {
			be.AddBias(x, ly.downb)
		}
		be.Add(x, cur)
		normOn(be, x, host, c.Embd, ly.outNormW, ly.outNormB, c.NormEps)
	}
	return host, nil
}

// moeScratch is a pass's memory for nomic-bert-moe's mixture of experts:
// router scores, each token's chosen experts and their weights, and the
// chosen experts' activations, a row per (token, rank).
type moeScratch struct {
	logits, sel, w backend.Tensor
	up, ones, y    backend.Tensor
}

func newMoEScratch(be backend.Backend, c Config, n int) *moeScratch {
	k := c.ExpertsUsed
	ms := &moeScratch{
		logits: be.NewTensor(n, c.Experts), sel: be.NewTensor(n, k), w: be.NewTensor(n, k),
		up: be.NewTensor(n*k, c.FF), ones: be.NewTensor(n*k, c.FF), y: be.NewTensor(n*k, c.Embd),
	}
	be.Write(ms.ones, slices.Repeat([]float32{1}, n*k*c.FF)) // GELU as a GLU whose up is 1
	return ms
}

// mixture sets dst to the mixture of experts' output for x, as
// llama.cpp's build_moe_ffn computes it for nomic-bert-moe: the router's
// softmax over all experts, the ExpertsUsed most probable weighted by
// their probabilities (not renormalised), each a GELU feed-forward
// without biases, their weighted outputs summed best first.
func (m *Model) mixture(ms *moeScratch, ly *layer, dst, x backend.Tensor) {
	m.be.MatMul(ms.logits, ly.router, x)
	m.moe.MoERoute(ms.sel, ms.w, ms.logits, backend.GateSoftmax)
	m.moe.MoEMatMul(ms.up, ly.upExps, nil, x, ms.sel)
	m.be.GLU(ms.up, ms.up, ms.ones, backend.GELUTanh)
	m.moe.MoEMatMul(ms.y, ly.downExps, nil, ms.up, ms.sel)
	m.moe.MoESum(dst, ms.y, ms.sel, ms.w, nil)
}

// normOn layer-normalises t on the host, through host (t's size), which
// holds the result afterwards too.
func normOn(be backend.Backend, t backend.Tensor, host []float32, e int, w, b []float32, eps float32) {
	be.Read(host, t)
	layerNorm(host, e, w, b, eps)
	be.Write(t, host)
}

// Scores is a reranker's relevance scores for ids (a query and a
// document, as the caller joined them), as llama.cpp's rank pooling
// makes them: the first token's ([CLS]) final hidden state through the
// file's classification head, tanh(cls·h + cls_b), then cls_out times
// that plus cls_out_b, each where the file has it (jina-reranker-v1 has
// only a one-row cls); Config.Classes scores, raw (no sigmoid). A model
// without a head refuses with ErrNoHead.
func (m *Model) Scores(ctx context.Context, ids []uint32) ([]float32, error) {
	if m.cfg.Classes == 0 {
		return nil, ErrNoHead
	}
	h, err := m.Hidden(ctx, ids)
	if err != nil {
		return nil, err
	}
	be, e := m.be, m.cfg.Embd
	x := be.NewTensor(1, e)
	be.Write(x, h[:e])
	if m.cls != nil {
		y := be.NewTensor(1, m.clsRows)
		be.MatMul(y, m.cls, x)
		if m.clsB != nil {
			be.AddBias(y, m.clsB)
		}
		v := make([]float32, m.clsRows)
		be.Read(v, y)
		for i, t := range v {
			v[i] = float32(math.Tanh(float64(t)))
		}
		if m.clsOut == nil {
			return v[:m.cfg.Classes], nil
		}
		be.Write(x, v) // Embd wide: a cls.output follows only a square cls
	}
	y := be.NewTensor(1, m.cfg.Classes)
	be.MatMul(y, m.clsOut, x)
	if m.clsOutB != nil {
		be.AddBias(y, m.clsOutB)
	}
	out := make([]float32, m.cfg.Classes)
	be.Read(out, y)
	return out, nil
}

// ErrNoHead: Scores was asked of a model with no classification head.
var ErrNoHead = errors.New("encoder: the model has no classification head (cls, cls.output) to score with")

// layerNorm normalises each e-wide row of x to mean 0 and variance 1,
// then scales by w and adds b, as ggml_norm then ggml_mul and ggml_add
// do: the mean and the variance summed wide (ggml_float) and rounded to
// float32, the scale 1/√(var + eps) in float32.
func layerNorm(x []float32, e int, w, b []float32, eps float32) {
	for i := 0; i < len(x); i += e {
		row := x[i : i+e]
		var sum float64
		for _, v := range row {
			sum += float64(v)
		}
		mean := float32(sum) / float32(e)
		var sq float64
		for j, v := range row {
			d := v - mean
			row[j] = d
			sq += float64(d * d)
		}
		variance := float32(sq / float64(e))
		scale := float32(1 / math.Sqrt(float64(variance+eps)))
		for j, v := range row {
			// Each product rounded: Go fuses a·b+c on arm64.
			row[j] = float32(float32(v*scale)*w[j]) + b[j]
		}
	}
}
