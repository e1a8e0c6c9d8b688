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
	// The rotations (nomic-bert, modern-bert; modern-bert's local layers
	// have their own base): nil where the model has none.
	rope, ropeSWA *backend.RoPE
	att           backend.FullAttender // be's attention without a cache
	moe           backend.MoE          // be's mixture of experts, for nomic-bert-moe
	// modern-bert's norm of the last layer's output.
	outNormW, outNormB []float32
	// gemma-embedding's RMS norm of the last layer's output, and the dense
	// projections of the pooled vector (nil where the file has none).
	rmsOut, dense2, dense3 backend.Weight
	// The classification head a reranker has (llama.cpp's cls, cls_b,
	// cls_out, cls_out_b, and modern-bert's cls_norm): nil where the file
	// has none. cls has clsRows outputs.
	cls, clsB, clsOut, clsOutB backend.Weight
	clsRows                    int
	clsNormW, clsNormB         []float32
}

type layer struct {
	q, k, v, qkv, o      backend.Weight
	qb, kb, vb, qkvb, ob backend.Weight // nil where the file has none
	up, gate, down       backend.Weight
	upb, gateb, downb    backend.Weight
	// Post-norm layers' norms: of the attention's sum, and of the
	// layer's output.
	attnNormW, attnNormB []float32
	outNormW, outNormB   []float32
	// modern-bert's pre-norms: of the layer's input (nil, the first
	// layer's, where the file has none) and of the feed-forward's.
	inNormW, inNormB   []float32
	ffnNormW, ffnNormB []float32
	// jina-bert-v2's optional norms: of the queries, of the keys, and a
	// second after attention; nil where the file has none.
	qNormW, qNormB, kNormW, kNormB, norm2W, norm2B []float32
	// nomic-bert-moe's mixture of experts, in place of up and down: the
	// router and each expert's matrices; nil in a dense layer.
	router           backend.Weight
	upExps, downExps []backend.Weight
	// gemma-embedding's RMS norms: before and after attention, of each
	// head's queries and keys, before and after the feed-forward.
	rmsIn, rmsPostAttn, qRMS, kRMS, rmsFFN, rmsPostFFN backend.Weight
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
	}
	if cfg.RoPEBase > 0 {
		m.rope = &backend.RoPE{Dims: cfg.RoPEDims, NeoX: true, Base: cfg.RoPEBase, FreqScale: 1, AttnFactor: 1}
	}
	if cfg.RoPEBaseSWA > 0 {
		m.ropeSWA = &backend.RoPE{Dims: cfg.RoPEDims, NeoX: true, Base: cfg.RoPEBaseSWA, FreqScale: 1, AttnFactor: 1}
	}
	if cfg.TokenTypes > 0 && !cfg.PreNorm && !cfg.Sandwich {
		if m.type0, err = ld.firstRow("token_types.weight", cfg.Embd, cfg.TokenTypes); err != nil {
			return nil, err
		}
	}
	if cfg.TokenTypes == 0 && cfg.Arch == "jina-bert-v3" {
		return nil, fmt.Errorf("%w: jina-bert-v3 needs a token type count (tokenizer.ggml.token_type_count), as llama.cpp does", ErrInvalid)
	}
	if m.type0 == nil && cfg.Arch == "jina-bert-v2" {
		return nil, fmt.Errorf("%w: jina-bert-v2 needs token type embeddings (token_types.weight, tokenizer.ggml.token_type_count)", ErrInvalid)
	}
	if cfg.Sandwich {
		if err := ld.sandwichModel(m); err != nil {
			return nil, err
		}
	} else if m.normW, m.normB, err = ld.norm("token_embd_norm", cfg.Embd, !cfg.PreNorm); err != nil {
		return nil, err
	}
	if cfg.PreNorm {
		if m.outNormW, m.outNormB, err = ld.norm("output_norm", cfg.Embd, false); err != nil {
			return nil, err
		}
	}
	if err := ld.head(m); err != nil {
		return nil, err
	}
	if !cfg.FusedQKV {
		_, m.cfg.FusedQKV = f.Tensor("blk.0.attn_qkv.weight")
	}
	if cfg.FFN == GEGLU && !cfg.FusedGate {
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
// row (len(ids) × Embd), every token having attended to every other it
// sees.
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
	p := m.newPass(n)
	x := p.x
	be.Embed(x, m.tok, ids)
	// ggml adds the type row to the tokens', then the sum to the
	// positions' (a + b rounds the same either way round).
	if m.type0 != nil {
		be.AddBias(x, m.type0)
	}
	if m.pos != nil {
		pe := be.NewTensor(n, c.Embd)
		positions := make([]uint32, n)
		for i := range positions {
			positions[i] = uint32(i)
		}
		be.Embed(pe, m.pos, positions)
		be.Add(x, pe)
	}
	if c.Sandwich {
		be.Scale(x, c.EmbedScale)
	} else {
		p.norm(x, x, m.normW, m.normB)
	}
	for li := range m.layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ly := &m.layers[li]
		if c.Sandwich {
			// gemma-embedding: x + norm(attention(norm(x))), then that
			// plus the norm of its normed feed-forward.
			be.RMSNorm(p.h, x, ly.rmsIn, c.NormEps)
			p.attention(li, p.h)
			be.RMSNorm(p.cur, p.cur, ly.rmsPostAttn, c.NormEps)
			be.Add(p.cur, x)
			be.RMSNorm(p.h, p.cur, ly.rmsFFN, c.NormEps)
			p.feedForward(ly, x, p.h)
			be.RMSNorm(x, x, ly.rmsPostFFN, c.NormEps)
			be.Add(x, p.cur)
			continue
		}
		if c.PreNorm {
			// modern-bert: x + attention(norm(x)), then that plus the
			// feed-forward of its norm.
			in := x
			if ly.inNormW != nil {
				in = p.h
				p.norm(in, x, ly.inNormW, ly.inNormB)
			}
			p.attention(li, in) // into p.cur
			be.Add(p.cur, x)
			p.norm(p.h, p.cur, ly.ffnNormW, ly.ffnNormB)
			p.feedForward(ly, x, p.h)
			be.Add(x, p.cur)
			continue
		}
		// The others: norm(x + attention(x)), then the norm of that plus
		// its feed-forward.
		p.attention(li, x)
		be.Add(p.cur, x)
		p.norm(p.cur, p.cur, ly.attnNormW, ly.attnNormB)
		if ly.norm2W != nil {
			be.Add(p.cur, x) // jina-bert-v2 adds the input once more
			p.norm(p.cur, p.cur, ly.norm2W, ly.norm2B)
		}
		p.feedForward(ly, x, p.cur)
		be.Add(x, p.cur)
		p.norm(x, x, ly.outNormW, ly.outNormB)
	}
	switch {
	case c.PreNorm:
		p.norm(x, x, m.outNormW, m.outNormB)
	case c.Sandwich:
		be.RMSNorm(x, x, m.rmsOut, c.NormEps)
		be.Read(p.host, x)
	}
	return p.host, nil
}

