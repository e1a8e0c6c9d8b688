package model

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/deltanet"
	"github.com/meshnode/meshnode/gguf/quant"
)

// Qwen3.5 (llama.cpp's qwen35 and qwen35moe graphs) is a hybrid: most
// blocks replace attention by a gated delta net, a linear attention whose
// memory is a fixed-size recurrent state per sequence, and every few
// blocks one is gated full attention over the KV cache. Each block's
// attention (either kind) is followed by an RMSNorm (post_attention_norm)
// and a SwiGLU FFN, dense (qwen35) or a mixture of experts plus a gated
// shared expert (qwen35moe).
//
// A delta-net block, per token t (llm_build_delta_net_base with the CPU's
// fused ggml_gated_delta_net):
//
//	qkv = conv1d(silu) over the last ConvKernel rows of h·Wqkvᵀ (the
//	      ConvKernel−1 rows before t are the conv state)
//	q, k = L2-normalised per key head; v per value head
//	g = softplus(h·Wα + dt_bias) · A, β = sigmoid(h·Wβ)  (per value head)
//	S = exp(g)·S;  S += k ⊗ β(v − Sᵀk);  o = Sᵀq / √d   (per value head,
//	      key head = value head mod key heads)
//	out = (RMSNorm(o) · ssm_norm · silu(h·Wzᵀ)) · Woutᵀ
//
// The projections run on the backend. The convolution, the recurrence and
// the gated norm run on the backend too where it implements
// backend.DeltaNetter (the CPU and CUDA do): two kernels per block over
// the step's sequences, each session's state in the backend's memory, so
// a block reads nothing back. Elsewhere they run on the host over the
// step's rows, piece by piece (a piece is one sequence's consecutive
// tokens, so each advances its own session's state in order), with the
// same arithmetic. A row's result depends only on its sequence's earlier
// rows, never on what else shares the step, so batching keeps tokens'
// logits bit-identical.
//
// The state's checkpoint (Truncate's rewind, a failed step's restore):
// on the backend a session keeps two states per block, and a step reads
// one and writes the other, so the state before the step is kept without
// a copy and a rewind only swaps back; on the host the state is copied
// before each step.

// deltaLayer is a delta-net block's weights.
type deltaLayer struct {
	wqkv, wz, wBeta, wAlpha, wOut backend.Weight
	conv                          []float32 // ConvChannels × ConvKernel, a channel's taps together
	dtBias, a                     []float32 // per value head
	norm                          []float32 // value head size

	// With the backend's kernels (Model.dn): conv as an F32 weight, and
	// the scan's shape and vectors.
	convW  backend.Weight
	params backend.DeltaNet
}

// sharedExpert is qwen35moe's shared expert: a SwiGLU FFN whose output is
// scaled by sigmoid(h·gateInp) and added to the routed experts' sum.
type sharedExpert struct {
	gate, up, down, gateInp backend.Weight
}

// convChannels is the width of a delta-net block's convolved projection:
// the keys' and queries' heads and the values'.
func (c *Config) convChannels() int { return 2*c.SSMGroups*c.SSMStateSize + c.SSMInner }

// deltaNetter is be's delta-net kernels when it has them for c's shapes.
func deltaNetter(c *Config, be backend.Backend) backend.DeltaNetter {
	if c.Recurrent == nil {
		return nil
	}
	if dn, ok := be.(backend.DeltaNetter); ok && dn.DeltaNetFits(c.SSMStateSize, c.ConvKernel) {
		return dn
	}
	return nil
}

// hybridState is a session's recurrent memory in one delta-net block, on
// the host.
type hybridState struct {
	conv []float32 // (ConvKernel−1) × convChannels: the last inputs, oldest first
	ssm  []float32 // SSMHeads × d × d: per head Sᵀ, row j the j-th value component
}

// maxState bounds a delta-net block's recurrent state, in floats (256 MiB;
// Qwen3.5's is 16 heads of 128×128).
const maxState = 1 << 26

