package metal_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/spec/spectest"
)

// testSpeculation holds speculative decoding on dev to plain decoding
// (spectest.Files): the llama fixture in Q4_K_M with its Q8_0 as the
// draft model, and mostly wrong drafts; greedy by the device's argmax,
// and seeded sampling on the rows' logits read back. With ref, the tokens
// must also be ref's.
func testSpeculation(t *testing.T, dev, ref backend.Backend) {
	runs, err := spectest.Files(context.Background(), dev, ref, fixture(t, "llama", "Q4_K_M"), fixture(t, "llama", "Q8_0"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		t.Logf("%s %+v: %+v", r.Proposer, r.Params, r.Stats)
	}
}

// TestEmuSpeculation: speculation on the stand-in gives the CPU's tokens.
func TestEmuSpeculation(t *testing.T) {
	be, _ := newEmu(t, emuConfig)
	defer be.Close()
	ref := cpu.New(cpu.Options{})
	defer ref.Close()
	testSpeculation(t, be, ref)
}

// TestGPUSpeculation: speculation on the Mac's GPU gives its plain
// tokens, on the fixtures and on the built-in model with prompt lookup
// over a prompt that repeats itself (spectest.Builtin).
func TestGPUSpeculation(t *testing.T) {
	be := newGPU(t)
	defer be.Close()
	testSpeculation(t, be, nil)
	if os.Getenv("MESHNODE_METAL_DEVICE") == "stand-in" {
		t.Log("the built-in model's part skipped: on the stand-in it takes many minutes")
		return
	}
	runs, err := spectest.Builtin(context.Background(), be, filepath.Join("..", "models"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		t.Logf("built-in model, %s %+v: %+v", r.Proposer, r.Params, r.Stats)
	}
}