// Projects reports whether the model's pooled vectors go through dense
// projections (Project) before they are scaled.
func (m *Model) Projects() bool { return m.dense2 != nil }

// Project returns a pooled vector (Embd wide) through the model's dense
// projections, as llama.cpp's build_dense_out applies them after pooling:
// dense_2 (to Dense2Out), then dense_3 (back to Embd). A model without
// them returns v.
func (m *Model) Project(v []float32) []float32 {
	if m.dense2 == nil {
		return v
	}
	be, c := m.be, m.cfg
	x, y, z := be.NewTensor(1, c.Embd), be.NewTensor(1, c.Dense2Out), be.NewTensor(1, c.Embd)
	be.Write(x, v)
	be.MatMul(y, m.dense2, x)
	be.MatMul(z, m.dense3, y)
	out := make([]float32, c.Embd)
	be.Read(out, z)
	return out
}

// pass is one Hidden call's activations, n rows each.
type pass struct {
	m                     *Model
	n                     int
	x, cur, h             backend.Tensor // n × Embd: the layers' input and output, a sum, a norm
	q, k, v, att, qkv     backend.Tensor // q and att Heads·HeadDim wide, k and v KVHeads·HeadDim
	up, gate              backend.Tensor // n × FF
	host, hq, hk, hv, all []float32      // host copies: a norm's rows; a fused QKV's split
	moe                   *moeScratch
}