// parseHybrid reads Qwen3.5's delta-net sizes and its layer pattern
// (llama_model_qwen35::load_arch_hparams).
func (c *Config) parseHybrid(m meta) error {
	var err error
	for _, f := range []struct {
		dst *int
		key string
	}{
		{&c.ConvKernel, "ssm.conv_kernel"}, {&c.SSMInner, "ssm.inner_size"}, {&c.SSMStateSize, "ssm.state_size"},
		{&c.SSMHeads, "ssm.time_step_rank"}, {&c.SSMGroups, "ssm.group_count"},
	} {
		if *f.dst, err = m.uint(f.key, 0, true); err != nil {
			return err
		}
		if *f.dst <= 0 || *f.dst > maxDim {
			return invalid("%s = %d", m.key(f.key), *f.dst)
		}
	}
	switch {
	case c.SSMHeads%c.SSMGroups != 0:
		return invalid("%d delta-net value heads over %d key heads", c.SSMHeads, c.SSMGroups)
	case c.SSMInner != c.SSMHeads*c.SSMStateSize:
		// ggml_gated_delta_net needs the value head as wide as the key head.
		return unsupported("a delta net of inner size %d over %d heads of state %d", c.SSMInner, c.SSMHeads, c.SSMStateSize)
	case c.ConvKernel < 2 || c.ConvKernel > 64:
		return invalid("%s = %d", m.key("ssm.conv_kernel"), c.ConvKernel)
	case c.convChannels() > maxDim:
		return invalid("a delta net of %d channels", c.convChannels())
	case int64(c.SSMInner)*int64(c.SSMStateSize) > maxState:
		// Bounded before any session allocates it: the state's size is
		// not backed by tensor bytes the loader checks.
		return unsupported("a delta-net state of %d heads of %d×%d", c.SSMHeads, c.SSMStateSize, c.SSMStateSize)
	}
	// Multi-token-prediction blocks (llama.cpp's converter appends them
	// to block_count by default) are a draft head this engine does not
	// run: the model is the blocks before them, and their tensors are
	// left alone, as llama.cpp leaves them unless asked for MTP.
	if c.NextN, err = m.uint("nextn_predict_layers", 0, false); err != nil {
		return err
	}
	if c.NextN >= c.Layers {
		return invalid("%s = %d of %d blocks", m.key("nextn_predict_layers"), c.NextN, c.Layers)
	}
	all := c.Layers
	c.Layers -= c.NextN
	c.SWA = c.SWA[:c.Layers]

	c.Recurrent = make([]bool, c.Layers)
	key := m.key("attention.recurrent_layers")
	if v, ok := m.md.Lookup(key); ok {
		vals, isArr := v.Values()
		if !isArr || len(vals) != all {
			return invalid("%s is not %d flags", key, all)
		}
		for l := range c.Recurrent {
			if c.Recurrent[l], ok = vals[l].AsBool(); !ok {
				return invalid("%s element of type %s", key, vals[l].Type())
			}
		}
	} else {
		interval, err := m.uint("full_attention_interval", 4, false)
		if err != nil {
			return err
		}
		if interval <= 0 {
			return invalid("%s = %d", m.key("full_attention_interval"), interval)
		}
		for l := range c.Recurrent {
			c.Recurrent[l] = (l+1)%interval != 0
		}
	}
	return c.parseSections(m)
}

// parseSections reads the M-RoPE sections of Qwen3.5's attention and
// checks that text positions make it plain NeoX RoPE: llama.cpp rotates
// interleaved (IMROPE) sections by the temporal, height and width
// positions, all equal to the token's position for text, so every pair
// must fall in one of those three sections (the real models' 11/11/10 of
// 32 pairs do); a pair in the fourth would turn by another position.
func (c *Config) parseSections(m meta) error {
	key := m.key("rope.dimension_sections")
	var sec []int
	if a, ok := m.md.Int32s(key); ok {
		for _, v := range a {
			sec = append(sec, int(v))
		}
	} else if a, ok := m.md.Uint32s(key); ok {
		for _, v := range a {
			sec = append(sec, int(v))
		}
	} else {
		return invalid("%s is missing", key)
	}
	if len(sec) < 3 || len(sec) > 4 {
		return invalid("%s has %d sections", key, len(sec))
	}
	copy(c.RoPESections[:], sec)
	s := c.RoPESections
	total := 0
	for _, v := range s {
		if v < 0 || v > maxDim {
			return invalid("%s = %v", key, sec)
		}
		total += v
	}
	if total <= 0 || total > c.RoPEDims/2 {
		return invalid("%s = %v for %d rotary pairs", key, sec, c.RoPEDims/2)
	}
	for i := range c.RoPEDims / 2 {
		sector := i % total
		ok := sector%3 == 0 && sector < 3*s[0] || sector%3 == 1 && sector < 3*s[1] || sector%3 == 2 && sector < 3*s[2]
		if !ok {
			return unsupported("%s = %v: rotary pair %d turns by the fourth M-RoPE position", key, sec, i)
		}
	}
	return nil
}

