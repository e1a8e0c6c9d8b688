package metal_test

import (
	"context"
	"hash/fnv"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/metal"
)

// testBatchInvariance holds the batched forward step on be to the same
// sequences evaluated alone on be, bit for bit, over random mixes
// (modeltest.BatchInvariance): no kernel's per-row arithmetic may depend
// on the rows beside it in a dispatch (the matrix kernels' row tiles,
// attention per query row, norms per row).
func testBatchInvariance(t *testing.T, be *metal.Backend, fixtures [][2]string, opt modeltest.MixOptions) {
	for _, fx := range fixtures {
		t.Run(fx[0]+"-"+fx[1], func(t *testing.T) {
			f := fixture(t, fx[0], fx[1])
			if err := mapFile(be, f); err != nil {
				t.Fatal(err)
			}
			m, err := model.Load(f, be)
			if err != nil {
				t.Fatal(err)
			}
			h := fnv.New64a()
			h.Write([]byte(t.Name()))
			st, err := modeltest.BatchInvariance(context.Background(), m, rand.New(rand.NewPCG(h.Sum64(), 3)), opt)
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

// TestEmuBatchInvariance runs the suite on the stand-in, one fixture with
// a K-quant type and small mixes: the stand-in runs each kernel thread as
// a Go call, so a mix of a few sequences is already many dispatches.
func TestEmuBatchInvariance(t *testing.T) {
	be, _ := newEmu(t, emuConfig)
	defer be.Close()
	testBatchInvariance(t, be, [][2]string{{"llama", "Q4_K_M"}},
		modeltest.MixOptions{Seqs: 3, MaxPrompt: 8, Decode: 3, Context: 32, Mixes: 1})
}

// TestGPUBatchInvariance is the suite on the Metal device, every fixture.
func TestGPUBatchInvariance(t *testing.T) {
	be := newGPU(t)
	defer be.Close()
	var all [][2]string
	for _, arch := range modeltest.Archs {
		for _, ft := range modeltest.FileTypes {
			all = append(all, [2]string{arch, ft})
		}
	}
	testBatchInvariance(t, be, all, modeltest.MixOptions{Seqs: 4, MaxPrompt: 20, Decode: 4, Context: 64, Mixes: 3})
}

// TestEmuStages: on the stand-in, a fixture split into stages (hidden
// rows written into and read out of device buffers between them) gives
// the whole model's logits on the same backend bit for bit
// (modeltest.StagesBitExact).
func TestEmuStages(t *testing.T) {
	be, _ := newEmu(t, emuConfig)
	defer be.Close()
	f := fixture(t, "llama", "Q4_0")
	if err := mapFile(be, f); err != nil {
		t.Fatal(err)
	}
	if err := modeltest.StagesBitExact(context.Background(), f, be, modeltest.Splits(2)); err != nil {
		t.Fatal(err)
	}
}

// TestGPUStages is TestEmuStages on the Metal device, every fixture.
func TestGPUStages(t *testing.T) {
	be := newGPU(t)
	defer be.Close()
	for _, arch := range modeltest.Archs {
		for _, ft := range modeltest.FileTypes {
			t.Run(arch+"-"+ft, func(t *testing.T) {
				f := fixture(t, arch, ft)
				if err := mapFile(be, f); err != nil {
					t.Fatal(err)
				}
				splits, err := modeltest.SplitsOf(f) // the fixtures' blocks: smollm3's are 4
				if err != nil {
					t.Fatal(err)
				}
				if err := modeltest.StagesBitExact(context.Background(), f, be, splits); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
