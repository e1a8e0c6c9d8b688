package model

import (
	"fmt"

	"github.com/meshnode/meshnode/gguf/backend"
)

// LFM2 (llama.cpp's lfm2 graph: Liquid's LFM2 and LFM2.5 models) is a
// hybrid of gated short convolutions and grouped-query attention. Every
// block is pre-norm: an RMSNorm (attn_norm, "operator_norm"), then a
// convolution or attention, the residual add, and a SwiGLU FFN after
// ffn_norm. The attention blocks norm Q and K per head and rotate NeoX
// style; the file marks the convolution blocks by a KV head count of 0.
// A convolution block, per token t:
//
//	b, c, x = the three chunks of h·W_inᵀ (shortconv.in_proj)
//	y = c ⊙ Σ_k w_k ⊙ (b ⊙ x)[t−K+1+k]   (a causal depthwise conv of K taps)
//	out = y·W_outᵀ (shortconv.out_proj)
//
// The last K−1 products b ⊙ x are the block's recurrent state: kept per
// session as Qwen3.5's delta-net states are (hybrid.go), with the same
// checkpoints, so speculation's rewinds and failed steps restore them.
// The convolution is the backend's (backend.GatedConver: the CPU, CUDA and
// Metal have it), so a step reads nothing back for it; a backend without
// it is refused at load.

// convLayer is an LFM2 convolution block's weights.
type convLayer struct {
	in, out backend.Weight
	conv    backend.Weight // F32, Embd × ConvKernel, a channel's taps together
}

// parseLFM2 reads LFM2's layer pattern from its per-layer KV head counts
// (0 for a convolution block) and its convolution's taps
// (llama_model_lfm2::load_arch_hparams). The attention blocks' KV heads
// must be one count. A bidirectional file (LFM2.5's embedding models,
// whose convolution pads both sides) is refused.
func (c *Config) parseLFM2(m meta) error {
	if causal, ok := m.md.Bool(m.key("attention.causal")); ok && !causal {
		return unsupported("%s with %s = false (a bidirectional embedding model)", m.arch, m.key("attention.causal"))
	}
	key := m.key("attention.head_count_kv")
	var kv []uint32
	if a, ok := m.md.Uint32s(key); ok {
		kv = a
	} else if v, ok := m.md.Uint32(key); ok {
		return unsupported("%s = %d for every block: an %s model without convolution blocks", key, v, m.arch)
	} else {
		return invalid("%s is missing", key)
	}
	if len(kv) != c.Layers {
		return invalid("%s has %d counts for %d blocks", key, len(kv), c.Layers)
	}
	c.Recurrent = make([]bool, c.Layers)
	for l, n := range kv {
		switch {
		case n == 0:
			c.Recurrent[l] = true
		case c.KVHeads == 0:
			c.KVHeads = int(n)
		case int(n) != c.KVHeads:
			return unsupported("%s varies over the attention blocks (%d and %d)", key, c.KVHeads, n)
		}
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads // no attention block: any count passes the checks
	}
	var err error
	if c.ConvKernel, err = m.uint("shortconv.l_cache", 0, true); err != nil {
		return err
	}
	if c.ConvKernel < 2 || c.ConvKernel > backend.MaxConvKernel {
		return invalid("%s = %d", m.key("shortconv.l_cache"), c.ConvKernel)
	}
	return nil
}

// parseLFM2Window reads LFM2's optional sliding window, which every
// attention block then takes (is_swa_impl), rotating as the others do.
// lfm2moe's loader does not read the key, so its blocks attend globally
// whatever the file says, as llama.cpp's do.
func (c *Config) parseLFM2Window(m meta) error {
	var err error
	if c.spec.moe {
		return nil
	}
	if c.SlidingWindow, err = m.uint("attention.sliding_window", 0, false); err != nil {
		return err
	}
	for l := range c.SWA {
		c.SWA[l] = c.SlidingWindow > 0 && !c.Recurrent[l]
	}
	c.RoPEBaseSWA = c.RoPEBase
	return nil
}

