package model_test

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/quant"
)

// TestStagesBitExact: a model split into 2 or 3 stages, f32 hidden rows
// passed between them, gives the whole model's logits bit for bit, on
// the parity fixture of every architecture and weight type (2 layers, and
// the same fixture with 4 layers so that 3 stages and a middle stage of
// several blocks exist), over batched prefill, decoding and a rewind
// (modeltest.StagesBitExact over modeltest.Splits).
func TestStagesBitExact(t *testing.T) {
	md, err := vocabSource()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	for _, arch := range modeltest.Archs {
		for _, ft := range modeltest.FileTypes {
			counts := []int{2, 4}
			if arch == "gemma4" {
				counts = []int{2, 6} // 6: the last 2 share KV (modeltest.StageFixture)
			}
			for _, layers := range counts {
				t.Run(fixtureName(arch, ft)+"/"+strconv.Itoa(layers)+"-layers", func(t *testing.T) {
					spec := modeltest.StageFixture(arch, ft, layers)
					f := modeltest.Parsed(t, spec, md)
					if modeltest.Hybrid(arch) {
						checkStageRefused(t, f, be)
						return
					}
					if err := modeltest.StagesBitExact(ctx, f, be, modeltest.Splits(layers)); err != nil {
						t.Fatal(err)
					}
				})
			}
		}
	}
}

// f16Tolerance bounds how far f16 hidden rows between stages move the
// logits: |Δ| ≤ f16Tolerance × the row's largest |logit|, at every
// element of every row. f16 keeps 11 significant bits (relative error
// 2⁻¹¹ ≈ 4.9e-4 per element), but the next block quantises its input
// to the weights' dot format (q8 blocks here), and a rounding step that
// flips there moves the logits far more: on the random-weight fixtures,
// which amplify such flips, the worst measured is about 0.02, and on the
// trained built-in model about 0.016, in 2 stages (see the test log).
const f16Tolerance = 0.05

