// Package modeltest writes random-weight GGUF models for tests and
// benchmarks: small fixtures of every architecture and weight type that
// package model runs, generated deterministically (the same bytes on every
// machine and run, so golden logits from llama.cpp stay valid), and large
// models of a real model's shape for speed measurements.
//
// The weights are random (not trained); the tokenizer is a real one copied
// from another GGUF's metadata, optionally cut to its first tokens so that
// the embedding tables, and the time it takes to quantise them, stay small.
package modeltest

import (
	"bufio"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// Spec describes a random model.
type Spec struct {
	Arch     string // llama, qwen2, phi3, gemma3, qwen3, qwen3moe, gpt-oss, gemma4, qwen35 or qwen35moe
	FileType string // F32, F16, Q8_0, Q4_0, Q6_K or Q4_K_M

	Embd, Layers, Heads, KVHeads, FF int
	// HeadDim is the head size when it is not Embd/Heads (0: Embd/Heads).
	HeadDim int `json:",omitempty"`
	// Experts, ExpertsUsed and ExpertFF shape a mixture-of-experts FFN
	// (qwen3moe): Experts experts of width ExpertFF, ExpertsUsed per token;
	// all 0 means 4 experts, 2 used, of width FF/2.
	Experts     int `json:",omitempty"`
	ExpertsUsed int `json:",omitempty"`
	ExpertFF    int `json:",omitempty"`
	// SharedFF is the width of qwen35moe's shared expert (0: FF/2).
	SharedFF int `json:",omitempty"`
	// SSMHeads and SSMGroups are a qwen35 delta net's value and key
	// heads, of SSMState each (all 0: 4 and 2 of 64), with a 4-tap
	// convolution; every FullAttn-th block is attention (0: 2).
	SSMHeads  int `json:",omitempty"`
	SSMGroups int `json:",omitempty"`
	SSMState  int `json:",omitempty"`
	FullAttn  int `json:",omitempty"`
	// Gemma 4: the SWA layers' head size (0: HeadDim), the width of the
	// per-layer token embeddings, and how many last layers share KV.
	SWAHeadDim   int `json:",omitempty"`
	PerLayerEmbd int `json:",omitempty"`
	SharedKV     int `json:",omitempty"`
	// FullKVHeads is gemma4's full-attention layers' KV heads where they
	// differ from the SWA layers' KVHeads (0: the same); WideFF doubles
	// the FFN of the layers that share KV (use_double_wide_mlp). Either
	// makes its key a per-layer array.
	FullKVHeads int  `json:",omitempty"`
	WideFF      bool `json:",omitempty"`
	// Window is lfm2's sliding window over its attention blocks (0:
	// none), and AttnLayers its attention blocks (nil: every third from
	// 1).
	Window     int   `json:",omitempty"`
	AttnLayers []int `json:",omitempty"`
	// DenseLead is lfm2moe's first blocks with a dense FFN
	// (leading_dense_block_count).
	DenseLead int `json:",omitempty"`
	// Vocab keeps the first Vocab tokens of the tokenizer (0: all).
	Vocab   int
	Context int
	Seed    uint64
}

// Archs and FileTypes are the fixture matrix the parity tests cover.
var (
	Archs     = []string{"llama", "qwen2", "phi3", "gemma3", "qwen3", "qwen3moe", "gpt-oss", "gemma4", "qwen35", "qwen35moe", "granite", "granitemoe", "smollm3", "gemma2", "mistral3", "olmo2", "exaone4", "ernie4_5", "lfm2", "lfm2moe"}
	FileTypes = []string{"F16", "Q8_0", "Q4_0", "Q4_K_M", "Q6_K"}
)

// Fixture is the parity fixture of arch in fileType: 2 layers of width 256
// (the least the K-quants allow), 4 heads sharing 2 KV heads, a 512-wide
// FFN and the first 2048 tokens of the vocabulary. Each architecture also
// carries the features its real models use, so the goldens cover them:
//
//   - llama: rope_freqs (llama 3's per-frequency factors);
//   - qwen2: Q/K/V biases, tied embeddings, YaRN RoPE scaling (factor 4);
//   - phi3: fused QKV and gate-up, partial rotary (half the head),
//     LongRoPE factors with an attention factor;
//   - gemma3: Q/K norms, post-norms, GeGLU, √n_embd embedding scale, tied
//     embeddings, a 4-token sliding window on every other layer with its
//     own RoPE base, and a final logit softcap;
//   - qwen3: Q/K norms, no biases, tied embeddings, and heads of 128 wider
//     than n_embd/n_head (Qwen3-0.6B's 16 heads of 128 over 1024);
//   - qwen3moe: Q/K norms, an untied output head, and a mixture-of-experts
//     FFN of 8 experts of width 256, 2 per token (Qwen3-30B-A3B has 128
//     of 768, 8 per token), with an F32 router as llama-quantize leaves it;
//   - gpt-oss: attention sinks, Q/K/V/O biases, a 4-token sliding window on
//     every other layer (the default period, 2), YaRN (factor 32 over an
//     original context of 1024, as gpt-oss's 32 over 4096), an untied head,
//     and 8 experts of width 256, 4 per token (gpt-oss-20b: 32 of 2880, 4
//     per token), in MXFP4 whatever the file type, as the published files
//     have them, with router and expert biases;
//   - gemma4: 4 layers alternating SWA (heads of 64, window 4, rotary
//     base 10⁴, 64 rotated) and full attention (heads of 128 with
//     rope_freqs), the last two sharing the first two's KV, per-layer
//     token embeddings 256 wide, layer output scales, V from K's
//     projection in layer 1 (no attn_v), tied embeddings and a final
//     logit softcap; and in layers 0 and 3 the 26B-A4B's mixture of 8
//     experts of width 256, 2 per token, beside the dense FFN, with
//     separate gate and up in layer 0, fused gate_up and per-expert
//     output scales in layer 3; 2 KV heads on SWA layers and 1 on full
//     ones, and the KV-sharing layers' FFN twice as wide (E2B's
//     use_double_wide_mlp), both per-layer arrays;
//   - qwen35: 4 blocks alternating a gated delta net (4 value heads of 64
//     over 2 key heads, a 4-tap convolution) and gated attention with Q/K
//     norms and M-RoPE sections (3/3/2) over a quarter of the head, an
//     untied output head (the real models have 3 delta nets per attention
//     block, heads of 128 and a quarter of a 256-wide attention head
//     rotated);
//   - qwen35moe: qwen35 with 8 experts of 256, 2 per token, and a gated
//     shared expert of 256 in every block;
//   - granite: llama's block with Granite 3.x's multipliers (embeddings
//     ×12, block outputs ×0.22 before the residual adds, scores × the
//     attention scale 1/64 rather than 1/√64, logits ÷1.6), tied
//     embeddings and a rope base of 10⁷;
//   - granitemoe: granite with 8 experts of the FFN's width (512, as
//     Granite's experts are feed_forward_length wide), 2 per token
//     (granite-3.1-3b-a800m: 40 of 512, 8 per token);
//   - smollm3: llama with no RoPE in every fourth block, 4 blocks (so the
//     last is one), tied embeddings and a rope base of 5·10⁶;
//   - gemma2: gemma3's block without Q/K norms, the scores capped at ±3
//     (Gemma 2's cap is 50, which random scores never reach: 3 bends
//     them), a 4-token window on every other layer by the default period
//     (no pattern key), the global rope base on those layers, and the
//     final softcap of 30;
//   - mistral3: llama's block with YaRN (factor 16 over an original
//     context of 8, the file's beta_fast 0.5 and beta_slow 0.125, which
//     put YaRN's ramp over pairs 2 to 6 of so short a context, and
//     a log multiplier of 1; Ministral 3 has 16 over 16384 with 32, 1 and
//     1) and the attention temperature 0.1, which the tiny original
//     context brings in from position 8 (Ministral 3's from 16384), and a
//     rope base of 10⁶;
//   - olmo2: no norm before attention or the FFN, RMS norms after them
//     (weights near 0.3, as gemma's post-norms), Q and K each normed
//     whole, an untied head, YaRN (factor 4 over an original context of
//     1024, an attention factor of 1.2) on its global layer and, as OLMo
//     3, a 4-token sliding window on every other layer, which rotates
//     plainly (the global base, though the file names another for it);
//   - exaone4: olmo2's norm order with per-head Q/K norms, tied
//     embeddings and a rope base of 10⁶ (EXAONE 4.0 1.2B's layout);
//   - ernie4_5: llama's block with tied embeddings, a rope base of 5·10⁵
//     and an attention output bias, which llama.cpp loads and does not
//     apply (ERNIE-4.5-0.3B has none);
//   - lfm2: 4 blocks, gated short convolutions of 3 taps but in block 1
//     (every third from 1, as LFM2's attention blocks are spread), which
//     is attention with per-head Q/K norms, tied embeddings, the output
//     norm named token_embd_norm and a rope base of 10⁶ (LFM2-350M: 16
//     blocks, 6 of them attention, 16 heads over 8 KV heads of 64). The
//     sliding window an LFM2 file may set (the released ones attend
//     globally) is HeldOut's to draw;
//   - lfm2moe: lfm2's blocks, the first with a dense FFN and the others 8
//     experts of 256, 2 per token, routed by sigmoid with a selection bias
//     (LFM2-8B-A1B: 24 blocks, the first 2 dense, 32 experts of 1792, 4
//     per token).
func Fixture(arch, fileType string) Spec {
	s := Spec{
		Arch: arch, FileType: fileType,
		Embd: 256, Layers: 2, Heads: 4, KVHeads: 2, FF: 512,
		Vocab: 2048, Context: 4096, Seed: 1,
	}
	switch arch {
	case "qwen3":
		s.HeadDim = 128
	case "qwen3moe":
		s.Experts, s.ExpertsUsed, s.ExpertFF = 8, 2, 256
	case "qwen35", "lfm2":
		s.Layers = 4
	case "lfm2moe":
		s.Layers, s.DenseLead = 4, 1
		s.Experts, s.ExpertsUsed, s.ExpertFF = 8, 2, 256
	case "qwen35moe":
		s.Layers = 4
		s.Experts, s.ExpertsUsed, s.ExpertFF, s.SharedFF = 8, 2, 256, 256
	case "gpt-oss":
		s.Experts, s.ExpertsUsed, s.ExpertFF = 8, 4, 256
	case "granitemoe":
		s.Experts, s.ExpertsUsed, s.ExpertFF = 8, 2, s.FF
	case "smollm3":
		s.Layers = 4
	case "gemma4":
		s.Layers, s.HeadDim, s.SWAHeadDim, s.PerLayerEmbd, s.SharedKV = 4, 128, 64, 256, 2
		s.Experts, s.ExpertsUsed, s.ExpertFF = 8, 2, 256
		s.FullKVHeads, s.WideFF = 1, true
	}
	return s
}

// HeldOut is a fixture of arch in fileType that the committed goldens
// never saw: Fixture's features with its weights' seed, width, depth,
// heads, FFN and expert counts drawn from rng (within what the K-quants
// and each architecture's generator allow), for checking the engine
// against llama.cpp on shapes and seeds chosen after the fact.
func HeldOut(arch, fileType string, rng *rand.Rand) Spec {
	s := Fixture(arch, fileType)
	pick := func(xs ...int) int { return xs[rng.IntN(len(xs))] }
	s.Seed = rng.Uint64()
	s.Embd = pick(256, 512)
	s.Heads = pick(4, 8)
	s.KVHeads = pick(1, 2, 4)
	s.FF = pick(512, 768)
	switch arch {
	case "gemma4":
		// Its layer pattern (SWA, full, then KV sharing) and head sizes
		// are the fixture's; depth grows by whole SWA/full pairs.
		s.Heads, s.Layers = 4, pick(4, 6)
		s.KVHeads = pick(1, 2)
	case "lfm2", "lfm2moe":
		s.Layers = pick(4, 5, 6) // one or two attention blocks, the last a convolution or not
		if arch == "lfm2" {
			s.Window = pick(0, 4) // lfm2moe's loader does not read one
		} else {
			pick(0, 4) // the same draws after it as lfm2's
		}
	case "qwen35", "qwen35moe":
		s.Layers = pick(4, 6)
		s.SSMHeads, s.SSMGroups, s.SSMState = pick(4, 8), 2, 64
	case "smollm3":
		s.Layers = pick(4, 5, 8) // at least one NoPE block
	default:
		s.Layers = pick(2, 3, 4)
	}
	if s.Experts > 0 {
		s.Experts = pick(8, 16)
		s.ExpertsUsed = pick(2, 4)
		s.ExpertFF = pick(256, 512)
		if s.SharedFF > 0 {
			s.SharedFF = pick(256, 512)
		}
		if arch == "granitemoe" {
			s.ExpertFF = s.FF // its experts are the FFN's width
		}
	}
	return s
}

// StageFixture is Fixture(arch, fileType) with layers blocks, as the
// stage tests split it. gemma4's leaves out the per-layer embeddings,
// which keep a model whole (as the 26B-A4B and 31B have none), and from 6
// layers on has its last 2 sharing KV, so that both allowed and refused
// split points exist.
func StageFixture(arch, fileType string, layers int) Spec {
	s := Fixture(arch, fileType)
	s.Layers = layers
	if arch == "gemma4" {
		s.PerLayerEmbd, s.SharedKV = 0, 0
		if layers >= 6 {
			s.SharedKV = 2
		}
	}
	return s
}

// PerLayer tells a decode step's per-layer cost (kernel launches, GPU
// dispatches) from the rest: count runs on two dense Q4_K_M fixtures of
// arch with vocab's tokenizer that differ only in depth (by one layer, or
// for qwen35 by one delta-net/attention pair, for lfm2 and lfm2moe by one
// run of its pattern: two convolutions and an attention block, lfm2moe's
// all with experts), and PerLayer
// returns the count per layer (per pair, per run) and outside the layers.
func PerLayer(arch string, vocab *gguf.Metadata, count func(*gguf.File) (int64, error)) (perLayer, outside int64, err error) {
	sizes := [2]int{2, 3}
	switch {
	case arch == "lfm2" || arch == "lfm2moe":
		sizes = [2]int{3, 6}
	case Hybrid(arch):
		sizes = [2]int{2, 4}
	}
	var n [2]int64
	for i, layers := range sizes {
		// gemma4's as stages have it (no per-layer embeddings or shared
		// KV below 6 layers), and dense, so that every block is of one
		// kind and depth tells them apart.
		spec := StageFixture(arch, "Q4_K_M", layers)
		if arch == "gemma4" {
			spec.Experts = 0
		}
		spec.DenseLead = 0 // lfm2moe's blocks all experts, as the rest of the real model's

		b, err := Generate(spec, vocab)
		if err != nil {
			return 0, 0, err
		}
		f, err := gguf.Parse(b)
		if err != nil {
			return 0, 0, err
		}
		if n[i], err = count(f); err != nil {
			return 0, 0, err
		}
	}
	unit := int64(sizes[1] - sizes[0])
	return n[1] - n[0], n[0] - int64(sizes[0])/unit*(n[1]-n[0]), nil
}

// Hybrid reports whether arch is a hybrid of recurrent and attention
// blocks (qwen35 and qwen35moe's delta nets, lfm2's convolutions), whose
// models run whole, never split into stages.
func Hybrid(arch string) bool { return deltaNet(arch) || arch == "lfm2" || arch == "lfm2moe" }

// deltaNet reports whether arch's recurrent blocks are gated delta nets.
func deltaNet(arch string) bool { return arch == "qwen35" || arch == "qwen35moe" }

// fileTypes maps a file type to general.file_type (llama_ftype) and its
// base tensor type.
var fileTypes = map[string]struct {
	ftype uint32
	base  quant.Type
}{
	"F32": {0, quant.F32}, "F16": {1, quant.F16}, "Q4_0": {2, quant.Q4_0}, "Q8_0": {7, quant.Q8_0},
	"Q4_K_M": {15, quant.Q4_K}, "Q6_K": {18, quant.Q6_K},
}

// tensor is one tensor to generate: ne (row length first) and how its
// values are drawn: mean + std·N(0,1).
type tensor struct {
	name      string
	dims      []int64
	mean, std float64
	typ       quant.Type
}

// HarmonyFirst is the first token id HarmonyVocab renames: within the
// 2048 tokens a Fixture keeps.
const HarmonyFirst = 1990

// HarmonyVocab is vocab's metadata with the tokens from HarmonyFirst on
// renamed to markers (harmony's: <|channel|>, <|message|>, ...), so that
// a Fixture of gpt-oss generated from it has a harmony vocabulary, as
// o200k_harmony has these tokens of its own: the tokenizer makes them
// user-defined tokens or ends of generation by their text.
func HarmonyVocab(vocab *gguf.Metadata, markers []string) (*gguf.Metadata, error) {
	kvs := vocab.KVs()
	for i, kv := range kvs {
		if kv.Key != "tokenizer.ggml.tokens" {
			continue
		}
		toks, ok := vocab.Strings(kv.Key)
		if !ok || len(toks) < HarmonyFirst+len(markers) {
			return nil, fmt.Errorf("modeltest: a vocabulary of %d tokens has no room for %d markers from %d", len(toks), len(markers), HarmonyFirst)
		}
		toks = slices.Clone(toks)
		copy(toks[HarmonyFirst:], markers)
		v, err := gguf.ValueOf(toks)
		if err != nil {
			return nil, err
		}
		kvs[i].Value = v
	}
	return gguf.NewMetadata(kvs)
}

// WriteHarmonyFixture writes to dir the gpt-oss Q8_0 Fixture whose
// vocabulary is vocabPath's (a GGUF's) with markers renamed in
// (HarmonyVocab), and returns the file's path.
func WriteHarmonyFixture(dir, vocabPath string, markers []string) (string, error) {
	f, err := gguf.Open(vocabPath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	md, err := HarmonyVocab(f.Metadata, markers)
	if err != nil {
		return "", err
	}
	b, err := Generate(Fixture("gpt-oss", "Q8_0"), md)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "gpt-oss-harmony.gguf")
	return p, os.WriteFile(p, b, 0o600)
}

// Generate writes the model s describes, its tokenizer copied from vocab
// (the tokenizer.* keys of another model's metadata).
func Generate(s Spec, vocab *gguf.Metadata) ([]byte, error) {
	w, ts, err := build(s, vocab)
	if err != nil {
		return nil, err
	}
	data := make([][]byte, len(ts))
	if err := parallel(len(ts), func(i int) error {
		var err error
		data[i], err = ts[i].generate(s.Seed)
		return err
	}); err != nil {
		return nil, err
	}
	for i, t := range ts {
		if err := w.AddTensor(t.name, t.typ, t.dims, data[i]); err != nil {
			return nil, err
		}
	}
	return w.Bytes()
}

// Parsed is Generate's model of s, parsed: a test's fixture, held in
// memory. It fails tb where the model cannot be made.
func Parsed(tb testing.TB, s Spec, vocab *gguf.Metadata) *gguf.File {
	tb.Helper()
	b, err := Generate(s, vocab)
	if err != nil {
		tb.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// WriteRandom writes a model of s's shape to out for speed measurements:
// its matrices are random blocks made directly, without drawing and
// quantising floats, so a model of a billion parameters takes seconds:
// for F16, Q8_0 and Q4_0 of the file type, used for every matrix, the
// output head included; for Q4_K_M of llama-quantize's mix (Q4_K, with
// Q6_K for the output head and the attn_v and ffn_down it picks). Its
// outputs are meaningless; its work is a real model's.
func WriteRandom(out io.Writer, s Spec, vocab *gguf.Metadata) error {
	w, ts, err := build(s, vocab)
	if err != nil {
		return err
	}
	base := fileTypes[s.FileType].base
	for i := range ts {
		t := &ts[i]
		var data []byte
		if len(t.dims) < 2 || t.typ == quant.F32 {
			data, err = t.generate(s.Seed)
		} else {
			if base != quant.Q4_K {
				t.typ = base
			}
			data, err = t.randomBlocks(s.Seed)
		}
		if err != nil {
			return err
		}
		if err := w.AddTensor(t.name, t.typ, t.dims, data); err != nil {
			return err
		}
	}
	_, err = w.WriteTo(out)
	return err
}

// WriteRandomFile writes WriteRandom's model of s's shape to path.
func WriteRandomFile(path string, s Spec, vocab *gguf.Metadata) error {
	return writeFile(path, func(out io.Writer) error { return WriteRandom(out, s, vocab) })
}

// WriteLlama1B writes a random llama model of Llama-3.2-1B's shape (2048
// wide, 16 blocks, 32 heads, 8 KV heads, 8192 feed-forward units) with
// weights of file type ft to dir/llama-1b-<ft>.gguf, the benchmarks' 1B
// model, and returns its path.
func WriteLlama1B(dir, ft string, vocab *gguf.Metadata) (string, error) {
	s := Spec{Arch: "llama", FileType: ft, Embd: 2048, Layers: 16, Heads: 32, KVHeads: 8, FF: 8192, Context: 4096, Seed: 1}
	path := filepath.Join(dir, "llama-1b-"+strings.ToLower(ft)+".gguf")
	return path, WriteRandomFile(path, s, vocab)
}

// OpenLlama1B writes WriteLlama1B's model into dir and opens it; the
// caller closes it.
func OpenLlama1B(tb testing.TB, dir, ft string, vocab *gguf.Metadata) *gguf.File {
	tb.Helper()
	path, err := WriteLlama1B(dir, ft, vocab)
	if err != nil {
		tb.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// writeFile writes path through a buffer by write, into path.tmp renamed
// to path once complete, so a file that is there is whole.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = write(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path + ".tmp")
		return err
	}
	return os.Rename(path+".tmp", path)
}

// build sets up the writer's metadata and lists the tensors to make.
func build(s Spec, vocab *gguf.Metadata) (*gguf.Writer, []tensor, error) {
	ft, ok := fileTypes[s.FileType]
	if !ok {
		return nil, nil, fmt.Errorf("modeltest: file type %q", s.FileType)
	}
	if s.Heads <= 0 || s.KVHeads <= 0 || s.Embd%s.Heads != 0 && s.HeadDim == 0 {
		return nil, nil, fmt.Errorf("modeltest: %d heads (%d KV) over %d", s.Heads, s.KVHeads, s.Embd)
	}
	w := gguf.NewWriter()
	var errs []error
	set := func(k string, v any) {
		if err := w.Set(k, v); err != nil {
			errs = append(errs, err)
		}
	}
	nVocab, err := copyTokenizer(set, vocab, s.Vocab)
	if err != nil {
		return nil, nil, err
	}

	a := s.Arch
	hd := s.Embd / s.Heads
	if s.HeadDim > 0 {
		hd = s.HeadDim
	}
	qDim, kvDim := s.Heads*hd, s.KVHeads*hd
	tied := a == "qwen2" || a == "gemma3" || a == "qwen3" || a == "gemma4" || a == "granite" || a == "granitemoe" || a == "smollm3" || a == "gemma2" || a == "exaone4" || a == "ernie4_5" || a == "lfm2" || a == "lfm2moe"
	eps := float32(1e-5)
	if a == "qwen2" || a == "gemma3" || a == "qwen3" || a == "qwen3moe" || a == "gemma4" || a == "qwen35" || a == "qwen35moe" || a == "gemma2" {
		eps = 1e-6
	}
	moe := a == "qwen3moe" || a == "gpt-oss" || a == "qwen35moe" || a == "granitemoe" || a == "lfm2moe"
	lfm2 := a == "lfm2" || a == "lfm2moe"
	hybrid := deltaNet(a)
	if hybrid {
		if s.SSMHeads == 0 && s.SSMGroups == 0 && s.SSMState == 0 {
			s.SSMHeads, s.SSMGroups, s.SSMState = 4, 2, 64
		}
		if s.FullAttn == 0 {
			s.FullAttn = 2
		}
		if a == "qwen35moe" && s.SharedFF == 0 {
			s.SharedFF = s.FF / 2
		}
		if s.SSMHeads <= 0 || s.SSMGroups <= 0 || s.SSMHeads%s.SSMGroups != 0 || s.SSMState <= 0 {
			return nil, nil, fmt.Errorf("modeltest: a delta net of %d heads over %d of %d", s.SSMHeads, s.SSMGroups, s.SSMState)
		}
	}
	set("general.architecture", a)
	// The name leaves the architecture out: llama.cpp applies special-token
	// fixes to vocabularies by model name ("phi3"), and these carry
	// another model's vocabulary.
	set("general.name", fmt.Sprintf("modeltest-random-%s-d%d-l%d", strings.ToLower(s.FileType), s.Embd, s.Layers))
	set("general.description", "RANDOM untrained weights, for tests and benchmarks only")
	set("general.file_type", ft.ftype)
	if ft.base != quant.F32 && ft.base != quant.F16 {
		set("general.quantization_version", uint32(2))
	}
	set(a+".context_length", uint32(s.Context))
	set(a+".embedding_length", uint32(s.Embd))
	set(a+".block_count", uint32(s.Layers))
	set(a+".feed_forward_length", layerCounts(s, s.FF, s.WideFF, func(l int) int {
		if l >= s.Layers-s.SharedKV {
			return 2 * s.FF
		}
		return s.FF
	}))
	set(a+".attention.head_count", uint32(s.Heads))
	set(a+".attention.head_count_kv", layerCounts(s, s.KVHeads, s.FullKVHeads != 0 && s.FullKVHeads != s.KVHeads || lfm2, func(l int) int {
		switch {
		case lfm2 && !s.lfm2Attention(l):
			return 0 // a convolution block
		case lfm2:
			return s.KVHeads
		case l%2 == 1:
			return s.FullKVHeads
		}
		return s.KVHeads
	}))
	set(a+".attention.layer_norm_rms_epsilon", eps)
	// yarn sets YaRN scaling by factor over an original context.
	yarn := func(factor float32, orig int) {
		set(a+".rope.scaling.type", "yarn")
		set(a+".rope.scaling.factor", factor)
		set(a+".rope.scaling.original_context_length", uint32(orig))
	}
	var rotDims int
	switch a {
	case "llama":
		rotDims = hd
		set(a+".rope.dimension_count", uint32(hd))
		set(a+".rope.freq_base", float32(10000))
		set(a+".vocab_size", uint32(nVocab))
	case "gemma2":
		rotDims = hd
		set(a+".attention.key_length", uint32(hd))
		set(a+".attention.value_length", uint32(hd))
		set(a+".rope.freq_base", float32(10000))
		set(a+".attention.sliding_window", uint32(4))
		set(a+".attn_logit_softcapping", float32(3))
		set(a+".final_logit_softcapping", float32(30))
	case "smollm3":
		rotDims = hd
		set(a+".rope.dimension_count", uint32(hd))
		set(a+".rope.freq_base", float32(5000000))
		set(a+".vocab_size", uint32(nVocab))
	case "olmo2":
		rotDims = hd
		set(a+".rope.freq_base", float32(500000))
		yarn(4, s.Context/4)
		set(a+".rope.scaling.attn_factor", float32(1.2))
		set(a+".rope.freq_base_swa", float32(10000)) // llama.cpp's olmo2 graph ignores it
		set(a+".attention.sliding_window", uint32(4))
		set(a+".attention.sliding_window_pattern", uint32(2))
	case "exaone4":
		rotDims = hd
		set(a+".rope.freq_base", float32(1000000))
	case "ernie4_5":
		rotDims = hd
		set(a+".rope.freq_base", float32(500000))
	case "lfm2", "lfm2moe":
		rotDims = hd
		set(a+".rope.freq_base", float32(1000000))
		set(a+".vocab_size", uint32(nVocab))
		set(a+".shortconv.l_cache", uint32(3))
		if s.Window > 0 {
			set(a+".attention.sliding_window", uint32(s.Window))
		}
		if moe {
			if s.Experts == 0 && s.ExpertsUsed == 0 && s.ExpertFF == 0 {
				s.Experts, s.ExpertsUsed, s.ExpertFF = 4, 2, s.FF/2
			}
			if s.Experts <= 0 || s.ExpertsUsed <= 0 || s.ExpertsUsed > s.Experts || s.ExpertFF <= 0 || s.DenseLead > s.Layers {
				return nil, nil, fmt.Errorf("modeltest: %d experts, %d used, of width %d after %d dense blocks", s.Experts, s.ExpertsUsed, s.ExpertFF, s.DenseLead)
			}
			set(a+".expert_count", uint32(s.Experts))
			set(a+".expert_used_count", uint32(s.ExpertsUsed))
			set(a+".expert_feed_forward_length", uint32(s.ExpertFF))
			set(a+".expert_gating_func", uint32(2)) // sigmoid
			set(a+".leading_dense_block_count", uint32(s.DenseLead))
		}
	case "mistral3":
		rotDims = hd
		set(a+".rope.dimension_count", uint32(hd))
		set(a+".rope.freq_base", float32(1000000))
		set(a+".vocab_size", uint32(nVocab))
		yarn(16, 8)
		set(a+".rope.scaling.yarn_beta_fast", float32(0.5))
		set(a+".rope.scaling.yarn_beta_slow", float32(0.125))
		set(a+".rope.scaling.yarn_log_multiplier", float32(1))
		set(a+".attention.temperature_scale", float32(0.1))
	case "granite", "granitemoe":
		rotDims = hd
		set(a+".rope.dimension_count", uint32(hd))
		set(a+".rope.freq_base", float32(10000000))
		set(a+".vocab_size", uint32(nVocab))
		set(a+".embedding_scale", float32(12))
		set(a+".residual_scale", float32(0.22))
		set(a+".attention.scale", float32(1)/float32(hd))
		set(a+".logit_scale", float32(1.6))
		if a == "granitemoe" {
			if s.Experts == 0 && s.ExpertsUsed == 0 && s.ExpertFF == 0 {
				s.Experts, s.ExpertsUsed, s.ExpertFF = 4, 2, s.FF
			}
			if s.Experts <= 0 || s.ExpertsUsed <= 0 || s.ExpertsUsed > s.Experts || s.ExpertFF != s.FF {
				return nil, nil, fmt.Errorf("modeltest: granitemoe: %d experts, %d used, of width %d (its experts are the FFN's %d)", s.Experts, s.ExpertsUsed, s.ExpertFF, s.FF)
			}
			set(a+".expert_count", uint32(s.Experts))
			set(a+".expert_used_count", uint32(s.ExpertsUsed))
		}
	case "qwen2":
		rotDims = hd
		set(a+".rope.freq_base", float32(1000000))
		yarn(4, s.Context/4)
	case "phi3":
		rotDims = hd / 2
		set(a+".rope.dimension_count", uint32(rotDims))
		set(a+".rope.freq_base", float32(10000))
		set(a+".rope.scaling.attn_factor", float32(1.19))
		set(a+".rope.scaling.original_context_length", uint32(1024))
	case "gemma3":
		rotDims = hd
		set(a+".attention.key_length", uint32(hd))
		set(a+".attention.value_length", uint32(hd))
		set(a+".rope.freq_base", float32(1000000))
		set(a+".attention.sliding_window", uint32(4))
		set(a+".attention.sliding_window_pattern", uint32(2))
		set(a+".final_logit_softcapping", float32(30))
	case "qwen3", "qwen3moe", "gpt-oss", "qwen35", "qwen35moe":
		rotDims = hd
		set(a+".attention.key_length", uint32(hd))
		set(a+".attention.value_length", uint32(hd))
		if !hybrid {
			set(a+".rope.freq_base", float32(1000000))
		}
		if a == "gpt-oss" {
			set(a+".rope.dimension_count", uint32(hd))
			yarn(32, 1024)
			set(a+".attention.sliding_window", uint32(4))
		}
		if hybrid {
			// Qwen3.5 rotates a quarter of the head, in M-RoPE sections
			// that for text are NeoX RoPE.
			rotDims = hd / 4
			set(a+".rope.dimension_count", uint32(rotDims))
			p := rotDims / 2
			w := p / 3
			hh := (p - w) / 2
			set(a+".rope.dimension_sections", []int32{int32(p - hh - w), int32(hh), int32(w), 0})
			set(a+".rope.freq_base", float32(10000000))
			set(a+".ssm.conv_kernel", uint32(4))
			set(a+".ssm.state_size", uint32(s.SSMState))
			set(a+".ssm.group_count", uint32(s.SSMGroups))
			set(a+".ssm.time_step_rank", uint32(s.SSMHeads))
			set(a+".ssm.inner_size", uint32(s.SSMHeads*s.SSMState))
			set(a+".full_attention_interval", uint32(s.FullAttn))
		}
		if moe {
			if s.Experts == 0 && s.ExpertsUsed == 0 && s.ExpertFF == 0 {
				s.Experts, s.ExpertsUsed, s.ExpertFF = 4, 2, s.FF/2
			}
			if s.Experts <= 0 || s.ExpertsUsed <= 0 || s.ExpertsUsed > s.Experts || s.ExpertFF <= 0 {
				return nil, nil, fmt.Errorf("modeltest: %d experts, %d used, of width %d", s.Experts, s.ExpertsUsed, s.ExpertFF)
			}
			set(a+".expert_count", uint32(s.Experts))
			set(a+".expert_used_count", uint32(s.ExpertsUsed))
			set(a+".expert_feed_forward_length", uint32(s.ExpertFF))
			if a == "qwen35moe" {
				set(a+".expert_shared_feed_forward_length", uint32(s.SharedFF))
			}
		}
	case "gemma4":
		rotDims = hd
		s.HeadDim = hd
		if s.SWAHeadDim == 0 {
			s.SWAHeadDim = hd
		}
		if s.SharedKV > 0 && (s.Layers-s.SharedKV < 2 || (s.Layers-s.SharedKV)%2 != 0) {
			return nil, nil, fmt.Errorf("modeltest: %d of %d layers sharing KV (the last two with KV must be SWA, full)", s.SharedKV, s.Layers)
		}
		set(a+".attention.key_length", uint32(hd))
		set(a+".attention.value_length", uint32(hd))
		set(a+".attention.key_length_swa", uint32(s.SWAHeadDim))
		set(a+".attention.value_length_swa", uint32(s.SWAHeadDim))
		set(a+".rope.dimension_count", uint32(hd))
		set(a+".rope.dimension_count_swa", uint32(s.SWAHeadDim))
		set(a+".rope.freq_base", float32(1000000))
		set(a+".rope.freq_base_swa", float32(10000))
		set(a+".attention.sliding_window", uint32(4))
		pattern := make([]bool, s.Layers)
		for l := range pattern {
			pattern[l] = l%2 == 0 // SWA, full, SWA, full, …
		}
		set(a+".attention.sliding_window_pattern", pattern)
		set(a+".attention.shared_kv_layers", uint32(s.SharedKV))
		set(a+".embedding_length_per_layer_input", uint32(s.PerLayerEmbd))
		set(a+".final_logit_softcapping", float32(30))
		if s.Experts > 0 {
			set(a+".expert_count", uint32(s.Experts))
			set(a+".expert_used_count", uint32(s.ExpertsUsed))
			set(a+".expert_feed_forward_length", uint32(s.ExpertFF))
		}
	default:
		return nil, nil, fmt.Errorf("modeltest: architecture %q", a)
	}
	if len(errs) > 0 {
		return nil, nil, errs[0]
	}

	// The tensors in the order llama.cpp's converters write them. Matrix
	// types follow llama-quantize's choices for the file type
	// (llama_tensor_get_type), so a fixture looks like a real file of it.
	var ts []tensor
	add := func(name string, mean, std float64, dims ...int64) {
		ts = append(ts, tensor{name: name, dims: dims, mean: mean, std: std})
	}
	embStd := 1.0
	if tied {
		embStd = 4 / math.Sqrt(float64(s.Embd))
	}
	mat := func(name string, rows, cols int) { add(name, 0, 1/math.Sqrt(float64(cols)), int64(cols), int64(rows)) }
	norm := func(name string, n int) { add(name, 1, 0.1, int64(n)) }

	add("token_embd.weight", 0, embStd, int64(s.Embd), int64(nVocab))
	switch a {
	case "llama":
		// Llama 3's factors run from 1 (high frequencies) up; any
		// values ≥ 1 exercise them.
		add("rope_freqs.weight", 2.5, 0.8, int64(rotDims/2))
	case "phi3":
		add("rope_factors_long.weight", 3, 0.8, int64(rotDims/2))
		add("rope_factors_short.weight", 1.2, 0.1, int64(rotDims/2))
	case "gemma4":
		add("rope_freqs.weight", 2.5, 0.8, int64(hd/2))
		if s.PerLayerEmbd > 0 {
			pl := int64(s.PerLayerEmbd * s.Layers)
			add("per_layer_token_embd.weight", 0, 1/math.Sqrt(float64(s.PerLayerEmbd)), pl, int64(nVocab))
			add("per_layer_model_proj.weight", 0, 1/math.Sqrt(float64(s.Embd)), int64(s.Embd), pl)
			norm("per_layer_proj_norm.weight", s.PerLayerEmbd)
		}
	}
	for l := range s.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		if hybrid {
			hybridBlock(add, mat, norm, s, p, (l+1)%s.FullAttn != 0, hd)
			continue
		}
		if lfm2 && !s.lfm2Attention(l) {
			norm(p+"attn_norm.weight", s.Embd)
			mat(p+"shortconv.in_proj.weight", 3*s.Embd, s.Embd)
			add(p+"shortconv.conv.weight", 0, 0.5, 3, int64(s.Embd))
			mat(p+"shortconv.out_proj.weight", s.Embd, s.Embd)
			norm(p+"ffn_norm.weight", s.Embd)
			if moe && l >= s.DenseLead {
				lfm2Experts(add, s, p)
				continue
			}
			mat(p+"ffn_gate.weight", s.FF, s.Embd)
			mat(p+"ffn_up.weight", s.FF, s.Embd)
			mat(p+"ffn_down.weight", s.Embd, s.FF)
			continue
		}
		reorder := a == "olmo2" || a == "exaone4" // norms after each sublayer only
		if !reorder {
			norm(p+"attn_norm.weight", s.Embd)
		}
		if a == "gemma4" {
			g4Layer(s, l, add, mat, norm)
			continue
		}
		if a == "phi3" {
			mat(p+"attn_qkv.weight", qDim+2*kvDim, s.Embd)
		} else {
			mat(p+"attn_q.weight", qDim, s.Embd)
			mat(p+"attn_k.weight", kvDim, s.Embd)
			mat(p+"attn_v.weight", kvDim, s.Embd)
		}
		if a == "qwen2" || a == "gpt-oss" {
			add(p+"attn_q.bias", 0, 0.1, int64(qDim))
			add(p+"attn_k.bias", 0, 0.1, int64(kvDim))
			add(p+"attn_v.bias", 0, 0.1, int64(kvDim))
		}
		if a == "gemma3" || a == "qwen3" || a == "qwen3moe" || a == "exaone4" || lfm2 {
			norm(p+"attn_q_norm.weight", hd)
			norm(p+"attn_k_norm.weight", hd)
		}
		if a == "olmo2" {
			norm(p+"attn_q_norm.weight", qDim)
			norm(p+"attn_k_norm.weight", kvDim)
		}
		mat(p+"attn_output.weight", s.Embd, qDim)
		if a == "ernie4_5" {
			add(p+"attn_output.bias", 0, 0.5, int64(s.Embd)) // unused: llama.cpp applies none
		}
		if a == "gpt-oss" {
			add(p+"attn_output.bias", 0, 0.1, int64(s.Embd))
			// Sinks about the scores' size: some heads give the sink a
			// good share, some little.
			add(p+"attn_sinks.weight", 0, 1.5, int64(s.Heads))
			norm(p+"post_attention_norm.weight", s.Embd)
		} else {
			if a == "gemma3" || a == "gemma2" || reorder {
				add(p+"post_attention_norm.weight", 0.3, 0.05, int64(s.Embd))
			}
			if !reorder {
				norm(p+"ffn_norm.weight", s.Embd)
			}
		}
		if a == "lfm2moe" {
			if l >= s.DenseLead {
				lfm2Experts(add, s, p)
				continue
			}
		} else if moe {
			// Router scores of std 2 over unit-RMS rows: the top-k
			// choice is clear, rarely a near tie.
			routerStd := 2.0
			if a == "gpt-oss" {
				// Four of eight chosen puts the 4th and 5th logits closer
				// than qwen3moe's 2nd and 3rd: wider scores keep the cut
				// clear.
				routerStd = 4
			}
			add(p+"ffn_gate_inp.weight", 0, routerStd/math.Sqrt(float64(s.Embd)), int64(s.Embd), int64(s.Experts))
			x := int64(s.Experts)
			add(p+"ffn_gate_exps.weight", 0, 1/math.Sqrt(float64(s.Embd)), int64(s.Embd), int64(s.ExpertFF), x)
			add(p+"ffn_up_exps.weight", 0, 1/math.Sqrt(float64(s.Embd)), int64(s.Embd), int64(s.ExpertFF), x)
			add(p+"ffn_down_exps.weight", 0, 1/math.Sqrt(float64(s.ExpertFF)), int64(s.ExpertFF), int64(s.Embd), x)
			if a == "gpt-oss" {
				add(p+"ffn_gate_inp.bias", 0, 0.5, x)
				add(p+"ffn_gate_exps.bias", 0, 0.1, int64(s.ExpertFF), x)
				add(p+"ffn_up_exps.bias", 0, 0.1, int64(s.ExpertFF), x)
				add(p+"ffn_down_exps.bias", 0, 0.1, int64(s.Embd), x)
			}
			continue
		}
		if a == "phi3" {
			mat(p+"ffn_up.weight", 2*s.FF, s.Embd)
		} else {
			mat(p+"ffn_gate.weight", s.FF, s.Embd)
			mat(p+"ffn_up.weight", s.FF, s.Embd)
		}
		mat(p+"ffn_down.weight", s.Embd, s.FF)
		if a == "gemma3" || a == "gemma2" || reorder {
			add(p+"post_ffw_norm.weight", 0.3, 0.05, int64(s.Embd))
		}
	}
	if lfm2 {
		norm("token_embd_norm.weight", s.Embd) // LFM2's output norm, as llama.cpp names it
	} else {
		norm("output_norm.weight", s.Embd)
	}
	if !tied {
		// A wide output head gives logits of std ≈ 4, so greedy choices
		// have clear margins.
		add("output.weight", 0, 4/math.Sqrt(float64(s.Embd)), int64(s.Embd), int64(nVocab))
	}
	for i := range ts {
		ts[i].typ = tensorType(s, ft.base, ts[i].name, len(ts[i].dims), tied)
	}
	return w, ts, nil
}

// lfm2Experts lists an lfm2moe block's experts: the router, its
// selection bias (about the sigmoids' spread, so that it moves the
// choice) and the experts' matrices.
func lfm2Experts(add func(string, float64, float64, ...int64), s Spec, p string) {
	x := int64(s.Experts)
	add(p+"ffn_gate_inp.weight", 0, 2/math.Sqrt(float64(s.Embd)), int64(s.Embd), x)
	add(p+"exp_probs_b.bias", 0, 0.1, x)
	add(p+"ffn_gate_exps.weight", 0, 1/math.Sqrt(float64(s.Embd)), int64(s.Embd), int64(s.ExpertFF), x)
	add(p+"ffn_up_exps.weight", 0, 1/math.Sqrt(float64(s.Embd)), int64(s.Embd), int64(s.ExpertFF), x)
	add(p+"ffn_down_exps.weight", 0, 1/math.Sqrt(float64(s.ExpertFF)), int64(s.ExpertFF), int64(s.Embd), x)
}

// lfm2Attention reports whether an lfm2 model's block l is attention
// (AttnLayers, or every third from 1) rather than a convolution.
func (s Spec) lfm2Attention(l int) bool {
	if s.AttnLayers != nil {
		return slices.Contains(s.AttnLayers, l)
	}
	return l%3 == 1
}

// hybridBlock lists a Qwen3.5 block's tensors: a gated delta net (rec) or
// gated attention, the post-attention norm and the FFN.
func hybridBlock(add func(string, float64, float64, ...int64), mat func(string, int, int), norm func(string, int), s Spec, p string, rec bool, hd int) {
	norm(p+"attn_norm.weight", s.Embd)
	if rec {
		kDim, vDim := s.SSMGroups*s.SSMState, s.SSMHeads*s.SSMState
		mat(p+"attn_qkv.weight", 2*kDim+vDim, s.Embd)
		mat(p+"attn_gate.weight", vDim, s.Embd)
		add(p+"ssm_conv1d.weight", 0, 0.5, 4, int64(2*kDim+vDim))
		add(p+"ssm_dt.bias", 0, 0.5, int64(s.SSMHeads))
		// A = −exp(A_log): negative, a decay of exp(softplus(…)·A) < 1.
		add(p+"ssm_a", -0.6, 0.2, int64(s.SSMHeads))
		mat(p+"ssm_beta.weight", s.SSMHeads, s.Embd)
		mat(p+"ssm_alpha.weight", s.SSMHeads, s.Embd)
		norm(p+"ssm_norm.weight", s.SSMState)
		mat(p+"ssm_out.weight", s.Embd, vDim)
	} else {
		mat(p+"attn_q.weight", 2*s.Heads*hd, s.Embd)
		mat(p+"attn_k.weight", s.KVHeads*hd, s.Embd)
		mat(p+"attn_v.weight", s.KVHeads*hd, s.Embd)
		norm(p+"attn_q_norm.weight", hd)
		norm(p+"attn_k_norm.weight", hd)
		mat(p+"attn_output.weight", s.Embd, s.Heads*hd)
	}
	norm(p+"post_attention_norm.weight", s.Embd)
	if s.Arch != "qwen35moe" {
		mat(p+"ffn_gate.weight", s.FF, s.Embd)
		mat(p+"ffn_up.weight", s.FF, s.Embd)
		mat(p+"ffn_down.weight", s.Embd, s.FF)
		return
	}
	add(p+"ffn_gate_inp.weight", 0, 2/math.Sqrt(float64(s.Embd)), int64(s.Embd), int64(s.Experts))
	x := int64(s.Experts)
	add(p+"ffn_gate_exps.weight", 0, 1/math.Sqrt(float64(s.Embd)), int64(s.Embd), int64(s.ExpertFF), x)
	add(p+"ffn_up_exps.weight", 0, 1/math.Sqrt(float64(s.Embd)), int64(s.Embd), int64(s.ExpertFF), x)
	add(p+"ffn_down_exps.weight", 0, 1/math.Sqrt(float64(s.ExpertFF)), int64(s.ExpertFF), int64(s.Embd), x)
	add(p+"ffn_gate_inp_shexp.weight", 0, 1/math.Sqrt(float64(s.Embd)), int64(s.Embd))
	mat(p+"ffn_gate_shexp.weight", s.SharedFF, s.Embd)
	mat(p+"ffn_up_shexp.weight", s.SharedFF, s.Embd)
	mat(p+"ffn_down_shexp.weight", s.Embd, s.SharedFF)
}

// layerCounts is a count key's value: v, or with perLayer (gemma4, lfm2)
// an array of at(l) over the layers.
func layerCounts(s Spec, v int, perLayer bool, at func(int) int) any {
	if !perLayer || s.Arch != "gemma4" && s.Arch != "lfm2" && s.Arch != "lfm2moe" {
		return uint32(v)
	}
	a := make([]uint32, s.Layers)
	for l := range a {
		a[l] = uint32(at(l))
	}
	return a
}

// g4Layer lists gemma4 block l's tensors (after attn_norm).
func g4Layer(s Spec, l int, add func(string, float64, float64, ...int64), mat func(string, int, int), norm func(string, int)) {
	p := fmt.Sprintf("blk.%d.", l)
	hd := s.HeadDim
	if l%2 == 0 {
		hd = s.SWAHeadDim
	}
	hasKV := l < s.Layers-s.SharedKV
	kvh, ff := s.KVHeads, s.FF
	if l%2 == 1 && s.FullKVHeads != 0 {
		kvh = s.FullKVHeads
	}
	if s.WideFF && !hasKV {
		ff *= 2
	}
	mat(p+"attn_q.weight", s.Heads*hd, s.Embd)
	if hasKV {
		mat(p+"attn_k.weight", kvh*hd, s.Embd)
		if l != 1 { // layer 1's V is its K projection
			mat(p+"attn_v.weight", kvh*hd, s.Embd)
		}
	}
	norm(p+"attn_q_norm.weight", hd)
	if hasKV {
		norm(p+"attn_k_norm.weight", hd)
	}
	mat(p+"attn_output.weight", s.Embd, s.Heads*hd)
	add(p+"post_attention_norm.weight", 0.3, 0.05, int64(s.Embd))
	norm(p+"ffn_norm.weight", s.Embd)
	mat(p+"ffn_gate.weight", ff, s.Embd)
	mat(p+"ffn_up.weight", ff, s.Embd)
	mat(p+"ffn_down.weight", s.Embd, ff)
	if s.Experts > 0 && l%3 == 0 {
		add(p+"pre_ffw_norm_2.weight", 1, 0.1, int64(s.Embd))
		add(p+"post_ffw_norm_1.weight", 0.3, 0.05, int64(s.Embd))
		add(p+"post_ffw_norm_2.weight", 0.3, 0.05, int64(s.Embd))
		// Router scores of std ≈ 2: the top-k choice is clear.
		add(p+"ffn_gate_inp.weight", 0, 2, int64(s.Embd), int64(s.Experts))
		add(p+"ffn_gate_inp.scale", 1, 0.1, int64(s.Embd))
		x, e, f := int64(s.Experts), int64(s.Embd), int64(s.ExpertFF)
		if l == 0 {
			add(p+"ffn_gate_exps.weight", 0, 1/math.Sqrt(float64(s.Embd)), e, f, x)
			add(p+"ffn_up_exps.weight", 0, 1/math.Sqrt(float64(s.Embd)), e, f, x)
		} else {
			add(p+"ffn_gate_up_exps.weight", 0, 1/math.Sqrt(float64(s.Embd)), e, 2*f, x)
		}
		add(p+"ffn_down_exps.weight", 0, 1/math.Sqrt(float64(s.ExpertFF)), f, e, x)
		if l != 0 {
			add(p+"ffn_down_exps.scale", 1, 0.2, x)
		}
	}
	add(p+"post_ffw_norm.weight", 0.3, 0.05, int64(s.Embd))
	if s.PerLayerEmbd > 0 {
		mat(p+"inp_gate.weight", s.PerLayerEmbd, s.Embd)
		mat(p+"proj.weight", s.Embd, s.PerLayerEmbd)
		add(p+"post_norm.weight", 0.3, 0.05, int64(s.Embd))
	}
	add(p+"layer_output_scale.weight", 0.8, 0.05, 1)
}

// tensorType is llama-quantize's type for a tensor of a file of base type
// (for the file types Generate makes): vectors, biases and MoE routers stay
// F32; gpt-oss's experts are MXFP4 (as published, and as llama-quantize
// keeps them under MXFP4_MOE); the output head
// (the embeddings, when tied) takes Q6_K below 8 bits; Q4_K_M gives Q6_K
// to attn_v and ffn_down in the layers use_more_bits picks, Q5_K to a
// fused QKV.
func tensorType(s Spec, base quant.Type, name string, ndims int, tied bool) quant.Type {
	if ndims < 2 || strings.HasSuffix(name, "ffn_gate_inp.weight") || strings.HasSuffix(name, "ssm_conv1d.weight") || strings.HasSuffix(name, "shortconv.conv.weight") || strings.HasSuffix(name, ".bias") {
		return quant.F32
	}
	if s.Arch == "gpt-oss" && strings.HasSuffix(name, "_exps.weight") {
		return quant.MXFP4
	}
	isOutput := name == "output.weight" || (tied && name == "token_embd.weight")
	switch base {
	case quant.Q4_0:
		if isOutput {
			return quant.Q6_K
		}
	case quant.Q4_K:
		var layer int
		fmt.Sscanf(name, "blk.%d.", &layer)
		switch {
		case isOutput:
			return quant.Q6_K
		case strings.HasSuffix(name, "attn_qkv.weight"):
			return quant.Q5_K
		case (strings.HasSuffix(name, "attn_v.weight") || strings.HasSuffix(name, "ffn_down.weight") || strings.HasSuffix(name, "ffn_down_exps.weight")) && useMoreBits(layer, s.Layers):
			return quant.Q6_K
		}
	}
	return base
}

// useMoreBits is llama-quantize's use_more_bits.
func useMoreBits(i, n int) bool {
	return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2
}

// generate draws the tensor's values and encodes them as its type. Each
// tensor has its own random stream, keyed by its name, so the tensors can
// be made in any order or in parallel.
func (t *tensor) generate(seed uint64) ([]byte, error) {
	n := 1
	for _, d := range t.dims {
		n *= int(d)
	}
	h := fnv.New64a()
	h.Write([]byte(t.name))
	rng := rand.NewPCG(seed, h.Sum64())
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(t.mean + float64(t.std*normal(rng))) // rounded: a fixture is the same bytes on arm64
	}
	size, err := t.typ.RowSize(n)
	if err != nil {
		return nil, fmt.Errorf("modeltest: %s: %w", t.name, err)
	}
	// Quantise row by row: the rows are what ggml quantises, and a row
	// length that is no whole number of blocks is caught here.
	out := make([]byte, size)
	cols := int(t.dims[0])
	rs, err := t.typ.RowSize(cols)
	if err != nil {
		return nil, fmt.Errorf("modeltest: %s: %w", t.name, err)
	}
	for r := range n / cols {
		if err := quant.Quantize(t.typ, x[r*cols:(r+1)*cols], out[r*rs:(r+1)*rs]); err != nil {
			return nil, fmt.Errorf("modeltest: %s: %w", t.name, err)
		}
	}
	return out, nil
}

// randomBlocks makes the tensor's bytes directly in its type, with values
// of about its std: F16 halves of random sign and mantissa at a fixed
// binade, or Q8_0, Q4_0, Q4_K or Q6_K blocks of random quants (and
// sub-block scales and mins) under a scale that gives that spread.
func (t *tensor) randomBlocks(seed uint64) ([]byte, error) {
	n := 1
	for _, d := range t.dims {
		n *= int(d)
	}
	size, err := t.typ.RowSize(n)
	if err != nil {
		return nil, fmt.Errorf("modeltest: %s: %w", t.name, err)
	}
	h := fnv.New64a()
	h.Write([]byte(t.name))
	rng := rand.NewPCG(seed, h.Sum64())
	out := make([]byte, size)
	for i := 0; i < len(out); i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8 && i+j < len(out); j++ {
			out[i+j] = byte(v >> (8 * j))
		}
	}
	put16 := func(b []byte, v uint16) { b[0], b[1] = byte(v), byte(v>>8) }
	switch t.typ {
	case quant.F16:
		// Exponent fixed to the binade of std: |x| in [e, 2e).
		exp := uint16(math.Floor(math.Log2(t.std))) + 15
		for i := 0; i < len(out); i += 2 {
			v := uint16(out[i]) | uint16(out[i+1])<<8
			put16(out[i:], v&0x83ff|exp<<10)
		}
	case quant.Q8_0:
		// Uniform int8 has std ≈ 73.6.
		d := quant.FP32ToFP16(float32(t.std / 73.6))
		for i := 0; i < len(out); i += 34 {
			put16(out[i:], d)
		}
	case quant.Q4_0:
		// Uniform nibbles − 8 have std ≈ 4.6.
		d := quant.FP32ToFP16(float32(t.std / 4.6))
		for i := 0; i < len(out); i += 18 {
			put16(out[i:], d)
		}
	case quant.Q4_K:
		// d·sc·q − dmin·m with q < 16 and sc, m < 64 uniform: with dmin =
		// 7.5·d the mean is 0 and the std ≈ 258·d.
		d := float32(t.std / 258)
		for i := 0; i < len(out); i += 144 {
			put16(out[i:], quant.FP32ToFP16(d))
			put16(out[i+2:], quant.FP32ToFP16(7.5*d))
		}
	case quant.Q6_K:
		// d·sc·(q−32) with q < 64 and int8 sc uniform: std ≈ 1366·d.
		d := quant.FP32ToFP16(float32(t.std / 1366))
		for i := 0; i < len(out); i += 210 {
			put16(out[i+208:], d)
		}
	default:
		return nil, fmt.Errorf("modeltest: random blocks of %s", t.typ)
	}
	return out, nil
}

