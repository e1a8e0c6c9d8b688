package gguf_test

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/quant"
)

// llamaQuantize finds llama.cpp's llama-quantize: $LLAMA_QUANTIZE, or the
// reference build's (/work/shared/tools/llamacpp-ref/build.sh).
func llamaQuantize(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("LLAMA_QUANTIZE"), filepath.Join(os.Getenv("HOME"), ".cache/llamacpp-ref/bin/llama-quantize")} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("llama-quantize not found (set LLAMA_QUANTIZE, or build /work/shared/tools/llamacpp-ref)")
	return ""
}

// tinyLlama writes a one-layer llama model with random F32 weights whose
// rows are multiples of 256, so every type quantises them.
func tinyLlama(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	const d, ff, vocab = 256, 512, 512
	w := gguf.NewWriter()
	set := func(k string, v any) {
		if err := w.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	set("general.architecture", "llama")
	set("general.name", "tiny")
	set("llama.context_length", uint32(128))
	set("llama.embedding_length", uint32(d))
	set("llama.block_count", uint32(1))
	set("llama.feed_forward_length", uint32(ff))
	set("llama.attention.head_count", uint32(4))
	set("llama.attention.head_count_kv", uint32(4))
	set("llama.attention.layer_norm_rms_epsilon", float32(1e-5))
	set("llama.vocab_size", uint32(vocab))
	set("general.file_type", uint32(0))
	rng := rand.New(rand.NewPCG(7, 8))
	data := map[string][]float32{}
	add := func(name string, dims ...int64) {
		n := int64(1)
		for _, x := range dims {
			n *= x
		}
		x := make([]float32, n)
		scale := 0.02 * float32(1+rng.IntN(50)) // vary the range tensor to tensor
		for i := range x {
			x[i] = float32(rng.NormFloat64()) * scale
		}
		b := make([]byte, 4*n)
		if err := quant.Quantize(quant.F32, x, b); err != nil {
			t.Fatal(err)
		}
		if err := w.AddTensor(name, quant.F32, dims, b); err != nil {
			t.Fatal(err)
		}
		data[name] = x
	}
	add("token_embd.weight", d, vocab)
	add("blk.0.attn_norm.weight", d)
	add("blk.0.attn_q.weight", d, d)
	add("blk.0.attn_k.weight", d, d)
	add("blk.0.attn_v.weight", d, d)
	add("blk.0.attn_output.weight", d, d)
	add("blk.0.ffn_norm.weight", d)
	add("blk.0.ffn_gate.weight", d, ff)
	add("blk.0.ffn_up.weight", d, ff)
	add("blk.0.ffn_down.weight", ff, d)
	add("output_norm.weight", d)
	add("output.weight", d, vocab)
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteTo(out); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return data
}

// TestLlamaQuantizeParity quantises a model with llama.cpp's llama-quantize
// and with Quantize, and requires identical tensor bytes for every type.
func TestLlamaQuantizeParity(t *testing.T) {
	if testing.Short() {
		t.Skip("runs llama-quantize once per type")
	}
	bin := llamaQuantize(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "f32.gguf")
	weights := tinyLlama(t, in)
	for _, c := range []struct {
		ftype string
		typ   quant.Type
	}{
		{"F16", quant.F16}, {"BF16", quant.BF16}, {"Q4_0", quant.Q4_0}, {"Q4_1", quant.Q4_1},
		{"Q5_0", quant.Q5_0}, {"Q5_1", quant.Q5_1}, {"Q8_0", quant.Q8_0}, {"Q2_K", quant.Q2_K},
		{"Q3_K_M", quant.Q3_K}, {"Q4_K_M", quant.Q4_K}, {"Q5_K_M", quant.Q5_K}, {"Q6_K", quant.Q6_K},
		{"IQ4_NL", quant.IQ4_NL}, {"IQ4_XS", quant.IQ4_XS},
	} {
		t.Run(c.ftype, func(t *testing.T) {
			outPath := filepath.Join(dir, c.ftype+".gguf")
			cmd := exec.Command(bin, "--pure", in, outPath, c.ftype, "1")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("llama-quantize: %v\n%s", err, out)
			}
			f, err := gguf.Open(outPath)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if q := f.Facts().QuantizationType; q != c.ftype {
				t.Errorf("QuantizationType %q, want %q", q, c.ftype)
			}
			n := 0
			for _, ti := range f.Tensors {
				if ti.Type != c.typ {
					continue
				}
				want, _ := f.TensorData(ti)
				got := make([]byte, len(want))
				if err := quant.Quantize(c.typ, weights[ti.Name], got); err != nil {
					t.Fatal(err)
				}
				if i := diffAt(got, want); i >= 0 {
					t.Errorf("%s: byte %d (block %d) differs from llama-quantize", ti.Name, i, i/c.typ.TypeSize())
				}
				n++
			}
			if n < 7 {
				t.Fatalf("only %d tensors came out as %s", n, c.typ)
			}
			t.Logf("%d tensors bit-identical", n)
		})
	}
}

func diffAt(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
