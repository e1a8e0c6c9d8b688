package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/receipt"
	"github.com/zeebo/blake3"
)

func request(maxTokens uint32) receipt.ServeRequest {
	return receipt.ServeRequest{
		PromptHash:     receipt.PromptHash([]byte("abc")),
		PromptTokens:   3,
		MaxTokens:      maxTokens,
		FidelityFloor:  receipt.F1,
		JouleCeilingUJ: 1 << 40,
	}
}

func collect(t *testing.T, e Engine, req receipt.ServeRequest, prompt []uint32) ([]uint32, Outcome) {
	t.Helper()
	var toks []uint32
	out, err := e.Serve(context.Background(), req, prompt, func(tok uint32) error {
		toks = append(toks, tok)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return toks, out
}

// TestReferenceAlgorithm recomputes the documented algorithm from scratch.
func TestReferenceAlgorithm(t *testing.T) {
	prompt := []uint32{'a', 'b', 'c'}
	msg := []byte("mesh-reference prefill\x00")
	for _, p := range prompt {
		msg = binary.LittleEndian.AppendUint32(msg, p)
	}
	state := blake3.Sum256(msg)
	var want []uint32
	for range 5 {
		for range 256 {
			state = blake3.Sum256(state[:])
		}
		want = append(want, binary.LittleEndian.Uint32(state[:4])%32000)
	}
	e := NewReference(ReferenceConfig{Fidelity: receipt.F2, UJPerToken: 10})
	got, out := collect(t, e, request(5), prompt)
	if !slices.Equal(got, want) {
		t.Fatalf("tokens %v, want %v", got, want)
	}
	d := receipt.F2
	if want := (Outcome{TokensIn: 3, TokensOut: 5, TokensAccepted: 5, Delivered: &d}); out.TokensIn != want.TokensIn ||
		out.TokensOut != want.TokensOut || out.TokensAccepted != want.TokensAccepted || *out.Delivered != d {
		t.Fatalf("outcome %+v, want %+v", out, want)
	}
}

func TestReferenceDeterminism(t *testing.T) {
	prompt := []uint32{1, 2, 3, 4}
	a := NewReference(ReferenceConfig{Fidelity: receipt.F1, UJPerToken: 1})
	b := NewReference(ReferenceConfig{Fidelity: receipt.F4, UJPerToken: 99, UJPerOptionScored: 5})
	first, _ := collect(t, a, request(12), prompt)
	again, _ := collect(t, a, request(12), prompt)
	other, _ := collect(t, b, request(12), prompt)
	if !slices.Equal(first, again) || !slices.Equal(first, other) {
		t.Fatal("same request and payload gave different tokens")
	}
	if !a.Deterministic() {
		t.Fatal("reference engine does not declare itself deterministic")
	}
	short, _ := collect(t, a, request(4), prompt)
	if !slices.Equal(short, first[:4]) {
		t.Fatal("a lower max_tokens is not a prefix of the longer output")
	}
	changed, _ := collect(t, a, request(12), []uint32{1, 2, 3, 5})
	if slices.Equal(changed, first) {
		t.Fatal("another payload gave the same tokens")
	}
	for _, tok := range first {
		if tok >= ReferenceVocab {
			t.Fatalf("token %d outside the vocabulary", tok)
		}
	}
	if _, ok := a.Weights(); ok || a.Recipe() != "mesh-reference" {
		t.Fatal("reference engine names weights or another recipe")
	}
}

func TestReferenceDecision(t *testing.T) {
	e := NewReference(ReferenceConfig{Fidelity: receipt.F1, UJPerToken: 1, UJPerOptionScored: 3})
	req := request(50)
	req.Decision = &receipt.Decision{Questions: 1, OptionsScored: 4}
	toks, out := collect(t, e, req, []uint32{1, 2, 3})
	if len(toks) != 0 || out.TokensOut != 0 || out.TokensIn != 3 {
		t.Fatalf("decision emitted %v, outcome %+v", toks, out)
	}
}

func TestReferenceStops(t *testing.T) {
	e := NewReference(ReferenceConfig{Fidelity: receipt.F1})
	t.Run("cancelled mid-serve", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		n := 0
		out, err := e.Serve(ctx, request(100), []uint32{1}, func(uint32) error {
			if n++; n == 3 {
				cancel()
			}
			return nil
		})
		if !errors.Is(err, context.Canceled) || out.TokensOut != 3 || n != 3 {
			t.Fatalf("err %v, outcome %+v after %d emits; want Canceled after 3", err, out, n)
		}
	})
	t.Run("cancelled before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		out, err := e.Serve(ctx, request(100), []uint32{1}, func(uint32) error { t.Fatal("emitted"); return nil })
		if !errors.Is(err, context.Canceled) || out.TokensOut != 0 {
			t.Fatalf("err %v, outcome %+v", err, out)
		}
	})
	t.Run("emit fails", func(t *testing.T) {
		gone := errors.New("client gone")
		out, err := e.Serve(context.Background(), request(100), []uint32{1}, func(uint32) error { return gone })
		if !errors.Is(err, gone) || out.TokensOut != 0 {
			t.Fatalf("err %v, outcome %+v", err, out)
		}
	})
	refusals := []*receipt.Sampling{
		{TemperatureE6: 1},
		{Stop: []string{"x"}},
		{PresencePenaltyE6: 1},
		{FrequencyPenaltyE6: -1},
		{RepeatPenaltyE6: 1_100_000},
		{LogitBias: []receipt.LogitBias{{Token: 1, BiasE6: -100_000_000}}},
		{MinTokens: 2},
	}
	for _, s := range refusals {
		req := request(4)
		req.Sampling = s
		out, err := e.Serve(context.Background(), req, []uint32{1}, func(uint32) error { t.Fatal("emitted"); return nil })
		if !errors.Is(err, ErrRefused) || out != (Outcome{}) {
			t.Fatalf("sampling %+v: err %v, outcome %+v; want ErrRefused and no work", s, err, out)
		}
	}
	seed := uint64(3)
	req := request(4)
	req.Sampling = &receipt.Sampling{Seed: &seed, TopK: 4}
	if toks, _ := collect(t, e, req, []uint32{1}); len(toks) != 4 {
		t.Fatal("greedy request with inert sampling options not served")
	}
}

