package model

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/detmath"
)

// archSpec is what distinguishes the architectures' graphs (llama.cpp's
// src/models/<arch>.cpp); everything else is shared.
type archSpec struct {
	// neox selects the NeoX RoPE layout (llama_model_rope_type).
	neox bool
	glu  backend.GLU
	// qkNorm: a per-head RMSNorm of Q and K before RoPE (gemma3, qwen3).
	qkNorm bool
	// postNorms: RMSNorm of the attention and FFN outputs before each
	// residual add (gemma3).
	postNorms bool
	// embedScale: embeddings are multiplied by √n_embd (gemma).
	embedScale bool
	// fusedGateUp: ffn_up holds the gate rows then the up rows and there
	// is no ffn_gate (phi3).
	fusedGateUp bool
	// scaleQ: Q is multiplied by the attention scale before the product
	// and the scores are not scaled again (phi3, gemma3).
	scaleQ bool
	// swa: the file may declare a sliding window (gemma3).
	swa bool
	// fullRot: rope.dimension_count must equal the head size (llama).
	fullRot bool
	// moe: the FFN is a mixture of experts (ffn_gate_inp routing to
	// ffn_{gate,up,down}_exps) with a softmax router whose top-k weights
	// are renormalised (qwen3moe).
	moe bool
	// hybrid: Qwen3.5's gated delta-net blocks beside gated attention
	// blocks, post_attention_norm as the FFN's norm (hybrid.go); with moe,
	// a gated shared expert beside the routed ones.
	hybrid bool
	// gemma4: per-layer token embeddings, KV shared by the last layers,
	// SWA layers with their own head size, V RMS-normalised (gemma4.go).
	gemma4 bool
	// gptoss: gpt-oss's differences (llama_model_openai_moe): attention
	// sinks, Q/K/V/O and router and expert biases, the FFN norm named
	// post_attention_norm, a softmax over the chosen experts' logits
	// rather than all of them, the clamped SwiGLU, a sliding window on
	// every other layer (period 2) whose layers keep the YaRN scaling,
	// and scores scaled by 1/√n_rot.
	gptoss bool
	// granite: llama's graph with IBM Granite's multipliers
	// (llama_model_granite): the embeddings scaled by embedding_scale,
	// each block's attention and FFN outputs by residual_scale before
	// the residual add, the scores by attention.scale, and the logits
	// divided by logit_scale.
	granite bool
	// noRoPEStep: every noRoPEStep-th block (the last of each run) rotates
	// neither Q nor K (SmolLM3's NoPE layers, n_no_rope_layer_step).
	noRoPEStep int
	// gemma2: gemma3's block without the Q/K norms, its scores capped at
	// ±attn_logit_softcapping (default 50) with tanh, a sliding window
	// (default 4096) on every other layer with the global rope base, and
	// the final softcap on by default (30) (llama_model_gemma2).
	gemma2 bool
	// noPreNorm: no norm before attention or the feed-forward, only
	// postNorms' after them (OLMo 2's and EXAONE 4's "reordered" norms);
	// fullQKNorm: the Q and K norms over the whole projection, not each
	// head (olmo2).
	noPreNorm, fullQKNorm bool
	// olmo2: OLMo 3's sliding-window layers (a period of 4 by default)
	// rotate without YaRN, at the global base unless rope.freq_base_swa
	// says otherwise (llama_model_olmo2).
	olmo2 bool
	// exaone4: EXAONE 4.0 32B's hybrid attention (sliding-window layers
	// and global ones without RoPE) is refused; the 1.2B is all global.
	exaone4 bool
	// ernie4_5: llama's graph (llama_model_ernie4_5), whose attention
	// output takes no bias even where the file has one (llama.cpp loads
	// attn_output.bias and passes none).
	ernie bool
	// mistral3: llama's graph (llama_model_mistral3) with the YaRN
	// parameters the file gives (beta_fast, beta_slow, the magnitude's
	// log multiplier) and Llama 4's attention temperature: each query
	// scaled by 1 + temperature_scale·ln(⌊pos/n_ctx_orig⌋ + 1).
	mistral3 bool
	// lfm2: LFM2's gated short convolutions in the blocks whose KV head
	// count is 0, grouped-query attention with per-head Q/K norms in the
	// others (with an optional sliding window on all of those, but for
	// lfm2moe), and the output norm named token_embd_norm (shortconv.go).
	lfm2 bool
}