// loadHybridLayer loads block l of a Qwen3.5 model: a delta net or gated
// attention, the post-attention norm the FFN starts from, and the FFN.
func (m *Model) loadHybridLayer(ld *loader, l int) error {
	c := &m.cfg
	ly := &m.layers[l-m.lo]
	name := func(s string) string { return fmt.Sprintf("blk.%d.%s", l, s) }
	var err error
	vec := func(dst *backend.Weight, s string, n int) {
		if err == nil {
			*dst, err = ld.vector(name(s), n, true)
		}
	}
	mat := func(dst *backend.Weight, s string, rows, cols int) {
		if err == nil {
			*dst, err = ld.matrix(name(s), rows, cols, true)
		}
	}
	host := func(dst *[]float32, s string, dims ...int) {
		if err == nil {
			*dst, err = ld.hostFloats(name(s), dims...)
		}
	}
	vec(&ly.attnNorm, "attn_norm.weight", c.Embd)
	vec(&ly.ffnNorm, "post_attention_norm.weight", c.Embd)
	if c.Recurrent[l] {
		d := &deltaLayer{}
		ly.delta = d
		mat(&d.wqkv, "attn_qkv.weight", c.convChannels(), c.Embd)
		mat(&d.wz, "attn_gate.weight", c.SSMInner, c.Embd)
		mat(&d.wBeta, "ssm_beta.weight", c.SSMHeads, c.Embd)
		mat(&d.wAlpha, "ssm_alpha.weight", c.SSMHeads, c.Embd)
		mat(&d.wOut, "ssm_out.weight", c.Embd, c.SSMInner)
		host(&d.conv, "ssm_conv1d.weight", c.ConvKernel, c.convChannels())
		host(&d.dtBias, "ssm_dt.bias", c.SSMHeads)
		host(&d.a, "ssm_a", c.SSMHeads)
		host(&d.norm, "ssm_norm.weight", c.SSMStateSize)
		if err == nil && m.dn != nil {
			err = m.deltaWeights(d)
		}
	} else {
		qDim, kDim, vDim := c.Heads*c.HeadDimK, c.KVHeads*c.HeadDimK, c.KVHeads*c.HeadDimV
		ly.attn = backend.Attention{Heads: c.Heads, KVHeads: c.KVHeads, HeadDimK: c.HeadDimK, HeadDimV: c.HeadDimV, Scale: c.AttnScale}
		if m.dn != nil {
			if err == nil {
				ly.wq, ly.attnGate, err = m.splitQGate(ld, name("attn_q.weight"))
			}
		} else {
			mat(&ly.qGate, "attn_q.weight", 2*qDim, c.Embd)
		}
		mat(&ly.wk, "attn_k.weight", kDim, c.Embd)
		mat(&ly.wv, "attn_v.weight", vDim, c.Embd)
		mat(&ly.wo, "attn_output.weight", c.Embd, qDim)
		vec(&ly.qNorm, "attn_q_norm.weight", c.HeadDimK)
		vec(&ly.kNorm, "attn_k_norm.weight", c.HeadDimK)
	}
	if err != nil {
		return err
	}
	if !c.spec.moe {
		mat(&ly.gate, "ffn_gate.weight", c.FF, c.Embd)
		mat(&ly.up, "ffn_up.weight", c.FF, c.Embd)
		mat(&ly.down, "ffn_down.weight", c.Embd, c.FF)
		return err
	}
	if err = m.loadExperts(ld, ly, name); err != nil {
		return err
	}
	sh := &sharedExpert{}
	ly.shared = sh
	mat(&sh.gate, "ffn_gate_shexp.weight", c.SharedFF, c.Embd)
	mat(&sh.up, "ffn_up_shexp.weight", c.SharedFF, c.Embd)
	mat(&sh.down, "ffn_down_shexp.weight", c.Embd, c.SharedFF)
	vec(&sh.gateInp, "ffn_gate_inp_shexp.weight", c.Embd)
	return err
}

// loadExperts loads a mixture-of-experts FFN's router and experts, for
// loadLayer (qwen3moe, gpt-oss, gemma4's routed experts aside) and the
// hybrid blocks alike.
func (m *Model) loadExperts(ld *loader, ly *layer, name func(string) string) error {
	c := &m.cfg
	var err error
	if ly.router, err = ld.matrix(name("ffn_gate_inp.weight"), c.Experts, c.Embd, true); err != nil {
		return err
	}
	if ly.gateExps, err = ld.experts(name("ffn_gate_exps.weight"), c.Experts, c.ExpertFF, c.Embd); err != nil {
		return err
	}
	if ly.upExps, err = ld.experts(name("ffn_up_exps.weight"), c.Experts, c.ExpertFF, c.Embd); err != nil {
		return err
	}
	ly.downExps, err = ld.experts(name("ffn_down_exps.weight"), c.Experts, c.Embd, c.ExpertFF)
	return err
}

// deltaWeights hands the backend a delta-net block's small weights, which
// the host reads as float32 (MadeBytes counts them).
func (m *Model) deltaWeights(d *deltaLayer) error {
	c := &m.cfg
	var err error
	w := func(dst *backend.Weight, v []float32, rows, cols int) {
		if err == nil {
			*dst, err = m.hostMatrix(v, rows, cols)
		}
	}
	w(&d.convW, d.conv, c.convChannels(), c.ConvKernel)
	d.params = backend.DeltaNet{KeyHeads: c.SSMGroups, Heads: c.SSMHeads, HeadDim: c.SSMStateSize, Eps: c.NormEps}
	w(&d.params.DTBias, d.dtBias, 1, c.SSMHeads)
	w(&d.params.A, d.a, 1, c.SSMHeads)
	w(&d.params.Norm, d.norm, 1, c.SSMStateSize)
	return err
}

