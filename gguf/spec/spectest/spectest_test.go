package spectest_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/spec/spectest"
)

var models = filepath.Join("..", "..", "..", "models")

func fixture(t *testing.T, ft string) *gguf.File {
	t.Helper()
	src, err := gguf.Open(filepath.Join(models, "meshnode-fortunes-q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return modeltest.Parsed(t, modeltest.Fixture("llama", ft), src.Metadata)
}

// TestCPUPasses: the CPU backend passes the checks against itself, on the
// fixtures and on the built-in model.
func TestCPUPasses(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	ref := cpu.New(cpu.Options{Threads: 1})
	defer ref.Close()
	ctx := context.Background()
	runs, err := spectest.Files(ctx, be, ref, fixture(t, "Q4_K_M"), fixture(t, "Q8_0"))
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2*len(spectest.Params) {
		t.Errorf("%d runs, want the draft's and junk's under each of %d parameters", len(runs), len(spectest.Params))
	}
	runs, err = spectest.Builtin(ctx, be, models)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		t.Logf("built-in model, %s %+v: %+v", r.Proposer, r.Params, r.Stats)
	}
}

// skewed is a backend whose products over two to five rows — a verified
// window's, never a one-token step's or this prompt's — come out scaled:
// a device whose window rows are not one-token decoding's bits.
type skewed struct{ backend.Backend }

func (s skewed) MatMul(dst backend.Tensor, w backend.Weight, x backend.Tensor) {
	s.Backend.MatMul(dst, w, x)
	if x.Rows > 1 && x.Rows <= 5 {
		s.Backend.Scale(dst, 1.5)
	}
}

// TestCatchesSkewedWindows: the checks fail on a backend whose windows
// are not its one-token steps.
func TestCatchesSkewedWindows(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	_, err := spectest.Files(context.Background(), skewed{be}, nil, fixture(t, "Q4_K_M"), fixture(t, "Q8_0"))
	if err == nil || !strings.Contains(err.Error(), "speculating gave") {
		t.Fatalf("a backend with skewed windows passed, or failed otherwise: %v", err)
	}
	t.Log(err)
}
