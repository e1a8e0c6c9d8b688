package model

import (
	"encoding/binary"
	"fmt"
	"math"

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
//   - an optional per-block output scale (layer_output_scale).
//
// The mixture-of-experts FFN of the 26B-A4B (a shared expert beside a
// routed one, each with its own norms) is not run yet: such a file is
// refused by name.

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
		return unsupported("gemma4 mixture-of-experts FFN (%s): the 26B-A4B's shared and routed experts are not implemented", m.key("expert_count"))
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
	if c.PerLayerEmbd, err = m.uint("embedding_length_per_layer_input", 0, true); err != nil {
		return err
	}
	if c.PerLayerEmbd > maxDim || c.PerLayerEmbd*c.Layers > maxDim {
		return invalid("%s = %d", m.key("embedding_length_per_layer_input"), c.PerLayerEmbd)
	}
	return nil
}

// headDims is block l's K and V head sizes.
func (c *Config) headDims(l int) (k, v int) {
	if c.SWA[l] {
		return c.HeadDimKSWA, c.HeadDimVSWA
	}
	return c.HeadDimK, c.HeadDimV
}

// ropeDims is block l's rotated dimensions per head.
func (c *Config) ropeDims(l int) int {
	if c.SWA[l] {
		return c.RoPEDimsSWA
	}
	return c.RoPEDims
}

// KVSource is the block whose keys and values block l attends over: l
// itself, or for a Gemma 4 block that shares KV, the last block of its
// kind (SWA or full attention) that has its own (llama.cpp's layer_reuse).
func (c *Config) KVSource(l int) int {
	if l < c.KVLayers {
		return l
	}
	if c.SWA[l] {
		return c.KVLayers - 2
	}
	return c.KVLayers - 1
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
	ones := make([]byte, 4*hdV)
	for i := range hdV {
		binary.LittleEndian.PutUint32(ones[4*i:], math.Float32bits(1))
	}
	// A weight the backend holds, not the file's: it is not counted in
	// the model's weight bytes.
	if ly.vNorm, err = m.be.Weight(quant.F32, 1, hdV, ones); err != nil {
		return fmt.Errorf("model: V norm: %w", err)
	}
	return nil
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