// hostMatrix hands the backend an F32 rows × cols matrix of v, counted in
// MadeBytes.
func (m *Model) hostMatrix(v []float32, rows, cols int) (backend.Weight, error) {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	m.madeBytes += int64(len(b))
	return m.be.Weight(quant.F32, rows, cols, b)
}

// splitQGate loads Qwen3.5's joint query-and-gate projection (per head,
// the head's query rows then its gate rows) as two weights, the queries'
// rows and the gates', copied out of the file's rows: the backend then
// projects both with no host split between (each row's product is the
// same bits).
func (m *Model) splitQGate(ld *loader, name string) (q, gate backend.Weight, err error) {
	c := &m.cfg
	hd, w := c.HeadDimK, c.Heads*c.HeadDimK
	t, b, _, err := ld.lookup(name, true, c.Embd, 2*w)
	if err != nil {
		return nil, nil, err
	}
	rs, err := t.Type.RowSize(c.Embd)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: tensor %s: %w", ErrInvalid, name, err)
	}
	qb, gb := make([]byte, 0, w*rs), make([]byte, 0, w*rs)
	for h := range c.Heads {
		qb = append(qb, b[2*h*hd*rs:(2*h+1)*hd*rs]...)
		gb = append(gb, b[(2*h+1)*hd*rs:(2*h+2)*hd*rs]...)
	}
	if q, err = ld.weight(name, t.Type, w, c.Embd, qb); err != nil {
		return nil, nil, err
	}
	gate, err = ld.weight(name, t.Type, w, c.Embd, gb)
	return q, gate, err
}

// hostFloats reads a required F32/F16 tensor of exactly dims (row length
// first) to float32, for the parts of a delta net that run on the host.
func (ld *loader) hostFloats(name string, dims ...int) ([]float32, error) {
	t, b, _, err := ld.lookup(name, true, dims...)
	if err != nil {
		return nil, err
	}
	if t.Type != quant.F32 && t.Type != quant.F16 {
		return nil, fmt.Errorf("%w: tensor %s has type %s (want F32 or F16)", ErrUnsupported, name, t.Type)
	}
	n := 1
	for _, d := range dims {
		n *= d
	}
	out := make([]float32, n)
	if err := quant.Dequantize(t.Type, b, out); err != nil {
		return nil, fmt.Errorf("%w: tensor %s: %w", ErrInvalid, name, err)
	}
	return out, nil
}

// hybridScratch is the delta net's and the gated attention's per-step
// memory: device rows for the projections, host copies for the scan.
type hybridScratch struct {
	qkv, z, beta, alpha, y backend.Tensor
	qgate                  backend.Tensor // rows × 2·Heads·HeadDimK: the joint query and gate projection
	gate                   backend.Tensor // rows × Heads·HeadDimK: the attention's output gate (backend path)
	sh                     backend.Tensor // rows × 1: the shared expert's gate
	shGate, shUp, shOut    backend.Tensor // the shared expert's activations

	hQKV, hZ, hBeta, hAlpha, hY []float32
	hA, hB                      []float32 // rows × Embd or wider, for host-side combinations
	hGate                       []float32 // rows × Heads·HeadDimK: the attention's output gate
	win                         []float32 // ConvKernel × channels: one row's convolution window

	// LFM2's convolution blocks (shortconv.go): the in-projection's rows
	// (rows × 3·Embd); the convolution's output is y (rows × Embd).
	bcx backend.Tensor

	// The step's sequences for the backend's kernels, and their sessions.
	seqs  []backend.DeltaSeq
	owner []*Session
}

func newHybridScratch(be backend.Backend, c *Config, rows int) *hybridScratch {
	if c.spec.lfm2 {
		return &hybridScratch{bcx: be.NewTensor(rows, 3*c.Embd), y: be.NewTensor(rows, c.Embd)}
	}
	ch := c.convChannels()
	hs := &hybridScratch{
		qkv:    be.NewTensor(rows, ch),
		z:      be.NewTensor(rows, c.SSMInner),
		beta:   be.NewTensor(rows, c.SSMHeads),
		alpha:  be.NewTensor(rows, c.SSMHeads),
		y:      be.NewTensor(rows, c.SSMInner),
		qgate:  be.NewTensor(rows, 2*c.Heads*c.HeadDimK),
		gate:   be.NewTensor(rows, c.Heads*c.HeadDimK),
		hGate:  make([]float32, rows*c.Heads*c.HeadDimK),
		hQKV:   make([]float32, rows*ch),
		hZ:     make([]float32, rows*c.SSMInner),
		hBeta:  make([]float32, rows*c.SSMHeads),
		hAlpha: make([]float32, rows*c.SSMHeads),
		hY:     make([]float32, rows*c.SSMInner),
		hA:     make([]float32, rows*max(c.Embd, 2*c.Heads*c.HeadDimK)),
		hB:     make([]float32, rows*max(c.Embd, c.Heads*c.HeadDimV)),
	}
	if c.SharedFF > 0 {
		hs.sh = be.NewTensor(rows, 1)
		hs.shGate, hs.shUp = be.NewTensor(rows, c.SharedFF), be.NewTensor(rows, c.SharedFF)
		hs.shOut = be.NewTensor(rows, c.Embd)
	}
	return hs
}

