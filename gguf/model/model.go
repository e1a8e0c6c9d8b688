package model

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/greedyhead"
	"github.com/meshnode/meshnode/gguf/quant"
)

// Model is a loaded model: its configuration and its weights on a
// backend. It holds no per-sequence state, so any number of Sessions may
// run on one Model at once. The weights refer to the File's mapping; the
// File must stay open until the Model is no longer used.
type Model struct {
	cfg Config
	be  backend.Backend

	embd    backend.Weight // token_embd, vocab × embd
	outNorm backend.Weight
	out     backend.Weight   // output, or token_embd when tied
	outBias backend.Weight   // optional
	greedy  *greedyhead.Head // out's int8 shadow, for greedy tokens (greedy.go); nil for none
	// The head BuildShadow may shadow (shadowable), until it has.
	headType quant.Type
	headData []byte
	// layers are blocks lo … lo+len(layers)-1 of the model's cfg.Layers:
	// all of them, or a stage's range (LoadStage). Only the first stage
	// has embd, only the last outNorm, out and outBias.
	lo     int
	layers []layer
	// weightBytes is the size of the file's tensor data the model handed
	// its backend; madeBytes that of weights it computed (MadeBytes).
	weightBytes, madeBytes int64

	// LongRoPE's two factor sets (phi3); nil elsewhere.
	ropeLong, ropeShort []float32
	// rope_freqs (llama 3), used by every layer; nil if absent.
	ropeFreqs []float32

	// kvIdx[l] is the cache layer block lo+l stores to and attends over:
	// blocks that share another's KV (gemma4) have none of their own.
	kvIdx   []int
	kvShape []backend.KVShape
	// perLayer is Gemma 4's per-layer token embeddings; nil elsewhere.
	perLayer *perLayer
	// dn runs a hybrid's delta nets on the backend, when it can
	// (hybrid.go); nil: on the host.
	dn backend.DeltaNetter
	// gc runs LFM2's gated convolutions (shortconv.go); nil for other
	// architectures.
	gc backend.GatedConver
	// xp runs a mixture of experts' routing, products and sum on the
	// backend, when it can (moe.go); nil: routed on the host.
	xp backend.MoE
	// jm multiplies one input by several weights at once (a block's
	// query, key and value; its gate and up), when the backend can; nil:
	// one MatMul each.
	jm backend.Joint
}

// layer is one block's weights. Optional weights are nil.
type layer struct {
	attnNorm, qNorm, kNorm, postAttnNorm backend.Weight
	wq, wk, wv, wo                       backend.Weight
	bq, bk, bv, bo                       backend.Weight
	ffnNorm, postFFNNorm                 backend.Weight
	gate, up, down                       backend.Weight
	bgate, bup, bdown                    backend.Weight
	attn                                 backend.Attention
	// A mixture-of-experts FFN (gate, up and down nil): the router
	// (Experts × Embd) and each expert's matrices, views of the rows of
	// the file's 3-D ffn_*_exps tensors, so a token reads only the
	// experts it is routed to.
	router                     backend.Weight
	gateExps, upExps, downExps []backend.Weight
	// Qwen3.5 (hybrid.go): a delta-net block has delta and no attention
	// weights; a gated attention block has qGate, its joint query and
	// gate projection, for wq; shared is qwen35moe's shared expert.
	// With the backend's hybrid kernels (Model.dn) the joint projection
	// is split at load into wq and attnGate, its gate rows.
	delta    *deltaLayer
	qGate    backend.Weight
	attnGate backend.Weight
	shared   *sharedExpert
	// LFM2 (shortconv.go): a convolution block has conv and no attention
	// weights.
	conv *convLayer
	// Gemma 4: V's weightless norm (ones), the per-layer embedding's
	// gate, projection and norm, and the output scale (0: none).
	vNorm, pleGate, pleProj, pleNorm backend.Weight
	outScale                         float32
	// Gemma 4's MoE blocks: the routed experts' input norm, the shared
	// and routed outputs' norms, the router's input norm
	// (ffn_gate_inp.scale) and the optional per-expert output scales.
	preFFN2, postFFN1, postFFN2, routerNorm backend.Weight
	downScale                               []float32
	// gpt-oss's biases of the router and of each expert (nil elsewhere).
	routerBias backend.Weight
	// lfm2moe's selection bias (ffn_exp_probs_b: added to the router's
	// sigmoids to choose by, not to weight by), for the backend and for
	// the host's routing.
	selBias                       backend.Weight
	selBiasHost                   []float32
	gateExpsB, upExpsB, downExpsB []backend.Weight
}

