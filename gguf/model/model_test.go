package model_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/quant"
)

// tiny is a fixture small enough to rewrite freely in tests.
func tiny(t testing.TB, arch string) []byte {
	t.Helper()
	md, err := vocabSource()
	if err != nil {
		t.Fatal(err)
	}
	b, err := modeltest.Generate(modeltest.Spec{Arch: arch, FileType: "Q8_0", Embd: 64, Layers: 2, Heads: 2, KVHeads: 1,
		FF: 128, Vocab: 300, Context: 512, Seed: 3}, md)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rewrite copies a GGUF file through edit, which may change the metadata
// (keys mapped to nil are dropped) and the tensors.
func rewrite(t testing.TB, file []byte, meta map[string]any, tensors func([]gguf.TensorInfo) []gguf.TensorInfo, data func(gguf.TensorInfo) []byte) []byte {
	t.Helper()
	f, err := gguf.Parse(file)
	if err != nil {
		t.Fatal(err)
	}
	w := gguf.NewWriter()
	for k, v := range f.Metadata.All() {
		if nv, ok := meta[k]; ok {
			if nv == nil {
				continue
			}
			if err := w.Set(k, nv); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := w.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range meta {
		if _, ok := f.Metadata.Lookup(k); !ok && v != nil {
			if err := w.Set(k, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	ts := f.Tensors
	if tensors != nil {
		ts = tensors(slices.Clone(ts))
	}
	for _, ti := range ts {
		var b []byte
		if data != nil {
			b = data(ti)
		}
		if b == nil {
			if b, err = f.TensorData(ti); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.AddTensor(ti.Name, ti.Type, ti.Dims, b); err != nil {
			t.Fatal(err)
		}
	}
	out, err := w.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func load(t testing.TB, file []byte, be backend.Backend) (*model.Model, error) {
	t.Helper()
	f, err := gguf.Parse(file)
	if err != nil {
		t.Fatal(err)
	}
	return model.Load(f, be)
}

func TestLoadErrors(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	file := tiny(t, "llama")
	if _, err := load(t, file, be); err != nil {
		t.Fatalf("the unedited fixture: %v", err)
	}
	drop := func(name string) func([]gguf.TensorInfo) []gguf.TensorInfo {
		return func(ts []gguf.TensorInfo) []gguf.TensorInfo {
			return slices.DeleteFunc(ts, func(ti gguf.TensorInfo) bool { return ti.Name == name })
		}
	}
	for _, tc := range []struct {
		name    string
		file    []byte
		want    error
		mention string
	}{
		{"architecture", rewrite(t, file, map[string]any{"general.architecture": "mamba"}, nil, nil), model.ErrUnsupported, `"mamba"`},
		{"no architecture", rewrite(t, file, map[string]any{"general.architecture": nil}, nil, nil), model.ErrInvalid, "general.architecture"},
		{"missing tensor", rewrite(t, file, nil, drop("blk.1.ffn_down.weight"), nil), model.ErrInvalid, "blk.1.ffn_down.weight"},
		{"extra tensor", rewrite(t, file, nil, func(ts []gguf.TensorInfo) []gguf.TensorInfo {
			x := ts[len(ts)-1]
			x.Name = "blk.0.ffn_gate_inp.weight"
			return append(ts, x)
		}, func(ti gguf.TensorInfo) []byte {
			if ti.Name == "blk.0.ffn_gate_inp.weight" {
				return make([]byte, ti.Size)
			}
			return nil
		}), model.ErrUnsupported, "blk.0.ffn_gate_inp.weight"},
		{"wrong shape", rewrite(t, file, nil, func(ts []gguf.TensorInfo) []gguf.TensorInfo {
			for i := range ts {
				if ts[i].Name == "blk.0.attn_norm.weight" {
					ts[i].Dims = []int64{32, 2}
				}
			}
			return ts
		}, nil), model.ErrInvalid, "blk.0.attn_norm.weight"},
		{"missing hyperparameter", rewrite(t, file, map[string]any{"llama.block_count": nil}, nil, nil), model.ErrInvalid, "block_count"},
		{"kv heads not dividing heads", rewrite(t, file, map[string]any{"llama.attention.head_count_kv": uint32(3)}, nil, nil), model.ErrInvalid, "KV heads"},
		{"per-layer heads", rewrite(t, file, map[string]any{"llama.attention.head_count": []uint32{2, 4}}, nil, nil), model.ErrUnsupported, "varies by layer"},
		{"rope scaling", rewrite(t, file, map[string]any{"llama.rope.scaling.type": "su"}, nil, nil), model.ErrUnsupported, `"su"`},
		{"huge width", rewrite(t, file, map[string]any{"llama.embedding_length": uint32(1 << 30)}, nil, nil), model.ErrInvalid, "embedding_length"},
		// A few kilobytes claiming 4M blocks: refused before they are
		// allocated (below, the bytes the load allocates).
		{"blocks past the tensors", rewrite(t, file, map[string]any{"llama.block_count": uint32(1 << 22)}, nil, nil), model.ErrInvalid, "block_count = 4194304"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := load(t, tc.file, be)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("error %v, want %v mentioning %s", err, tc.want, tc.mention)
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
				t.Errorf("refusing it allocated %d MB", got>>20)
			}
		})
	}
}

func TestUnsupportedTypeNamed(t *testing.T) {
	// A tensor type the kernels lack is ErrUnsupported with its name.
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	file := rewrite(t, tiny(t, "llama"), nil, func(ts []gguf.TensorInfo) []gguf.TensorInfo {
		for i := range ts {
			if ts[i].Name == "blk.0.ffn_norm.weight" {
				ts[i].Type = quant.I32
			}
		}
		return ts
	}, nil)
	_, err := load(t, file, be)
	if !errors.Is(err, model.ErrUnsupported) || !strings.Contains(err.Error(), "blk.0.ffn_norm.weight") || !strings.Contains(err.Error(), "I32") {
		t.Fatalf("error %v", err)
	}
}

func session(t testing.TB, m *model.Model, opt model.SessionOptions) *model.Session {
	t.Helper()
	s, err := m.NewSession(opt)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestInvariance: the logits do not depend on the batch a prompt is cut
// into, the thread count, or whether the prefix came from the cache.
func TestInvariance(t *testing.T) {
	ctx := context.Background()
	for _, arch := range modeltest.Archs {
		t.Run(arch, func(t *testing.T) {
			file := tiny(t, arch)
			prompt := []uint32{1, 5, 77, 200, 13, 9, 250, 31, 42, 7, 99}
			var ref []float32
			for _, tc := range []struct {
				threads, batch int
				kv             model.KVType
			}{{1, 128, model.KVF16}, {3, 128, model.KVF16}, {2, 1, model.KVF16}, {2, 4, model.KVF16}} {
				be := cpu.New(cpu.Options{Threads: tc.threads})
				m, err := load(t, file, be)
				if err != nil {
					t.Fatal(err)
				}
				s := session(t, m, model.SessionOptions{Context: 64, Batch: tc.batch, KV: tc.kv})
				_, logits, err := s.Prefill(ctx, prompt)
				if err != nil {
					t.Fatal(err)
				}
				if ref == nil {
					ref = slices.Clone(logits)
				} else if !slices.Equal(ref, logits) {
					t.Fatalf("threads %d, batch %d: logits differ", tc.threads, tc.batch)
				}
				be.Close()
			}

			// KV reuse: evaluate the first half, then ask for the whole.
			be := cpu.New(cpu.Options{})
			defer be.Close()
			m, err := load(t, file, be)
			if err != nil {
				t.Fatal(err)
			}
			s := session(t, m, model.SessionOptions{Context: 64})
			if _, _, err := s.Prefill(ctx, prompt[:6]); err != nil {
				t.Fatal(err)
			}
			reused, logits, err := s.Prefill(ctx, prompt)
			if err != nil {
				t.Fatal(err)
			}
			if reused != 6 || !slices.Equal(logits, ref) {
				t.Fatalf("reused %d (want 6); logits equal: %v", reused, slices.Equal(logits, ref))
			}
			// A diverging prompt keeps only the shared prefix.
			other := slices.Concat(prompt[:3], []uint32{8, 8, 8})
			if reused, _, err = s.Prefill(ctx, other); err != nil || reused != 3 {
				t.Fatalf("diverging prompt: reused %d, %v", reused, err)
			}
			// Back to the first prompt: the shared 3 tokens stay; then the
			// same prompt again re-evaluates its last token only.
			if reused, logits, err = s.Prefill(ctx, prompt); err != nil || reused != 3 || !slices.Equal(logits, ref) {
				t.Fatalf("back to the first: reused %d, %v", reused, err)
			}
			if reused, logits, err = s.Prefill(ctx, prompt); err != nil || reused != len(prompt)-1 || !slices.Equal(logits, ref) {
				t.Fatalf("repeat: reused %d, %v", reused, err)
			}
		})
	}
}

// TestKVF32 checks the f32 cache against the f16 one: close, not equal.
func TestKVF32(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	m, err := load(t, tiny(t, "gemma3"), be)
	if err != nil {
		t.Fatal(err)
	}
	prompt := []uint32{1, 5, 77, 200, 13, 9}
	var got [2][]float32
	for i, kv := range []model.KVType{model.KVF16, model.KVF32} {
		_, logits, err := session(t, m, model.SessionOptions{Context: 16, KV: kv}).Prefill(context.Background(), prompt)
		if err != nil {
			t.Fatal(err)
		}
		got[i] = slices.Clone(logits)
	}
	var worst float64
	for i := range got[0] {
		worst = max(worst, float64(abs32(got[0][i]-got[1][i])))
	}
	if worst == 0 || worst > 0.05 {
		t.Fatalf("f16 and f32 caches differ by %v (want a little)", worst)
	}
}

func abs32(f float32) float32 {
	if f < 0 {
		return -f
	}
	return f
}

func TestSessionErrors(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	m, err := load(t, tiny(t, "qwen2"), be)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.NewSession(model.SessionOptions{Context: 513}); !errors.Is(err, model.ErrContext) {
		t.Fatalf("context beyond training: %v", err)
	}
	s := session(t, m, model.SessionOptions{Context: 4})
	ctx := context.Background()
	if _, err := s.Eval(ctx, []uint32{1, 300}); !errors.Is(err, model.ErrToken) {
		t.Fatalf("token 300 of 300: %v", err)
	}
	if _, err := s.Eval(ctx, []uint32{1, 2, 3, 4, 5}); !errors.Is(err, model.ErrContext) {
		t.Fatalf("5 tokens into 4: %v", err)
	}
	if _, err := s.Eval(ctx, []uint32{1, 2, 3}); err != nil || s.Len() != 3 {
		t.Fatalf("3 tokens: %v, len %d", err, s.Len())
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Eval(cancelled, []uint32{4}); !errors.Is(err, context.Canceled) || s.Len() != 3 {
		t.Fatalf("cancelled: %v, len %d", err, s.Len())
	}
	if _, _, err := s.Prefill(ctx, nil); err == nil {
		t.Fatal("empty prompt accepted")
	}
}

func TestConfig(t *testing.T) {
	for _, arch := range modeltest.Archs {
		f, err := gguf.Parse(tiny(t, arch))
		if err != nil {
			t.Fatal(err)
		}
		c, err := model.ParseConfig(f.Metadata)
		if err != nil {
			t.Fatal(err)
		}
		if c.Arch != arch || c.Embd != 64 || c.Layers != 2 || c.Heads != 2 || c.KVHeads != 1 || c.HeadDimK != 32 || c.FF != 128 || c.VocabSize != 300 {
			t.Errorf("%s: %v", arch, c)
		}
		switch arch {
		case "llama":
			if c.RoPENeoX || c.RoPEDims != 32 {
				t.Errorf("llama rope: %v", c)
			}
		case "qwen2":
			if !c.RoPENeoX || c.RoPEScaling != model.ScalingYaRN || c.RoPEScale != 0.25 || c.RoPEOrigContext != 128 {
				t.Errorf("qwen2 rope: %+v", c)
			}
		case "phi3":
			if c.RoPEDims != 16 || c.RoPEAttnFactor != 1.19 {
				t.Errorf("phi3 rope: %+v", c)
			}
		case "gemma3":
			if c.SlidingWindow != 4 || !slices.Equal(c.SWA, []bool{true, false}) || c.RoPEBaseSWA != 10000 || c.FinalSoftcap != 30 || c.EmbedScale != 8 {
				t.Errorf("gemma3: %+v", c)
			}
		case "qwen3":
			if !c.RoPENeoX || c.RoPEBase != 1e6 || c.Experts != 0 {
				t.Errorf("qwen3: %+v", c)
			}
		case "qwen3moe":
			if !c.RoPENeoX || c.Experts != 4 || c.ExpertsUsed != 2 || c.ExpertFF != 64 || !c.ExpertNorm {
				t.Errorf("qwen3moe: %+v", c)
			}
		case "gpt-oss":
			// Every even layer slides, with the global base and the YaRN
			// scale; the chosen experts' logits are softmaxed, unnormalised.
			if !c.RoPENeoX || c.SlidingWindow != 4 || !slices.Equal(c.SWA, []bool{true, false}) || c.RoPEBaseSWA != 1e6 ||
				c.RoPEScaling != model.ScalingYaRN || c.RoPEScale != 1.0/32 || c.Experts != 4 || c.ExpertsUsed != 2 ||
				c.ExpertNorm || !c.ExpertSoftmaxChosen {
				t.Errorf("gpt-oss: %+v", c)
			}
		case "gemma2":
			if c.SlidingWindow != 4 || !slices.Equal(c.SWA, []bool{true, false}) || c.RoPEBaseSWA != c.RoPEBase || c.AttnSoftcap != 3 ||
				c.FinalSoftcap != 30 || c.EmbedScale != 8 {
				t.Errorf("gemma2: %+v", c)
			}
			// Without its keys, llama.cpp's defaults: caps of 50 and 30,
			// a window of 4096.
			f, _ := gguf.Parse(rewrite(t, tiny(t, arch), map[string]any{"gemma2.attn_logit_softcapping": nil, "gemma2.final_logit_softcapping": nil,
				"gemma2.attention.sliding_window": nil}, nil, nil))
			if d, err := model.ParseConfig(f.Metadata); err != nil || d.AttnSoftcap != 50 || d.FinalSoftcap != 30 || d.SlidingWindow != 4096 {
				t.Errorf("gemma2's defaults: %+v, %v", d, err)
			}
		case "granite", "granitemoe":
			if c.RoPENeoX || c.EmbedScale != 12 || c.ResidualScale != 0.22 || c.AttnScale != 1.0/32 || c.LogitScale != 1.6 {
				t.Errorf("%s: %+v", arch, c)
			}
			if arch == "granitemoe" && (c.Experts != 4 || c.ExpertsUsed != 2 || c.ExpertFF != c.FF || !c.ExpertNorm) {
				t.Errorf("granitemoe's experts: %+v", c)
			}
		}
		for l, no := range c.NoRoPE {
			if want := arch == "smollm3" && (l+1)%4 == 0; no != want || len(c.NoRoPE) != c.Layers {
				t.Errorf("%s: block %d NoRoPE %v", arch, l, no)
			}
		}
		if arch != "gemma2" && c.AttnSoftcap != 0 {
			t.Errorf("%s caps its scores: %+v", arch, c)
		}
		if !strings.HasPrefix(arch, "granite") && (c.ResidualScale != 0 || c.LogitScale != 1) {
			t.Errorf("%s has Granite's multipliers: %+v", arch, c)
		}
	}
	// Granite's logit_scale is required and every multiplier finite and
	// not negative; a zero optional one is none, as llama.cpp reads it.
	file := tiny(t, "granite")
	for _, tc := range []struct {
		edit map[string]any
		want string
	}{
		{map[string]any{"granite.logit_scale": nil}, "logit_scale is missing"},
		{map[string]any{"granite.logit_scale": float32(0)}, "logit_scale = 0"},
		{map[string]any{"granite.residual_scale": float32(-1)}, "residual_scale = -1"},
		{map[string]any{"granite.embedding_scale": float32(math.Inf(1))}, "embedding_scale is +Inf"},
	} {
		f, err := gguf.Parse(rewrite(t, file, tc.edit, nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := model.ParseConfig(f.Metadata); !errors.Is(err, model.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want ErrInvalid saying %q", tc.edit, err, tc.want)
		}
	}
	f, _ := gguf.Parse(rewrite(t, file, map[string]any{"granite.embedding_scale": float32(0), "granite.attention.scale": nil, "granite.residual_scale": nil}, nil, nil))
	if c, err := model.ParseConfig(f.Metadata); err != nil || c.EmbedScale != 1 || c.AttnScale != 1/float32(math.Sqrt(32)) || c.ResidualScale != 0 {
		t.Errorf("granite without multipliers: %+v, %v", c, err)
	}
}

// FuzzLoad feeds mutated model files through the parser and the loader,
// which must answer with an error, never a panic.
func FuzzLoad(f *testing.F) {
	md, err := vocabSource()
	if err != nil {
		f.Fatal(err)
	}
	// Seeds of a few kilobytes: the fuzzer slows to a crawl on large ones.
	for _, arch := range modeltest.Archs {
		b, err := modeltest.Generate(modeltest.Spec{Arch: arch, FileType: "Q8_0", Embd: 32, Layers: 1, Heads: 2, KVHeads: 1,
			FF: 64, Vocab: 16, Context: 64, Seed: 3}, md)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// gemma4 with every feature on: per-layer embeddings, shared KV,
	// SWA heads of their own size, per-layer KV heads and FFN widths,
	// experts.
	b, err := modeltest.Generate(modeltest.Spec{Arch: "gemma4", FileType: "Q8_0", Embd: 32, Layers: 4, Heads: 2, KVHeads: 1,
		FF: 64, HeadDim: 32, SWAHeadDim: 16, PerLayerEmbd: 32, SharedKV: 2, FullKVHeads: 2, WideFF: true,
		Experts: 4, ExpertsUsed: 2, ExpertFF: 32, Vocab: 16, Context: 64, Seed: 3}, md)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	be := cpu.New(cpu.Options{Threads: 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		gf, err := gguf.Parse(b)
		if err != nil {
			return
		}
		m, err := model.Load(gf, be)
		if err != nil {
			return
		}
		s, err := m.NewSession(model.SessionOptions{Context: 8})
		if err != nil {
			return
		}
		s.Prefill(context.Background(), []uint32{1, 2})
	})
}