// normal draws an approximately standard normal value as a centred sum of
// four 16-bit uniforms (Irwin–Hall): exact integer arithmetic and one
// float64 scaling, so every platform and Go version draws the same.
func normal(rng *rand.PCG) float64 {
	u := rng.Uint64()
	s := float64(u&0xffff) + float64(u>>16&0xffff) + float64(u>>32&0xffff) + float64(u>>48)
	// Each term is uniform on {0 … 65535}: mean 32767.5, variance
	// (65536²−1)/12; the sum of four has variance (65536²−1)/3.
	const mean, sd = 4 * 32767.5, 37837.226722108 // √((65536²−1)/3)
	return (s - mean) / sd
}

// copyTokenizer copies the tokenizer.* keys of md, keeping the first n
// tokens (n = 0: all) and dropping special-token ids beyond them. It
// returns the vocabulary size written.
func copyTokenizer(set func(string, any), md *gguf.Metadata, n int) (int, error) {
	tokens, ok := md.Strings("tokenizer.ggml.tokens")
	if !ok || len(tokens) == 0 {
		return 0, fmt.Errorf("modeltest: the vocabulary source has no tokenizer.ggml.tokens")
	}
	full := len(tokens)
	if n <= 0 || n > full {
		n = full
	}
	for k, v := range md.All() {
		if !strings.HasPrefix(k, "tokenizer.") {
			continue
		}
		if v.Type() == gguf.TypeArray && v.Len() == full {
			switch vals := v.Interface().(type) {
			case []string:
				set(k, slices.Clone(vals[:n]))
			case []float32:
				set(k, slices.Clone(vals[:n]))
			case []int32:
				set(k, slices.Clone(vals[:n]))
			default:
				return 0, fmt.Errorf("modeltest: cannot cut %s (%T) to %d tokens", k, vals, n)
			}
			continue
		}
		if strings.HasSuffix(k, "_token_id") {
			if id, ok := v.AsUint64(); ok && id >= uint64(n) {
				continue
			}
		}
		set(k, v)
	}
	return n, nil
}