var archs = map[string]archSpec{
	"llama":  {fullRot: true},
	"qwen2":  {neox: true},
	"phi3":   {neox: true, fusedGateUp: true, scaleQ: true},
	"gemma3": {neox: true, glu: backend.GELUTanh, qkNorm: true, postNorms: true, embedScale: true, scaleQ: true, swa: true},
	// gemma2 is gemma3 without the Q/K norms, with its scores capped.
	"gemma2": {neox: true, glu: backend.GELUTanh, postNorms: true, embedScale: true, scaleQ: true, swa: true, gemma2: true},
	// qwen3 is qwen2 without the Q/K/V biases (optional anyway) and with
	// gemma3's per-head Q/K norms.
	"qwen3": {neox: true, qkNorm: true},
	// qwen3moe is qwen3 with a mixture-of-experts FFN in every block.
	"qwen3moe": {neox: true, qkNorm: true, moe: true},
	// qwen35 and qwen35moe are hybrids of gated delta nets and gated
	// attention (hybrid.go).
	"qwen35":    {neox: true, qkNorm: true, hybrid: true},
	"qwen35moe": {neox: true, qkNorm: true, hybrid: true, moe: true},
	// gemma4 is gemma3 with no Q pre-scaling (the Q/K norms replace it)
	// and the features gemma4.go reads.
	"gemma4":  {neox: true, glu: backend.GELUTanh, qkNorm: true, postNorms: true, embedScale: true, swa: true, gemma4: true},
	"gpt-oss": {neox: true, glu: backend.SwiGLUOAI, swa: true, moe: true, gptoss: true},
	// granite is llama (Granite 3.x) with its multipliers; granitemoe
	// (Granite 3.x MoE) is granite with qwen3moe's routed experts.
	"granite":    {fullRot: true, granite: true},
	"granitemoe": {fullRot: true, granite: true, moe: true},
	// smollm3 is llama with no RoPE in every fourth block (SmolLM3-3B).
	"smollm3": {fullRot: true, noRoPEStep: 4},
	// mistral3 is llama (Ministral 3) with YaRN and an attention
	// temperature past its original context.
	"mistral3": {fullRot: true, mistral3: true},
	// olmo2 (OLMo 2, OLMo 3) norms each sublayer's output, not its input,
	// with Q and K normed whole; OLMo 3 adds sliding-window layers.
	"olmo2": {neox: true, fullRot: true, qkNorm: true, fullQKNorm: true, postNorms: true, noPreNorm: true, swa: true, olmo2: true},
	// ernie4_5 (ERNIE 4.5 dense: ERNIE-4.5-0.3B) is llama's block.
	"ernie4_5": {ernie: true},
	// exaone4 (EXAONE 4.0) is olmo2's norm order with per-head Q/K norms.
	"exaone4": {neox: true, fullRot: true, qkNorm: true, postNorms: true, noPreNorm: true, exaone4: true},
	// lfm2 (LFM2, LFM2.5) is a hybrid of gated short convolutions and
	// qwen3's attention blocks; lfm2moe (LFM2-8B-A1B) has sigmoid-routed
	// experts in place of the FFN after its first blocks.
	"lfm2":    {neox: true, qkNorm: true, lfm2: true},
	"lfm2moe": {neox: true, qkNorm: true, lfm2: true, moe: true},
}

