package cuda_test

import (
	"testing"

	"github.com/meshnode/meshnode/cuda"
)

// TestEmuHybridGraphs: a qwen35 or lfm2 decode step is one recording
// (nothing is read back per layer), replayed as a CUDA graph once it
// repeats, although each step reads one of the session's two recurrent
// states and writes the other (their addresses travel in the argument
// area); its logits are eager launching's bit for bit.
func TestEmuHybridGraphs(t *testing.T) {
	for _, arch := range []string{"qwen35", "lfm2"} {
		t.Run(arch, func(t *testing.T) {
			f := fixture(t, arch, "Q4_0")
			eager, _ := newEmu(t, cuda.Options{NoGraphs: true})
			defer eager.Close()
			want, _ := greedy(t, eager, f, modelSteps)
			be, _ := newEmu(t, cuda.Options{})
			defer be.Close()
			replaysGreedy(t, be, f, want, "launched one by one")
			t.Logf("%+v", be.Stats())
		})
	}
}