func (m *Model) newPass(n int) *pass {
	be, c := m.be, m.cfg
	p := &pass{m: m, n: n,
		x: be.NewTensor(n, c.Embd), cur: be.NewTensor(n, c.Embd), h: be.NewTensor(n, c.Embd),
		q: be.NewTensor(n, c.Heads*c.HeadDim), k: be.NewTensor(n, c.KVHeads*c.HeadDim), v: be.NewTensor(n, c.KVHeads*c.HeadDim),
		att: be.NewTensor(n, c.Heads*c.HeadDim),
		up:  be.NewTensor(n, c.FF), gate: be.NewTensor(n, c.FF),
		host: make([]float32, n*c.Embd),
	}
	if c.FFN == GELU {
		fillOnes(be, p.gate)
	}
	if c.FusedQKV {
		p.qkv = be.NewTensor(n, 3*c.Embd)
		p.hq, p.hk, p.hv = make([]float32, n*c.Embd), make([]float32, n*c.Embd), make([]float32, n*c.Embd)
		p.all = make([]float32, n*3*c.Embd)
	}
	if m.moe != nil {
		p.moe = newMoEScratch(be, c, n)
	}
	return p
}

// norm sets dst to src layer-normalised on the host (p.host holds the
// result afterwards too); dst may be src.
func (p *pass) norm(dst, src backend.Tensor, w, b []float32) {
	p.m.be.Read(p.host, src)
	layerNorm(p.host, p.m.cfg.Embd, w, b, p.m.cfg.NormEps)
	p.m.be.Write(dst, p.host)
}

// attention sets p.cur to layer li's attention over in: Q, K and V (their
// biases, jina-bert-v2's norms, the rotation), attention over the keys the
// layer sees, the output projection and its bias.
func (p *pass) attention(li int, in backend.Tensor) {
	m, be, c := p.m, p.m.be, p.m.cfg
	ly := &m.layers[li]
	if c.FusedQKV {
		// One product, its rows split three ways on the host.
		e, w := c.Embd, 3*c.Embd
		be.MatMul(p.qkv, ly.qkv, in)
		if ly.qkvb != nil {
			be.AddBias(p.qkv, ly.qkvb)
		}
		be.Read(p.all, p.qkv)
		for i := range p.n {
			row := p.all[i*w : (i+1)*w]
			copy(p.hq[i*e:(i+1)*e], row[:e])
			copy(p.hk[i*e:(i+1)*e], row[e:2*e])
			copy(p.hv[i*e:(i+1)*e], row[2*e:])
		}
		be.Write(p.q, p.hq)
		be.Write(p.k, p.hk)
		be.Write(p.v, p.hv)
	} else {
		for _, pr := range []struct {
			dst  backend.Tensor
			w, b backend.Weight
		}{{p.q, ly.q, ly.qb}, {p.k, ly.k, ly.kb}, {p.v, ly.v, ly.vb}} {
			be.MatMul(pr.dst, pr.w, in)
			if pr.b != nil {
				be.AddBias(pr.dst, pr.b)
			}
		}
	}
	if ly.qNormW != nil {
		p.norm(p.q, p.q, ly.qNormW, ly.qNormB)
	}
	if ly.kNormW != nil {
		p.norm(p.k, p.k, ly.kNormW, ly.kNormB)
	}
	if ly.qRMS != nil {
		be.RMSNorm(p.q, p.q, ly.qRMS, c.NormEps) // head by head
		be.RMSNorm(p.k, p.k, ly.kRMS, c.NormEps)
	}
	a := &backend.FullAttention{Heads: c.Heads, KVHeads: c.KVHeads, Scale: float32(1 / math.Sqrt(float64(c.HeadDim))), MaxALiBi: c.ALiBi}
	rope := m.rope
	if c.Local(li) {
		a.Window, rope = c.Window, m.ropeSWA
	}
	if rope != nil {
		be.RoPE(p.q, c.HeadDim, 0, rope)
		be.RoPE(p.k, c.HeadDim, 0, rope)
	}
	if c.Sandwich {
		// gemma scales the queries, then attends at scale 1.
		be.Scale(p.q, a.Scale)
		a.Scale = 1
	}
	m.att.AttendFull(p.att, p.q, p.k, p.v, a)
	be.MatMul(p.cur, ly.o, p.att)
	if ly.ob != nil {
		be.AddBias(p.cur, ly.ob)
	}
}

