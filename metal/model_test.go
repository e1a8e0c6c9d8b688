package metal_test

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/metal"
)

// The model suite: every architecture × weight type of the parity
// fixtures, the prompt and then greedy steps on both backends, logits
// compared at every step.

// modelTolerance bounds |Δlogit| (the logits spread over about ±15), per
// weight type. The kernels are the CPU's arithmetic, but the two float64
// sums (float-float here, see tolerance) and expf's fma can put a float32
// one ulp apart now and then; one ulp on an activation that is then
// quantised to 8 bits can cross a rounding boundary, and a random-weight
// network carries that quantum to the logits (gguf/model's parity
// tolerances explain the size). F16 models only round activations to half
// precision.
var modelTolerance = map[string]float64{
	"F16": 0.02, "Q8_0": 0.3, "Q4_0": 0.3, "Q4_K_M": 0.3, "Q6_K": 0.3,
}

const (
	modelSteps   = 4
	modelContext = 64
)

var modelPrompt = []uint32{1, 306, 763, 304, 1101, 278, 1243, 310}

var vocabSource = sync.OnceValues(func() (*gguf.Metadata, error) {
	f, err := gguf.Open(filepath.Join("..", "models", "meshnode-fortunes-q8_0.gguf"))
	if err != nil {
		return nil, err
	}
	return f.Metadata, nil // mapped for the test binary's life
})

// fixture generates and parses one parity fixture.
func fixture(t testing.TB, arch, ft string) *gguf.File {
	t.Helper()
	md, err := vocabSource()
	if err != nil {
		t.Skipf("vocabulary source: %v", err)
	}
	return modeltest.Parsed(t, modeltest.Fixture(arch, ft), md)
}

// greedy runs the prompt and steps greedy tokens, returning each step's
// logits and the tokens.
func greedy(t testing.TB, be backend.Backend, f *gguf.File, steps int) ([][]float32, []uint32) {
	t.Helper()
	logits, toks, err := decode(be, f, steps)
	if err != nil {
		t.Fatal(err)
	}
	return logits, toks
}

func decode(be backend.Backend, f *gguf.File, steps int) ([][]float32, []uint32, error) {
	if mb, ok := be.(*metal.Backend); ok {
		if err := mapFile(mb, f); err != nil {
			return nil, nil, err
		}
	}
	m, err := model.Load(f, be)
	if err != nil {
		return nil, nil, err
	}
	if _, ok := be.(*metal.Backend); ok {
		madeBytes.Add(m.MadeBytes())
	}
	s, err := m.NewSession(model.SessionOptions{Context: modelContext})
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	ctx := context.Background()
	_, logits, err := s.Prefill(ctx, modelPrompt)
	if err != nil {
		return nil, nil, err
	}
	var all [][]float32
	var toks []uint32
	for step := range steps {
		all = append(all, append([]float32(nil), logits...))
		next := argmax(logits)
		toks = append(toks, next)
		if step < steps-1 {
			if logits, err = s.Eval(ctx, []uint32{next}); err != nil {
				return nil, nil, err
			}
		}
	}
	return all, toks, nil
}

// mapped holds the files mapFile gave a backend, so that their bytes stay
// where its views are for the test binary's life (MapFile's contract).
var mapped sync.Map // mapKey → *gguf.File

type mapKey struct {
	be   *metal.Backend
	data *byte
}

// mapFile maps f's bytes into be once: weights read in place, as the
// engine reads them.
func mapFile(be *metal.Backend, f *gguf.File) error {
	k := mapKey{be, &f.Bytes()[0]}
	if _, loaded := mapped.LoadOrStore(k, f); loaded {
		return nil
	}
	return be.MapFile(f.Bytes(), largestTensor(f))
}

// largestTensor is the bytes of f's largest tensor.
func largestTensor(f *gguf.File) int {
	n := 0
	for _, t := range f.Tensors {
		if b, err := f.TensorData(t); err == nil {
			n = max(n, len(b))
		}
	}
	return n
}

func argmax(x []float32) uint32 {
	best, at := float32(math.Inf(-1)), 0
	for i, v := range x {
		if v > best {
			best, at = v, i
		}
	}
	return uint32(at)
}

