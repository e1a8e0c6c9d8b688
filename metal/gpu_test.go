package metal_test

import (
	"testing"
)

// The GPU tests: the same suites as the stand-in's, on the system's Metal
// device (or the stand-in, with MESHNODE_METAL_DEVICE=stand-in). They
// skip where there is none; scripts/metal-check.sh fails if they do.

func TestGPUKernels(t *testing.T) {
	be := newGPU(t)
	defer be.Close()
	testKernels(t, be)
}

func TestGPUModels(t *testing.T) {
	be := newGPU(t)
	defer be.Close()
	testModels(t, be)
	t.Logf("stats: %+v", be.Stats())
}

// TestGPUArgMaxDecode: greedy decoding by the device's argmax gives the
// tokens the device's logits give (the logits' agreement with the CPU's is
// TestGPUModels'), reading one int back per token.
func TestGPUArgMaxDecode(t *testing.T) {
	be := newGPU(t)
	defer be.Close()
	testArgMaxDecode(t, be, be)
}