// recurrent is a hybrid session's recurrent memory (delta nets' or LFM2's
// convolutions'), one of two kinds.
type recurrent struct {
	// On the host: the state per block (nil for attention blocks), and
	// its copy from before the last step.
	host, ck []hybridState
	// On the backend (Model.devStates): two states per block (zero
	// values for attention blocks). dev[cur] is the state; a step reads
	// it, writes dev[1-cur] and, done, makes that current.
	dev [2][]backend.DeltaState
	cur int
	// ckPos is the position the checkpoint is at, -1 when there is none:
	// on the host, ck; on the backend, dev[ckAt] (cur itself after a
	// rewind).
	ckPos, ckAt int
}

// devStates reports whether sessions keep their recurrent states on the
// backend, whose kernels advance them (Model.dn, Model.gc).
func (m *Model) devStates() bool { return m.dn != nil || m.gc != nil }

// stateShape is block ly's recurrent state: the convolution's channels
// (its state is ConvKernel−1 rows of them) and the scan's heads·d×d
// floats; 0 channels for a block without (attention), 0 floats for one
// without a scan (LFM2's convolutions).
func (m *Model) stateShape(ly *layer) (channels, ssm int) {
	c := &m.cfg
	switch {
	case ly.delta != nil:
		return c.convChannels(), c.SSMHeads * c.SSMStateSize * c.SSMStateSize
	case ly.conv != nil:
		return c.Embd, 0
	}
	return 0, 0
}

// newRecurrent is an empty sequence's memory for every recurrent block of
// the model (nil for a model without).
func (m *Model) newRecurrent() *recurrent {
	c := &m.cfg
	if c.Recurrent == nil {
		return nil
	}
	r := &recurrent{ckPos: -1}
	if m.devStates() {
		for i := range r.dev {
			r.dev[i] = make([]backend.DeltaState, len(m.layers))
			for l := range m.layers {
				ch, ssm := m.stateShape(&m.layers[l])
				if ch == 0 {
					continue
				}
				r.dev[i][l].Conv = m.be.NewTensor(c.ConvKernel-1, ch)
				if ssm > 0 {
					r.dev[i][l].SSM = m.be.NewTensor(c.SSMHeads*c.SSMStateSize, c.SSMStateSize)
				}
			}
		}
		return r
	}
	r.host = make([]hybridState, len(m.layers))
	for l := range m.layers {
		if ch, ssm := m.stateShape(&m.layers[l]); ch > 0 {
			r.host[l] = hybridState{conv: make([]float32, (c.ConvKernel-1)*ch), ssm: make([]float32, ssm)}
		}
	}
	return r
}

// StateBytes is the size of one session's recurrent memory (0 for a model
// without recurrent blocks): its state and the checkpoint kept beside it
// (the backend's second state).
func (m *Model) StateBytes() int64 {
	var n int64
	for l := range m.layers {
		ch, ssm := m.stateShape(&m.layers[l])
		n += int64((m.cfg.ConvKernel-1)*ch + ssm)
	}
	return 2 * 4 * n
}

// recurrentBlock runs a recurrent block of the forward pass on the
// residual rows x normed into h: the delta net (qwen35) or the gated
// convolution (lfm2), whose state every row advances, then, for the rows
// that go on (the logits rows in the model's last block), the residual
// add and the FFN. It returns those rows of x, and whether the step is
// done (the last block with no logits wanted).
func (m *Model) recurrentBlock(sc *scratch, ly *layer, l int, p *plan, x, h backend.Tensor, last bool) (backend.Tensor, bool) {
	be, eps := m.be, m.cfg.NormEps
	n := x.Rows
	o := sc.o.Slice(0, n)
	if ly.conv != nil {
		m.gatedConv(sc.hy, ly.conv, l, p, o, h)
	} else {
		m.deltaNet(sc.hy, ly, l, p, o, h)
	}
	if last && p.tail == n {
		return x, true
	}
	if last {
		o, x = o.Slice(p.tail, n), x.Slice(p.tail, n)
	}
	rows := x.Rows
	be.Add(x, o)
	h = sc.h.Slice(0, rows)
	be.RMSNorm(h, x, ly.ffnNorm, eps)
	if ly.router != nil {
		m.moeFFN(sc.moe, ly, o, h, h)
		if ly.shared != nil {
			m.sharedFFN(sc.hy, ly.shared, o, h)
		}
	} else {
		gate, up := sc.gate.Slice(0, rows), sc.up.Slice(0, rows)
		m.projectAll(sc, h, proj{gate, ly.gate, nil}, proj{up, ly.up, nil})
		be.GLU(gate, gate, up, backend.SiLU)
		be.MatMul(o, ly.down, gate)
	}
	be.Add(x, o)
	return x, false
}