// Architectures lists the general.architecture values this package runs.
func Architectures() []string {
	names := make([]string, 0, len(archs))
	for n := range archs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// RoPE scaling types (rope.scaling.type).
const (
	ScalingNone     = "none"
	ScalingLinear   = "linear"
	ScalingYaRN     = "yarn"
	ScalingLongRoPE = "longrope"
)

// Config is a model's hyperparameters as llama.cpp reads them from the
// file's metadata, with its defaults.
type Config struct {
	Arch string // general.architecture
	Name string // general.name

	VocabSize          int
	Embd               int // n_embd
	Layers             int
	Heads, KVHeads     int
	HeadDimK, HeadDimV int
	FF                 int // feed-forward width
	NormEps            float32
	// TrainContext is the context length the model was trained for
	// (context_length).
	TrainContext int

	RoPEDims  int // rotated dimensions per head (n_rot)
	RoPENeoX  bool
	RoPEBase  float32
	RoPEScale float32 // freq_scale = 1 / rope.scaling.factor
	// RoPEScaling is the scaling type: none, linear, yarn or longrope.
	RoPEScaling string
	// RoPEOrigContext is the context the scaling was fitted from
	// (rope.scaling.original_context_length, default TrainContext).
	RoPEOrigContext int
	RoPEAttnFactor  float32 // rope.scaling.attn_factor, default 1
	// YaRN's ramp (beta_fast, beta_slow: 32 and 1 unless mistral3's file
	// says) and its magnitude's log multiplier (mscale_all_dim; 0: none).
	YaRNBetaFast, YaRNBetaSlow, YaRNLogMul float32
	// AttnTemp scales each query by 1 + AttnTemp·ln(⌊pos/AttnTempFloor⌋
	// + 1) (mistral3's attention.temperature_scale, its floor the
	// original context); 0: none.
	AttnTemp      float32
	AttnTempFloor int
	// RoPEBaseSWA is the frequency base of sliding-window layers (gemma3).
	RoPEBaseSWA float32

	// SlidingWindow is the window of the layers SWA marks (0: none).
	SlidingWindow int
	SWA           []bool
	// NoRoPE marks the blocks whose Q and K are not rotated (smollm3).
	NoRoPE []bool

	// EmbedScale multiplies the token embeddings (1: none).
	EmbedScale float32
	// AttnScale scales attention scores (1/√head size, or as the
	// architecture fixes it).
	AttnScale float32
	// FinalSoftcap caps the logits at ±FinalSoftcap with tanh (0: none).
	FinalSoftcap float32
	// AttnSoftcap caps the attention scores at ±AttnSoftcap with tanh
	// (0: none; gemma2).
	AttnSoftcap float32
	// ResidualScale multiplies each block's attention and FFN outputs
	// before their residual adds (0: none); LogitScale divides the
	// logits (1: none). Granite's.
	ResidualScale float32
	LogitScale    float32

	// Experts is the number of experts of a mixture-of-experts FFN (0:
	// a dense FFN); ExpertsUsed of them run per token, each ExpertFF wide.
	Experts, ExpertsUsed, ExpertFF int
	// ExpertNorm renormalises the chosen experts' router probabilities
	// to sum to 1 (Qwen3's norm_topk_prob).
	ExpertNorm bool
	// SharedFF is the width of the shared expert beside the routed ones
	// (qwen35moe; 0: none).
	SharedFF int

	// Recurrent marks the recurrent blocks of a hybrid: gated delta nets
	// (qwen35) or gated convolutions (lfm2); nil for a model of
	// attention blocks only.
	Recurrent []bool
	// The delta net: a causal convolution of ConvKernel taps (LFM2's
	// convolutions' too, shortconv.l_cache), SSMGroups
	// key heads and SSMHeads value heads of SSMStateSize, SSMInner the
	// value heads' width.
	ConvKernel, SSMInner, SSMStateSize, SSMHeads, SSMGroups int
	// NextN is the number of multi-token-prediction blocks the file
	// carries after the Layers it runs (nextn_predict_layers), unused.
	NextN int
	// RoPESections are the M-RoPE sections (qwen35), which for text are
	// NeoX RoPE (parseSections).
	RoPESections [4]int
	// ExpertSoftmaxChosen: the experts are chosen by their router logits
	// and weighted by a softmax over the chosen ones alone (gpt-oss;
	// llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT).
	ExpertSoftmaxChosen bool
	// ExpertSigmoid: the router's sigmoids plus a selection bias choose
	// the experts, weighted by their sigmoids renormalised (lfm2moe;
	// LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID with exp_probs_b).
	ExpertSigmoid bool
	// DenseLead is how many first blocks have a dense FFN in a model of
	// experts (lfm2moe's leading_dense_block_count; 0 elsewhere).
	DenseLead int

	// Gemma 4 (zero elsewhere): the head and rotary sizes of the SWA
	// layers, the first block whose KV is another block's (Layers: none
	// shared), and the width of the per-layer token embeddings (0: none).
	HeadDimKSWA, HeadDimVSWA, RoPEDimsSWA int
	KVLayers                              int
	PerLayerEmbd                          int
	// LayerKVHeads and LayerFF are each block's KV heads and FFN width
	// where they vary by layer (gemma4; nil otherwise): KVHeads and FF are
	// then their largest.
	LayerKVHeads, LayerFF []int

	spec archSpec
}

// meta reads arch-prefixed keys.
type meta struct {
	md   *gguf.Metadata
	arch string
	// varying: per-layer arrays may vary, and uint returns their largest
	// (gemma4, which reads the arrays themselves: layerUints).
	varying bool
}

func (m meta) key(k string) string { return m.arch + "." + k }

// uint reads a positive count, or an array of them that must all be equal
// (per-layer values, which this package does not run unless uniform).
func (m meta) uint(k string, def int, required bool) (int, error) {
	key := m.key(k)
	if v, ok := m.md.Uint32(key); ok {
		return int(v), nil
	}
	if a, ok := m.md.Uint32s(key); ok && len(a) > 0 {
		if slices.Min(a) != slices.Max(a) && !m.varying {
			return 0, unsupported("%s varies by layer (%d … %d)", key, slices.Min(a), slices.Max(a))
		}
		return int(slices.Max(a)), nil
	}
	if _, present := m.md.Lookup(key); present {
		return 0, invalid("%s is not an unsigned integer", key)
	}
	if required {
		return 0, invalid("%s is missing", key)
	}
	return def, nil
}

func (m meta) float(k string, def float32) (float32, error) {
	key := m.key(k)
	if v, ok := m.md.Float32(key); ok {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return 0, invalid("%s is %v", key, v)
		}
		return v, nil
	}
	if _, present := m.md.Lookup(key); present {
		return 0, invalid("%s is not a float", key)
	}
	return def, nil
}