// Config returns the model's hyperparameters.
func (m *Model) Config() Config { return m.cfg }

// Backend returns the backend the model runs on.
func (m *Model) Backend() backend.Backend { return m.be }

// Load reads the model in f onto be. Every tensor of the file must be one
// the architecture uses: an unknown one is an error naming it, rather than
// a forward pass that silently ignores part of the model.
func Load(f *gguf.File, be backend.Backend) (*Model, error) {
	return load(f, be, nil)
}

// LayerRange is the blocks [Lo, Hi) of a model a stage runs.
type LayerRange struct{ Lo, Hi int }

// String is "lo-hi", the half-open range.
func (r LayerRange) String() string { return fmt.Sprintf("%d-%d", r.Lo, r.Hi) }

// LoadStage reads the blocks r of the model in f onto be: one stage of a
// model split across several backends or nodes, each running a
// contiguous range of its layers. The first stage (Lo 0) also holds the
// token embeddings, the last (Hi the model's block count) the output norm
// and head (the embeddings again when they are tied); every other tensor
// is left alone, so its bytes are neither read from the file's mapping
// nor given to the backend. A tensor that no stage would use is refused
// as Load refuses it, when the stage would have loaded it. A last stage's
// output head gets its int8 shadow only from BuildShadow, for a caller
// whose memory budget holds it (ShadowBytes).
func LoadStage(f *gguf.File, be backend.Backend, r LayerRange) (*Model, error) {
	return load(f, be, &r)
}