// deltaNet sets o's rows to the delta-net block's output for the normed
// rows h, advancing each piece's session's state over its rows.
func (m *Model) deltaNet(hs *hybridScratch, ly *layer, l int, p *plan, o, h backend.Tensor) {
	be, c := m.be, &m.cfg
	d := ly.delta
	n := h.Rows
	ch, inner, nh := c.convChannels(), c.SSMInner, c.SSMHeads
	be.MatMul(hs.qkv.Slice(0, n), d.wqkv, h)
	be.MatMul(hs.z.Slice(0, n), d.wz, h)
	be.MatMul(hs.beta.Slice(0, n), d.wBeta, h)
	be.MatMul(hs.alpha.Slice(0, n), d.wAlpha, h)
	if m.dn != nil {
		seqs := hs.deltaSeqs(p, l)
		x, y := hs.qkv.Slice(0, n), hs.y.Slice(0, n)
		m.dn.ShortConv(x, d.convW, seqs)
		m.dn.DeltaScan(y, x, hs.z.Slice(0, n), hs.beta.Slice(0, n), hs.alpha.Slice(0, n), &d.params, seqs)
		clear(hs.seqs) // holds no session or state past the step
		clear(hs.owner)
		be.MatMul(o, d.wOut, y)
		return
	}
	be.Read(hs.hQKV[:n*ch], hs.qkv.Slice(0, n))
	be.Read(hs.hZ[:n*inner], hs.z.Slice(0, n))
	be.Read(hs.hBeta[:n*nh], hs.beta.Slice(0, n))
	be.Read(hs.hAlpha[:n*nh], hs.alpha.Slice(0, n))

	for _, pc := range p.pieces {
		st := &pc.s.rec.host[l]
		for r := pc.row; r < pc.row+pc.n; r++ {
			m.deltaRow(hs, d, st, r)
		}
	}
	be.Write(hs.y.Slice(0, n), hs.hY[:n*inner])
	be.MatMul(o, d.wOut, hs.y.Slice(0, n))
}

// deltaSeqs lays out the step's sequences for the backend's kernels in
// block l: a sequence's pieces (its body rows, then its tail) as its
// spans, read from its current state into the other.
func (hs *hybridScratch) deltaSeqs(p *plan, l int) []backend.DeltaSeq {
	hs.seqs, hs.owner = hs.seqs[:0], hs.owner[:0]
	for _, pc := range p.pieces {
		i := slices.Index(hs.owner, pc.s)
		if i < 0 {
			r := pc.s.rec
			hs.owner = append(hs.owner, pc.s)
			hs.seqs = append(hs.seqs, backend.DeltaSeq{Prev: r.dev[r.cur][l], Next: r.dev[1-r.cur][l]})
			i = len(hs.seqs) - 1
		}
		sq := &hs.seqs[i]
		k := 0
		if sq.Spans[0].N > 0 {
			k = 1
		}
		sq.Spans[k] = backend.RowSpan{Row: pc.row, N: pc.n}
	}
	return hs.seqs
}

// deltaRow runs row r of the step through the convolution, the
// recurrence and the gated norm, with st its sequence's state before it.
func (m *Model) deltaRow(hs *hybridScratch, d *deltaLayer, st *hybridState, r int) {
	c := &m.cfg
	ch, K, S := c.convChannels(), c.ConvKernel, c.SSMStateSize
	x := hs.hQKV[r*ch : (r+1)*ch]
	// The window is the conv state's K−1 rows then this row; the new
	// state drops the oldest (ggml_ssm_conv over the concatenation).
	if cap(hs.win) < K*ch {
		hs.win = make([]float32, K*ch)
	}
	win := hs.win[:K*ch]
	copy(win, st.conv)
	copy(win[(K-1)*ch:], x)
	for i := range ch {
		var sum float32
		w := d.conv[i*K : (i+1)*K]
		for k := range K {
			sum += float32(win[k*ch+i] * w[k]) // rounded: no FMA on arm64 either
		}
		x[i] = deltanet.Silu(sum)
	}
	copy(st.conv, win[ch:])

	kh := c.SSMGroups
	q, k, v := x[:kh*S], x[kh*S:2*kh*S], x[2*kh*S:]
	for h := range kh {
		deltanet.L2Norm(q[h*S:(h+1)*S], c.NormEps)
		deltanet.L2Norm(k[h*S:(h+1)*S], c.NormEps)
	}
	y := hs.hY[r*c.SSMInner : (r+1)*c.SSMInner]
	z := hs.hZ[r*c.SSMInner : (r+1)*c.SSMInner]
	for h := range c.SSMHeads {
		g := deltanet.Softplus(hs.hAlpha[r*c.SSMHeads+h]+d.dtBias[h]) * d.a[h]
		beta := deltanet.Sigmoid(hs.hBeta[r*c.SSMHeads+h])
		qh, khd := q[(h%kh)*S:(h%kh+1)*S], k[(h%kh)*S:(h%kh+1)*S]
		M := st.ssm[h*S*S : (h+1)*S*S]
		deltanet.HeadRow(M, M, qh, khd, v[h*S:(h+1)*S], z[h*S:(h+1)*S], d.norm, y[h*S:(h+1)*S], g, beta, c.NormEps)
	}
}