// maxDim bounds every size read from a file, so products of them cannot
// overflow before the tensor checks catch a lie.
const maxDim = 1 << 24

// ParseConfig reads a model's hyperparameters from its metadata.
func ParseConfig(md *gguf.Metadata) (Config, error) {
	arch, ok := md.String("general.architecture")
	if !ok {
		return Config{}, invalid("general.architecture is missing")
	}
	spec, ok := archs[arch]
	if !ok {
		return Config{}, unsupported("architecture %q (this engine runs %s)", arch, strings.Join(Architectures(), ", "))
	}
	c := Config{Arch: arch, spec: spec, RoPENeoX: spec.neox}
	c.Name, _ = md.String("general.name")
	m := meta{md: md, arch: arch, varying: spec.gemma4}

	var err error
	ints := []struct {
		dst      *int
		key      string
		def      int
		required bool
	}{
		{&c.Embd, "embedding_length", 0, true},
		{&c.Layers, "block_count", 0, true},
		{&c.FF, "feed_forward_length", 0, !(spec.hybrid && spec.moe)},
		{&c.Heads, "attention.head_count", 0, true},
		{&c.TrainContext, "context_length", 0, true},
	}
	for _, f := range ints {
		if *f.dst, err = m.uint(f.key, f.def, f.required); err != nil {
			return Config{}, err
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"embedding_length", c.Embd}, {"block_count", c.Layers}, {"feed_forward_length", c.FF}, {"attention.head_count", c.Heads}, {"context_length", c.TrainContext}} {
		if f.v <= 0 && !(f.name == "feed_forward_length" && spec.hybrid && spec.moe) || f.v < 0 || f.v > maxDim {
			return Config{}, invalid("%s.%s = %d", arch, f.name, f.v)
		}
	}
	if spec.lfm2 {
		if err := c.parseLFM2(m); err != nil {
			return Config{}, err
		}
	} else if c.KVHeads, err = m.uint("attention.head_count_kv", c.Heads, false); err != nil {
		return Config{}, err
	}
	if c.HeadDimK, err = m.uint("attention.key_length", c.Embd/c.Heads, false); err != nil {
		return Config{}, err
	}
	if c.HeadDimV, err = m.uint("attention.value_length", c.Embd/c.Heads, false); err != nil {
		return Config{}, err
	}
	if c.RoPEDims, err = m.uint("rope.dimension_count", c.HeadDimK, false); err != nil {
		return Config{}, err
	}
	switch {
	case c.KVHeads <= 0 || c.KVHeads > c.Heads || c.Heads%c.KVHeads != 0:
		return Config{}, invalid("%d KV heads for %d heads", c.KVHeads, c.Heads)
	case c.HeadDimK <= 0 || c.HeadDimV <= 0 || c.HeadDimK > maxDim || c.HeadDimV > maxDim:
		return Config{}, invalid("head sizes %d and %d", c.HeadDimK, c.HeadDimV)
	case c.RoPEDims <= 0 || c.RoPEDims > c.HeadDimK || c.RoPEDims%2 != 0:
		return Config{}, invalid("%d rotary dimensions for a head of %d", c.RoPEDims, c.HeadDimK)
	case spec.fullRot && c.RoPEDims != c.HeadDimK:
		return Config{}, invalid("%s needs rope.dimension_count (%d) equal to the head size (%d)", arch, c.RoPEDims, c.HeadDimK)
	}

	if _, ok := md.Lookup(m.key("attention.layer_norm_rms_epsilon")); !ok {
		return Config{}, invalid("%s.attention.layer_norm_rms_epsilon is missing", arch)
	}
	if c.NormEps, err = m.float("attention.layer_norm_rms_epsilon", 0); err != nil {
		return Config{}, err
	}
	if err := c.parseRoPE(m); err != nil {
		return Config{}, err
	}
	if err := c.parseSWA(m); err != nil {
		return Config{}, err
	}
	finalCap := float32(0)
	if spec.gemma2 {
		finalCap = 30 // llama.cpp's default, which its gemma2 graph always applies
		if c.AttnSoftcap, err = m.float("attn_logit_softcapping", 50); err != nil {
			return Config{}, err
		}
		if c.AttnSoftcap <= 0 {
			return Config{}, invalid("%s.attn_logit_softcapping = %v", arch, c.AttnSoftcap)
		}
	}
	if c.FinalSoftcap, err = m.float("final_logit_softcapping", finalCap); err != nil {
		return Config{}, err
	}
	if arch != "gemma3" && arch != "gemma4" && arch != "gemma2" {
		c.FinalSoftcap = 0 // only gemma's graphs apply it
	}
	if spec.gemma2 && c.FinalSoftcap <= 0 {
		return Config{}, invalid("%s.final_logit_softcapping = %v", arch, c.FinalSoftcap)
	}

	if spec.moe {
		if err := c.parseMoE(m); err != nil {
			return Config{}, err
		}
	}
	if spec.hybrid {
		if err := c.parseHybrid(m); err != nil {
			return Config{}, err
		}
		if spec.moe {
			if err := c.parseShared(m); err != nil {
				return Config{}, err
			}
		}
	}
	c.HeadDimKSWA, c.HeadDimVSWA, c.RoPEDimsSWA, c.KVLayers = c.HeadDimK, c.HeadDimV, c.RoPEDims, c.Layers
	if spec.gemma4 {
		if err := c.parseGemma4(m); err != nil {
			return Config{}, err
		}
	}

	c.EmbedScale = 1
	if spec.embedScale {
		c.EmbedScale = float32(math.Sqrt(float64(c.Embd)))
	}
	c.AttnScale = 1 / float32(math.Sqrt(float64(c.HeadDimK)))
	if spec.gemma4 {
		c.AttnScale = 1 // f_attention_scale: the Q/K norms stand in for it
	}
	if spec.gptoss {
		c.AttnScale = 1 / float32(math.Sqrt(float64(c.RoPEDims)))
	}
	c.NoRoPE = make([]bool, c.Layers)
	if n := spec.noRoPEStep; n > 0 {
		for l := range c.NoRoPE {
			c.NoRoPE[l] = (l+1)%n == 0
		}
	}
	if spec.mistral3 {
		if err := c.parseMistral3(m); err != nil {
			return Config{}, err
		}
	}
	c.LogitScale = 1
	if spec.granite {
		if err := c.parseGranite(m); err != nil {
			return Config{}, err
		}
	}
	if arch == "gemma2" && c.Layers == 46 {
		// Gemma 2 27B scales by the model width per head
		// (llama_model_gemma2::load_arch_hparams).
		c.AttnScale = 1 / float32(math.Sqrt(float64(c.Embd/c.Heads)))
	}
	if arch == "gemma3" && c.Layers == 62 {
		// Gemma 3 27B scales by the model width per head, not the head
		// size (llama_model_gemma3::load_arch_hparams).
		c.AttnScale = 1 / float32(math.Sqrt(float64(c.Embd/c.Heads)))
	}

	if n, ok := md.ArrayLen("tokenizer.ggml.tokens"); ok {
		c.VocabSize = n
	} else if c.VocabSize, err = m.uint("vocab_size", 0, false); err != nil {
		return Config{}, err
	}
	return c, nil
}

