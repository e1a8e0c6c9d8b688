package ggufengine

import (
	"fmt"
	"strings"
	"sync"

	"github.com/meshnode/meshnode/gguf/sample"
	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node/receipt"
)

// BreakerTokens is what DRY's sequence breakers are read with: the
// model's tokenizer.
type BreakerTokens interface {
	NumTokens() int
	Piece(id uint32, special bool) (string, error)
	Encode(s string, opt tokenizer.EncodeOptions) []uint32
}

// DRYVocab reads DRY's sequence breakers into token sequences for one
// model (sample.Breakers), keeping the last few lists read: reading one
// walks the whole vocabulary, milliseconds a request, and clients send
// the same list every time.
type DRYVocab struct {
	t     BreakerTokens
	mu    sync.Mutex
	lists map[string]map[uint32][][]uint32
}

// NewDRYVocab is t's DRYVocab.
func NewDRYVocab(t BreakerTokens) *DRYVocab {
	return &DRYVocab{t: t, lists: map[string]map[uint32][][]uint32{}}
}

// dryLists bounds the lists a DRYVocab keeps.
const dryLists = 8

// NumTokens implements sample.BreakerVocab.
func (v *DRYVocab) NumTokens() int { return v.t.NumTokens() }

// Text implements sample.BreakerVocab: a control token's text too, as
// llama.cpp reads them.
func (v *DRYVocab) Text(id uint32) string {
	p, err := v.t.Piece(id, true)
	if err != nil {
		return ""
	}
	return p
}

// Tokenize implements sample.BreakerVocab: the text as it is, no BOS and
// no control tokens, as llama.cpp tokenizes a breaker's tail.
func (v *DRYVocab) Tokenize(text string) []uint32 { return v.t.Encode(text, tokenizer.EncodeOptions{}) }

// breakers are list's token sequences. The map returned is shared:
// callers read it only.
func (v *DRYVocab) breakers(list []string) (map[uint32][][]uint32, error) {
	key := strings.Join(list, "\x00")
	v.mu.Lock()
	defer v.mu.Unlock()
	if b, ok := v.lists[key]; ok {
		return b, nil
	}
	b, err := sample.Breakers(v, list)
	if err != nil {
		return nil, err
	}
	if len(v.lists) >= dryLists {
		clear(v.lists)
	}
	v.lists[key] = b
	return b, nil
}

// dryParams is a request's DRY (receipt.Sampling's dry_* fields) for a
// serve of prompt, its breakers read with v (nil: the engine has no
// tokenizer, and refuses DRY).
func dryParams(s *receipt.Sampling, v *DRYVocab, prompt []uint32) (*sample.DRY, error) {
	if v == nil {
		return nil, fmt.Errorf("DRY needs the model's tokenizer to read its sequence breakers, and this engine has none")
	}
	list := s.DRYBreakers
	if list == nil {
		list = receipt.DefaultDRYBreakers
	}
	b, err := v.breakers(list)
	if err != nil {
		return nil, err
	}
	d := &sample.DRY{
		Multiplier:    float64(s.DRYMultiplierE6) / 1e6,
		Base:          float64(s.DRYBaseE6) / 1e6,
		AllowedLength: int(s.DRYAllowedLength),
		Breakers:      b,
		Context:       prompt,
	}
	if s.DRYLastN != receipt.PenaltyAll {
		d.LastN = int(s.DRYLastN)
	}
	return d, nil
}

// DRYBreakers are list's DRY sequence breakers as the model's token
// sequences (sample.Breakers), read with the model's own DRYVocab, whose
// serves keep the last few lists read.
func (m *Model) DRYBreakers(list []string) (map[uint32][][]uint32, error) {
	return m.dry.breakers(list)
}
