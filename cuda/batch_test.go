package cuda_test

import (
	"context"
	"hash/fnv"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/cuda"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
)

// testBatchInvariance holds the batched forward step on dev to the same
// sequences evaluated alone on dev, bit for bit, over random mixes
// (modeltest.BatchInvariance): the kernels' per-row arithmetic must not
// depend on the rows beside it in a launch (the matrix kernels' one- and
// eight-row variants, attention per query row, norms per row).
func testBatchInvariance(t *testing.T, dev backend.Backend, fixtures [][2]string, opt modeltest.MixOptions) {
	for _, fx := range fixtures {
		t.Run(fx[0]+"-"+fx[1], func(t *testing.T) {
			m, err := model.Load(fixture(t, fx[0], fx[1]), dev)
			if err != nil {
				t.Fatal(err)
			}
			h := fnv.New64a()
			h.Write([]byte(t.Name()))
			st, err := modeltest.BatchInvariance(context.Background(), m, rand.New(rand.NewPCG(h.Sum64(), 2)), opt)
			if err != nil {
				t.Fatal(err)
			}
			if st.MaxSeqs < 2 || st.MixedSteps == 0 {
				t.Errorf("the mixes never batched sequences together, or never mixed prefill with decode: %+v", st)
			}
			t.Logf("%+v", st)
		})
	}
}

// TestEmuBatchInvariance runs the batch invariance suite on the stand-in,
// on two fixtures (a 32-element and a K-quant type) to keep it short.
func TestEmuBatchInvariance(t *testing.T) {
	be, _ := newEmu(t, cuda.Options{})
	defer be.Close()
	testBatchInvariance(t, be, [][2]string{{"llama", "Q4_0"}, {"gemma3", "Q4_K_M"}},
		modeltest.MixOptions{Seqs: 3, MaxPrompt: 10, Decode: 3, Context: 32, Mixes: 2})
}

// TestGPUBatchInvariance is the suite on a real GPU, every fixture.
func TestGPUBatchInvariance(t *testing.T) {
	be := newGPU(t, cuda.Options{})
	defer be.Close()
	var all [][2]string
	for _, arch := range modeltest.Archs {
		for _, ft := range modeltest.FileTypes {
			all = append(all, [2]string{arch, ft})
		}
	}
	testBatchInvariance(t, be, all, modeltest.MixOptions{Seqs: 4, MaxPrompt: 20, Decode: 4, Context: 64, Mixes: 3})
}
