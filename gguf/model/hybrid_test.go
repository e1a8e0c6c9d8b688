package model_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
)

// The hybrid (qwen35) state tests beyond the matrix ones: TestWindowLogits
// and TestBatchInvariance run the qwen35 fixtures too, so a verified
// window, a trim after it and any batching give plain decoding's bits.

// fixtureBytes is the parity fixture of arch in fileType, generated.
func fixtureBytes(t *testing.T, arch, fileType string) []byte {
	t.Helper()
	md, err := vocabSource()
	if err != nil {
		t.Fatal(err)
	}
	file, err := modeltest.Generate(modeltest.Fixture(arch, fileType), md)
	if err != nil {
		t.Fatal(err)
	}
	return file
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: id %d is %v, want %v", what, i, got[i], want[i])
		}
	}
}

// TestHybridPrefixReuse: a prompt that shares only a prefix with what a
// session holds rewinds its recurrent state (from empty, the prefix being
// before the session's last step) and gets a fresh session's logits, bit
// for bit; so does a rewind to within the last step (from its
// checkpoint), and a step refused by a cancelled context changes nothing.
// Both ways of running the delta nets are checked: the backend's kernels
// (the CPU's), with two states per session, and the host's, with a copy.
func TestHybridPrefixReuse(t *testing.T) {
	cb := cpu.New(cpu.Options{Threads: 2})
	defer cb.Close()
	for _, arch := range []string{"qwen35", "qwen35moe"} {
		for _, be := range []backend.Backend{cb, hostDelta{cb}} {
			t.Run(arch+"/"+pathName(be), func(t *testing.T) {
				m, err := load(t, fixtureBytes(t, arch, "Q8_0"), be)
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				a := []uint32{1, 306, 763, 304, 1101, 278}
				b := []uint32{1243, 310, 5, 77, 19}
				c := []uint32{42, 900, 17}
				fresh := func(prompt []uint32) []float32 {
					s := session(t, m, model.SessionOptions{Context: 64, Batch: 4})
					_, l, err := s.Prefill(ctx, prompt)
					if err != nil {
						t.Fatal(err)
					}
					return append([]float32(nil), l...)
				}
				s := session(t, m, model.SessionOptions{Context: 64, Batch: 4})
				if _, _, err := s.Prefill(ctx, append(append([]uint32(nil), a...), b...)); err != nil {
					t.Fatal(err)
				}
				ac := append(append([]uint32(nil), a...), c...)
				reused, got, err := s.Prefill(ctx, ac)
				if err != nil {
					t.Fatal(err)
				}
				if reused != len(a) {
					t.Fatalf("reused %d tokens, want %d", reused, len(a))
				}
				sameBits(t, "after a rewind to the shared prefix", got, fresh(ac))

				// Within the last step: one token, then back to before it.
				if _, err := s.Eval(ctx, []uint32{8}); err != nil {
					t.Fatal(err)
				}
				s.Truncate(len(ac))
				got, err = s.Eval(ctx, []uint32{9})
				if err != nil {
					t.Fatal(err)
				}
				sameBits(t, "after a rewind of the last step", got, fresh(append(ac, 9)))

				done, cancel := context.WithCancel(ctx)
				cancel()
				if _, err := s.Eval(done, []uint32{10, 11}); !errors.Is(err, context.Canceled) {
					t.Fatalf("a cancelled step: %v", err)
				}
				got, err = s.Eval(ctx, []uint32{12})
				if err != nil {
					t.Fatal(err)
				}
				sameBits(t, "after a cancelled step", got, fresh(append(ac, 9, 12)))
			})
		}
	}
}