func (c *Config) parseRoPE(m meta) error {
	var err error
	if c.RoPEBase, err = m.float("rope.freq_base", 10000); err != nil {
		return err
	}
	scaling, ok := m.md.String(m.key("rope.scaling.type"))
	if !ok {
		scaling = ScalingLinear
	}
	switch scaling {
	case ScalingNone, ScalingLinear, ScalingYaRN, ScalingLongRoPE:
	default:
		return unsupported("rope scaling %q", scaling)
	}
	c.RoPEScaling = scaling
	factor, err := m.float("rope.scaling.factor", 0)
	if err != nil {
		return err
	}
	if factor == 0 {
		if factor, err = m.float("rope.scale_linear", 0); err != nil {
			return err
		}
	}
	c.RoPEScale = 1
	if factor != 0 {
		c.RoPEScale = 1 / factor
	}
	if scaling == ScalingNone {
		c.RoPEScale = 1
	}
	if c.RoPEOrigContext, err = m.uint("rope.scaling.original_context_length", c.TrainContext, false); err != nil {
		return err
	}
	if c.RoPEAttnFactor, err = m.float("rope.scaling.attn_factor", 1); err != nil {
		return err
	}
	c.YaRNBetaFast, c.YaRNBetaSlow = 32, 1
	if c.spec.mistral3 {
		// Only mistral3's loader reads these (llama_model_mistral3).
		for _, k := range []struct {
			key string
			dst *float32
			def float32
		}{{"rope.scaling.yarn_beta_fast", &c.YaRNBetaFast, 32}, {"rope.scaling.yarn_beta_slow", &c.YaRNBetaSlow, 1}, {"rope.scaling.yarn_log_multiplier", &c.YaRNLogMul, 0}} {
			if *k.dst, err = m.float(k.key, k.def); err != nil {
				return err
			}
		}
	}
	if c.RoPEBase <= 0 || c.RoPEScale <= 0 {
		return invalid("rope base %v, scale %v", c.RoPEBase, c.RoPEScale)
	}
	return nil
}

