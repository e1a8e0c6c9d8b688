package modeltest

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/quant"
)

// InflateShape is the shape Inflate pads a model to: attention heads
// (of the model's own head dimension), KV heads, feed-forward width and
// blocks, each at least the model's.
type InflateShape struct {
	Heads, KVHeads, FF, Layers int
}

// Inflate writes to dst the llama model at src padded to a larger shape
// that computes the same function (up to rounding), with every matrix
// quantised to typ: a trained model at the cost of a larger one. Speed
// measured on it is a model of that size's — every weight is read and
// multiplied — and what a proposer's drafts are worth is the trained
// model's, which a random-weight model of the size cannot show.
//
// The residual stream's new dimensions stay exactly zero: the embedding
// and every product writing to the residual (attn_output, ffn_down) are
// zero outside the model's own block, so new heads, new feed-forward
// units and the added blocks (whose attn_output and ffn_down are all
// zero) add exact zeros. Everything they compute from is filled with
// seeded normal weights, so they cost what real ones do. RMSNorm's mean
// runs over the wider stream: its weights are scaled by √(e/E) and its
// epsilon by e/E, which leaves the normalised values as they were. The
// model's own blocks come first.
func Inflate(src, dst string, typ quant.Type, sh InflateShape, seed uint64) error {
	f, err := gguf.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	md := f.Metadata
	if arch, _ := md.String("general.architecture"); arch != "llama" {
		return fmt.Errorf("inflate %s: architecture %q, not llama", src, arch)
	}
	get := func(k string) (int, error) {
		v, ok := md.Uint64("llama." + k)
		if !ok || v == 0 || v > 1<<20 {
			return 0, fmt.Errorf("inflate %s: llama.%s missing or out of range", src, k)
		}
		return int(v), nil
	}
	var e, heads, kvHeads, ff, layers int
	for _, p := range []struct {
		dst *int
		key string
	}{{&e, "embedding_length"}, {&heads, "attention.head_count"}, {&kvHeads, "attention.head_count_kv"}, {&ff, "feed_forward_length"}, {&layers, "block_count"}} {
		if *p.dst, err = get(p.key); err != nil {
			return err
		}
	}
	eps, ok := md.Float32("llama.attention.layer_norm_rms_epsilon")
	if !ok || e%heads != 0 || heads%kvHeads != 0 {
		return fmt.Errorf("inflate %s: no RMSNorm epsilon, or heads that do not divide", src)
	}
	hd := e / heads
	if sh.Heads < heads || sh.KVHeads < kvHeads || sh.FF < ff || sh.Layers < layers ||
		sh.Heads%sh.KVHeads != 0 || sh.Heads/sh.KVHeads != heads/kvHeads {
		return fmt.Errorf("inflate %s: shape %+v is not a widening of %d heads (%d KV), %d wide, %d blocks that keeps the heads' grouping", src, sh, heads, kvHeads, ff, layers)
	}
	E, KV := sh.Heads*hd, sh.KVHeads*hd
	if E%typ.BlockSize() != 0 || sh.FF%typ.BlockSize() != 0 {
		return fmt.Errorf("inflate %s: rows of %d and %d are not whole %v blocks", src, E, sh.FF, typ)
	}
	r := float64(e) / float64(E)
	normScale := math.Sqrt(r)

	w := gguf.NewWriter()
	if err := copyMetadata(w, md, map[string]any{
		"llama.embedding_length":                 uint32(E),
		"llama.attention.head_count":             uint32(sh.Heads),
		"llama.attention.head_count_kv":          uint32(sh.KVHeads),
		"llama.feed_forward_length":              uint32(sh.FF),
		"llama.block_count":                      uint32(sh.Layers),
		"llama.attention.layer_norm_rms_epsilon": float32(float64(eps) * r),
	}); err != nil {
		return fmt.Errorf("inflate %s: %w", src, err)
	}

	// old reads one of the model's tensors as floats (nil where the name
	// is a block the model does not have).
	old := func(name string) ([]float32, *gguf.TensorInfo, error) {
		t, ok := f.Tensor(name)
		if !ok {
			return nil, nil, nil
		}
		data, err := f.TensorData(t)
		if err != nil {
			return nil, nil, err
		}
		x := make([]float32, t.Elements())
		if err := quant.Dequantize(t.Type, data, x); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		return x, &t, nil
	}
	// pad is the kind of a tensor's new weights: zero where they write to
	// the residual stream's new dimensions or add to it from new units,
	// seeded normals where they only read.
	type pad int
	const (
		zero pad = iota
		normals
	)
	type plan struct {
		name       string
		rows, cols int // the new shape (a vector: rows 1)
		fill       pad
		norm       bool // an RMSNorm weight: scaled, padded with ones
	}
	plans := []plan{
		{"token_embd.weight", 0, E, zero, false},
		{"output_norm.weight", 1, E, zero, true},
		{"output.weight", 0, E, normals, false},
	}
	for l := range sh.Layers {
		p := "blk." + strconv.Itoa(l) + "."
		plans = append(plans,
			plan{p + "attn_norm.weight", 1, E, zero, true},
			plan{p + "attn_q.weight", E, E, normals, false},
			plan{p + "attn_k.weight", KV, E, normals, false},
			plan{p + "attn_v.weight", KV, E, normals, false},
			plan{p + "attn_output.weight", E, E, zero, false},
			plan{p + "ffn_norm.weight", 1, E, zero, true},
			plan{p + "ffn_gate.weight", sh.FF, E, normals, false},
			plan{p + "ffn_up.weight", sh.FF, E, normals, false},
			plan{p + "ffn_down.weight", E, sh.FF, zero, false},
		)
	}
	// A model whose output head is its embedding (no output.weight)
	// keeps it tied.
	plans = slices.DeleteFunc(plans, func(p plan) bool {
		_, ok := f.Tensor(p.name)
		return p.rows == 0 && !ok
	})
	// Every tensor of the model must have a plan: a bias or a tensor of
	// another kind would be dropped, and the function changed.
	planned := map[string]bool{}
	for _, p := range plans {
		planned[p.name] = true
	}
	for _, t := range f.Tensors {
		if !planned[t.Name] {
			return fmt.Errorf("inflate %s: tensor %s has no place in the inflated model", src, t.Name)
		}
	}

	out := make([][]byte, len(plans))
	types := make([]quant.Type, len(plans))
	dims := make([][]int64, len(plans))
	err = parallel(len(plans), func(i int) error {
		p := plans[i]
		x, t, err := old(p.name)
		if err != nil {
			return err
		}
		rows, cols := p.rows, p.cols
		oldRows, oldCols := 0, 0
		if t != nil {
			oldCols, oldRows = int(t.RowLen()), int(t.Rows())
			if rows == 0 { // as many rows as the model's (the vocabulary)
				rows = oldRows
			}
			if oldRows > rows || oldCols > cols {
				return fmt.Errorf("%s: %d×%d does not fit %d×%d", p.name, oldRows, oldCols, rows, cols)
			}
		}
		nw := make([]float32, rows*cols)
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		for row := range rows {
			for c := range cols {
				var v float32
				switch {
				case row < oldRows && c < oldCols:
					v = x[row*oldCols+c]
					if p.norm {
						v = float32(float64(v) * normScale)
					}
				case p.norm:
					v = 1
				case p.fill == normals:
					v = float32(rng.NormFloat64() * 0.02)
				}
				nw[row*cols+c] = v
			}
		}
		if p.norm {
			types[i], dims[i] = quant.F32, []int64{int64(cols)}
			out[i] = make([]byte, 4*cols)
			return quant.Quantize(quant.F32, nw, out[i])
		}
		types[i], dims[i] = typ, []int64{int64(cols), int64(rows)}
		out[i] = make([]byte, rows*typ.TypeSize()*(cols/typ.BlockSize()))
		if err := quant.Quantize(typ, nw, out[i]); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("inflate %s: %w", src, err)
	}
	for i, p := range plans {
		if err := w.AddTensor(p.name, types[i], dims[i], out[i]); err != nil {
			return fmt.Errorf("inflate %s: %w", src, err)
		}
	}
	return writeFile(dst, func(o io.Writer) error {
		_, err := w.WriteTo(o)
		return err
	})
}