func load(f *gguf.File, be backend.Backend, stage *LayerRange) (*Model, error) {
	cfg, err := ParseConfig(f.Metadata)
	if err != nil {
		return nil, err
	}
	if cfg.spec.gptoss {
		// Attention sinks and the clamped SwiGLU are kernels a backend
		// may lack: refuse here rather than compute without them.
		for _, need := range []struct {
			f    backend.Feature
			what string
		}{{backend.AttentionSinks, "attention sinks"}, {backend.GLUSwiOAI, "gpt-oss's clamped SwiGLU"}} {
			if !backend.Supports(be, need.f) {
				return nil, unsupported("%s needs %s, which the %s backend does not have", cfg.Arch, need.what, be.Name())
			}
		}
	}
	ld := &loader{f: f, be: be, used: map[string]bool{}}
	m := &Model{cfg: cfg, be: be}
	m.dn = deltaNetter(&cfg, be)
	if cfg.spec.lfm2 {
		gc, ok := be.(backend.GatedConver)
		if !ok {
			return nil, unsupported("%s needs the gated short convolution (backend.GatedConver), which the %s backend does not have", cfg.Arch, be.Name())
		}
		m.gc = gc
	}
	if xp, ok := be.(backend.MoE); ok && cfg.Experts > 0 {
		m.xp = xp
	}
	m.jm, _ = be.(backend.Joint)
	r := LayerRange{0, cfg.Layers}
	if stage != nil {
		r = *stage
		if r.Lo < 0 || r.Hi <= r.Lo || r.Hi > cfg.Layers {
			return nil, fmt.Errorf("%w: layers %v of a %d-layer model", ErrRange, r, cfg.Layers)
		}
	}
	if stage != nil && cfg.Recurrent != nil {
		// A stage after the first could not rewind its recurrent state:
		// it never sees the token ids it would evaluate again.
		return nil, unsupported("splitting %s into stages (its recurrent state cannot be rewound)", cfg.Arch)
	}
	// Every block has tensors of its own: a block count past the file's
	// tensors is a corrupt or hostile header, refused before the blocks
	// are allocated (4M claimed blocks were 3 GB of them).
	if n := r.Hi - r.Lo; n > len(f.Tensors) {
		return nil, invalid("%s.block_count = %d, and the file holds %d tensors", cfg.Arch, cfg.Layers, len(f.Tensors))
	}
	m.lo = r.Lo
	first, last := r.Lo == 0, r.Hi == cfg.Layers
	if err := cfg.CheckStage(r); err != nil {
		return nil, err
	}

	// The vocabulary is the embedding table's height; a tokenizer, if
	// the file has one, must agree.
	if t, ok := f.Tensor("token_embd.weight"); ok && len(t.Dims) == 2 {
		rows := int(t.Dims[1])
		if cfg.VocabSize != 0 && cfg.VocabSize != rows {
			return nil, invalid("token_embd.weight has %d rows for a vocabulary of %d", rows, cfg.VocabSize)
		}
		m.cfg.VocabSize = rows
	}
	c := &m.cfg
	if c.VocabSize <= 0 || c.VocabSize > maxDim {
		return nil, invalid("vocabulary of %d", c.VocabSize)
	}
	var embd backend.Weight
	if _, hasOut := f.Tensor("output.weight"); first || last && !hasOut {
		if embd, err = ld.matrix("token_embd.weight", c.VocabSize, c.Embd, true); err != nil {
			return nil, err
		}
	}
	if first {
		m.embd = embd
	}
	if last {
		outNorm := "output_norm.weight"
		if c.spec.lfm2 {
			outNorm = "token_embd_norm.weight" // as llama.cpp names LFM2's
		}
		if m.outNorm, err = ld.vector(outNorm, c.Embd, true); err != nil {
			return nil, err
		}
		if m.out, err = ld.matrix("output.weight", c.VocabSize, c.Embd, false); err != nil {
			return nil, err
		}
		head := "output.weight"
		if m.out == nil {
			m.out, head = embd, "token_embd.weight" // tied embeddings
		}
		if m.outBias, err = ld.vector("output.bias", c.VocabSize, false); err != nil {
			return nil, err
		}
		if t, b, ok, err := ld.lookup(head, false, c.Embd, c.VocabSize); ok && err == nil {
			m.shadowable(t.Type, b)
		}
	}
	if c.spec.gemma4 {
		// Gemma 4's rope_freqs cover the full-attention head (n_embd_head/2).
		if m.ropeFreqs, err = ld.floats("rope_freqs.weight", c.HeadDimK/2); err != nil {
			return nil, err
		}
		if m.ropeFreqs != nil {
			m.ropeFreqs = m.ropeFreqs[:c.RoPEDims/2]
		}
		if first && c.PerLayerEmbd > 0 {
			if err := m.loadPerLayer(ld); err != nil {
				return nil, err
			}
		}
	} else if m.ropeFreqs, err = ld.floats("rope_freqs.weight", c.RoPEDims/2); err != nil {
		return nil, err
	}
	if m.ropeLong, err = ld.floats("rope_factors_long.weight", c.RoPEDims/2); err != nil {
		return nil, err
	}
	if m.ropeShort, err = ld.floats("rope_factors_short.weight", c.RoPEDims/2); err != nil {
		return nil, err
	}

	m.layers = make([]layer, r.Hi-r.Lo)
	for l := r.Lo; l < r.Hi; l++ {
		if err := m.loadLayer(ld, l); err != nil {
			return nil, err
		}
	}
	m.weightBytes = ld.bytes
	for l := r.Lo; l < r.Hi; l++ {
		if src := c.KVSource(l); src != l {
			m.kvIdx = append(m.kvIdx, m.kvIdx[src-r.Lo])
			continue
		}
		hdK, hdV := c.headDims(l)
		kvh := c.kvHeads(l)
		if ly := &m.layers[l-r.Lo]; ly.delta != nil || ly.conv != nil {
			// A recurrent block (qwen35, lfm2) keeps no keys or values; it gets
			// a one-head slot, the least a backend's cache takes, which it
			// never writes.
			kvh = 1
		}
		m.kvIdx = append(m.kvIdx, len(m.kvShape))
		m.kvShape = append(m.kvShape, backend.KVShape{KVHeads: kvh, HeadDimK: hdK, HeadDimV: hdV})
	}
	for _, t := range f.Tensors {
		if !ld.used[t.Name] && !otherStage(t.Name, r, c.Layers) && !c.mtpTensor(t.Name) && !rerankHead(t.Name, c.Arch) {
			return nil, unsupported("tensor %s (%s %v) is not part of a %s model this engine runs", t.Name, t.Type, t.Dims, c.Arch)
		}
	}
	if stage == nil {
		m.BuildShadow()
	}
	return m, nil
}

