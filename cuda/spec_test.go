package cuda_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
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

// TestEmuDraftTop: a greedy draft on the device judges its tokens there
// (model.TopProber): each draft step copies back 8 bytes, not its logits,
// and proposes the CPU draft's tokens with its confidences (the host's to
// within its table's 0.2%).
func TestEmuDraftTop(t *testing.T) {
	be, _ := newEmu(t, cuda.Options{})
	defer be.Close()
	ref := cpu.New(cpu.Options{})
	defer ref.Close()
	f := fixture(t, "llama", "Q8_0")
	prompt := []uint32{1, 450, 1996, 17, 1701}
	propose := func(b backend.Backend) []spec.Draft {
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
		drafts, err := spec.NewModelProposer(s, sample.Params{}, -1).Propose(context.Background(), prompt, len(prompt), 4)
		if err != nil {
			t.Fatal(err)
		}
		if b == backend.Backend(be) {
			if got := be.Stats().ReadBytes - read; got != 8*4 {
				t.Errorf("the device's four draft steps copied back %d bytes, want 8 each", got)
			}
		}
		return slices.Clone(drafts)
	}
	got, want := propose(be), propose(ref)
	if len(got) != 4 || len(want) != 4 {
		t.Fatalf("%d and %d drafts, want 4", len(got), len(want))
	}
	for i := range got {
		if got[i].Token != want[i].Token || math.Abs(got[i].Conf-want[i].Conf) > 0.003*want[i].Conf {
			t.Errorf("draft %d: %d at %.5f on the device, %d at %.5f on the CPU", i, got[i].Token, got[i].Conf, want[i].Token, want[i].Conf)
		}
	}
}

// TestEmuBatchTop: a batched step's rows judged on the device (Batch.
// TopProbAt, as spec.Measure and a serve's batched draft steps judge
// them) copy back 8 bytes a row, once for the step, and give the CPU's
// picks with its confidences within the host table's 0.2%.
func TestEmuBatchTop(t *testing.T) {
	be, _ := newEmu(t, cuda.Options{})
	defer be.Close()
	ref := cpu.New(cpu.Options{})
	defer ref.Close()
	f := fixture(t, "llama", "Q8_0")
	type top struct {
		id uint32
		p  float64
	}
	judge := func(b backend.Backend) []top {
		m, err := model.Load(f, b)
		if err != nil {
			t.Fatal(err)
		}
		s, err := m.NewSession(model.SessionOptions{Context: 32})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		bt, err := m.NewBatch(model.BatchOptions{Tokens: 8, Seqs: 8})
		if err != nil {
			t.Fatal(err)
		}
		if err := bt.Step(context.Background(), []model.Seq{{Session: s, Tokens: []uint32{1, 450, 1996, 17, 1701}, Logits: 3}}); err != nil {
			t.Fatal(err)
		}
		read := be.Stats().ReadBytes
		var tops []top
		for j := range 3 {
			id, p := spec.BatchLogits{B: bt, I: 0, J: j}.Top()
			tops = append(tops, top{id, p})
		}
		if b == backend.Backend(be) {
			if got := be.Stats().ReadBytes - read; got != 8*3 {
				t.Errorf("judging a step's three rows copied back %d bytes, want 8 a row", got)
			}
		}
		return tops
	}
	got, want := judge(be), judge(ref)
	for j := range want {
		if got[j].id != want[j].id || math.Abs(got[j].p-want[j].p) > 0.003*want[j].p {
			t.Errorf("row %d: %d at %.5f on the device, %d at %.5f on the CPU", j, got[j].id, got[j].p, want[j].id, want[j].p)
		}
	}
}
