package cuda_test

import (
	"testing"

	"github.com/meshnode/meshnode/cuda"
)

func TestEmuKernels(t *testing.T) {
	be, h := newEmu(t, cuda.Options{})
	testKernels(t, be)
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	if n := h.Live(); n != 0 {
		t.Errorf("%d allocations outlive Close", n)
	}
}