// otherStage reports whether a tensor a stage over r left alone is one
// that another stage of the model loads (and checks): a block outside r,
// or the embeddings or output head.
func otherStage(name string, r LayerRange, layers int) bool {
	switch name {
	case "token_embd.weight":
		return r.Lo > 0
	case "output_norm.weight", "output.weight", "output.bias":
		return r.Hi < layers
	}
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return false
	}
	num, _, ok := strings.Cut(rest, ".")
	l, err := strconv.Atoi(num)
	return ok && err == nil && strconv.Itoa(l) == num && l < layers && (l < r.Lo || l >= r.Hi)
}

// Range is the blocks the model runs: all of them, or a stage's.
func (m *Model) Range() LayerRange { return LayerRange{m.lo, m.lo + len(m.layers)} }

// First reports whether the model starts from token ids: a whole model,
// or the first stage of one.
func (m *Model) First() bool { return m.lo == 0 }

// Last reports whether the model computes logits: a whole model, or the
// last stage of one.
func (m *Model) Last() bool { return m.lo+len(m.layers) == m.cfg.Layers }

// WeightBytes is the size of the weights the model runs: the tensor data
// of its blocks, and of the embeddings and head when it has them.
func (m *Model) WeightBytes() int64 { return m.weightBytes }

// ShadowBytes is the memory the output head's int8 shadow takes beside
// the weights (greedy.go), or will take once BuildShadow builds it; 0
// where the model has none and will have none. At most maxShadow bytes
// and their scales, part of what the model holds though no file holds
// it.
func (m *Model) ShadowBytes() int64 {
	switch {
	case m.greedy != nil:
		return m.greedy.Bytes()
	case m.headData != nil:
		return greedyhead.Size(m.cfg.VocabSize, m.cfg.Embd)
	}
	return 0
}

// KVBytes is the size of one session's KV cache of ctx positions of type
// kv over the model's blocks.
func (m *Model) KVBytes(ctx int, kv KVType) int64 {
	var n int64
	for _, s := range m.kvShape {
		n += int64(ctx) * int64(s.KVHeads) * int64(s.HeadDimK+s.HeadDimV) * int64(kv.quant().TypeSize())
	}
	return n
}

// Whole reports whether the model runs every block, from token ids to
// logits.
func (m *Model) Whole() bool { return m.First() && m.Last() }