// TestStagesF16Close: with hidden rows rounded to f16 between stages
// (model.RoundF16, what an f16 activation frame carries), the logits stay
// within f16Tolerance of the whole model's, and do differ from them (the
// option changes something). The fixtures are the Q8_0 parity fixtures
// with 4 layers, in 3 stages, and the built-in model in 2.
func TestStagesF16Close(t *testing.T) {
	md, err := vocabSource()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	check := func(t *testing.T, f *gguf.File, rs []model.LayerRange) {
		want, err := modeltest.StageScript(ctx, f, be, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The tokens follow the whole model's choices, so that a near tie
		// flipped by f16 does not send the runs apart.
		got, err := modeltest.StageScript(ctx, f, be, rs, model.RoundF16, want)
		if err != nil {
			t.Fatal(err)
		}
		worst, flips := 0.0, 0
		for r := range want {
			top := 0.0
			for _, v := range want[r] {
				top = max(top, math.Abs(float64(v)))
			}
			for j := range want[r] {
				worst = max(worst, math.Abs(float64(got[r][j]-want[r][j]))/top)
			}
			if argmax(got[r]) != argmax(want[r]) {
				flips++
			}
		}
		t.Logf("worst |Δlogit| / max|logit| = %.3g (bound %g); greedy token changed in %d of %d rows", worst, f16Tolerance, flips, len(want))
		if worst > f16Tolerance {
			t.Errorf("f16 hidden rows moved the logits by %.3g of their scale, bound %g", worst, f16Tolerance)
		}
		if worst == 0 {
			t.Errorf("f16 hidden rows changed nothing: the carry was not applied")
		}
	}
	for _, arch := range modeltest.Archs {
		t.Run(arch, func(t *testing.T) {
			layers, layout := 4, []model.LayerRange{{Lo: 0, Hi: 1}, {Lo: 1, Hi: 3}, {Lo: 3, Hi: 4}}
			if arch == "gemma4" {
				// Blocks 4 and 5 read 2's and 3's KV: split before 2.
				layers, layout = 6, []model.LayerRange{{Lo: 0, Hi: 1}, {Lo: 1, Hi: 2}, {Lo: 2, Hi: 6}}
			}
			f := modeltest.Parsed(t, modeltest.StageFixture(arch, "Q8_0", layers), md)
			if modeltest.Hybrid(arch) {
				checkStageRefused(t, f, cpu.New(cpu.Options{}))
				return
			}
			check(t, f, layout)
		})
	}
	t.Run("fortunes-q8_0", func(t *testing.T) {
		f, err := gguf.Open(filepath.Join("..", "..", "models", "meshnode-fortunes-q8_0.gguf"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		check(t, f, []model.LayerRange{{Lo: 0, Hi: 2}, {Lo: 2, Hi: 4}})
	})
}

// TestRoundF16: the round trip is quant's f16 conversion, element by
// element, and the f16 form round-trips exactly.
func TestRoundF16(t *testing.T) {
	src := []float32{0, 1, -2.5, 1e-8, 65504, 70000, 3.14159, -0.1}
	h := model.AppendF16(nil, src)
	back := model.F16ToF32(make([]float32, len(h)), h)
	x := slices.Clone(src)
	model.RoundF16(x)
	for i, v := range src {
		if h[i] != quant.FP32ToFP16(v) {
			t.Errorf("AppendF16(%v) = %#x, want %#x", v, h[i], quant.FP32ToFP16(v))
		}
		if want := quant.FP16ToFP32(quant.FP32ToFP16(v)); math.Float32bits(back[i]) != math.Float32bits(want) || math.Float32bits(x[i]) != math.Float32bits(want) {
			t.Errorf("%v: F16ToF32 %v, RoundF16 %v, want %v", v, back[i], x[i], want)
		}
	}
}

// TestStagesFortunesGreedy: the built-in model split in two at every
// block boundary keeps llama.cpp's greedy ids (models/reference-greedy.txt).
func TestStagesFortunesGreedy(t *testing.T) {
	cases, err := modeltest.ReadGreedyReference(filepath.Join("..", "..", "models", "reference-greedy.txt"))
	if err != nil || len(cases) == 0 {
		t.Fatalf("reference: %d cases, %v", len(cases), err)
	}
	be := cpu.New(cpu.Options{})
	defer be.Close()
	ctx := context.Background()
	for _, tc := range cases {
		path, ok := modelPath(tc.File)
		if !ok {
			t.Logf("%s not found (the F16 file is not in the repository; set MESHNODE_MODELS)", tc.File)
			continue
		}
		f, err := gguf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cfg, err := model.ParseConfig(f.Metadata)
		if err != nil {
			t.Fatal(err)
		}
		for _, rs := range modeltest.Splits(cfg.Layers)[:cfg.Layers-1] {
			t.Run(tc.File+"/"+strconv.Itoa(len(tc.Prompt))+"/"+splitName(rs), func(t *testing.T) {
				got := stagesGreedy(t, ctx, f, be, rs, tc.Prompt, len(tc.Generated))
				if !slices.Equal(got, tc.Generated) {
					t.Fatalf("greedy ids\n got %v\nwant %v", got, tc.Generated)
				}
			})
		}
	}
}

// stagesGreedy decodes n greedy tokens after prompt through the stages
// rs of the model in f, one sequence, passing f32 hidden rows.
func stagesGreedy(t *testing.T, ctx context.Context, f *gguf.File, be backend.Backend, rs []model.LayerRange, prompt []uint32, n int) []uint32 {
	t.Helper()
	var batches []*model.Batch
	var sessions []*model.Session
	for _, r := range rs {
		m, err := model.LoadStage(f, be, r)
		if err != nil {
			t.Fatal(err)
		}
		b, err := m.NewBatch(model.BatchOptions{Tokens: 64, Seqs: 1})
		if err != nil {
			t.Fatal(err)
		}
		batches, sessions = append(batches, b), append(sessions, session(t, m, model.SessionOptions{Context: 256}))
	}
	var out []uint32
	var hidden []float32
	in := prompt
	for len(out) < n {
		for i, b := range batches {
			seq := []model.Seq{{Session: sessions[i], Logits: 1}}
			var err error
			if i == 0 {
				seq[0].Tokens = in
				err = b.Step(ctx, seq)
			} else {
				seq[0].Count = len(in)
				err = b.StepHidden(ctx, seq, hidden)
			}
			if err != nil {
				t.Fatal(err)
			}
			if i < len(batches)-1 {
				hidden = b.Hidden(hidden)
			}
		}
		tok := batches[len(batches)-1].ArgMax(0)
		out = append(out, tok)
		in = []uint32{tok}
	}
	return out
}

func splitName(rs []model.LayerRange) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, r.String())
	}
	return strings.Join(parts, ",")
}

