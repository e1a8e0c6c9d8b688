package tokenizer

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/meshnode/meshnode/gguf"
)

// TestPreTokenizerVectors checks the pre-tokenizers llama.cpp's own vocab
// files do not cover (gpt-4o/llama4, tekken, deepseek-v3, seed-coder,
// bailingmoe, minicpm5, granite-embed-multi-97m) against llama-tokenize
// run on the llama-bpe
// vocabulary relabelled with each tokenizer.ggml.pre value
// (testdata/gen-pre-vectors.py).
func TestPreTokenizerVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/pre-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Cases []struct {
			Pre   string   `json:"pre"`
			Input []byte   `json:"input"`
			IDs   []uint32 `json:"ids"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	model, _, _ := vocabFiles(t, "llama-bpe")
	f, err := gguf.Parse(model)
	if err != nil {
		t.Fatal(err)
	}
	toks := map[string]*Tokenizer{}
	pass, total := map[string]int{}, map[string]int{}
	for _, c := range golden.Cases {
		tk := toks[c.Pre]
		if tk == nil {
			v, err := VocabFromGGUF(f.Metadata)
			if err != nil {
				t.Fatal(err)
			}
			v.Pre = c.Pre
			if tk, err = New(v); err != nil {
				t.Fatalf("%s: %v", c.Pre, err)
			}
			toks[c.Pre] = tk
		}
		total[c.Pre]++
		if got := tk.Encode(string(c.Input), EncodeOptions{}); !equalIDs(got, c.IDs) {
			t.Errorf("%s: Encode(%q)\n got %v\nwant %v", c.Pre, c.Input, got, c.IDs)
			continue
		}
		pass[c.Pre]++
	}
	for pre, n := range total {
		t.Logf("%s: %d/%d exact", pre, pass[pre], n)
	}
}