func (m *Model) loadLayer(ld *loader, l int) error {
	c := &m.cfg
	if c.spec.hybrid {
		return m.loadHybridLayer(ld, l)
	}
	if c.spec.lfm2 && c.Recurrent[l] {
		return m.loadConvLayer(ld, l)
	}
	ly := &m.layers[l-m.lo]
	name := func(s string) string { return fmt.Sprintf("blk.%d.%s", l, s) }
	hdK, hdV := c.headDims(l)
	kvh, ff := c.kvHeads(l), c.ffn(l)
	qDim, kDim, vDim := c.Heads*hdK, kvh*hdK, kvh*hdV
	ly.attn = backend.Attention{
		Heads: c.Heads, KVHeads: kvh, HeadDimK: hdK, HeadDimV: hdV,
		Scale: c.AttnScale, Softcap: c.AttnSoftcap,
	}
	// A block that shares another's KV (gemma4) may omit K and V; Gemma 4
	// may omit V anywhere (V is then K's projection).
	hasKV := c.KVSource(l) == l
	needV := hasKV && !c.spec.gemma4
	if c.spec.scaleQ {
		ly.attn.Scale = 1
	}
	if c.SWA[l] {
		ly.attn.Window = c.SlidingWindow
	}

	var err error
	vec := func(dst *backend.Weight, s string, n int, required bool) {
		if err == nil {
			*dst, err = ld.vector(name(s), n, required)
		}
	}
	mat := func(dst *backend.Weight, s string, rows, cols int, required bool) {
		if err == nil {
			*dst, err = ld.matrix(name(s), rows, cols, required)
		}
	}
	if !c.spec.noPreNorm {
		vec(&ly.attnNorm, "attn_norm.weight", c.Embd, true)
	}

	// Q, K and V: one fused matrix or three (create_tensor_qkv).
	if _, fused := ld.f.Tensor(name("attn_qkv.weight")); fused && err == nil {
		var parts []backend.Weight
		if parts, err = ld.rowSplit(name("attn_qkv.weight"), c.Embd, qDim, kDim, vDim); err == nil {
			ly.wq, ly.wk, ly.wv = parts[0], parts[1], parts[2]
		}
		if _, ok := ld.f.Tensor(name("attn_qkv.bias")); ok && err == nil {
			if parts, err = ld.rowSplit(name("attn_qkv.bias"), 0, qDim, kDim, vDim); err == nil {
				ly.bq, ly.bk, ly.bv = parts[0], parts[1], parts[2]
			}
		}
	} else {
		mat(&ly.wq, "attn_q.weight", qDim, c.Embd, true)
		mat(&ly.wk, "attn_k.weight", kDim, c.Embd, hasKV)
		mat(&ly.wv, "attn_v.weight", vDim, c.Embd, needV)
		vec(&ly.bq, "attn_q.bias", qDim, false)
		vec(&ly.bk, "attn_k.bias", kDim, false)
		vec(&ly.bv, "attn_v.bias", vDim, false)
	}
	mat(&ly.wo, "attn_output.weight", c.Embd, c.Heads*hdV, true)
	if c.spec.ernie {
		// Read and checked, as llama.cpp loads it, and applied nowhere.
		var unused backend.Weight
		vec(&unused, "attn_output.bias", c.Embd, false)
	} else {
		vec(&ly.bo, "attn_output.bias", c.Embd, false)
	}
	if c.spec.fullQKNorm {
		// olmo2 norms the whole projection: one group of qDim (kDim).
		vec(&ly.qNorm, "attn_q_norm.weight", qDim, true)
		vec(&ly.kNorm, "attn_k_norm.weight", kDim, hasKV)
	} else if c.spec.qkNorm {
		vec(&ly.qNorm, "attn_q_norm.weight", hdK, true)
		vec(&ly.kNorm, "attn_k_norm.weight", hdK, hasKV)
	}
	if c.spec.postNorms {
		vec(&ly.postAttnNorm, "post_attention_norm.weight", c.Embd, true)
		vec(&ly.postFFNNorm, "post_ffw_norm.weight", c.Embd, true)
	}

	if c.spec.gptoss {
		if err == nil {
			ly.attn.Sinks, err = ld.floats(name("attn_sinks.weight"), c.Heads)
			if err == nil && ly.attn.Sinks == nil {
				err = invalid("tensor %s is missing", name("attn_sinks.weight"))
			}
		}
		// gpt-oss calls its FFN norm the post-attention norm.
		vec(&ly.ffnNorm, "post_attention_norm.weight", c.Embd, true)
	} else if !c.spec.noPreNorm {
		vec(&ly.ffnNorm, "ffn_norm.weight", c.Embd, true)
	}
	if c.spec.gemma4 && err == nil {
		if err = m.loadGemma4Layer(ld, ly, l); err != nil {
			return err
		}
		if hasKV && ly.wv == nil {
			ly.wv = ly.wk
		}
	}
	if c.spec.lfm2 {
		if err != nil {
			return err
		}
		return m.loadLFM2FFN(ld, ly, l)
	}
	if c.spec.moe {
		if err != nil {
			return err
		}
		if err := m.loadExperts(ld, ly, name); err != nil {
			return err
		}
		if c.spec.gptoss {
			return m.loadExpertBiases(ld, ly, name)
		}
		return nil
	}
	if c.spec.fusedGateUp {
		// phi3: ffn_up is gate then up, and swiglu takes the halves in
		// that order.
		var parts []backend.Weight
		if err == nil {
			if parts, err = ld.rowSplit(name("ffn_up.weight"), c.Embd, c.FF, c.FF); err == nil {
				ly.gate, ly.up = parts[0], parts[1]
			}
		}
	} else {
		mat(&ly.gate, "ffn_gate.weight", ff, c.Embd, true)
		mat(&ly.up, "ffn_up.weight", ff, c.Embd, true)
		vec(&ly.bgate, "ffn_gate.bias", ff, false)
		vec(&ly.bup, "ffn_up.bias", ff, false)
	}
	mat(&ly.down, "ffn_down.weight", c.Embd, ff, true)
	vec(&ly.bdown, "ffn_down.bias", c.Embd, false)
	return err
}

