package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// Gemma 4 (llama.cpp's src/models/gemma4.cpp) is gemma3's block with:
//
//   - SWA layers whose heads (and rotary dimensions) differ in size from
//     the full-attention layers' (attention.key_length_swa …);
//   - the last attention.shared_kv_layers blocks computing no keys or
//     values of their own: each attends over the cache of the last
//     earlier block of its kind (SWA or full), so the cache holds none
//     for them;
//   - V RMS-normalised without a weight, and taken from K's projection
//     when a block has no attn_v;
//   - rope_freqs applied on the full-attention layers only;
//   - per-layer token embeddings (E2B/E4B): a second embedding table of
//     Layers × embedding_length_per_layer_input per token, mixed with a
//     projection of the scaled input embeddings, gated into each block's
//     output;
//   - an optional per-block output scale (layer_output_scale);
//   - in the blocks that have a router (the 26B-A4B), a mixture of
//     experts beside the dense FFN (its shared expert): each has its own
//     input and output norms, the router scores its own norm of the
//     block's input, the experts are GeGLU with optional per-expert output
//     scales and gate and up possibly fused in one tensor, and the sum of
//     both goes through post_ffw_norm.

// parseGemma4 reads Gemma 4's own hyperparameters
// (llama_model_gemma4::load_arch_hparams and the SWA head sizes of
// llama_model::load_hparams).
func (c *Config) parseGemma4(m meta) error {
	var err error
	if c.SlidingWindow <= 0 {
		return invalid("%s is missing", m.key("attention.sliding_window"))
	}
	if _, ok := m.md.Lookup(m.key("attention.sliding_window_pattern")); !ok {
		return invalid("%s is missing", m.key("attention.sliding_window_pattern"))
	}
	if _, ok := m.md.Lookup(m.key("expert_count")); ok {
		// The 26B-A4B: blocks with an ffn_gate_inp run the experts
		// beside the dense FFN.
		if err := c.parseMoE(m); err != nil {
			return err
		}
	}
	if c.HeadDimKSWA, err = m.uint("attention.key_length_swa", 0, true); err != nil {
		return err
	}
	if c.HeadDimVSWA, err = m.uint("attention.value_length_swa", 0, true); err != nil {
		return err
	}
	if c.RoPEDimsSWA, err = m.uint("rope.dimension_count_swa", c.RoPEDims, false); err != nil {
		return err
	}
	switch {
	case c.HeadDimK != c.HeadDimV || c.HeadDimKSWA != c.HeadDimVSWA:
		return invalid("gemma4 needs equal K and V head sizes (%d/%d, SWA %d/%d)", c.HeadDimK, c.HeadDimV, c.HeadDimKSWA, c.HeadDimVSWA)
	case c.HeadDimKSWA <= 0 || c.HeadDimKSWA > maxDim:
		return invalid("SWA head size %d", c.HeadDimKSWA)
	case c.RoPEDimsSWA <= 0 || c.RoPEDimsSWA > c.HeadDimKSWA || c.RoPEDimsSWA%2 != 0:
		return invalid("%d rotary dimensions for an SWA head of %d", c.RoPEDimsSWA, c.HeadDimKSWA)
	}
	shared, err := m.uint("attention.shared_kv_layers", 0, false)
	if err != nil {
		return err
	}
	c.KVLayers = c.Layers - shared
	if shared > 0 {
		// Shared blocks read block KVLayers-2 (SWA) or KVLayers-1 (full):
		// those must exist and be of the kind they stand for.
		if c.KVLayers < 2 || !c.SWA[c.KVLayers-2] || c.SWA[c.KVLayers-1] {
			return invalid("%s = %d of %d layers: the last two layers with KV must be an SWA and a full-attention one", m.key("attention.shared_kv_layers"), shared, c.Layers)
		}
	}
	if c.LayerKVHeads, err = m.layerUints("attention.head_count_kv", c.Layers); err != nil {
		return err
	}
	for l, n := range c.LayerKVHeads {
		if n <= 0 || c.Heads%n != 0 {
			return invalid("layer %d: %d KV heads for %d heads", l, n, c.Heads)
		}
	}
	if c.LayerFF, err = m.layerUints("feed_forward_length", c.Layers); err != nil {
		return err
	}
	for l, n := range c.LayerFF {
		if n <= 0 {
			return invalid("layer %d: feed_forward_length %d", l, n)
		}
	}
	if c.PerLayerEmbd, err = m.uint("embedding_length_per_layer_input", 0, true); err != nil {
		return err
	}
	if c.PerLayerEmbd > maxDim || c.PerLayerEmbd*c.Layers > maxDim {
		return invalid("%s = %d", m.key("embedding_length_per_layer_input"), c.PerLayerEmbd)
	}
	return nil
}

