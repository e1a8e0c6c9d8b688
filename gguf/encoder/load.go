package encoder

import (
	"fmt"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// loader hands out the file's tensors, checking their shapes.
type loader struct {
	f  *gguf.File
	be backend.Backend
}

// lookup finds name and checks its shape (gguf.File.TensorShaped).
func (ld *loader) lookup(name string, required bool, want ...int) (gguf.TensorInfo, []byte, bool, error) {
	t, b, ok, err := ld.f.TensorShaped(name, want...)
	switch {
	case !ok && required:
		return t, nil, false, fmt.Errorf("%w: tensor %s is missing", ErrInvalid, name)
	case err != nil:
		return t, nil, false, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return t, b, ok, nil
}

// matrix loads a rows × cols weight (ne = {cols, rows}); nil where it is
// optional and absent.
func (ld *loader) matrix(name string, rows, cols int, required bool) (backend.Weight, error) {
	t, b, ok, err := ld.lookup(name, required, cols, rows)
	if !ok || err != nil {
		return nil, err
	}
	w, err := ld.be.Weight(t.Type, rows, cols, b)
	if err != nil {
		return nil, fmt.Errorf("%w: tensor %s (%s): %w", ErrInvalid, name, t.Type, err)
	}
	return w, nil
}

// floats reads a required n-element vector to float32 (a layer norm's,
// which the host applies).
func (ld *loader) floats(name string, n int) ([]float32, error) {
	t, b, _, err := ld.lookup(name, true, n)
	if err != nil {
		return nil, err
	}
	out := make([]float32, t.Elements())
	if err := quant.Dequantize(t.Type, b, out); err != nil {
		return nil, fmt.Errorf("%w: tensor %s: %w", ErrInvalid, name, err)
	}
	return out, nil
}

// firstRow loads the first row of an optional n × rows tensor as a
// 1-row weight (a bias the backend adds to every row); nil where the file
// has none.
func (ld *loader) firstRow(name string, n, rows int) (backend.Weight, error) {
	t, b, ok, err := ld.lookup(name, false, n, rows)
	if !ok || err != nil {
		return nil, err
	}
	w, err := ld.be.Weight(t.Type, 1, n, b[:t.RowSize()])
	if err != nil {
		return nil, fmt.Errorf("%w: tensor %s (%s): %w", ErrInvalid, name, t.Type, err)
	}
	return w, nil
}

// spec is a weight of a block: where it goes, its name after
// "blk.N.", its shape, and whether the file must have it.
type spec struct {
	dst        *backend.Weight
	name       string
	rows, cols int
	required   bool
}

// layer loads block i.
func (ld *loader) layer(ly *layer, i int, c Config) error {
	if c.Sandwich {
		return ld.sandwichLayer(ly, i, c)
	}
	name := func(s string) string { return fmt.Sprintf("blk.%d.%s", i, s) }
	e := c.Embd
	mats := []spec{
		{&ly.o, "attn_output.weight", e, e, true},
		{&ly.ob, "attn_output.bias", 1, e, false},
	}
	if c.FusedQKV {
		mats = append(mats, spec{&ly.qkv, "attn_qkv.weight", 3 * e, e, true}, spec{&ly.qkvb, "attn_qkv.bias", 1, 3 * e, false})
	} else {
		for _, p := range []struct {
			w, b *backend.Weight
			name string
		}{{&ly.q, &ly.qb, "attn_q"}, {&ly.k, &ly.kb, "attn_k"}, {&ly.v, &ly.vb, "attn_v"}} {
			mats = append(mats, spec{p.w, p.name + ".weight", e, e, true}, spec{p.b, p.name + ".bias", 1, e, false})
		}
	}
	if c.MoEEvery > 0 && i%c.MoEEvery == 1 {
		return ld.moeLayer(ly, i, c, mats)
	}
	if c.FusedGate {
		if err := ld.fusedGate(ly, name("ffn_up"), c); err != nil {
			return err
		}
	} else {
		mats = append(mats, spec{&ly.up, "ffn_up.weight", c.FF, e, true}, spec{&ly.upb, "ffn_up.bias", 1, c.FF, false})
	}
	mats = append(mats, spec{&ly.down, "ffn_down.weight", e, c.FF, true}, spec{&ly.downb, "ffn_down.bias", 1, e, false})
	if c.FFN != GELU && !c.FusedGate {
		mats = append(mats, spec{&ly.gate, "ffn_gate.weight", c.FF, e, true})
	} else if _, ok := ld.f.Tensor(name("ffn_gate.weight")); ok {
		// Load took the feed-forward's kind from blk.0; a gate it would
		// leave unused means the file is not what blk.0 says.
		return fmt.Errorf("%w: blk.%d has a gate (ffn_gate.weight) where blk.0 has none", ErrInvalid, i)
	}
	if err := ld.weights(i, mats); err != nil {
		return err
	}
	if err := ld.norms(ly, i, c); err != nil {
		return err
	}
	if c.Arch == "jina-bert-v2" {
		// Layer norms of the queries and the keys (jina-embeddings-v2-code),
		// and a second one after attention (attn_norm_2), each optional.
		for _, v := range []struct {
			w, b *[]float32
			name string
		}{{&ly.qNormW, &ly.qNormB, "attn_q_norm"}, {&ly.kNormW, &ly.kNormB, "attn_k_norm"}, {&ly.norm2W, &ly.norm2B, "attn_norm_2"}} {
			var err error
			if *v.w, *v.b, err = ld.optionalNorm(name(v.name), e); err != nil {
				return err
			}
		}
	}
	return nil
}

// weights loads block i's matrices and vectors.
func (ld *loader) weights(i int, mats []spec) error {
	for _, m := range mats {
		var err error
		if *m.dst, err = ld.weight(fmt.Sprintf("blk.%d.%s", i, m.name), m.rows, m.cols, m.required); err != nil {
			return err
		}
	}
	return nil
}

// norms loads block i's two layer norms: after attention and at its end
// (with biases), or modern-bert's before each (without; the first
// layer's attention norm optional, an identity where the file has none).
func (ld *loader) norms(ly *layer, i int, c Config) error {
	name := func(s string) string { return fmt.Sprintf("blk.%d.%s", i, s) }
	var err error
	if c.PreNorm {
		if _, ok := ld.f.Tensor(name("attn_norm.weight")); ok || i > 0 {
			if ly.inNormW, ly.inNormB, err = ld.norm(name("attn_norm"), c.Embd, false); err != nil {
				return err
			}
		}
		ly.ffnNormW, ly.ffnNormB, err = ld.norm(name("ffn_norm"), c.Embd, false)
		return err
	}
	if ly.attnNormW, ly.attnNormB, err = ld.norm(name("attn_output_norm"), c.Embd, true); err != nil {
		return err
	}
	ly.outNormW, ly.outNormB, err = ld.norm(name("layer_output_norm"), c.Embd, true)
	return err
}

// norm reads a layer norm's weight and, where bias is set, its bias;
// without one, a bias of zeros (ggml_norm then a scale alone).
func (ld *loader) norm(name string, n int, bias bool) (w, b []float32, err error) {
	if w, err = ld.floats(name+".weight", n); err != nil {
		return nil, nil, err
	}
	if !bias {
		return w, make([]float32, n), nil
	}
	if b, err = ld.floats(name+".bias", n); err != nil {
		return nil, nil, err
	}
	return w, b, nil
}

// moeLayer loads nomic-bert-moe's block i, whose feed-forward is a
// mixture of experts: the router (ffn_gate_inp, Experts rows) and each
// expert's up and down matrices, views of the file's 3-D tensors
// (ffn_up_exps: Experts × FF × Embd; ffn_down_exps: Experts × Embd ×
// FF), with the attention's matrices mats.
func (ld *loader) moeLayer(ly *layer, i int, c Config, mats []spec) error {
	mats = append(mats, spec{&ly.router, "ffn_gate_inp.weight", c.Experts, c.Embd, true})
	if err := ld.weights(i, mats); err != nil {
		return err
	}
	var err error
	if ly.upExps, err = ld.experts(fmt.Sprintf("blk.%d.ffn_up_exps.weight", i), c.Experts, c.FF, c.Embd); err != nil {
		return err
	}
	if ly.downExps, err = ld.experts(fmt.Sprintf("blk.%d.ffn_down_exps.weight", i), c.Experts, c.Embd, c.FF); err != nil {
		return err
	}
	return ld.norms(ly, i, c)
}

// experts loads a 3-D tensor of n experts' rows × cols matrices (ne =
// {cols, rows, n}) as a weight per expert over its bytes.
func (ld *loader) experts(name string, n, rows, cols int) ([]backend.Weight, error) {
	t, b, _, err := ld.lookup(name, true, cols, rows, n)
	if err != nil {
		return nil, err
	}
	size := rows * int(t.RowSize())
	out := make([]backend.Weight, n)
	for x := range out {
		if out[x], err = ld.be.Weight(t.Type, rows, cols, b[x*size:(x+1)*size]); err != nil {
			return nil, fmt.Errorf("%w: tensor %s (%s): %w", ErrInvalid, name, t.Type, err)
		}
	}
	return out, nil
}

// optionalNorm reads an optional layer norm's weight and bias (a bias of
// zeros where the file has only the weight); nil where it has neither.
func (ld *loader) optionalNorm(name string, n int) (w, b []float32, err error) {
	_, hasW := ld.f.Tensor(name + ".weight")
	_, hasB := ld.f.Tensor(name + ".bias")
	switch {
	case !hasW && hasB:
		return nil, nil, fmt.Errorf("%w: tensor %s.bias without its weight", ErrInvalid, name)
	case !hasW:
		return nil, nil, nil
	}
	return ld.norm(name, n, hasB)
}

// fusedGate loads jina-bert-v2's ffn_up of 2·FF rows, the gate its first
// half and up its second (ggml_geglu's split), as two weights over the
// halves of its bytes: each output row is a dot product of its own, so
// the halves compute what the whole would, with no split on the host.
func (ld *loader) fusedGate(ly *layer, name string, c Config) error {
	t, b, _, err := ld.lookup(name+".weight", true, c.Embd, 2*c.FF)
	if err != nil {
		return err
	}
	half := c.FF * int(t.RowSize())
	if ly.gate, err = ld.be.Weight(t.Type, c.FF, c.Embd, b[:half]); err == nil {
		ly.up, err = ld.be.Weight(t.Type, c.FF, c.Embd, b[half:2*half])
	}
	if err != nil {
		return fmt.Errorf("%w: tensor %s.weight (%s): %w", ErrInvalid, name, t.Type, err)
	}
	t, b, ok, err := ld.lookup(name+".bias", false, 2*c.FF)
	if !ok || err != nil {
		return err
	}
	half = int(t.RowSize()) / 2 // a vector: one row of 2·FF
	if ly.gateb, err = ld.be.Weight(t.Type, 1, c.FF, b[:half]); err == nil {
		ly.upb, err = ld.be.Weight(t.Type, 1, c.FF, b[half:2*half])
	}
	if err != nil {
		return fmt.Errorf("%w: tensor %s.bias (%s): %w", ErrInvalid, name, t.Type, err)
	}
	return nil
}

// weight loads a matrix, or a vector as a 1-row one (ne = {cols}).
func (ld *loader) weight(name string, rows, cols int, required bool) (backend.Weight, error) {
	if rows != 1 {
		return ld.matrix(name, rows, cols, required)
	}
	t, b, ok, err := ld.lookup(name, required, cols)
	if !ok || err != nil {
		return nil, err
	}
	w, err := ld.be.Weight(t.Type, 1, cols, b)
	if err != nil {
		return nil, fmt.Errorf("%w: tensor %s (%s): %w", ErrInvalid, name, t.Type, err)
	}
	return w, nil
}

// head loads the classification head a reranker carries: cls (a dense
// layer, then tanh) and cls.output (Classes rows), each optional as
// llama.cpp has them, with the count of classes from
// <arch>.classifier.output_labels (1 where it names none). cls is
// Embd-square before a cls.output; alone it may be narrower
// (jina-reranker-v1's is one row: the score).
func (ld *loader) head(m *Model) error {
	c := &m.cfg
	var err error
	t, ok := ld.f.Tensor("cls.weight")
	_, hasOut := ld.f.Tensor("cls.output.weight")
	m.clsRows = c.Embd
	if ok && !hasOut && !c.PreNorm && len(t.Dims) == 2 && t.Dims[1] >= 1 && t.Dims[1] < int64(c.Embd) {
		m.clsRows = int(t.Dims[1])
	}
	if m.cls, err = ld.matrix("cls.weight", m.clsRows, c.Embd, false); err != nil {
		return err
	}
	if m.cls != nil {
		if m.clsB, err = ld.weight("cls.bias", 1, m.clsRows, false); err != nil {
			return err
		}
		if c.PreNorm {
			if m.clsNormW, m.clsNormB, err = ld.optionalNorm("cls.norm", c.Embd); err != nil {
				return err
			}
		}
	}
	if !hasOut {
		if m.cls != nil {
			c.Classes = 1 // the dense layer's first output is the score, as llama-server takes it
		}
		return nil
	}
	t, _ = ld.f.Tensor("cls.output.weight")
	classes := 1
	if labels, ok := ld.f.Metadata.ArrayLen(c.Arch + ".classifier.output_labels"); ok && labels > 0 {
		classes = labels
	}
	if classes > c.Embd {
		return fmt.Errorf("%w: %d classifier labels for a width of %d", ErrInvalid, classes, c.Embd)
	}
	if len(t.Dims) < 2 && classes != 1 || len(t.Dims) >= 2 && t.Dims[1] != int64(classes) {
		return fmt.Errorf("%w: tensor cls.output.weight has shape %v, want [%d %d]", ErrInvalid, t.Dims, c.Embd, classes)
	}
	if m.clsOut, err = ld.matrix("cls.output.weight", classes, c.Embd, true); err != nil {
		return err
	}
	if m.clsOutB, err = ld.weight("cls.output.bias", 1, classes, false); err != nil {
		return err
	}
	c.Classes = classes
	return nil
}

// sandwichModel loads gemma-embedding's tensors outside its blocks: the
// output's RMS norm and the optional dense projections (both or neither).
func (ld *loader) sandwichModel(m *Model) error {
	c := m.cfg
	var err error
	if m.rmsOut, err = ld.weight("output_norm.weight", 1, c.Embd, true); err != nil {
		return err
	}
	_, d2 := ld.f.Tensor("dense_2.weight")
	_, d3 := ld.f.Tensor("dense_3.weight")
	switch {
	case d2 != d3:
		return fmt.Errorf("%w: dense_2.weight and dense_3.weight come together (sentence-transformers' two projections); the file has one", ErrInvalid)
	case !d2:
		return nil
	case c.Dense2Out == 0 || c.Dense3In != c.Dense2Out:
		return fmt.Errorf("%w: dense projections %d then %d wide: %s.dense_2_feat_out and dense_3_feat_in must be set and agree", ErrInvalid, c.Dense2Out, c.Dense3In, c.Arch)
	}
	if m.dense2, err = ld.matrix("dense_2.weight", c.Dense2Out, c.Embd, true); err != nil {
		return err
	}
	m.dense3, err = ld.matrix("dense_3.weight", c.Embd, c.Dense3In, true)
	return err
}

// sandwichLayer loads gemma-embedding's block i: its projections (the
// queries Heads·HeadDim wide, the keys and values KVHeads·HeadDim), its
// gated feed-forward, and its six RMS norms, all without biases.
func (ld *loader) sandwichLayer(ly *layer, i int, c Config) error {
	e, qw, kw := c.Embd, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	return ld.weights(i, []spec{
		{&ly.q, "attn_q.weight", qw, e, true}, {&ly.k, "attn_k.weight", kw, e, true}, {&ly.v, "attn_v.weight", kw, e, true},
		{&ly.o, "attn_output.weight", e, qw, true},
		{&ly.gate, "ffn_gate.weight", c.FF, e, true}, {&ly.up, "ffn_up.weight", c.FF, e, true}, {&ly.down, "ffn_down.weight", e, c.FF, true},
		{&ly.rmsIn, "attn_norm.weight", 1, e, true}, {&ly.rmsPostAttn, "post_attention_norm.weight", 1, e, true},
		{&ly.qRMS, "attn_q_norm.weight", 1, c.HeadDim, true}, {&ly.kRMS, "attn_k_norm.weight", 1, c.HeadDim, true},
		{&ly.rmsFFN, "ffn_norm.weight", 1, e, true}, {&ly.rmsPostFFN, "post_ffw_norm.weight", 1, e, true},
	})
}