// testModels compares the fixtures' logits on dev with the CPU backend's.
func testModels(t *testing.T, dev backend.Backend) {
	ref := cpu.New(cpu.Options{})
	defer ref.Close()
	for _, arch := range modeltest.Archs {
		for _, ft := range modeltest.FileTypes {
			t.Run(arch+"-"+ft, func(t *testing.T) {
				if why := modeltest.Unsupported(arch, dev); why != "" {
					t.Skip(why)
				}
				f := fixture(t, arch, ft)
				want, wantToks := greedy(t, ref, f, modelSteps)
				got, gotToks := greedy(t, dev, f, modelSteps)
				tol := modelTolerance[ft]
				var worst float64
				for step := range want {
					for i := range want[step] {
						d := math.Abs(float64(got[step][i] - want[step][i]))
						if !(d <= tol) { // NaN too
							t.Fatalf("step %d: logit %d is %v, the CPU's %v (|Δ| %.3g > %.3g)", step, i, got[step][i], want[step][i], d, tol)
						}
						worst = max(worst, d)
					}
					if gotToks[step] != wantToks[step] {
						// Equal logits within tol may still order two
						// near-equal candidates differently.
						l := want[step]
						if math.Abs(float64(l[gotToks[step]]-l[wantToks[step]])) > 2*tol {
							t.Errorf("step %d: greedy token %d, the CPU's %d", step, gotToks[step], wantToks[step])
						}
					}
				}
				t.Logf("max |Δlogit| %.3g over %d steps (tolerance %.3g)", worst, len(want), tol)
			})
		}
	}
}

// madeBytes sums the Metal models' MadeBytes: the only weights that are
// not in a mapped file, so the only ones Metal may copy.
var madeBytes atomic.Int64

func TestEmuModels(t *testing.T) {
	be, _ := newEmu(t, emuConfig)
	defer be.Close()
	madeBytes.Store(0)
	testModels(t, be)
	st, info := be.Stats(), be.Info()
	t.Logf("stats: %+v", st)
	if st.CopiedBytes != madeBytes.Load() || info.MappedBytes == 0 {
		t.Errorf("weights were copied (%d bytes, %d of them the models' own vectors) though the files were mapped (%d bytes)", st.CopiedBytes, madeBytes.Load(), info.MappedBytes)
	}
}

var _ model.ArgMaxer = (*metal.Backend)(nil)

// argMaxSteps is how many greedy tokens testArgMaxDecode generates.
const argMaxSteps = 4

// testArgMaxDecode decodes greedily through the session's argmax path on
// dev and checks the tokens against ref's logits path (Eval, then the
// argmax on the host), and the bytes copied back: one int32 per step, the
// prompt's included, each step one command buffer, while a step that asks
// for the logits still reads them all.
func testArgMaxDecode(t *testing.T, dev *metal.Backend, ref backend.Backend) {
	f := fixture(t, "llama", "Q4_K_M")
	_, want := greedy(t, ref, f, argMaxSteps)

	m, err := model.Load(f, dev)
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSession(model.SessionOptions{Context: modelContext})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	read := func(step func() error) (int64, metal.Stats) {
		t.Helper()
		before := dev.Stats()
		if err := step(); err != nil {
			t.Fatal(err)
		}
		after := dev.Stats()
		return after.ReadBytes - before.ReadBytes, after
	}

	var got []uint32
	var next uint32
	n, _ := read(func() (err error) { _, next, err = s.PrefillArgMax(ctx, modelPrompt); return err })
	if n != 4 {
		t.Errorf("the prompt's argmax copied %d bytes back, want 4", n)
	}
	got = append(got, next)
	for len(got) < argMaxSteps {
		before := dev.Stats().Steps
		n, end := read(func() (err error) { next, err = s.EvalArgMax(ctx, []uint32{next}); return err })
		if n != 4 {
			t.Errorf("decode step %d copied %d bytes back, want 4", len(got), n)
		}
		if c := end.Steps - before; c != 1 {
			t.Errorf("decode step %d was %d command buffers, want 1", len(got), c)
		}
		got = append(got, next)
	}
	if !slices.Equal(got, want) {
		t.Errorf("greedy tokens by the device's argmax %v, by the logits on %s %v", got, ref.Name(), want)
	}

	vocab := m.Config().VocabSize
	n, _ = read(func() error { _, err := s.Eval(ctx, []uint32{next}); return err })
	if n != int64(4*vocab) {
		t.Errorf("a step that asks for the logits copied %d bytes back, want %d", n, 4*vocab)
	}
	t.Logf("argmax decode: %d greedy tokens, the same as by %s's logits; 4 bytes back per step, %d for a step's logits", len(got), ref.Name(), n)
}

func TestEmuArgMaxDecode(t *testing.T) {
	be, _ := newEmu(t, emuConfig)
	defer be.Close()
	ref := cpu.New(cpu.Options{})
	defer ref.Close()
	testArgMaxDecode(t, be, ref)
}