// TestHybridMTPBlocks: multi-token-prediction blocks after the model's
// (nextn_predict_layers, as llama.cpp's converter writes Qwen3.5 by
// default) are left unused: the logits are the file's without them.
func TestHybridMTPBlocks(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	file := fixtureBytes(t, "qwen35", "Q8_0")
	f, err := gguf.Parse(file)
	if err != nil {
		t.Fatal(err)
	}
	c, err := model.ParseConfig(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	last := "blk." + strconv.Itoa(c.Layers-1) + "."
	withMTP := rewrite(t, file, map[string]any{"qwen35.block_count": uint32(c.Layers + 1), "qwen35.nextn_predict_layers": uint32(1)},
		func(ts []gguf.TensorInfo) []gguf.TensorInfo {
			for _, ti := range ts {
				if rest, ok := strings.CutPrefix(ti.Name, last); ok {
					extra := ti
					extra.Name = "blk." + strconv.Itoa(c.Layers) + "." + rest
					ts = append(ts, extra)
				}
			}
			return ts
		}, func(ti gguf.TensorInfo) []byte {
			if rest, ok := strings.CutPrefix(ti.Name, "blk."+strconv.Itoa(c.Layers)+"."); ok {
				src, _ := f.Tensor(last + rest)
				b, err := f.TensorData(src)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			return nil
		})
	logits := func(file []byte) []float32 {
		m, err := load(t, file, be)
		if err != nil {
			t.Fatal(err)
		}
		if m.Config().Layers != c.Layers {
			t.Fatalf("%d blocks run, want %d", m.Config().Layers, c.Layers)
		}
		s := session(t, m, model.SessionOptions{Context: 32})
		l, err := s.Eval(context.Background(), []uint32{1, 306, 763})
		if err != nil {
			t.Fatal(err)
		}
		return append([]float32(nil), l...)
	}
	sameBits(t, "with an MTP block", logits(withMTP), logits(file))

	bad := rewrite(t, file, map[string]any{"qwen35.nextn_predict_layers": uint32(c.Layers)}, nil, nil)
	if _, err := load(t, bad, be); !errors.Is(err, model.ErrInvalid) {
		t.Fatalf("every block MTP: %v, want ErrInvalid", err)
	}
}

// TestHybridConfigErrors: Qwen3.5 metadata this engine cannot run as
// llama.cpp does is refused, naming the key.
func TestHybridConfigErrors(t *testing.T) {
	be := cpu.New(cpu.Options{})
	defer be.Close()
	file := fixtureBytes(t, "qwen35", "Q8_0")
	for _, tc := range []struct {
		name string
		meta map[string]any
		want error
		key  string
	}{
		// The fixture rotates 8 pairs: with 4/2/2 the last pair falls in
		// the fourth (image) section, which text does not turn like the
		// others.
		{"fourth rope section", map[string]any{"qwen35.rope.dimension_sections": []int32{4, 2, 2, 0}}, model.ErrUnsupported, "rope.dimension_sections"},
		{"no sections", map[string]any{"qwen35.rope.dimension_sections": nil}, model.ErrInvalid, "rope.dimension_sections"},
		{"no conv kernel", map[string]any{"qwen35.ssm.conv_kernel": nil}, model.ErrInvalid, "ssm.conv_kernel"},
		{"value heads not a multiple", map[string]any{"qwen35.ssm.group_count": uint32(3)}, model.ErrInvalid, "heads"},
		{"value head wider than the state", map[string]any{"qwen35.ssm.inner_size": uint32(512)}, model.ErrUnsupported, "inner size"},
		{"layer flags of another length", map[string]any{"qwen35.attention.recurrent_layers": []bool{true, false}}, model.ErrInvalid, "recurrent_layers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, rewrite(t, file, tc.meta, nil, nil), be)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("%v, want %v naming %q", err, tc.want, tc.key)
			}
		})
	}
}

// TestHybridKV: a delta-net block's KV cache slot is one head, never
// written, and the engine's per-position count (Config.LayerKVElems)
// agrees with the cache the model makes (KVBytes); a proper stage is
// refused by Config.CheckStage as by LoadStage.
func TestHybridKV(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 2})
	defer be.Close()
	m, err := load(t, fixtureBytes(t, "qwen35", "Q8_0"), be)
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config()
	head, attn := c.HeadDimK+c.HeadDimV, c.KVHeads*(c.HeadDimK+c.HeadDimV)
	if c.KVHeads == 1 {
		t.Fatalf("the fixture has 1 KV head: a delta-net block's slot would not differ")
	}
	want := []int{head, attn, head, attn} // delta net, attention, …
	var got []int
	sum := 0
	for l := range c.Layers {
		got = append(got, c.LayerKVElems(l))
		sum += c.LayerKVElems(l)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("floats per position by block %v, want %v", got, want)
	}
	if got, want := m.KVBytes(64, model.KVF16), int64(64*2*sum); got != want {
		t.Errorf("KVBytes(64, f16) = %d, want %d", got, want)
	}
	for _, r := range []model.LayerRange{{Lo: 0, Hi: 1}, {Lo: 1, Hi: c.Layers}} {
		if err := c.CheckStage(r); !errors.Is(err, model.ErrUnsupported) {
			t.Errorf("CheckStage(%v) = %v, want ErrUnsupported", r, err)
		}
	}
	if err := c.CheckStage(model.LayerRange{Lo: 0, Hi: c.Layers}); err != nil {
		t.Errorf("CheckStage of the whole model: %v", err)
	}
}

// hostDelta is a backend without delta-net kernels (as Metal is), so a
// hybrid runs its delta nets on the host.
type hostDelta struct{ backend.Backend }

func pathName(be backend.Backend) string {
	if _, ok := be.(backend.DeltaNetter); ok {
		return "kernels"
	}
	return "host"
}

// TestHybridKernelsMatchHost: the CPU backend's delta-net kernels give the
// host path's logits bit for bit, through prefill, batched decoding of two
// sessions and a rewind.
func TestHybridKernelsMatchHost(t *testing.T) {
	cb := cpu.New(cpu.Options{Threads: 2})
	defer cb.Close()
	kernelsMatchHost(t, cb, hostDelta{cb}, "qwen35", "qwen35moe")
}