// parseMistral3 reads mistral3's attention temperature (Llama 4's
// scaling, llama_model_mistral3's load_arch_hparams): its floor is the
// original context, which must then be set. A mistral3 file with experts
// (Mistral Large 3) is refused.
func (c *Config) parseMistral3(m meta) error {
	if n, ok := m.md.Uint32(m.key("expert_count")); ok && n > 0 {
		return unsupported("%s with %d experts (Mistral Large 3's mixture)", m.arch, n)
	}
	var err error
	if c.AttnTemp, err = m.float("attention.temperature_scale", 0); err != nil {
		return err
	}
	if c.AttnTemp != 0 {
		if c.AttnTempFloor = c.RoPEOrigContext; c.AttnTempFloor <= 0 {
			return invalid("%s.attention.temperature_scale needs an original context (rope.scaling.original_context_length)", m.arch)
		}
	}
	return nil
}

// AttnTempAt is the factor mistral3's queries at position pos are scaled
// by, as llama.cpp's llm_graph_input_attn_temp computes it (the floor in
// float32, the logarithm in float64): 1 below the original context.
func (c *Config) AttnTempAt(pos int) float32 {
	f := math.Floor(float64(float32(pos) / float32(c.AttnTempFloor)))
	return float32(float64(math.Log(float64(float32(f))+1)*float64(c.AttnTemp)) + 1) // rounded apart: arm64 would fuse it
}

// parseGranite reads Granite's multipliers (llama_model_granite's
// load_arch_hparams): logit_scale is required, the others optional, and
// a zero one is no scaling, as llama.cpp takes it.
func (c *Config) parseGranite(m meta) error {
	if _, ok := m.md.Lookup(m.key("logit_scale")); !ok {
		return invalid("%s.logit_scale is missing", m.arch)
	}
	var embed, attn float32
	var err error
	for _, f := range []struct {
		dst *float32
		key string
	}{{&c.LogitScale, "logit_scale"}, {&c.ResidualScale, "residual_scale"}, {&embed, "embedding_scale"}, {&attn, "attention.scale"}} {
		if *f.dst, err = m.float(f.key, 0); err != nil {
			return err
		}
		if *f.dst < 0 { // meta.float refuses what is not finite
			return invalid("%s.%s = %v", m.arch, f.key, *f.dst)
		}
	}
	if c.LogitScale == 0 {
		return invalid("%s.logit_scale = 0", m.arch)
	}
	if embed != 0 {
		c.EmbedScale = embed
	}
	if attn != 0 {
		c.AttnScale = attn
	}
	return nil
}