// projectQGate sets q to the query rows of Qwen3.5's joint query-and-gate
// projection of h, whose output is, per head, the head's query then its
// gate, and keeps the gates on the host for gateAttention. The weight is
// used as the file holds it (read in place); the rows are split on the
// host.
func (m *Model) projectQGate(hs *hybridScratch, ly *layer, q, h backend.Tensor) {
	be, c := m.be, &m.cfg
	n, hd, w := h.Rows, c.HeadDimK, c.Heads*c.HeadDimK
	if ly.attnGate != nil { // split at load: no host split
		be.MatMul(q, ly.wq, h)
		be.MatMul(hs.gate.Slice(0, n), ly.attnGate, h)
		return
	}
	qg := hs.qgate.Slice(0, n)
	be.MatMul(qg, ly.qGate, h)
	all := hs.hA[:n*2*w]
	be.Read(all, qg)
	qs := hs.hB[:n*w]
	for r := range n {
		for hh := range c.Heads {
			src := all[r*2*w+2*hh*hd:]
			copy(qs[r*w+hh*hd:r*w+(hh+1)*hd], src[:hd])
			copy(hs.hGate[r*w+hh*hd:r*w+(hh+1)*hd], src[hd:2*hd])
		}
	}
	be.Write(q, qs)
}

// gateAttention multiplies the attention output att, the step's rows from
// first on, by sigmoid of their gates (projectQGate), Qwen3.5's output
// gate, before the output projection.
func (m *Model) gateAttention(hs *hybridScratch, att backend.Tensor, first int) {
	be := m.be
	n, w := att.Rows, att.Cols
	if m.dn != nil {
		m.dn.SigmoidMul(att, hs.gate.Slice(first, first+n))
		return
	}
	a := hs.hB[:n*w]
	be.Read(a, att)
	g := hs.hGate[first*w : (first+n)*w]
	for i := range a {
		a[i] *= deltanet.Sigmoid(g[i])
	}
	be.Write(att, a)
}

// sharedFFN adds qwen35moe's gated shared expert of the normed rows h to
// o, which holds the routed experts' sum.
func (m *Model) sharedFFN(hs *hybridScratch, sh *sharedExpert, o, h backend.Tensor) {
	be, c := m.be, &m.cfg
	n := h.Rows
	gate, up, out, sg := hs.shGate.Slice(0, n), hs.shUp.Slice(0, n), hs.shOut.Slice(0, n), hs.sh.Slice(0, n)
	be.MatMul(gate, sh.gate, h)
	be.MatMul(up, sh.up, h)
	be.GLU(gate, gate, up, backend.SiLU)
	be.MatMul(out, sh.down, gate)
	be.MatMul(sg, sh.gateInp, h)
	if m.dn != nil {
		m.dn.SigmoidMul(out, sg)
		be.Add(o, out)
		return
	}
	e := c.Embd
	a, b := hs.hA[:n*e], hs.hB[:n*e]
	be.Read(a, o)
	be.Read(b, out)
	gs := hs.hZ[:n] // the delta net's z rows are free here
	be.Read(gs, sg)
	for r := range n {
		s := deltanet.Sigmoid(gs[r])
		for i := r * e; i < (r+1)*e; i++ {
			a[i] += float32(b[i] * s) // rounded, as SigmoidMul then Add (no FMA on arm64)
		}
	}
	be.Write(o, a)
}

// checkpoint records the recurrent state of every hybrid session of the
// step's plan before the step changes it, on the host: a failed step
// restores it, and Truncate rewinds to it. On the backend the step writes
// the sessions' other states, and commit makes them current.
func checkpoint(p *plan) {
	for i, pc := range p.pieces {
		s := pc.s
		r := s.rec
		if r == nil || r.host == nil || seenBefore(p.pieces[:i], s) {
			continue
		}
		if r.ck == nil {
			r.ck = make([]hybridState, len(r.host))
			for l, st := range r.host {
				if st.conv != nil {
					r.ck[l] = hybridState{conv: make([]float32, len(st.conv)), ssm: make([]float32, len(st.ssm))}
				}
			}
		}
		copyState(r.ck, r.host)
		r.ckPos = len(s.tokens)
	}
}