// kernelsMatchHost runs each architecture's Q8_0 fixture through
// mixedRun on kernels and on host (the same backend with kernels hidden)
// and holds every logit row to the host's bit for bit.
func kernelsMatchHost(t *testing.T, kernels, host backend.Backend, archs ...string) {
	for _, arch := range archs {
		t.Run(arch, func(t *testing.T) {
			file := fixtureBytes(t, arch, "Q8_0")
			want, got := mixedRun(t, file, host), mixedRun(t, file, kernels)
			if len(got) != len(want) {
				t.Fatalf("%d logit rows, want %d", len(got), len(want))
			}
			for i := range want {
				sameBits(t, "row "+strconv.Itoa(i), got[i], want[i])
			}
		})
	}
}

// mixedRun is the logits of file's model on be through prefill, batched
// decoding of two sessions and a rewind.
func mixedRun(t *testing.T, file []byte, be backend.Backend) [][]float32 {
	t.Helper()
	m, err := load(t, file, be)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var out [][]float32
	keep := func(l []float32) { out = append(out, slices.Clone(l)) }
	s1 := session(t, m, model.SessionOptions{Context: 64, Batch: 4})
	s2 := session(t, m, model.SessionOptions{Context: 64, Batch: 4})
	for i, s := range []*model.Session{s1, s2} {
		_, l, err := s.Prefill(ctx, []uint32{1, 306, 763, 304, 1101, uint32(278 + i)})
		if err != nil {
			t.Fatal(err)
		}
		keep(l)
	}
	b, err := m.NewBatch(model.BatchOptions{Tokens: 8, Seqs: 4})
	if err != nil {
		t.Fatal(err)
	}
	// s2's three tokens with one logits row are two pieces of
	// the step, its body rows and its tail.
	for step := range 3 {
		err := b.Step(ctx, []model.Seq{
			{Session: s1, Tokens: []uint32{uint32(40 + step)}, Logits: 1},
			{Session: s2, Tokens: []uint32{uint32(90 + step), 7, 8}, Logits: 1},
		})
		if err != nil {
			t.Fatal(err)
		}
		keep(b.Logits(0))
		keep(b.Logits(1))
	}
	s2.Truncate(s2.Len() - 1)
	l, err := s2.Eval(ctx, []uint32{5})
	if err != nil {
		t.Fatal(err)
	}
	keep(l)
	return out
}

// failAfter is a context whose Err is Canceled from its n+1-th call on:
// a step that forward checks once per block fails after n blocks.
type failAfter struct {
	context.Context
	n int
}

func (c *failAfter) Err() error {
	if c.n--; c.n < 0 {
		return context.Canceled
	}
	return nil
}

// TestHybridFailedStepRewind: a step that fails after its first block (a
// delta net, which has written its next state over the checkpoint's on the
// backend) leaves the state its tokens had, and a rewind right after it
// to the last checkpoint's position still gets a fresh session's logits.
func TestHybridFailedStepRewind(t *testing.T) {
	cb := cpu.New(cpu.Options{Threads: 2})
	defer cb.Close()
	for _, be := range []backend.Backend{cb, hostDelta{cb}} {
		t.Run(pathName(be), func(t *testing.T) {
			m, err := load(t, fixtureBytes(t, "qwen35", "Q8_0"), be)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			fresh := func(prompt []uint32) []float32 {
				s := session(t, m, model.SessionOptions{Context: 64, Batch: 4})
				_, l, err := s.Prefill(ctx, prompt)
				if err != nil {
					t.Fatal(err)
				}
				return slices.Clone(l)
			}
			a := []uint32{1, 306, 763, 304}
			s := session(t, m, model.SessionOptions{Context: 64, Batch: 4})
			if _, _, err := s.Prefill(ctx, a); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Eval(ctx, []uint32{8}); err != nil {
				t.Fatal(err)
			}
			fail := func() {
				t.Helper()
				if _, err := s.Eval(&failAfter{ctx, 1}, []uint32{9, 10}); !errors.Is(err, context.Canceled) {
					t.Fatalf("a step cancelled after one block: %v", err)
				}
			}
			fail()
			// Back to before the last successful step (the checkpoint's
			// position, the 8).
			s.Truncate(len(a))
			got, err := s.Eval(ctx, []uint32{12})
			if err != nil {
				t.Fatal(err)
			}
			sameBits(t, "after a rewind past the failed step", got, fresh(append(slices.Clone(a), 12)))
			fail()
			got, err = s.Eval(ctx, []uint32{13})
			if err != nil {
				t.Fatal(err)
			}
			sameBits(t, "after the failed step", got, fresh(append(slices.Clone(a), 12, 13)))
		})
	}
}