// layerUints reads a per-layer array of n counts, or nil when the key is
// a scalar or its values are all equal.
func (m meta) layerUints(k string, n int) ([]int, error) {
	a, ok := m.md.Uint32s(m.key(k))
	if !ok || len(a) == 0 || slices.Min(a) == slices.Max(a) {
		return nil, nil
	}
	if len(a) != n {
		return nil, invalid("%s has %d values for %d layers", m.key(k), len(a), n)
	}
	out := make([]int, n)
	for i, v := range a {
		out[i] = int(v)
	}
	return out, nil
}

// kvHeads is block l's KV head count.
func (c *Config) kvHeads(l int) int {
	if c.LayerKVHeads != nil {
		return c.LayerKVHeads[l]
	}
	return c.KVHeads
}

// ffn is block l's FFN width.
func (c *Config) ffn(l int) int {
	if c.LayerFF != nil {
		return c.LayerFF[l]
	}
	return c.FF
}

// isSWA reports whether block l slides (false for a Config built by hand,
// without SWA flags).
func (c *Config) isSWA(l int) bool { return l < len(c.SWA) && c.SWA[l] }

// headDims is block l's K and V head sizes.
func (c *Config) headDims(l int) (k, v int) {
	if c.isSWA(l) && c.HeadDimKSWA > 0 {
		return c.HeadDimKSWA, c.HeadDimVSWA
	}
	return c.HeadDimK, c.HeadDimV
}

// ropeDims is block l's rotated dimensions per head.
func (c *Config) ropeDims(l int) int {
	if c.isSWA(l) && c.RoPEDimsSWA > 0 {
		return c.RoPEDimsSWA
	}
	return c.RoPEDims
}

// KVSource is the block whose keys and values block l attends over: l
// itself, or for a Gemma 4 block that shares KV, the last block of its
// kind (SWA or full attention) that has its own (llama.cpp's layer_reuse).
func (c *Config) KVSource(l int) int {
	if c.KVLayers == 0 || l < c.KVLayers {
		return l // a Config not from ParseConfig has no sharing
	}
	if c.isSWA(l) {
		return c.KVLayers - 2
	}
	return c.KVLayers - 1
}

// LayerKVElems is the floats one position takes in block l's own KV
// cache: its keys and values, or 0 for a block that shares another's; a
// delta-net block (qwen35) has the one-head slot the loader gives it.
func (c *Config) LayerKVElems(l int) int {
	if c.KVSource(l) != l {
		return 0
	}
	k, v := c.headDims(l)
	if l < len(c.Recurrent) && c.Recurrent[l] {
		return k + v
	}
	return c.kvHeads(l) * (k + v)
}

// maxHeadDims is the widest K and V heads of any block.
func (c *Config) maxHeadDims() (k, v int) {
	return max(c.HeadDimK, c.HeadDimKSWA), max(c.HeadDimV, c.HeadDimVSWA)
}

