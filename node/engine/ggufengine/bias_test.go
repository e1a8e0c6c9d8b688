package ggufengine

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/sample"
	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

func biased(b ...receipt.LogitBias) *receipt.Sampling { return &receipt.Sampling{LogitBias: b} }

// TestLogitBias: a greedy serve with a token banned (−100) picks the
// model's likeliest other token, found here from the model's logits
// alone; one with a token forced (+100) emits only it; a sampled serve
// never draws a banned token; a bias for a token past the vocabulary is
// refused before any work.
func TestLogitBias(t *testing.T) {
	m := fortunes(t)
	prompt := q8References(t)[0].Prompt
	plain, _ := serve(t, m.Engine(), request(8, nil), prompt)

	s, err := m.model.NewSession(model.SessionOptions{Context: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	logits, err := s.Eval(context.Background(), prompt)
	if err != nil {
		t.Fatal(err)
	}
	second := -1
	for id, l := range logits {
		if uint32(id) != plain[0] && (second < 0 || l > logits[second]) {
			second = id
		}
	}
	banned, _ := serve(t, m.Engine(), request(8, biased(receipt.LogitBias{Token: plain[0], BiasE6: -100_000_000})), prompt)
	if len(banned) == 0 || banned[0] != uint32(second) {
		t.Fatalf("with %d banned: %v, want it to start with the runner-up %d (plain %v)", plain[0], banned, second, plain)
	}

	the := m.Tokenizer().AppendEncode(nil, "the", tokenizer.EncodeOptions{}) // "▁the": SentencePiece adds the space
	if len(the) != 1 {
		t.Fatalf(`"the" is %v, not one token`, the)
	}
	forced, _ := serve(t, m.Engine(), request(8, biased(receipt.LogitBias{Token: the[0], BiasE6: 100_000_000})), prompt)
	if len(forced) != 8 || slices.ContainsFunc(forced, func(id uint32) bool { return id != the[0] }) {
		t.Fatalf("with %d forced: %v", the[0], forced)
	}

	// Sampled at a high temperature, with the plain answer's tokens banned.
	seed := uint64(5)
	hot := &receipt.Sampling{TemperatureE6: 1_500_000, Seed: &seed}
	for _, id := range slices.Compact(slices.Sorted(slices.Values(plain))) {
		hot.LogitBias = append(hot.LogitBias, receipt.LogitBias{Token: id, BiasE6: -100_000_000})
	}
	drawn, _ := serve(t, m.Engine(), request(64, hot), prompt)
	if i := slices.IndexFunc(drawn, func(id uint32) bool { return slices.Contains(plain, id) }); i >= 0 {
		t.Fatalf("a sampled serve drew banned token %d at %d: %v", drawn[i], i, drawn)
	}

	called := false
	out, err := m.Engine().Serve(context.Background(), request(4, biased(receipt.LogitBias{Token: 32000, BiasE6: 1})), prompt,
		func(uint32) error { called = true; return nil })
	if !errors.Is(err, engine.ErrRefused) || called || out != (engine.Outcome{}) {
		t.Fatalf("a bias past the vocabulary: %v, emitted %v, outcome %+v", err, called, out)
	}
	// Generate (meshnode run's way in) checks as Serve does.
	out, err = m.Engine().Generate(context.Background(), prompt, Generation{Sampling: sample.Params{LogitBias: []sample.Bias{{Token: 32000, Bias: 1}}}, MaxTokens: 4},
		func(uint32) error { called = true; return nil })
	if !errors.Is(err, engine.ErrRefused) || called || out != (engine.Outcome{}) {
		t.Fatalf("Generate with a bias past the vocabulary: %v, emitted %v, outcome %+v", err, called, out)
	}
}
