package cuda_test

import (
	"context"
	"math"
	"testing"

	"github.com/meshnode/meshnode/cuda"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
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
			got, toks := greedy(t, be, f, modelSteps)
			for step := range want {
				for i := range want[step] {
					if math.Float32bits(got[step][i]) != math.Float32bits(want[step][i]) {
						t.Fatalf("step %d: logit %d is %v on the device, %v on the CPU", step, i, got[step][i], want[step][i])
					}
				}
			}
			// Steps 1 and 2 differ from the prompt's; step 3 repeats
			// step 2 and is captured, and the rest replay it.
			st := be.Stats()
			if st.Captures != 1 || st.Graphs < int64(modelSteps-3) {
				t.Errorf("decode steps were not replayed as one graph: %+v", st)
			}

			// One more step, counted: one recording, and no bytes back
			// but its logits.
			m, err := model.Load(f, be)
			if err != nil {
				t.Fatal(err)
			}
			s, err := m.NewSession(model.SessionOptions{Context: modelContext})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
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
			t.Logf("%+v", st)
		})
	}
}
