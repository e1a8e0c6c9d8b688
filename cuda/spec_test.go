package cuda_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshnode/meshnode/cuda"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/sample"
	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/gguf/spec/spectest"
)

// The speculation suite (spectest.Suite): the llama fixture in Q4_K_M
// with its Q8_0 as the draft model, and mostly wrong drafts; greedy by
// the device's argmax, and seeded sampling on the rows' logits read back.

// TestEmuSpeculation: speculation on the stand-in gives the CPU's tokens.
func TestEmuSpeculation(t *testing.T) {
	be, _ := newEmu(t, cuda.Options{})
	defer be.Close()
	ref := cpu.New(cpu.Options{})
	defer ref.Close()
	spectest.Suite(t, be, ref, fixture(t, "llama", "Q4_K_M"), fixture(t, "llama", "Q8_0"), "")
}

// TestGPUSpeculation: speculation on the GPU gives the GPU's plain
// tokens, on the fixtures and on the built-in model with prompt lookup
// over a prompt that repeats itself (spectest.Builtin; not on the
// stand-in, where it takes many minutes).
func TestGPUSpeculation(t *testing.T) {
	be := newGPU(t, cuda.Options{})
	defer be.Close()
	builtin := filepath.Join("..", "models")
	if os.Getenv("MESHNODE_CUDA_LIBRARY") == "stand-in" {
		builtin = ""
	}
	spectest.Suite(t, be, nil, fixture(t, "llama", "Q4_K_M"), fixture(t, "llama", "Q8_0"), builtin)
}

// top is a token judged likeliest and its probability.
type top struct {
	id uint32
	p  float64
}

// topsAgree runs judge on a session of the llama Q8_0 fixture on be (the
// stand-in or a GPU) and on the CPU, and checks that the device copied
// back readBack bytes for it (the judged tokens, not their logits) and
// that both judged the same tokens, the confidences within the host
// table's 0.2% (spec.topProb on the CPU, model.TopProber on the device)
// and the device's rounding.
func topsAgree(t *testing.T, be *cuda.Backend, what string, readBack int64, judge func(m *model.Model, s *model.Session) []top) {
	ref := cpu.New(cpu.Options{})
	defer ref.Close()
	f := fixture(t, "llama", "Q8_0")
	run := func(b backend.Backend) []top {
		m, err := model.Load(f, b)
		if err != nil {
			t.Fatal(err)
		}
		s, err := m.NewSession(model.SessionOptions{Context: 32})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		read := be.Stats().ReadBytes
		tops := judge(m, s)
		if b == backend.Backend(be) {
			if got := be.Stats().ReadBytes - read; got != readBack {
				t.Errorf("%s copied back %d bytes, want %d", what, got, readBack)
			}
		}
		return tops
	}
	got, want := run(be), run(ref)
	for i := range want {
		if got[i].id != want[i].id || math.Abs(got[i].p-want[i].p) > 0.003*want[i].p {
			t.Errorf("%s, %d: %d at %.5f on the device, %d at %.5f on the CPU", what, i, got[i].id, got[i].p, want[i].id, want[i].p)
		}
	}
}

var topPrompt = []uint32{1, 450, 1996, 17, 1701}

// TestEmuDraftTop: a greedy draft on the device judges its tokens there
// (model.TopProber): each draft step copies back 8 bytes, not its logits,
// and proposes the CPU draft's tokens with its confidences.
func TestEmuDraftTop(t *testing.T) {
	be, _ := newEmu(t, cuda.Options{})
	defer be.Close()
	draftTop(t, be)
}

// TestGPUDraftTop is TestEmuDraftTop on a GPU: top_prob's pick and
// confidence there.
func TestGPUDraftTop(t *testing.T) {
	be := newGPU(t, cuda.Options{})
	defer be.Close()
	draftTop(t, be)
}

// draftTop: four greedy draft steps on be judge their tokens there.
func draftTop(t *testing.T, be *cuda.Backend) {
	topsAgree(t, be, "four draft steps", 8*4, func(_ *model.Model, s *model.Session) []top {
		drafts, err := spec.NewModelProposer(s, sample.Params{}, -1).Propose(context.Background(), topPrompt, len(topPrompt), 4)
		if err != nil {
			t.Fatal(err)
		}
		if len(drafts) != 4 {
			t.Fatalf("%d drafts, want 4", len(drafts))
		}
		tops := make([]top, len(drafts))
		for i, d := range drafts {
			tops[i] = top{d.Token, d.Conf}
		}
		return tops
	})
}

// TestEmuBatchTop: a batched step's rows judged on the device (Batch.
// TopProbAt, as spec.Measure and a serve's batched draft steps judge
// them) copy back 8 bytes a row, once for the step, and give the CPU's
// picks with its confidences.
func TestEmuBatchTop(t *testing.T) {
	be, _ := newEmu(t, cuda.Options{})
	defer be.Close()
	batchTop(t, be)
}

// TestGPUBatchTop is TestEmuBatchTop on a GPU.
func TestGPUBatchTop(t *testing.T) {
	be := newGPU(t, cuda.Options{})
	defer be.Close()
	batchTop(t, be)
}

// batchTop: a step of three rows on be, judged there.
func batchTop(t *testing.T, be *cuda.Backend) {
	topsAgree(t, be, "a step of three rows judged", 8*3, func(m *model.Model, s *model.Session) []top {
		bt, err := m.NewBatch(model.BatchOptions{Tokens: 8, Seqs: 8})
		if err != nil {
			t.Fatal(err)
		}
		if err := bt.Step(context.Background(), []model.Seq{{Session: s, Tokens: topPrompt, Logits: 3}}); err != nil {
			t.Fatal(err)
		}
		var tops []top
		for j := range 3 {
			id, p := spec.BatchLogits{B: bt, I: 0, J: j}.Top()
			tops = append(tops, top{id, p})
		}
		return tops
	})
}
