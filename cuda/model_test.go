package cuda_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/cuda"
	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
)

// The model suite: every architecture × weight type of the parity
// fixtures, the prompt and then greedy steps on both backends, logits
// compared at every step.

// modelTolerance bounds |Δlogit| (the logits spread over about ±15). The
// kernels are the CPU's arithmetic, but the two float64 sums (see
// tolerance) can put a float32 one ulp apart now and then; one ulp on an
// activation that is then quantised to 8 bits can cross a rounding
// boundary, and a random-weight network carries that quantum to the
// logits (gguf/model's parity tolerances explain the size). F16 models
// only round activations to half precision.
var modelTolerance = map[string]float64{
	"F16": 0.02, "Q8_0": 0.3, "Q4_0": 0.3, "Q4_K_M": 0.3, "Q6_K": 0.3,
}

const (
	modelSteps   = 6
	modelContext = 256
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
	m, err := model.Load(f, be)
	if err != nil {
		return nil, nil, err
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

// session loads f on be and opens a session of modelContext, closed when
// the test ends.
func session(t testing.TB, be backend.Backend, f *gguf.File) (*model.Model, *model.Session) {
	t.Helper()
	m, err := model.Load(f, be)
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSession(model.SessionOptions{Context: modelContext})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// replaysGreedy decodes f greedily on be (a backend with graphs) and
// holds every step's logits to want's bit for bit (against names where
// want came from), and the decode steps to one recording replayed: steps
// 1 and 2 differ from the prompt's, step 3 repeats step 2 and is
// captured, and the rest replay it. It returns the tokens picked.
func replaysGreedy(t *testing.T, be *cuda.Backend, f *gguf.File, want [][]float32, against string) []uint32 {
	t.Helper()
	got, toks := greedy(t, be, f, modelSteps)
	for step := range want {
		sameBits(t, fmt.Sprintf("step %d, against %s", step, against), got[step], want[step])
	}
	if st := be.Stats(); st.Captures != 1 || st.Graphs < int64(modelSteps-3) {
		t.Errorf("decode steps were not replayed as one graph: %+v", st)
	}
	return toks
}

// sameBits fails t unless got's logits are want's bit for bit; what
// names them and the two runs compared.
func sameBits(t testing.TB, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d logits, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: logit %d is %v, want %v", what, i, got[i], want[i])
		}
	}
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

func TestEmuModels(t *testing.T) {
	be, _ := newEmu(t, cuda.Options{})
	defer be.Close()
	testModels(t, be)
	st := be.Stats()
	t.Logf("stats: %+v", st)
	if st.Graphs == 0 || st.Captures == 0 {
		t.Errorf("decode steps were never launched as graphs: %+v", st)
	}
}

var _ model.ArgMaxer = (*cuda.Backend)(nil)

// argMaxSteps is how many greedy tokens testArgMaxDecode generates: enough
// for the decode step to be captured and replayed as a graph.
const argMaxSteps = 6

// testArgMaxDecode decodes greedily through the session's argmax path on
// dev and checks the tokens against ref's logits path (Eval, then the
// argmax on the host), and the bytes copied back: one int32 per step, the
// prompt's included, while a step that asks for the logits still copies
// them all.
func testArgMaxDecode(t *testing.T, dev *cuda.Backend, ref backend.Backend) {
	f := fixture(t, "llama", "Q4_K_M")
	_, want := greedy(t, ref, f, argMaxSteps)

	m, s := session(t, dev, f)
	ctx := context.Background()
	read := func(step func() error) (int64, cuda.Stats) {
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
	n, start := read(func() (err error) { _, next, err = s.PrefillArgMax(ctx, modelPrompt); return err })
	if n != 4 {
		t.Errorf("the prompt's argmax copied %d bytes back, want 4", n)
	}
	got = append(got, next)
	var end cuda.Stats
	for len(got) < argMaxSteps {
		if n, end = read(func() (err error) { next, err = s.EvalArgMax(ctx, []uint32{next}); return err }); n != 4 {
			t.Errorf("decode step %d copied %d bytes back, want 4", len(got), n)
		}
		got = append(got, next)
	}
	if !slices.Equal(got, want) {
		t.Errorf("greedy tokens by the device's argmax %v, by the logits on %s %v", got, ref.Name(), want)
	}
	if end.Graphs == start.Graphs {
		t.Errorf("no argmax decode step was launched as a graph: %+v", end)
	}

	vocab := m.Config().VocabSize
	n, _ = read(func() error { _, err := s.Eval(ctx, []uint32{next}); return err })
	if n != int64(4*vocab) {
		t.Errorf("a step that asks for the logits copied %d bytes back, want %d", n, 4*vocab)
	}
	t.Logf("argmax decode: %d greedy tokens, the same as by %s's logits; 4 bytes back per step, %d for a step's logits", len(got), ref.Name(), n)
}

func TestEmuArgMaxDecode(t *testing.T) {
	be, _ := newEmu(t, cuda.Options{})
	defer be.Close()
	ref := cpu.New(cpu.Options{})
	defer ref.Close()
	testArgMaxDecode(t, be, ref)
}
