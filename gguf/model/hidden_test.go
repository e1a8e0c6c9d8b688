package model_test

import (
	"context"
	"math"
	"testing"

	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/quant"
)

// TestEvalHiddenFeedsTheHead: the hidden state EvalHidden returns for
// each position is the output head's input there. The test multiplies it
// by the output matrix, dequantised here, in float64 and compares the
// result with the logits Eval gives after the same position on another
// session. They differ by the head's quantisation of its input to 8 bits
// (the kernels' Q8_0 activations): within 2% of the logits' range.
func TestEvalHiddenFeedsTheHead(t *testing.T) {
	path, ok := modelPath("meshnode-fortunes-q8_0.gguf")
	if !ok {
		t.Skip("the fortunes model is not in models/")
	}
	be := cpu.New(cpu.Options{})
	defer be.Close()
	f, m := modeltest.Load(t, path, be)
	c := m.Config()
	info, ok := f.Tensor("output.weight")
	if !ok {
		info, _ = f.Tensor("token_embd.weight") // tied
	}
	raw, err := f.TensorData(info)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, c.VocabSize*c.Embd)
	if err := quant.Dequantize(info.Type, raw, out); err != nil {
		t.Fatal(err)
	}

	tokens := []uint32{1, 450, 6635, 3290, 373, 278, 1775, 29889, 450, 6635}
	for i := range tokens {
		tokens[i] %= uint32(c.VocabSize)
	}
	a, err := m.NewSession(model.SessionOptions{Context: 64, Batch: 4}) // several steps
	if err != nil {
		t.Fatal(err)
	}
	hidden, err := a.EvalHidden(context.Background(), tokens, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(hidden) != len(tokens)*c.Embd || a.Len() != len(tokens) {
		t.Fatalf("%d hidden floats and %d positions for %d tokens of %d", len(hidden), a.Len(), len(tokens), c.Embd)
	}
	b, err := m.NewSession(model.SessionOptions{Context: 64})
	if err != nil {
		t.Fatal(err)
	}
	for i, tok := range tokens {
		logits, err := b.Eval(context.Background(), []uint32{tok})
		if err != nil {
			t.Fatal(err)
		}
		h := hidden[i*c.Embd : (i+1)*c.Embd]
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, l := range logits {
			lo, hi = min(lo, float64(l)), max(hi, float64(l))
		}
		worst := 0.0
		for v := range c.VocabSize {
			var dot float64
			for j, x := range h {
				dot += float64(out[v*c.Embd+j]) * float64(x)
			}
			worst = max(worst, math.Abs(dot-float64(logits[v])))
		}
		if worst > 0.02*(hi-lo) {
			t.Fatalf("position %d: the head over the hidden state misses Eval's logits by %v (range %v)", i, worst, hi-lo)
		}
		t.Logf("position %d: largest difference %.4f over a logits range of %.2f", i, worst, hi-lo)
	}
}
