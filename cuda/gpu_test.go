package cuda_test

import (
	"slices"
	"testing"

	"github.com/meshnode/meshnode/cuda"
)

// The GPU tests: the same suites as the stand-in's, on the real driver
// (libcuda.so.1) and device 0. They skip where there is none.

func TestGPUKernels(t *testing.T) {
	be := newGPU(t, cuda.Options{})
	defer be.Close()
	testKernels(t, be)
}

func TestGPUModels(t *testing.T) {
	be := newGPU(t, cuda.Options{})
	defer be.Close()
	testModels(t, be)
	t.Logf("stats: %+v", be.Stats())
}

// TestGPUArgMaxDecode: greedy decoding by the device's argmax gives the
// tokens the device's logits give (the logits' agreement with the CPU's is
// TestGPUModels'), copying one int back per token.
func TestGPUArgMaxDecode(t *testing.T) {
	be := newGPU(t, cuda.Options{})
	defer be.Close()
	testArgMaxDecode(t, be, be)
}

// TestGPUGraphs: a decode replayed as CUDA graphs gives the logits of the
// same decode launched kernel by kernel.
func TestGPUGraphs(t *testing.T) {
	f := fixture(t, "llama", "Q4_K_M")
	run := func(opt cuda.Options) ([][]float32, cuda.Stats) {
		be := newGPU(t, opt)
		defer be.Close()
		logits, _ := greedy(t, be, f, 8)
		return logits, be.Stats()
	}
	eager, _ := run(cuda.Options{NoGraphs: true})
	graphed, st := run(cuda.Options{})
	if st.Graphs == 0 {
		t.Errorf("no step was launched as a graph: %+v", st)
	}
	for step := range eager {
		if !slices.Equal(eager[step], graphed[step]) {
			t.Fatalf("step %d: logits differ between graph and eager launches", step)
		}
	}
}
