package model_test

import (
	"context"
	"slices"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/sample"
)

// argMaxBackend is the CPU backend made an ArgMaxer, counting the calls
// that copy logits or their argmax back.
type argMaxBackend struct {
	backend.Backend
	reads, argMaxes int
}

func (b *argMaxBackend) Read(dst []float32, t backend.Tensor) {
	b.reads++
	b.Backend.Read(dst, t)
}

func (b *argMaxBackend) ArgMax(t backend.Tensor) int {
	b.argMaxes++
	x := make([]float32, t.Len())
	b.Backend.Read(x, t)
	return int(argmax(x))
}

// TestArgMax: greedy decoding by PrefillArgMax and EvalArgMax picks the
// tokens the sampler's greedy pick makes from the logits, on a backend
// without ArgMax (the host finds it) and on one with it, which the session
// then asks instead of reading the logits.
func TestArgMax(t *testing.T) {
	file := fixtureBytes(t, "qwen2", "Q4_0")
	f, err := gguf.Parse(file)
	if err != nil {
		t.Fatal(err)
	}
	const steps = 6
	ctx := context.Background()
	decode := func(be backend.Backend, argMax bool) []uint32 {
		t.Helper()
		m, err := model.Load(f, be)
		if err != nil {
			t.Fatal(err)
		}
		s, err := m.NewSession(model.SessionOptions{Context: 64, Batch: 5})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		sampler := sample.New(sample.Params{})
		var next uint32
		var toks []uint32
		for len(toks) < steps {
			var logits []float32
			switch {
			case argMax && toks == nil:
				_, next, err = s.PrefillArgMax(ctx, parityPrompt)
			case argMax:
				next, err = s.EvalArgMax(ctx, []uint32{next})
			case toks == nil:
				_, logits, err = s.Prefill(ctx, parityPrompt)
			default:
				logits, err = s.Eval(ctx, []uint32{next})
			}
			if err != nil {
				t.Fatal(err)
			}
			if !argMax {
				next = sampler.Sample(logits, toks)
			}
			toks = append(toks, next)
		}
		return toks
	}

	be := cpu.New(cpu.Options{})
	defer be.Close()
	want := decode(be, false)
	if got := decode(be, true); !slices.Equal(got, want) {
		t.Errorf("on the CPU: EvalArgMax's tokens %v, the sampler's %v", got, want)
	}
	am := &argMaxBackend{Backend: be}
	if got := decode(am, true); !slices.Equal(got, want) {
		t.Errorf("on an ArgMaxer: EvalArgMax's tokens %v, the sampler's %v", got, want)
	}
	if am.argMaxes != steps || am.reads != 0 {
		t.Errorf("%d greedy steps on an ArgMaxer made %d ArgMax calls and %d reads, want %d and 0", steps, am.argMaxes, am.reads, steps)
	}
}
