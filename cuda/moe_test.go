package cuda_test

import (
	"context"
	"slices"
	"testing"

	"github.com/meshnode/meshnode/cuda"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
)

// TestEmuMoEGraphs: a mixture-of-experts decode step (qwen3moe, and
// gpt-oss's biased experts and gating) is one recording — the router's
// choice stays on the device, nothing is read back per layer — replayed
// as a CUDA graph once it repeats, and its logits are the CPU backend's
// bit for bit, prompt and decode steps alike.
func TestEmuMoEGraphs(t *testing.T) {
	ref := cpu.New(cpu.Options{})
	defer ref.Close()
	for _, arch := range []string{"qwen3moe", "gpt-oss"} {
		t.Run(arch, func(t *testing.T) {
			f := fixture(t, arch, "Q4_K_M")
			want, _ := greedy(t, ref, f, modelSteps)
			be, _ := newEmu(t, cuda.Options{})
			defer be.Close()
			toks := replaysGreedy(t, be, f, want, "the CPU")

			// One more step, counted: one recording, and no bytes back
			// but its logits.
			m, s := session(t, be, f)
			ctx := context.Background()
			if _, err := s.Eval(ctx, modelPrompt); err != nil {
				t.Fatal(err)
			}
			before := be.Stats()
			if _, err := s.EvalArgMax(ctx, []uint32{toks[0]}); err != nil {
				t.Fatal(err)
			}
			after := be.Stats()
			if steps, read := after.Steps-before.Steps, after.ReadBytes-before.ReadBytes; steps != 1 || read != 4 {
				t.Errorf("a %d-layer decode step was %d recordings reading %d bytes back, want 1 and 4 (its token)", m.Config().Layers, steps, read)
			}
			t.Logf("%+v", after)
		})
	}
}

// TestEmuMoELongPrompt: a prompt longer than moeMaxRows takes the grouped
// host path (each chosen expert read once per batch of its rows) and a
// decode step after it the device path, with the CPU's bits throughout.
func TestEmuMoELongPrompt(t *testing.T) {
	f := fixture(t, "qwen3moe", "Q4_0")
	prompt := make([]uint32, 40) // over moeMaxRows (16)
	for i := range prompt {
		prompt[i] = uint32(1 + (i*37)%2000)
	}
	// run gives the prompt's and a decode step's logits, and with the
	// device the bytes each read back.
	run := func(be backend.Backend) (first, next []float32, promptRead, stepRead int64) {
		_, s := session(t, be, f)
		ctx := context.Background()
		read := func() int64 {
			if cb, ok := be.(*cuda.Backend); ok {
				return cb.Stats().ReadBytes
			}
			return 0
		}
		r0 := read()
		out, err := s.Eval(ctx, prompt)
		if err != nil {
			t.Fatal(err)
		}
		first = slices.Clone(out)
		r1 := read()
		if out, err = s.Eval(ctx, []uint32{7}); err != nil {
			t.Fatal(err)
		}
		return first, slices.Clone(out), r1 - r0, read() - r1
	}
	ref := cpu.New(cpu.Options{})
	defer ref.Close()
	wantPrompt, wantNext, _, _ := run(ref)
	be, _ := newEmu(t, cuda.Options{})
	defer be.Close()
	gotPrompt, gotNext, promptRead, stepRead := run(be)
	// The prompt's routing was read back (the grouped path), the decode
	// step's was not: it reads back its logits alone.
	vocab := int64(len(wantNext)) * 4
	if promptRead <= vocab || stepRead != vocab {
		t.Errorf("read back %d bytes for the prompt and %d for the step, want more than %d and %d", promptRead, stepRead, vocab, vocab)
	}
	sameBits(t, "prompt, the device against the CPU", gotPrompt, wantPrompt)
	sameBits(t, "decode step, the device against the CPU", gotNext, wantNext)
}
