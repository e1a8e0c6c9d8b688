package model_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
)

// readCounter is a backend that records the weights MatMul reads.
type readCounter struct {
	backend.Backend
	read map[backend.Weight]bool
}

// Supports forwards the wrapped backend's features (gpt-oss needs them).
func (r *readCounter) Supports(f backend.Feature) bool { return backend.Supports(r.Backend, f) }

func (r *readCounter) MatMul(dst backend.Tensor, w backend.Weight, x backend.Tensor) {
	r.read[w] = true
	r.Backend.MatMul(dst, w, x)
}

// TestMoEReadsOnlyRoutedExperts: a decode step of the qwen3moe fixture (8
// experts, 2 per token, 2 layers) multiplies by exactly 2 experts' gate,
// up and down matrices in each layer, and a prompt of several tokens by
// no more than its tokens chose: the other experts' weights are not read.
// So for gpt-oss's (8 experts, 4 per token, MXFP4).
func TestMoEReadsOnlyRoutedExperts(t *testing.T) {
	for _, arch := range []string{"qwen3moe", "gpt-oss"} {
		t.Run(arch, func(t *testing.T) { testMoEReads(t, arch) })
	}
}

func testMoEReads(t *testing.T, arch string) {
	md, err := vocabSource()
	if err != nil {
		t.Fatal(err)
	}
	spec := modeltest.Fixture(arch, "Q8_0")
	spec.ExpertFF = 384 // no other matrix of the model has this shape
	f := modeltest.Parsed(t, spec, md)
	cb := cpu.New(cpu.Options{Threads: 1})
	defer cb.Close()
	be := &readCounter{Backend: cb, read: map[backend.Weight]bool{}}
	m, err := model.Load(f, be)
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config()
	s, err := m.NewSession(model.SessionOptions{Context: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	experts := func() int {
		n := 0
		for w := range be.read {
			// Expert matrices are ExpertFF × Embd (gate, up) or Embd ×
			// ExpertFF (down); no other weight of the fixture is.
			if w.Rows() == c.ExpertFF && w.Cols() == c.Embd || w.Rows() == c.Embd && w.Cols() == c.ExpertFF {
				n++
			}
		}
		clear(be.read)
		return n
	}
	ctx := context.Background()
	prompt := []uint32{1, 306, 763}
	if _, err := s.Eval(ctx, prompt); err != nil {
		t.Fatal(err)
	}
	if n, most := experts(), c.Layers*3*min(c.Experts, len(prompt)*c.ExpertsUsed); n > most || n < c.Layers*3*c.ExpertsUsed {
		t.Errorf("a %d-token prompt read %d expert matrices, want %d … %d", len(prompt), n, c.Layers*3*c.ExpertsUsed, most)
	}
	for step := range 4 {
		if _, err := s.Eval(ctx, []uint32{uint32(100 + step)}); err != nil {
			t.Fatal(err)
		}
		if n, want := experts(), c.Layers*3*c.ExpertsUsed; n != want {
			t.Errorf("decode step %d read %d expert matrices, want %d (of %d)", step, n, want, c.Layers*3*c.Experts)
		}
	}
}

// plainBackend hides the CPU backend's optional features.
type plainBackend struct{ backend.Backend }

// TestGptOssNeedsFeatures: a backend without attention sinks (or the
// clamped SwiGLU) is refused when gpt-oss loads, naming what it lacks,
// rather than running the model without them.
func TestGptOssNeedsFeatures(t *testing.T) {
	md, err := vocabSource()
	if err != nil {
		t.Fatal(err)
	}
	f := modeltest.Parsed(t, modeltest.Spec{Arch: "gpt-oss", FileType: "Q8_0", Embd: 64, Layers: 2, Heads: 2, KVHeads: 1,
		FF: 128, Vocab: 300, Context: 256, Seed: 1}, md)
	cb := cpu.New(cpu.Options{Threads: 1})
	defer cb.Close()
	_, err = model.Load(f, plainBackend{cb})
	if !errors.Is(err, model.ErrUnsupported) || !strings.Contains(err.Error(), "attention sinks") {
		t.Fatalf("Load on a backend without sinks: %v", err)
	}
	if _, err := model.Load(f, cb); err != nil {
		t.Fatalf("Load on the CPU: %v", err)
	}
}

// hostMoE is a backend without the MoE kernels (as Metal is), with the
// CPU's optional features, so a mixture of experts is routed on the host.
type hostMoE struct{ backend.Backend }

func (h hostMoE) Supports(f backend.Feature) bool { return backend.Supports(h.Backend, f) }

// TestMoEKernelsMatchHost: the CPU backend's MoE kernels (routing,
// gathered expert products, weighted sum) give the host path's logits bit
// for bit for every mixture-of-experts architecture, through prefill,
// batched decoding of two sessions and a rewind.
func TestMoEKernelsMatchHost(t *testing.T) {
	cb := cpu.New(cpu.Options{Threads: 2})
	defer cb.Close()
	if _, ok := backend.Backend(hostMoE{cb}).(backend.MoE); ok {
		t.Fatal("hostMoE offers the MoE kernels")
	}
	kernelsMatchHost(t, cb, hostMoE{cb}, "qwen3moe", "gpt-oss", "gemma4", "qwen35moe")
}