// CheckStage reports whether LoadStage can load the blocks r as a stage
// (so a planner can pick split points): an error wrapping ErrUnsupported
// for a Gemma 4 stage holding a block whose KV is in another stage's
// block (attention.shared_kv_layers), or for any proper stage of a model
// with per-layer embeddings, whose blocks all need the token ids and input
// embeddings only the first stage has. Every other range of the model's
// blocks is fine.
func (c *Config) CheckStage(r LayerRange) error {
	if r.Lo < 0 || r.Hi <= r.Lo || r.Hi > c.Layers {
		return fmt.Errorf("%w: layers %v of a %d-layer model", ErrRange, r, c.Layers)
	}
	for l := r.Lo; l < r.Hi; l++ {
		if src := c.KVSource(l); src < r.Lo {
			return fmt.Errorf("%w: layers %v: layer %d attends over layer %d's KV cache (attention.shared_kv_layers), which is in another stage; split at %d or before",
				ErrUnsupported, r, l, src, src)
		}
	}
	if c.Recurrent != nil && (r.Lo > 0 || r.Hi < c.Layers) {
		return fmt.Errorf("%w: layers %v: splitting %s into stages (its recurrent state cannot be rewound)", ErrUnsupported, r, c.Arch)
	}
	if c.PerLayerEmbd > 0 && (r.Lo > 0 || r.Hi < c.Layers) {
		return fmt.Errorf("%w: layers %v: gemma4's per-layer token embeddings feed every layer from the token ids, so the model cannot be split into stages", ErrUnsupported, r)
	}
	return nil
}

// perLayer is Gemma 4's per-layer embedding weights (model-wide).
type perLayer struct {
	// table is per_layer_token_embd viewed as vocab·Layers rows of
	// PerLayerEmbd: row id·Layers+l is token id's input to block l.
	table backend.Weight
	// proj[l] is block l's rows of per_layer_model_proj (PerLayerEmbd ×
	// Embd), a view, so each block's input is its own product.
	proj []backend.Weight
	norm backend.Weight // per_layer_proj_norm
}

// loadPerLayer loads the model-wide per-layer embedding tensors.
func (m *Model) loadPerLayer(ld *loader) error {
	c := &m.cfg
	n, L := c.PerLayerEmbd, c.Layers
	t, b, _, err := ld.lookup("per_layer_token_embd.weight", true, n*L, c.VocabSize)
	if err != nil {
		return err
	}
	if t.Type.BlockSize() > 1 && n%t.Type.BlockSize() != 0 {
		return unsupported("per_layer_token_embd.weight of type %s with %d-wide layer slices (not whole blocks)", t.Type, n)
	}
	pl := &perLayer{}
	if pl.table, err = ld.weight(t.Name, t.Type, c.VocabSize*L, n, b); err != nil {
		return err
	}
	parts := make([]int, L)
	for l := range parts {
		parts[l] = n
	}
	if pl.proj, err = ld.rowSplit("per_layer_model_proj.weight", c.Embd, parts...); err != nil {
		return err
	}
	if pl.norm, err = ld.vector("per_layer_proj_norm.weight", n, true); err != nil {
		return err
	}
	m.perLayer = pl
	return nil
}

// loadGemma4Layer loads block l's Gemma 4 tensors: the per-layer
// embedding gate, projection and norm, the output scale, and V's
// weightless norm (a vector of ones).
func (m *Model) loadGemma4Layer(ld *loader, ly *layer, l int) error {
	c := &m.cfg
	name := func(s string) string { return fmt.Sprintf("blk.%d.%s", l, s) }
	var err error
	if c.PerLayerEmbd > 0 {
		if ly.pleGate, err = ld.matrix(name("inp_gate.weight"), c.PerLayerEmbd, c.Embd, true); err != nil {
			return err
		}
		if ly.pleProj, err = ld.matrix(name("proj.weight"), c.Embd, c.PerLayerEmbd, true); err != nil {
			return err
		}
		if ly.pleNorm, err = ld.vector(name("post_norm.weight"), c.Embd, true); err != nil {
			return err
		}
	}
	s, err := ld.floats(name("layer_output_scale.weight"), 1)
	if err != nil {
		return err
	}
	if s != nil {
		if math.IsNaN(float64(s[0])) || math.IsInf(float64(s[0]), 0) {
			return invalid("%s is %v", name("layer_output_scale.weight"), s[0])
		}
		ly.outScale = s[0]
	}
	_, hdV := c.headDims(l)
	ones := make([]float32, hdV)
	for i := range ones {
		ones[i] = 1
	}
	if ly.vNorm, err = m.hostVector(ones); err != nil {
		return fmt.Errorf("model: V norm: %w", err)
	}
	if _, ok := ld.f.Tensor(name("ffn_gate_inp.weight")); ok {
		return m.loadGemma4MoE(ld, ly, l)
	}
	return nil
}