// parseMoE reads the mixture-of-experts sizes (llama_model_qwen3moe's
// load_arch_hparams).
func (c *Config) parseMoE(m meta) error {
	var err error
	if c.Experts, err = m.uint("expert_count", 0, true); err != nil {
		return err
	}
	if c.ExpertsUsed, err = m.uint("expert_used_count", 0, true); err != nil {
		return err
	}
	if c.Experts <= 0 || c.Experts > maxExperts || c.ExpertsUsed <= 0 || c.ExpertsUsed > c.Experts {
		return invalid("%d experts, %d used", c.Experts, c.ExpertsUsed)
	}
	if c.ExpertFF, err = m.uint("expert_feed_forward_length", c.FF/c.ExpertsUsed, false); err != nil {
		return err
	}
	if c.spec.granite {
		c.ExpertFF = c.FF // Granite's experts are feed_forward_length wide (llama_model_granite_moe)
	}
	if c.ExpertFF <= 0 || c.ExpertFF > maxDim {
		return invalid("%s = %d", m.key("expert_feed_forward_length"), c.ExpertFF)
	}
	if c.spec.gptoss {
		// openai-moe.cpp: SOFTMAX_WEIGHT gating, no renormalisation, and
		// expert_weights_scale is not read (0: no scaling).
		c.ExpertSoftmaxChosen = true
		return nil
	}
	if c.spec.lfm2 {
		return c.parseLFM2MoE(m)
	}
	// llama.cpp's qwen3moe and granitemoe graphs always renormalise the top-k weights
	// (build_moe_ffn's norm_w is true) and never scales them, whatever
	// expert_weights_norm or expert_weights_scale say; every released
	// Qwen3 MoE checkpoint has norm_topk_prob true.
	c.ExpertNorm = true
	return nil
}

// maxExperts is llama.cpp's LLAMA_MAX_EXPERTS.
const maxExperts = 512

func (c *Config) parseSWA(m meta) error {
	c.SWA = make([]bool, c.Layers)
	if c.spec.lfm2 {
		return c.parseLFM2Window(m)
	}
	if !c.spec.swa {
		return nil
	}
	var err error
	window := 0
	if c.spec.gemma2 {
		window = 4096 // Gemma 2's, llama.cpp's default for it
	}
	if c.SlidingWindow, err = m.uint("attention.sliding_window", window, c.spec.gptoss); err != nil || c.SlidingWindow == 0 {
		return err
	}
	if c.spec.exaone4 {
		return unsupported("%s with a sliding window (EXAONE 4.0 32B's hybrid attention, its global layers without RoPE)", m.arch)
	}
	if err := c.parseSWAPattern(m); err != nil {
		return err
	}
	baseSWA := float32(10000)
	if c.spec.gptoss || c.spec.gemma2 || c.spec.olmo2 {
		baseSWA = c.RoPEBase // rope_freq_base_train_swa defaults to the base
	}
	if c.RoPEBaseSWA, err = m.float("rope.freq_base_swa", baseSWA); err != nil {
		return err
	}
	return nil
}

// parseSWAPattern sets c.SWA from attention.sliding_window_pattern: a
// period (every layer but the last of each period slides,
// llama_hparams::set_swa_pattern; when absent 6, gpt-oss's and gemma2's 2), or one flag
// per layer (an array of bools, as converters write it). llama.cpp reads
// gemma4's key with get_key_or_arr, so there a scalar is every layer's
// flag rather than a period.
func (c *Config) parseSWAPattern(m meta) error {
	key := m.key("attention.sliding_window_pattern")
	flags, ok := m.md.Lookup(key)
	if !ok {
		period := 6
		switch {
		case c.spec.gptoss || c.spec.gemma2:
			period = 2
		case c.spec.olmo2:
			period = 4
		}
		for l := range c.SWA {
			c.SWA[l] = l%period < period-1
		}
		return nil
	}
	if v, ok := m.md.Uint32(key); ok {
		for l := range c.SWA {
			if c.spec.gemma4 {
				c.SWA[l] = v != 0
			} else {
				c.SWA[l] = v == 0 || l%int(v) < int(v)-1
			}
		}
		return nil
	}
	if bs, ok := flags.Interface().([]bool); ok {
		if len(bs) != c.Layers {
			return invalid("%s has %d flags for %d layers", key, len(bs), c.Layers)
		}
		copy(c.SWA, bs)
		return nil
	}
	vals, isArr := flags.Values()
	if !isArr || len(vals) != c.Layers {
		return unsupported("%s of type %s", key, flags.Type())
	}
	for l, v := range vals {
		if c.SWA[l], ok = v.AsBool(); !ok {
			return unsupported("%s element of type %s", key, v.Type())
		}
	}
	return nil
}