// BenchmarkReferenceToken: the reference engine's cost per output token,
// against one BLAKE3 round.
func BenchmarkReferenceToken(b *testing.B) {
	e := NewReference(ReferenceConfig{Fidelity: receipt.F1})
	req := request(64)
	// One BLAKE3 round, timed in the same run (testing.Benchmark cannot
	// nest inside a benchmark).
	var state [32]byte
	const rounds = 20_000
	var round time.Duration
	for range 2 { // the first pass warms up
		start := time.Now()
		for range rounds {
			state = blake3.Sum256(state[:])
		}
		round = time.Since(start) / rounds
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := e.Serve(context.Background(), req, []uint32{1, 2, 3}, func(uint32) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
	perToken := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / 64
	b.ReportMetric(perToken/1e3, "µs/token")
	b.ReportMetric(perToken/float64(round.Nanoseconds()), "x-blake3-round")
}

// TestReferencePromptProgress: a serve given WithPromptProgress reports
// the whole prompt in once, before its first token, and the same tokens.
func TestReferencePromptProgress(t *testing.T) {
	e := NewReference(ReferenceConfig{Fidelity: receipt.F1})
	prompt := []uint32{1, 2, 3}
	want, _ := collect(t, e, request(5), prompt)
	var events []string
	ctx := WithPromptProgress(context.Background(), func(p PromptProgress) {
		if p != (PromptProgress{Total: 3, Processed: 3}) {
			t.Errorf("progress %+v, want the whole prompt of 3", p)
		}
		events = append(events, "progress")
	})
	var got []uint32
	if _, err := e.Serve(ctx, request(5), prompt, func(tok uint32) error {
		got, events = append(got, tok), append(events, "token")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) || len(events) != 6 || events[0] != "progress" {
		t.Fatalf("tokens %v (want %v), events %v: want the progress once, first", got, want, events)
	}
}