// loadConvLayer loads LFM2 convolution block l: its norm, in- and
// out-projections and taps, then the FFN.
func (m *Model) loadConvLayer(ld *loader, l int) error {
	c := &m.cfg
	ly := &m.layers[l-m.lo]
	name := func(s string) string { return fmt.Sprintf("blk.%d.%s", l, s) }
	cv := &convLayer{}
	ly.conv = cv
	var err error
	mat := func(dst *backend.Weight, s string, rows, cols int) {
		if err == nil {
			*dst, err = ld.matrix(name(s), rows, cols, true)
		}
	}
	vec := func(dst *backend.Weight, s string) {
		if err == nil {
			*dst, err = ld.vector(name(s), c.Embd, true)
		}
	}
	vec(&ly.attnNorm, "attn_norm.weight")
	mat(&cv.in, "shortconv.in_proj.weight", 3*c.Embd, c.Embd)
	mat(&cv.out, "shortconv.out_proj.weight", c.Embd, c.Embd)
	if err == nil {
		// F32 in every file (llama-quantize leaves it), handed to the
		// backend as F32 whatever it is stored as.
		var taps []float32
		if taps, err = ld.hostFloats(name("shortconv.conv.weight"), c.ConvKernel, c.Embd); err == nil {
			cv.conv, err = m.hostMatrix(taps, c.Embd, c.ConvKernel)
		}
	}
	vec(&ly.ffnNorm, "ffn_norm.weight")
	if err != nil {
		return err
	}
	return m.loadLFM2FFN(ld, ly, l)
}

// gatedConv sets o's rows to the convolution block's output for the
// normed rows h, advancing each piece's session's state over its rows.
func (m *Model) gatedConv(hs *hybridScratch, cv *convLayer, l int, p *plan, o, h backend.Tensor) {
	n := h.Rows
	bcx, y := hs.bcx.Slice(0, n), hs.y.Slice(0, n)
	m.be.MatMul(bcx, cv.in, h)
	m.gc.GatedConv(y, bcx, cv.conv, hs.deltaSeqs(p, l))
	clear(hs.seqs) // holds no session or state past the step
	clear(hs.owner)
	m.be.MatMul(o, cv.out, y)
}

// parseLFM2MoE reads lfm2moe's experts (llama_model_lfm2moe): sigmoid
// gating (expert_gating_func 2, the only one its graph takes) with a
// selection bias per block, the weights renormalised, and the first
// leading_dense_block_count blocks dense. expert_weights_scale is not
// read, as llama.cpp's lfm2moe does not read it.
func (c *Config) parseLFM2MoE(m meta) error {
	gating, err := m.uint("expert_gating_func", 0, true)
	if err != nil {
		return err
	}
	if gating != 2 {
		return unsupported("%s = %d (lfm2moe routes by sigmoid, 2)", m.key("expert_gating_func"), gating)
	}
	c.ExpertSigmoid = true
	if c.DenseLead, err = m.uint("leading_dense_block_count", 0, false); err != nil {
		return err
	}
	if c.DenseLead > c.Layers {
		return invalid("%s = %d of %d blocks", m.key("leading_dense_block_count"), c.DenseLead, c.Layers)
	}
	return nil
}

// moeBlock reports whether block l's FFN is a mixture of experts.
func (c *Config) moeBlock(l int) bool { return c.spec.moe && l >= c.DenseLead }

// loadLFM2FFN loads block l's feed-forward after its norm (ffn_norm):
// dense, or lfm2moe's experts and their selection bias.
func (m *Model) loadLFM2FFN(ld *loader, ly *layer, l int) error {
	c := &m.cfg
	name := func(s string) string { return fmt.Sprintf("blk.%d.%s", l, s) }
	if !c.moeBlock(l) {
		var err error
		mat := func(dst *backend.Weight, s string, rows, cols int) {
			if err == nil {
				*dst, err = ld.matrix(name(s), rows, cols, true)
			}
		}
		mat(&ly.gate, "ffn_gate.weight", c.FF, c.Embd)
		mat(&ly.up, "ffn_up.weight", c.FF, c.Embd)
		mat(&ly.down, "ffn_down.weight", c.Embd, c.FF)
		return err
	}
	if err := m.loadExperts(ld, ly, name); err != nil {
		return err
	}
	var err error
	if ly.selBiasHost, err = ld.floats(name("exp_probs_b.bias"), c.Experts); err != nil {
		return err
	}
	if ly.selBiasHost == nil {
		return invalid("tensor %s is missing", name("exp_probs_b.bias"))
	}
	ly.selBias, err = m.hostMatrix(ly.selBiasHost, 1, c.Experts)
	return err
}