// parallel runs f(0 … n-1) on all CPUs and returns the first error.
func parallel(n int, f func(int) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		err  error
		next = make(chan int)
	)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if e := f(i); e != nil {
					mu.Lock()
					if err == nil {
						err = e
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return err
}

// Unsupported says why be cannot run arch's fixtures, or "" when it can:
// gpt-oss needs attention sinks and the clamped SwiGLU, optional backend
// features (backend.Supports), and lfm2 the gated short convolution
// (backend.GatedConver), all of which model.Load checks for.
func Unsupported(arch string, be backend.Backend) string {
	if _, ok := be.(backend.GatedConver); (arch == "lfm2" || arch == "lfm2moe") && !ok {
		return fmt.Sprintf("the %s backend has no gated short convolution, which lfm2 needs", be.Name())
	}
	if arch != "gpt-oss" {
		return ""
	}
	for _, need := range []struct {
		f    backend.Feature
		what string
	}{{backend.AttentionSinks, "attention sinks"}, {backend.GLUSwiOAI, "clamped SwiGLU (swiglu_oai)"}} {
		if !backend.Supports(be, need.f) {
			return fmt.Sprintf("the %s backend has no %s, which gpt-oss needs", be.Name(), need.what)
		}
	}
	return ""
}

// DecodeBytes is the weight bytes one decoded token of f reads: every
// matrix, and of the embedding table one row, unless it is also the
// output head. The GPU benchmarks divide it by a token's time.
func DecodeBytes(f *gguf.File) float64 {
	_, hasOutput := f.Tensor("output.weight")
	var n float64
	for _, t := range f.Tensors {
		size := float64(t.Size)
		if t.Name == "token_embd.weight" && hasOutput {
			size /= float64(t.Dims[len(t.Dims)-1])
		}
		n += size
	}
	return n
}