// weightBytes counts the bytes the model hands its backend.
type weightBytes struct {
	backend.Backend
	n int
}

func (b *weightBytes) Weight(typ quant.Type, rows, cols int, data []byte) (backend.Weight, error) {
	b.n += len(data)
	return b.Backend.Weight(typ, rows, cols, data)
}

// TestStageLoadsItsTensors: a stage hands the backend exactly its blocks'
// tensors, the first also the embeddings, the last the output norm and
// head (with tied embeddings, the embeddings again).
func TestStageLoadsItsTensors(t *testing.T) {
	cpuBE := cpu.New(cpu.Options{Threads: 1})
	defer cpuBE.Close()
	for _, arch := range []string{"llama", "qwen2"} { // untied, tied
		file := tiny(t, arch)
		f, err := gguf.Parse(file)
		if err != nil {
			t.Fatal(err)
		}
		size := func(keep func(name string) bool) int {
			n := 0
			for _, ti := range f.Tensors {
				if keep(ti.Name) && !strings.HasPrefix(ti.Name, "rope_") {
					n += int(ti.Size)
				}
			}
			return n
		}
		_, tied := f.Tensor("output.weight")
		tied = !tied
		for _, tc := range []struct {
			r    model.LayerRange
			want func(string) bool
		}{
			{model.LayerRange{Lo: 0, Hi: 1}, func(n string) bool { return strings.HasPrefix(n, "blk.0.") || n == "token_embd.weight" }},
			{model.LayerRange{Lo: 1, Hi: 2}, func(n string) bool {
				return strings.HasPrefix(n, "blk.1.") || strings.HasPrefix(n, "output") || tied && n == "token_embd.weight"
			}},
			{model.LayerRange{Lo: 0, Hi: 2}, func(n string) bool { return true }},
		} {
			be := &weightBytes{Backend: cpuBE}
			m, err := model.LoadStage(f, be, tc.r)
			if err != nil {
				t.Fatalf("%s %v: %v", arch, tc.r, err)
			}
			if want := size(tc.want); be.n != want || m.WeightBytes() != int64(want) {
				t.Errorf("%s %v: %d bytes of weights loaded (WeightBytes %d), want %d", arch, tc.r, be.n, m.WeightBytes(), want)
			}
			c := m.Config()
			if kv, want := m.KVBytes(10, model.KVF16), int64(tc.r.Hi-tc.r.Lo)*10*int64(c.KVHeads*(c.HeadDimK+c.HeadDimV))*2; kv != want {
				t.Errorf("%s %v: KVBytes %d, want %d", arch, tc.r, kv, want)
			}
			if m.Range() != tc.r || m.First() != (tc.r.Lo == 0) || m.Last() != (tc.r.Hi == 2) {
				t.Errorf("%s %v: Range %v First %v Last %v", arch, tc.r, m.Range(), m.First(), m.Last())
			}
		}
	}
}