// hostVector hands the backend a vector computed here, not the file's: it
// is not counted in the model's weight bytes but in MadeBytes.
func (m *Model) hostVector(v []float32) (backend.Weight, error) {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	m.madeBytes += int64(len(b))
	return m.be.Weight(quant.F32, 1, len(v), b)
}

// MadeBytes is the size of the weights the model computed rather than
// read from the file (gemma4's V norm vectors of ones): a backend that
// reads file weights in place (Metal's mapped files) copies these.
func (m *Model) MadeBytes() int64 { return m.madeBytes }

// loadGemma4MoE loads block l's routed experts and their norms.
func (m *Model) loadGemma4MoE(ld *loader, ly *layer, l int) error {
	c := &m.cfg
	name := func(s string) string { return fmt.Sprintf("blk.%d.%s", l, s) }
	if c.Experts == 0 {
		return invalid("%s without %s.expert_count", name("ffn_gate_inp.weight"), c.Arch)
	}
	var err error
	for _, v := range []struct {
		dst *backend.Weight
		s   string
	}{{&ly.preFFN2, "pre_ffw_norm_2.weight"}, {&ly.postFFN1, "post_ffw_norm_1.weight"}, {&ly.postFFN2, "post_ffw_norm_2.weight"}} {
		if *v.dst, err = ld.vector(name(v.s), c.Embd, true); err != nil {
			return err
		}
	}
	if ly.router, err = ld.matrix(name("ffn_gate_inp.weight"), c.Experts, c.Embd, true); err != nil {
		return err
	}
	// The router scores rms_norm(x) ⊙ scale / √Embd.
	if ly.routerNorm, err = ld.vector(name("ffn_gate_inp.scale"), c.Embd, true); err != nil {
		return err
	}
	if _, fused := ld.f.Tensor(name("ffn_gate_up_exps.weight")); fused {
		// Each expert's matrix is its gate rows then its up rows: views
		// of both halves, as ld.experts views whole experts.
		t, b, _, err := ld.lookup(name("ffn_gate_up_exps.weight"), true, c.Embd, 2*c.ExpertFF, c.Experts)
		if err != nil {
			return err
		}
		rs, err := t.Type.RowSize(c.Embd)
		if err != nil {
			return invalid("tensor %s: %v", t.Name, err)
		}
		half := c.ExpertFF * rs
		for x := range c.Experts {
			eb := b[2*x*half : 2*(x+1)*half]
			g, err := ld.weight(t.Name, t.Type, c.ExpertFF, c.Embd, eb[:half])
			if err != nil {
				return err
			}
			u, err := ld.weight(t.Name, t.Type, c.ExpertFF, c.Embd, eb[half:])
			if err != nil {
				return err
			}
			ly.gateExps, ly.upExps = append(ly.gateExps, g), append(ly.upExps, u)
		}
	} else {
		if ly.gateExps, err = ld.experts(name("ffn_gate_exps.weight"), c.Experts, c.ExpertFF, c.Embd); err != nil {
			return err
		}
		if ly.upExps, err = ld.experts(name("ffn_up_exps.weight"), c.Experts, c.ExpertFF, c.Embd); err != nil {
			return err
		}
	}
	if ly.downExps, err = ld.experts(name("ffn_down_exps.weight"), c.Experts, c.Embd, c.ExpertFF); err != nil {
		return err
	}
	if ly.downScale, err = ld.floats(name("ffn_down_exps.scale"), c.Experts); err != nil {
		return err
	}
	return nil
}

