package gguf_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/digest"
	"github.com/meshnode/meshnode/gguf/quant"
)

// The fortunes models shipped beside the project (see their README); tests
// skip when the directory is absent.
const modelDir = "/work/shared/models"

func openModel(t *testing.T, name string) *gguf.File {
	t.Helper()
	path := filepath.Join(modelDir, name)
	if _, err := os.Stat(path); err != nil {
		t.Skipf("model %s not present: %v", path, err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestFortunesFacts(t *testing.T) {
	for _, c := range []struct{ file, quant string }{
		{"meshnode-fortunes-f16.gguf", "F16"},
		{"meshnode-fortunes-q8_0.gguf", "Q8_0"},
	} {
		t.Run(c.file, func(t *testing.T) {
			f := openModel(t, c.file)
			if !f.Mapped() {
				t.Error("model not memory-mapped")
			}
			got := f.Facts()
			want := gguf.Facts{
				ModelKey: c.file[:len(c.file)-5], Name: "meshnode-fortunes", Architecture: "llama",
				ContextLength: 256, VocabSize: 32000, EmbeddingSize: 192, HeadCount: 4, KVHeadCount: 2,
				LayerCount: 4, FeedForwardLength: 512, KeyLength: 48, ValueLength: 48,
				TokenizerModel: "llama",
				SpecialTokens:  []gguf.SpecialToken{{Name: "bos", ID: 1}, {Name: "eos", ID: 2}, {Name: "unknown", ID: 0}},
				RopeFreqBase:   10000, QuantizationType: c.quant,
				ParameterSize: "14M",
			}
			want.ParameterCount = got.ParameterCount
			if got.ParameterCount < 13_800_000 || got.ParameterCount > 14_000_000 {
				t.Errorf("parameter count %d, the README says about 13.9M", got.ParameterCount)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Facts =\n%+v\nwant\n%+v", got, want)
			}
			// Every tensor's data is readable and every matrix dequantises.
			for _, ti := range f.Tensors {
				d, err := f.TensorData(ti)
				if err != nil {
					t.Fatal(err)
				}
				out := make([]float32, ti.Elements())
				if err := quant.Dequantize(ti.Type, d, out); err != nil {
					t.Errorf("%s: %v", ti.Name, err)
				}
			}
		})
	}
}

// TestFortunesQ8IsLlamaQuantizeOfF16 re-quantises the F16 model's matrices
// and expects the Q8_0 model's bytes exactly: that file was written by
// llama.cpp's quantiser from the F16 one.
func TestFortunesQ8IsLlamaQuantizeOfF16(t *testing.T) {
	f16 := openModel(t, "meshnode-fortunes-f16.gguf")
	q8 := openModel(t, "meshnode-fortunes-q8_0.gguf")
	checked := 0
	for _, ti := range q8.Tensors {
		if ti.Type != quant.Q8_0 {
			continue
		}
		src, ok := f16.Tensor(ti.Name)
		if !ok {
			t.Fatalf("%s missing from the F16 model", ti.Name)
		}
		srcData, _ := f16.TensorData(src)
		x := make([]float32, src.Elements())
		if err := quant.Dequantize(src.Type, srcData, x); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, ti.Size)
		if err := quant.Quantize(quant.Q8_0, x, got); err != nil {
			t.Fatal(err)
		}
		want, _ := q8.TensorData(ti)
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: byte %d = %#x, llama.cpp wrote %#x", ti.Name, i, got[i], want[i])
			}
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no Q8_0 tensors compared")
	}
}

func TestFortunesDigest(t *testing.T) {
	f := openModel(t, "meshnode-fortunes-q8_0.gguf")
	res, err := digest.Files(modelDir, "meshnode-fortunes-q8_0.gguf")
	if err != nil {
		t.Fatal(err)
	}
	mapped := digest.HashBytes(f.Bytes())
	if res.Entries[0].Sum != mapped {
		t.Fatalf("streamed sum %s != sum of the mapping %s", res.Entries[0].Sum, mapped)
	}
	t.Logf("weights_digest %s: %d bytes in %v (%.0f MB/s)", res.Digest, res.Bytes, res.Elapsed, res.MBps())
}