// layerRoPE returns the rotary embedding of layer l for a session of ctx
// positions (LongRoPE picks its factors by context size).
func (c *Config) layerRoPE(l int, factors []float32) backend.RoPE {
	r := backend.RoPE{
		Dims:       c.ropeDims(l),
		NeoX:       c.RoPENeoX,
		Base:       c.RoPEBase,
		FreqScale:  c.RoPEScale,
		Factors:    factors,
		AttnFactor: c.RoPEAttnFactor,
		BetaFast:   c.YaRNBetaFast,
		BetaSlow:   c.YaRNBetaSlow,
		OrigCtx:    c.RoPEOrigContext,
	}
	if c.SWA[l] {
		r.Base = c.RoPEBaseSWA
		if !c.spec.gptoss && !c.spec.gemma2 && !c.spec.lfm2 {
			r.FreqScale = 1 // gemma3's sliding layers are unscaled; gpt-oss's and gemma2's keep it
		}
		if c.spec.gemma4 {
			r.Factors = nil // rope_freqs are the full-attention layers'
		}
	}
	if c.RoPEScaling == ScalingYaRN {
		// llama_context's YaRN set-up: ramp fully, and correct the
		// magnitude so that rope_yarn's own correction cancels.
		r.ExtFactor = 1
		factor := 1 / r.FreqScale
		getMscale := func(mscale float32) float32 {
			if factor <= 1 {
				return 1
			}
			return float32(0.1*mscale*float32(detmath.Log(float64(factor)))) + 1
		}
		mscale := getMscale(1)
		if c.YaRNLogMul != 0 {
			// mscale_all_dim (mistral3's yarn_log_multiplier), mscale 1.
			mscale = getMscale(1) / getMscale(c.YaRNLogMul)
		}
		r.AttnFactor *= mscale / (1 + float32(0.1*float32(detmath.Log(float64(factor)))))
	}
	if c.spec.olmo2 && c.SWA[l] {
		// OLMo 3's sliding layers rotate plainly: the global base, no
		// YaRN (olmo2.cpp passes freq_base, 1, 0 and 1).
		r.Base, r.FreqScale, r.ExtFactor, r.AttnFactor = c.RoPEBase, 1, 0, 1
	}
	return r
}

// String summarises c for logs.
func (c Config) String() string {
	s := fmt.Sprintf("%s: %d layers, embd %d, %d heads (%d kv) of %d, ffn %d, vocab %d, ctx %d, rope %s θ=%g",
		c.Arch, c.Layers, c.Embd, c.Heads, c.KVHeads, c.HeadDimK, c.FF, c.VocabSize, c.TrainContext, c.ropeLayout(), c.RoPEBase)
	if c.SlidingWindow > 0 {
		s += fmt.Sprintf(", window %d", c.SlidingWindow)
	}
	if c.Experts > 0 {
		s += fmt.Sprintf(", %d of %d experts of %d", c.ExpertsUsed, c.Experts, c.ExpertFF)
	}
	return s
}

func (c Config) ropeLayout() string {
	if c.RoPENeoX {
		return "neox"
	}
	return "normal"
}

// gating is the MoE router's gating, as backend.Route takes it.
func (c *Config) gating() backend.Gating {
	switch {
	case c.ExpertSigmoid:
		return backend.GateSigmoidNorm
	case c.ExpertSoftmaxChosen:
		return backend.GateSoftmaxChosen
	case c.ExpertNorm:
		return backend.GateSoftmaxNorm
	}
	return backend.GateSoftmax
}