// loadExpertBiases loads gpt-oss's router bias and each expert's biases
// (2-D tensors, a row per expert), all required as llama.cpp requires them.
func (m *Model) loadExpertBiases(ld *loader, ly *layer, name func(string) string) error {
	c := &m.cfg
	var err error
	if ly.routerBias, err = ld.vector(name("ffn_gate_inp.bias"), c.Experts, true); err != nil {
		return err
	}
	if ly.gateExpsB, err = ld.experts(name("ffn_gate_exps.bias"), c.Experts, 1, c.ExpertFF); err != nil {
		return err
	}
	if ly.upExpsB, err = ld.experts(name("ffn_up_exps.bias"), c.Experts, 1, c.ExpertFF); err != nil {
		return err
	}
	ly.downExpsB, err = ld.experts(name("ffn_down_exps.bias"), c.Experts, 1, c.Embd)
	return err
}

// loader hands out the file's tensors as backend weights, checking their
// shapes and remembering which were used.
type loader struct {
	f     *gguf.File
	be    backend.Backend
	used  map[string]bool
	bytes int64 // handed to be.Weight
}

// lookup finds name and checks its dims are exactly want (ggml's ne:
// row length first).
func (ld *loader) lookup(name string, required bool, want ...int) (gguf.TensorInfo, []byte, bool, error) {
	t, b, ok, err := ld.f.TensorShaped(name, want...)
	switch {
	case !ok && required:
		return t, nil, false, invalid("tensor %s is missing", name)
	case !ok:
		return t, nil, false, nil
	case errors.Is(err, gguf.ErrShape):
		return t, nil, false, invalid("%v", err)
	case err != nil:
		return t, nil, false, fmt.Errorf("model: %w", err)
	}
	ld.used[name] = true
	return t, b, true, nil
}

func (ld *loader) weight(name string, typ quant.Type, rows, cols int, b []byte) (backend.Weight, error) {
	w, err := ld.be.Weight(typ, rows, cols, b)
	ld.bytes += int64(len(b))
	if err != nil {
		if !typ.Supported() {
			return nil, fmt.Errorf("%w: tensor %s has type %s, which the %s backend cannot compute with", ErrUnsupported, name, typ, ld.be.Name())
		}
		return nil, fmt.Errorf("%w: tensor %s: %w", ErrInvalid, name, err)
	}
	return w, nil
}

