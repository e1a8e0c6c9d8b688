package metal_test

import (
	"testing"
)

func TestEmuKernels(t *testing.T) {
	be, d := newEmu(t, emuConfig)
	testKernels(t, be)
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	if n := d.Live(); n != 0 {
		t.Errorf("%d buffers outlive Close", n)
	}
}
