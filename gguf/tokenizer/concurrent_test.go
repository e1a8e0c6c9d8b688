package tokenizer

import (
	"sync"
	"testing"
)

// TestConcurrentUse encodes and decodes from several goroutines at once
// with one Tokenizer (run under -race to check it is safe to share).
func TestConcurrentUse(t *testing.T) {
	tk, inp, out := loadVocab(t, "qwen2")
	vs := parseVectors(t, inp, out)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for _, v := range vs {
				if got := tk.Encode(v.text, EncodeOptions{}); !equalIDs(got, v.ids) {
					t.Errorf("Encode(%q) = %v, want %v", v.text, got, v.ids)
				}
				if _, err := tk.Decode(v.ids, DecodeOptions{}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}