// gemma4MoE adds a Gemma 4 MoE block's FFN to x, whose ffn_norm'd rows
// are h: post_ffw_norm(post_ffw_norm_1(dense(h)) +
// post_ffw_norm_2(experts(pre_ffw_norm_2(x)))), the experts routed by
// their router's own norm of x.
func (m *Model) gemma4MoE(sc *scratch, ly *layer, x, h backend.Tensor) {
	be, eps := m.be, m.cfg.NormEps
	rows, ff := x.Rows, ly.gate.Rows()
	o := sc.o.Slice(0, rows)
	gate, up := view(sc.gate, rows, ff), view(sc.up, rows, ff)
	m.projectAll(sc, h, proj{gate, ly.gate, nil}, proj{up, ly.up, nil})
	be.GLU(gate, gate, up, backend.GELUTanh)
	be.MatMul(o, ly.down, gate)
	be.RMSNorm(o, o, ly.postFFN1, eps)

	be.RMSNorm(h, x, ly.routerNorm, eps) // h is free: the router's input
	be.Scale(h, 1/float32(math.Sqrt(float64(m.cfg.Embd))))
	in, out := sc.moeIn.Slice(0, rows), sc.moeOut.Slice(0, rows)
	be.RMSNorm(in, x, ly.preFFN2, eps)
	m.moeFFN(sc.moe, ly, out, in, h)
	be.RMSNorm(out, out, ly.postFFN2, eps)

	be.Add(o, out)
	be.RMSNorm(o, o, ly.postFFNNorm, eps)
	be.Add(x, o)
}

// perLayerInputs computes every block's per-layer input for the step's n
// rows from the scaled input embeddings x (llama.cpp's
// project_per_layer_inputs): block l's rows are sc.ple's rows
// [l·sc.rows, l·sc.rows+n).
func (m *Model) perLayerInputs(sc *scratch, x backend.Tensor, ids []uint32) {
	be, c, pl := m.be, &m.cfg, m.perLayer
	n := len(ids)
	tmp := sc.pleTmp.Slice(0, n)
	sc.pleIDs = sc.pleIDs[:0]
	for range ids {
		sc.pleIDs = append(sc.pleIDs, 0)
	}
	for l := range c.Layers {
		dst := sc.ple.Slice(l*sc.rows, l*sc.rows+n)
		be.MatMul(dst, pl.proj[l], x)
		be.Scale(dst, 1/float32(math.Sqrt(float64(c.Embd))))
		be.RMSNorm(dst, dst, pl.norm, c.NormEps)
		for i, id := range ids {
			sc.pleIDs[i] = id*uint32(c.Layers) + uint32(l)
		}
		be.Embed(tmp, pl.table, sc.pleIDs)
		be.Scale(tmp, float32(math.Sqrt(float64(c.PerLayerEmbd))))
		be.Add(dst, tmp)
		be.Scale(dst, 1/float32(math.Sqrt(2)))
	}
}

// perLayerBlock adds block l's per-layer embedding to x's rows, whose
// per-layer inputs are inp: x += norm(proj(gelu(gate·x) ⊙ inp)).
func (m *Model) perLayerBlock(sc *scratch, ly *layer, x, inp backend.Tensor) {
	be := m.be
	rows := x.Rows
	g := sc.pleTmp.Slice(0, rows)
	be.MatMul(g, ly.pleGate, x)
	be.GLU(g, g, inp, backend.GELUTanh)
	o := sc.o.Slice(0, rows)
	be.MatMul(o, ly.pleProj, g)
	be.RMSNorm(o, o, ly.pleNorm, m.cfg.NormEps)
	be.Add(x, o)
}

// view is t's memory as a rows × cols tensor: a scratch sized for the
// widest block, shaped for this one's heads.
func view(t backend.Tensor, rows, cols int) backend.Tensor {
	if rows*cols > t.Len() {
		panic("model: view larger than its scratch")
	}
	return backend.Tensor{Buf: t.Buf, Off: t.Off, Rows: rows, Cols: cols}
}
