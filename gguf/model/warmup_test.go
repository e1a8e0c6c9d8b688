package model_test

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/quant"
)

// TestWarmUp: a whole model and each stage of a split one step a position
// at load, so that on a CPU that packs the Q8_0 weights it reads from
// memory they are packed before the first request (a later stage from a
// hidden row of zeros); after it the model serves as it would have.
func TestWarmUp(t *testing.T) {
	md, err := vocabSource()
	if err != nil {
		t.Fatal(err)
	}
	f := modeltest.Parsed(t, modeltest.StageFixture("llama", "Q8_0", 4), md)
	ctx := context.Background()
	for _, r := range []model.LayerRange{{Lo: 0, Hi: 4}, {Lo: 0, Hi: 2}, {Lo: 2, Hi: 4}} {
		be := cpu.New(cpu.Options{Threads: 1, CacheBytes: 1}) // every weight read from memory
		var m *model.Model
		if r.Lo == 0 && r.Hi == 4 {
			m, err = model.Load(f, be)
		} else {
			m, err = model.LoadStage(f, be, r)
		}
		if err != nil {
			t.Fatal(err)
		}
		if n := be.StreamedPacked(); n != 0 {
			t.Errorf("layers %v: %d weights packed by the load alone", r, n)
		}
		if err := m.WarmUp(ctx); err != nil {
			t.Errorf("layers %v: %v", r, err)
		}
		if embd := m.Config().Embd; quant.PacksStreamed(quant.Q8_0, embd) && be.StreamedPacked() == 0 {
			t.Errorf("layers %v: no weight packed after the warm-up", r)
		}
		be.Close()
	}
	// Warmed or not, the whole model gives the same logits.
	prompt := []uint32{1, 17, 42, 99, 7, 256, 3}
	var logits [2][]float32
	for i, warm := range []bool{false, true} {
		be := cpu.New(cpu.Options{Threads: 1, CacheBytes: 1})
		m, err := model.Load(f, be)
		if err != nil {
			t.Fatal(err)
		}
		if warm {
			if err := m.WarmUp(ctx); err != nil {
				t.Fatal(err)
			}
		}
		s, err := m.NewSession(model.SessionOptions{Context: 16})
		if err != nil {
			t.Fatal(err)
		}
		if logits[i], err = s.Eval(ctx, prompt); err != nil {
			t.Fatal(err)
		}
		logits[i] = slices.Clone(logits[i])
		s.Close()
		be.Close()
	}
	for j := range logits[0] {
		if math.Float32bits(logits[1][j]) != math.Float32bits(logits[0][j]) {
			t.Fatalf("after a warm-up the logits differ at %d: %v, %v without", j, logits[1][j], logits[0][j])
		}
	}
}