// commit ends a step that succeeded: each hybrid session on the backend
// takes the states the step wrote as current, and the ones it read as
// its checkpoint.
func commit(p *plan) {
	for i, pc := range p.pieces {
		s := pc.s
		r := s.rec
		if r == nil || r.host != nil || seenBefore(p.pieces[:i], s) {
			continue
		}
		r.ckAt, r.ckPos = r.cur, len(s.tokens)
		r.cur = 1 - r.cur
	}
}

func seenBefore(pieces []piece, s *Session) bool {
	for _, pc := range pieces {
		if pc.s == s {
			return true
		}
	}
	return false
}

func copyState(dst, src []hybridState) {
	for l := range src {
		copy(dst[l].conv, src[l].conv)
		copy(dst[l].ssm, src[l].ssm)
	}
}

// rollback restores the checkpoint of every hybrid session of a step that
// failed part-way, so its state again matches its tokens. On the backend
// the current states were only read, but the step may have written over
// the checkpoint in the other states: the checkpoint is now the current
// state, as on the host.
func rollback(p *plan) {
	for _, pc := range p.pieces {
		r := pc.s.rec
		switch {
		case r == nil:
		case r.host == nil:
			r.ckAt, r.ckPos = r.cur, len(pc.s.tokens)
		case r.ckPos == len(pc.s.tokens):
			copyState(r.host, r.ck)
		}
	}
}

// rewind makes a hybrid session's state that after its first n tokens: a
// recurrent state cannot drop positions, so it restores the checkpoint
// taken before the last step (or the empty state, when n is before it)
// and evaluates the tokens from there to n again. The attention blocks'
// keys and values at those positions are rewritten with the same bits.
func (s *Session) rewind(n int) {
	r := s.rec
	from := 0
	switch {
	case r.ckPos >= 0 && r.ckPos <= n && r.host != nil:
		copyState(r.host, r.ck)
		from = r.ckPos
	case r.ckPos >= 0 && r.ckPos <= n:
		r.cur = r.ckAt // the swap back
		from = r.ckPos
	case r.host != nil:
		for l := range r.host {
			clear(r.host[l].conv)
			clear(r.host[l].ssm)
		}
	default:
		s.m.clearStates(r.dev[r.cur])
		r.ckAt, r.ckPos = r.cur, 0
	}
	redo := append([]uint32(nil), s.tokens[from:n]...)
	s.tokens = s.tokens[:from]
	s.ownScratch()
	for len(redo) > 0 {
		k := min(len(redo), s.batch)
		s.p.reset()
		s.p.addBody(s, redo[:k], 0)
		s.p.tail = k // no logits
		if err := s.m.forward(context.Background(), s.sc, &s.p); err != nil {
			// forward fails only on its context, which is never done.
			panic(fmt.Sprintf("model: re-evaluating a rewound sequence: %v", err))
		}
		s.tokens = append(s.tokens, redo[:k]...)
		redo = redo[k:]
	}
}

// clearStates empties a session's backend states: zero is the empty state
// in every backend's layout.
func (m *Model) clearStates(st []backend.DeltaState) {
	var zero []float32
	for _, d := range st {
		for _, t := range []backend.Tensor{d.Conv, d.SSM} {
			if t.Buf == nil {
				continue
			}
			if len(zero) < t.Len() {
				zero = make([]float32, t.Len())
			}
			m.be.Write(t, zero)
		}
	}
}

// mtpTensor reports whether name belongs to a multi-token-prediction
// block the file carries after the model's (Config.NextN), unused here.
func (c *Config) mtpTensor(name string) bool {
	rest, ok := strings.CutPrefix(name, "blk.")
	num, _, ok2 := strings.Cut(rest, ".")
	l, err := strconv.Atoi(num)
	return ok && ok2 && err == nil && strconv.Itoa(l) == num && l >= c.Layers && l < c.Layers+c.NextN
}

// parseShared reads qwen35moe's shared expert width (its FFN width when
// absent, as llama.cpp defaults it) and refuses a routing scale, which
// this engine does not apply.
func (c *Config) parseShared(m meta) error {
	var err error
	if c.SharedFF, err = m.uint("expert_shared_feed_forward_length", c.FF, false); err != nil {
		return err
	}
	if c.SharedFF <= 0 || c.SharedFF > maxDim {
		return invalid("%s = %d", m.key("expert_shared_feed_forward_length"), c.SharedFF)
	}
	if s, err := m.float("expert_weights_scale", 0); err != nil {
		return err
	} else if s != 0 && s != 1 {
		return unsupported("%s = %v", m.key("expert_weights_scale"), s)
	}
	return nil
}
