package tokenizer

import (
	"encoding/json"
	"os"
	"testing"
)

// TestEdgeCases compares against ids llama.cpp's llama-tokenize gave for
// inputs the upstream vectors leave out: empty input, whitespace runs,
// emoji, invalid UTF-8, special tokens with and without parsing, BOS.
// testdata/gen-edge-cases.py regenerates the golden file.
func TestEdgeCases(t *testing.T) {
	raw, err := os.ReadFile("testdata/edge-cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Cases []struct {
			Vocab        string   `json:"vocab"`
			Input        []byte   `json:"input"`
			AddBOS       bool     `json:"add_bos"`
			ParseSpecial bool     `json:"parse_special"`
			IDs          []uint32 `json:"ids"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	if len(golden.Cases) == 0 {
		t.Fatal("no cases")
	}
	pass := map[string]int{}
	for _, c := range golden.Cases {
		tk, _, _ := loadVocab(t, c.Vocab)
		// llama-tokenize adds specials only when the vocab adds BOS.
		opt := EncodeOptions{AddSpecial: c.AddBOS && tk.AddsBOS(), ParseSpecial: c.ParseSpecial}
		got := tk.Encode(string(c.Input), opt)
		if !equalIDs(got, c.IDs) && (len(got) > 0 || len(c.IDs) > 0) {
			t.Errorf("%s: Encode(%q, %+v)\n got %v\nwant %v", c.Vocab, c.Input, opt, got, c.IDs)
			continue
		}
		pass[c.Vocab]++
	}
	t.Logf("exact: %v of %d cases", pass, len(golden.Cases))
}