// matrix loads a rows × cols weight (ne = {cols, rows}).
func (ld *loader) matrix(name string, rows, cols int, required bool) (backend.Weight, error) {
	t, b, ok, err := ld.lookup(name, required, cols, rows)
	if !ok || err != nil {
		return nil, err
	}
	return ld.weight(name, t.Type, rows, cols, b)
}

// vector loads an n-element weight as a 1-row matrix.
func (ld *loader) vector(name string, n int, required bool) (backend.Weight, error) {
	t, b, ok, err := ld.lookup(name, required, n)
	if !ok || err != nil {
		return nil, err
	}
	return ld.weight(name, t.Type, 1, n, b)
}

// floats reads an optional n-element vector to float32 (RoPE factors).
func (ld *loader) floats(name string, n int) ([]float32, error) {
	t, b, ok, err := ld.lookup(name, false, n)
	if !ok || err != nil {
		return nil, err
	}
	out := make([]float32, n)
	if err := quant.Dequantize(t.Type, b, out); err != nil {
		return nil, fmt.Errorf("%w: tensor %s: %w", ErrUnsupported, name, err)
	}
	return out, nil
}

// experts loads a 3-D tensor of n matrices of rows × cols (ne = {cols,
// rows, n}) as n weights, each a view of its bytes in the file: no copy,
// and a backend that reads weights in place (the CPU) touches an expert's
// pages only when a token is routed to it.
func (ld *loader) experts(name string, n, rows, cols int) ([]backend.Weight, error) {
	want := []int{cols, rows, n}
	if rows == 1 {
		want = []int{cols, n} // a vector per expert: a 2-D tensor
	}
	t, b, _, err := ld.lookup(name, true, want...)
	if err != nil {
		return nil, err
	}
	rs, err := t.Type.RowSize(cols)
	if err != nil {
		return nil, errors.Join(ErrInvalid, fmt.Errorf("tensor %s: %w", name, err))
	}
	size := rows * rs
	out := make([]backend.Weight, n)
	for e := range out {
		if out[e], err = ld.weight(name, t.Type, rows, cols, b[e*size:(e+1)*size]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// rowSplit loads a matrix whose rows are several matrices stacked (phi3's
// fused QKV and gate-up), as views of its rows: no copy. With cols 0 the
// tensor is a vector split into pieces.
func (ld *loader) rowSplit(name string, cols int, parts ...int) ([]backend.Weight, error) {
	total := 0
	for _, p := range parts {
		total += p
	}
	var (
		t   gguf.TensorInfo
		b   []byte
		err error
	)
	if cols == 0 {
		t, b, _, err = ld.lookup(name, true, total)
	} else {
		t, b, _, err = ld.lookup(name, true, cols, total)
	}
	if err != nil {
		return nil, err
	}
	var out []backend.Weight
	off := 0
	for _, p := range parts {
		var (
			w   backend.Weight
			err error
		)
		if cols == 0 {
			// A vector piece: elements off … off+p.
			if t.Type.BlockSize() != 1 {
				return nil, fmt.Errorf("%w: tensor %s: a fused bias of type %s", ErrUnsupported, name, t.Type)
			}
			es := t.Type.TypeSize()
			w, err = ld.weight(name, t.Type, 1, p, b[off*es:(off+p)*es])
		} else {
			rs, rerr := t.Type.RowSize(cols)
			if rerr != nil {
				return nil, errors.Join(ErrInvalid, fmt.Errorf("tensor %s: %w", name, rerr))
			}
			w, err = ld.weight(name, t.Type, p, cols, b[off*rs:(off+p)*rs])
		}
		if err != nil {
			return nil, err
		}
		out = append(out, w)
		off += p
	}
	return out, nil
}

// rerankHead reports whether name is a Qwen3-style reranker's head
// (cls.output.weight: its "yes" and "no" rows), which the forward pass
// does not read: the engine scores the final hidden state with it
// (node/engine/ggufengine's rank pooling).
func rerankHead(name, arch string) bool {
	return name == "cls.output.weight" && arch == "qwen3"
}
