package cuda_test

import (
	"context"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
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
// on four fixtures (a 32-element and a K-quant type, gemma4's per-layer
// embeddings, shared KV and experts, gpt-oss's sinks, sliding window
// and MXFP4 experts, whose gathered rows take the batched kernel, and
// qwen35's delta nets, whose kernels take a step's sequences in one
// launch) to keep it short.
func TestEmuBatchInvariance(t *testing.T) {
	be, _ := newEmu(t, cuda.Options{})
	defer be.Close()
	testBatchInvariance(t, be, emuBatchFixtures, emuBatchMixes)
}

var (
	emuBatchFixtures = [][2]string{{"llama", "Q4_0"}, {"gemma3", "Q4_K_M"}, {"gemma4", "Q8_0"}, {"gpt-oss", "Q4_0"}, {"qwen35", "Q4_K_M"}}
	emuBatchMixes    = modeltest.MixOptions{Seqs: 3, MaxPrompt: 10, Decode: 3, Context: 32, Mixes: 2}
)

// TestGPUBatchInvariance is the suite on a real GPU, every fixture; on the
// stand-in (gpu-check.sh --stand-in's rehearsal) TestEmuBatchInvariance's
// few, since every fixture there takes many minutes.
func TestGPUBatchInvariance(t *testing.T) {
	be := newGPU(t, cuda.Options{})
	defer be.Close()
	if os.Getenv("MESHNODE_CUDA_LIBRARY") == "stand-in" {
		testBatchInvariance(t, be, emuBatchFixtures, emuBatchMixes)
		return
	}
	var all [][2]string
	for _, arch := range modeltest.Archs {
		for _, ft := range modeltest.FileTypes {
			all = append(all, [2]string{arch, ft})
		}
	}
	testBatchInvariance(t, be, all, modeltest.MixOptions{Seqs: 4, MaxPrompt: 20, Decode: 4, Context: 64, Mixes: 3})
}

// batchedDecode prefills three sequences in one batched step and decodes
// steps greedy tokens for all of them together, returning the tokens.
func batchedDecode(t *testing.T, be backend.Backend, steps int) [][]uint32 {
	m, err := model.Load(fixture(t, "llama", "Q4_K_M"), be)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.NewBatch(model.BatchOptions{Tokens: 32, Seqs: 3})
	if err != nil {
		t.Fatal(err)
	}
	seqs := make([]model.Seq, 3)
	out := make([][]uint32, 3)
	for i := range seqs {
		s, err := m.NewSession(model.SessionOptions{Context: 64})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		seqs[i] = model.Seq{Session: s, Tokens: modelPrompt[i:], Logits: 1}
	}
	ctx := context.Background()
	for range steps {
		if err := b.Step(ctx, seqs); err != nil {
			t.Fatal(err)
		}
		for i := range seqs {
			tok := b.ArgMax(i)
			out[i] = append(out[i], tok)
			seqs[i].Tokens = []uint32{tok}
		}
	}
	return out
}

// TestEmuBatchGraphs: a batched decode step whose sequences stay the same
// is replayed as a CUDA graph, its argmaxes found together in one copy
// (model.RowArgMaxer), with the tokens of eager launches.
func TestEmuBatchGraphs(t *testing.T) {
	eager, _ := newEmu(t, cuda.Options{NoGraphs: true})
	defer eager.Close()
	want := batchedDecode(t, eager, 6)
	be, _ := newEmu(t, cuda.Options{})
	defer be.Close()
	got := batchedDecode(t, be, 6)
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("sequence %d: %v with graphs, %v launched one by one", i, got[i], want[i])
		}
	}
	st := be.Stats()
	if st.Captures == 0 || st.Graphs < 3 {
		t.Errorf("batched decode steps were not replayed as graphs: %+v", st)
	}
	t.Logf("%+v", st)
}

var _ model.RowArgMaxer = (*cuda.Backend)(nil)

// TestEmuStages: on the stand-in, a fixture split into stages (hidden
// rows written into and read out of device tensors between them) gives
// the whole model's logits on the same backend bit for bit
// (modeltest.StagesBitExact).
func TestEmuStages(t *testing.T) {
	be, _ := newEmu(t, cuda.Options{})
	defer be.Close()
	if err := modeltest.StagesBitExact(context.Background(), fixture(t, "llama", "Q4_0"), be, modeltest.Splits(2)); err != nil {
		t.Fatal(err)
	}
}

// TestGPUStages is TestEmuStages on a real GPU, every fixture.
func TestGPUStages(t *testing.T) {
	be := newGPU(t, cuda.Options{})
	defer be.Close()
	for _, arch := range modeltest.Archs {
		for _, ft := range modeltest.FileTypes {
			t.Run(arch+"-"+ft, func(t *testing.T) {
				f := fixture(t, arch, ft)
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