// TestStageErrors: bad ranges, and the calls a stage cannot serve, are
// refused with ErrRange and ErrStage; a tensor no stage uses is refused
// by the stage whose block it is in, and only by it.
func TestStageErrors(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	file := tiny(t, "llama")
	f, err := gguf.Parse(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []model.LayerRange{{Lo: -1, Hi: 1}, {Lo: 1, Hi: 1}, {Lo: 1, Hi: 0}, {Lo: 0, Hi: 3}} {
		if _, err := model.LoadStage(f, be, r); !errors.Is(err, model.ErrRange) {
			t.Errorf("LoadStage %v: %v, want ErrRange", r, err)
		}
	}
	first, err := model.LoadStage(f, be, model.LayerRange{Lo: 0, Hi: 1})
	if err != nil {
		t.Fatal(err)
	}
	last, err := model.LoadStage(f, be, model.LayerRange{Lo: 1, Hi: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s0 := session(t, first, model.SessionOptions{Context: 8})
	s1 := session(t, last, model.SessionOptions{Context: 8})
	b0, err := first.NewBatch(model.BatchOptions{Tokens: 4, Seqs: 1})
	if err != nil {
		t.Fatal(err)
	}
	b1, err := last.NewBatch(model.BatchOptions{Tokens: 4, Seqs: 1})
	if err != nil {
		t.Fatal(err)
	}
	embd := first.Config().Embd
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"Eval on a first stage", func() error { _, err := s0.Eval(ctx, []uint32{1}); return err }(), model.ErrStage},
		{"Prefill on a last stage", func() error { _, _, err := s1.Prefill(ctx, []uint32{1}); return err }(), model.ErrStage},
		{"Step on a later stage", b1.Step(ctx, []model.Seq{{Session: s1, Tokens: []uint32{1}}}), model.ErrStage},
		{"StepHidden on the first stage", b0.StepHidden(ctx, []model.Seq{{Session: s0, Count: 1}}, make([]float32, embd)), model.ErrStage},
		{"hidden rows of the wrong size", b1.StepHidden(ctx, []model.Seq{{Session: s1, Count: 2}}, make([]float32, embd)), nil},
		{"token ids into StepHidden", b1.StepHidden(ctx, []model.Seq{{Session: s1, Tokens: []uint32{1}, Count: 1}}, make([]float32, embd)), nil},
		{"past the context", b1.StepHidden(ctx, []model.Seq{{Session: s1, Count: 9}}, make([]float32, 9*embd)), model.ErrContext},
		{"no positions", b1.StepHidden(ctx, []model.Seq{{Session: s1}}, nil), nil},
	} {
		if tc.err == nil || tc.want != nil && !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want an error (%v)", tc.name, tc.err, tc.want)
		}
	}
	if s0.Len() != 0 || s1.Len() != 0 {
		t.Errorf("refused steps changed the sessions: %d, %d positions", s0.Len(), s1.Len())
	}

	// An unknown tensor in block 1 is the business of the stage with block 1.
	bad := rewrite(t, file, nil, func(ts []gguf.TensorInfo) []gguf.TensorInfo {
		x := ts[len(ts)-1]
		x.Name = "blk.1.ffn_gate_inp.weight"
		return append(ts, x)
	}, func(ti gguf.TensorInfo) []byte {
		if ti.Name == "blk.1.ffn_gate_inp.weight" {
			return make([]byte, ti.Size)
		}
		return nil
	})
	bf, err := gguf.Parse(bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := model.LoadStage(bf, be, model.LayerRange{Lo: 0, Hi: 1}); err != nil {
		t.Errorf("stage 0-1 refused a tensor of block 1: %v", err)
	}
	if _, err := model.LoadStage(bf, be, model.LayerRange{Lo: 1, Hi: 2}); !errors.Is(err, model.ErrUnsupported) || !strings.Contains(err.Error(), "blk.1.ffn_gate_inp.weight") {
		t.Errorf("stage 1-2 with an unknown tensor in its block: %v", err)
	}
}

// checkStageRefused: a hybrid model (qwen35, lfm2) loads whole but refuses
// to be split, since a later stage could not rewind its recurrent state.
func checkStageRefused(t *testing.T, f *gguf.File, be backend.Backend) {
	t.Helper()
	if _, err := model.Load(f, be); err != nil {
		t.Fatalf("the whole model: %v", err)
	}
	c, err := model.ParseConfig(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []model.LayerRange{{Lo: 0, Hi: 1}, {Lo: 1, Hi: c.Layers}} {
		_, err := model.LoadStage(f, be, r)
		if !errors.Is(err, model.ErrUnsupported) {
			t.Fatalf("stage %v: %v, want ErrUnsupported", r, err)
		}
	}
}

// TestGemma4Stages: a gemma4 model splits only where no block's shared KV
// (attention.shared_kv_layers) is in another stage, and not at all with
// per-layer embeddings; LoadStage refuses the rest with a clear error,
// and the allowed splits are bit-exact.
func TestGemma4Stages(t *testing.T) {
	md, err := vocabSource()
	if err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	load := func(spec modeltest.Spec) *gguf.File {
		return modeltest.Parsed(t, spec, md)
	}

	// 6 layers, 4 and 5 reading 2's (SWA) and 3's (full) KV.
	f := load(modeltest.StageFixture("gemma4", "Q8_0", 6))
	cfg, err := model.ParseConfig(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	if got := []int{cfg.KVSource(3), cfg.KVSource(4), cfg.KVSource(5)}; !slices.Equal(got, []int{3, 2, 3}) {
		t.Fatalf("KV sources of layers 3-5: %v, want [3 2 3]", got)
	}
	for at := 1; at < 6; at++ {
		_, err := model.LoadStage(f, be, model.LayerRange{Lo: at, Hi: 6})
		if at <= 2 {
			if err != nil {
				t.Errorf("split at %d: %v", at, err)
			}
			continue
		}
		if !errors.Is(err, model.ErrUnsupported) || !strings.Contains(err.Error(), "KV cache") {
			t.Errorf("split at %d: %v, want a refusal naming the shared KV", at, err)
		}
		if cerr := cfg.CheckStage(model.LayerRange{Lo: at, Hi: 6}); cerr == nil {
			t.Errorf("split at %d: CheckStage allows what LoadStage refuses", at)
		}
	}
	layouts := [][]model.LayerRange{{{Lo: 0, Hi: 1}, {Lo: 1, Hi: 6}}, {{Lo: 0, Hi: 2}, {Lo: 2, Hi: 6}}}
	if err := modeltest.StagesBitExact(context.Background(), f, be, layouts); err != nil {
		t.Fatal(err)
	}

	// The parity fixture has per-layer embeddings: only whole.
	f = load(modeltest.Fixture("gemma4", "Q8_0"))
	for _, r := range []model.LayerRange{{Lo: 0, Hi: 1}, {Lo: 1, Hi: 2}} {
		if _, err := model.LoadStage(f, be, r); !errors.Is(err, model.ErrUnsupported) || !strings.Contains(err.Error(), "per-layer") {
			t.Errorf("stage %v of a model with per-layer embeddings: %v", r, err)
		}
	}
	if _, err := model.LoadStage(f, be, model.LayerRange{Lo: 0, Hi: 4}); err != nil {
		t.Errorf("the whole range as a stage: %v", err)
	}
}

// TestStageLayoutsCoverModel: a layout that stops short of the model's
// last block is an error that says so, not a panic reading logits from a
// stage that has none (the device checks ran the two-block layouts on
// smollm3's four-block fixture); SplitsOf's layouts run the whole model.
func TestStageLayoutsCoverModel(t *testing.T) {
	md, err := vocabSource()
	if err != nil {
		t.Fatal(err)
	}
	f := modeltest.Parsed(t, modeltest.StageFixture("llama", "Q8_0", 4), md)
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	short := []model.LayerRange{{Lo: 0, Hi: 1}, {Lo: 1, Hi: 2}}
	if _, err := modeltest.StageScript(context.Background(), f, be, short, nil, nil); err == nil || !strings.Contains(err.Error(), "end at block 2 of the model's 4") {
		t.Errorf("stages %v of 4 blocks: %v, want an error naming where they end", short, err)
	}
	splits, err := modeltest.SplitsOf(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(splits) == 0 {
		t.Fatal("SplitsOf gave no layouts")
	}
	for _, layout := range splits {
		at := 0
		for _, r := range layout {
			if r.Lo != at || r.Hi <= r.Lo {
				t.Errorf("layout %v: stage %v does not follow block %d", layout, r, at)
			}
			at = r.Hi
		}
		if at != 4 || len(layout) < 2 {
			t.Errorf("layout %v: want 2 or more stages ending at block 4", layout)
		}
	}
	if err := modeltest.StagesBitExact(context.Background(), f, be, splits); err != nil {
		t.Error(err)
	}
}