// feedForward sets dst to ly's feed-forward of in (dst must not be in):
// a mixture of experts, or up (and a gate), the activation and down, each
// with the bias the file has.
func (p *pass) feedForward(ly *layer, dst, in backend.Tensor) {
	m, be, c := p.m, p.m.be, p.m.cfg
	if ly.router != nil {
		m.mixture(p.moe, ly, dst, in)
		return
	}
	be.MatMul(p.up, ly.up, in)
	if ly.upb != nil {
		be.AddBias(p.up, ly.upb)
	}
	switch c.FFN {
	case GELU:
		be.GLU(p.up, p.up, p.gate, backend.GELUTanh)
	default:
		be.MatMul(p.gate, ly.gate, in)
		if ly.gateb != nil {
			be.AddBias(p.gate, ly.gateb)
		}
		act := backend.SiLU
		if c.FFN == GEGLU {
			act = backend.GELUTanh
		}
		be.GLU(p.up, p.gate, p.up, act)
	}
	be.MatMul(dst, ly.down, p.up)
	if ly.downb != nil {
		be.AddBias(dst, ly.downb)
	}
}

// fillOnes sets every element of t to 1: GELU runs as a GLU whose up is
// t, ggml's gelu, half-precision table and all.
func fillOnes(be backend.Backend, t backend.Tensor) {
	be.Write(t, slices.Repeat([]float32{1}, t.Len()))
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
	fillOnes(be, ms.ones)
	return ms
}

// mixture sets dst to the mixture of experts' output for x, as
// llama.cpp's build_moe_ffn computes it for nomic-bert-moe: the router's
// softmax over all experts, the ExpertsUsed most probable weighted by
// their probabilities (not renormalised), each a GELU feed-forward
// without biases, their weighted outputs summed best first.
func (m *Model) mixture(ms *moeScratch, ly *layer, dst, x backend.Tensor) {
	m.be.MatMul(ms.logits, ly.router, x)
	m.moe.MoERoute(ms.sel, ms.w, ms.logits, nil, backend.GateSoftmax)
	m.moe.MoEMatMul(ms.up, ly.upExps, nil, x, ms.sel)
	m.be.GLU(ms.up, ms.up, ms.ones, backend.GELUTanh)
	m.moe.MoEMatMul(ms.y, ly.downExps, nil, ms.up, ms.sel)
	m.moe.MoESum(dst, ms.y, ms.sel, ms.w, nil)
}

// Scores is a reranker's relevance scores for ids (a query and a
// document, as the caller joined them), as llama.cpp's rank pooling
// makes them: the first token's ([CLS]) final hidden state through the
// file's classification head, tanh(cls·h + cls_b), then cls_out times
// that plus cls_out_b, each where the file has it (jina-reranker-v1 has
// only a one-row cls); modern-bert's mean of every token's state through
// cls, GELU and its norm, then cls_out. Config.Classes scores, raw (no
// sigmoid). A model without a head refuses with ErrNoHead.
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
	if m.cfg.PreNorm {
		be.Write(x, meanRows(h, e))
	} else {
		be.Write(x, h[:e])
	}
	if m.cls != nil {
		y := be.NewTensor(1, m.clsRows)
		be.MatMul(y, m.cls, x)
		if m.clsB != nil {
			be.AddBias(y, m.clsB)
		}
		v := make([]float32, m.clsRows)
		if m.cfg.PreNorm {
			// modern-bert's head: GELU (ggml's), then its norm.
			ones := be.NewTensor(1, m.clsRows)
			fillOnes(be, ones)
			be.GLU(y, y, ones, backend.GELUTanh)
			be.Read(v, y)
			if m.clsNormW != nil {
				layerNorm(v, e, m.clsNormW, m.clsNormB, m.cfg.NormEps)
			}
		} else {
			be.Read(v, y)
			for i, t := range v {
				v[i] = float32(math.Tanh(float64(t)))
			}
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

// meanRows is the mean of the e-wide rows of h, summed in float64.
func meanRows(h []float32, e int) []float32 {
	n := len(h) / e
	sum := make([]float64, e)
	for i := range n {
		for j, v := range h[i*e : (i+1)*e] {
			sum[j] += float64(v)
		}
	}
	out := make([]float32, e)
	for j, s := range sum {
		out[j] = float32(s / float64(n))
	}
	return out
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
