package metal_test

import (
	"path/filepath"
	"testing"

	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/spec/spectest"
	"github.com/meshnode/meshnode/metal/metalemu"
)

// The speculation suite (spectest.Suite): the llama fixture in Q4_K_M
// with its Q8_0 as the draft model, and mostly wrong drafts; greedy by
// the device's argmax, and seeded sampling on the rows' logits read back.

// TestEmuSpeculation: speculation on the stand-in gives the CPU's tokens.
func TestEmuSpeculation(t *testing.T) {
	be, _ := newEmu(t, emuConfig)
	defer be.Close()
	ref := cpu.New(cpu.Options{})
	defer ref.Close()
	spectest.Suite(t, be, ref, fixture(t, "llama", "Q4_K_M"), fixture(t, "llama", "Q8_0"), "")
}

// TestGPUSpeculation: speculation on the Mac's GPU gives its plain
// tokens, on the fixtures and on the built-in model with prompt lookup
// over a prompt that repeats itself (spectest.Builtin; not on the
// stand-in, where it takes many minutes).
func TestGPUSpeculation(t *testing.T) {
	be := newGPU(t)
	defer be.Close()
	builtin := filepath.Join("..", "models")
	if metalemu.StandIn() {
		builtin = ""
	}
	spectest.Suite(t, be, nil, fixture(t, "llama", "Q4_K_M"), fixture(t, "llama", "Q8_0"), builtin)
}
