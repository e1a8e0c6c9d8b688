package receipt

import (
	"encoding/hex"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

// TestRequestCanonicalForm checks the request's encoding against an
// independent core-deterministic encoding of the §3.1 key set, so the id
// any mesh/1 implementation computes for a plain generation is ours.
func TestRequestCanonicalForm(t *testing.T) {
	req := testRequest()
	want := canonicalOf(t, requestKeys(req, nil))
	got, err := req.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(got) != hex.EncodeToString(want) {
		t.Fatalf("canonical request\n got %x\nwant %x", got, want)
	}
	if id := mustID(t, req); id != Sum(want) {
		t.Fatalf("request_id %s, want BLAKE3 of the canonical form %s", id, Sum(want))
	}

	req.Decision = &Decision{Questions: 1, OptionsScored: 2, SchemaTokens: 3}
	want = canonicalOf(t, requestKeys(req, map[string]any{
		"decision": map[string]any{"questions": uint64(1), "options_scored": uint64(2), "schema_tokens": uint64(3)},
	}))
	if got, _ = req.Canonical(); hex.EncodeToString(got) != hex.EncodeToString(want) {
		t.Fatalf("canonical decision request\n got %x\nwant %x", got, want)
	}

	// Logit biases are [token, bias_e6] pairs in an array.
	req.Decision = nil
	req.Sampling = &Sampling{LogitBias: []LogitBias{{Token: 7, BiasE6: -100 * e6}, {Token: 300, BiasE6: 1}}}
	want = canonicalOf(t, requestKeys(req, map[string]any{
		"sampling": map[string]any{"logit_bias": []any{[]any{uint64(7), int64(-100 * e6)}, []any{uint64(300), uint64(1)}}},
	}))
	if got, _ = req.Canonical(); hex.EncodeToString(got) != hex.EncodeToString(want) {
		t.Fatalf("canonical request with logit biases\n got %x\nwant %x", got, want)
	}
}

// requestKeys is req's §3.1 keys, written out independently of the
// encoder, with the options' keys in extra.
func requestKeys(req ServeRequest, extra map[string]any) map[string]any {
	m := map[string]any{
		"prompt_hash":      req.PromptHash.String(),
		"prompt_tokens":    uint64(req.PromptTokens),
		"max_tokens":       uint64(req.MaxTokens),
		"fidelity_floor":   uint64(req.FidelityFloor),
		"joule_ceiling_uj": req.JouleCeilingUJ,
	}
	maps.Copy(m, extra)
	return m
}

// TestRequestIdentity: everything that changes an engine's output changes
// the id; options that say nothing leave it alone.
func TestRequestIdentity(t *testing.T) {
	base := mustID(t, testRequest())
	same := []struct {
		name string
		mod  func(*ServeRequest)
	}{
		{"nil sampling", func(r *ServeRequest) { r.Sampling = nil }},
		{"zero sampling", func(r *ServeRequest) { r.Sampling = &Sampling{} }},
		{"empty stop list", func(r *ServeRequest) { r.Sampling = &Sampling{Stop: []string{}} }},
	}
	for _, tt := range same {
		r := testRequest()
		tt.mod(&r)
		if id := mustID(t, r); id != base {
			t.Errorf("%s: id changed to %s", tt.name, id)
		}
	}
	differ := []struct {
		name string
		mod  func(*ServeRequest)
	}{
		{"prompt_hash", func(r *ServeRequest) { r.PromptHash[0] ^= 1 }},
		{"prompt_tokens", func(r *ServeRequest) { r.PromptTokens++ }},
		{"max_tokens", func(r *ServeRequest) { r.MaxTokens++ }},
		{"fidelity_floor", func(r *ServeRequest) { r.FidelityFloor = F3 }},
		{"joule_ceiling", func(r *ServeRequest) { r.JouleCeilingUJ++ }},
		{"decision", func(r *ServeRequest) { r.Decision = &Decision{Questions: 1, OptionsScored: 1} }},
		{"temperature", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 700_000} }},
		{"top_p", func(r *ServeRequest) { r.Sampling = &Sampling{TopPE6: 950_000} }},
		{"top_k", func(r *ServeRequest) { r.Sampling = &Sampling{TopK: 40} }},
		{"min_p", func(r *ServeRequest) { r.Sampling = &Sampling{MinPE6: 50_000} }},
		{"presence", func(r *ServeRequest) { r.Sampling = &Sampling{PresencePenaltyE6: -500_000} }},
		{"frequency", func(r *ServeRequest) { r.Sampling = &Sampling{FrequencyPenaltyE6: 1} }},
		{"repeat", func(r *ServeRequest) { r.Sampling = &Sampling{RepeatPenaltyE6: 1_100_000} }},
		{"seed zero", func(r *ServeRequest) { r.Sampling = &Sampling{Seed: ptr(uint64(0))} }},
		{"stop", func(r *ServeRequest) { r.Sampling = &Sampling{Stop: []string{"\n\n"}} }},
		{"draft", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 700_000, Draft: "lookup"} }},
		{"logit bias", func(r *ServeRequest) { r.Sampling = &Sampling{LogitBias: []LogitBias{{Token: 7, BiasE6: -100 * e6}}} }},
		{"another token's bias", func(r *ServeRequest) { r.Sampling = &Sampling{LogitBias: []LogitBias{{Token: 8, BiasE6: -100 * e6}}} }},
		{"another bias", func(r *ServeRequest) { r.Sampling = &Sampling{LogitBias: []LogitBias{{Token: 7, BiasE6: 1}}} }},
		{"grammar", func(r *ServeRequest) { g := Sum([]byte("root ::= \"a\"")); r.Sampling = &Sampling{Grammar: &g} }},
		{"another grammar", func(r *ServeRequest) { g := Sum([]byte("root ::= \"b\"")); r.Sampling = &Sampling{Grammar: &g} }},
		{"a grammar and a draft", func(r *ServeRequest) {
			g := Sum([]byte("root ::= \"b\""))
			r.Sampling = &Sampling{Grammar: &g, TemperatureE6: 700_000, Draft: "lookup"}
		}},
		{"samplers", func(r *ServeRequest) { r.Sampling = &Sampling{TopK: 40, Samplers: "ki"} }},
		{"other samplers", func(r *ServeRequest) { r.Sampling = &Sampling{TopK: 40, Samplers: "kpi"} }},
		{"n_indent", func(r *ServeRequest) { r.Sampling = &Sampling{MinIndent: 4} }},
		{"penalty_last_n", func(r *ServeRequest) { r.Sampling = &Sampling{RepeatPenaltyE6: 1_100_000, PenaltyLastN: 64} }},
		{"penalty_last_n all", func(r *ServeRequest) { r.Sampling = &Sampling{RepeatPenaltyE6: 1_100_000, PenaltyLastN: PenaltyAll} }},
		{"typical_p", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 1, TypicalPE6: 900_000} }},
		{"top_n_sigma", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 1, TopNSigmaE6: 1_500_000} }},
		{"xtc", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, XTCProbabilityE6: 500_000, XTCThresholdE6: 100_000}
		}},
		{"xtc threshold 0", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 1, XTCProbabilityE6: 500_000} }},
		{"dynatemp", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, DynaTempRangeE6: 300_000, DynaTempExponentE6: e6}
		}},
		{"another dynatemp exponent", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, DynaTempRangeE6: 300_000, DynaTempExponentE6: 2 * e6}
		}},
		{"min_keep", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 1, TopPE6: 900_000, MinKeep: 5} }},
		{"dry", func(r *ServeRequest) {
			r.Sampling = &Sampling{DRYMultiplierE6: 800_000, DRYBaseE6: 1_750_000, DRYAllowedLength: 2, DRYLastN: 64}
		}},
		{"dry scanning all", func(r *ServeRequest) {
			r.Sampling = &Sampling{DRYMultiplierE6: 800_000, DRYBaseE6: 1_750_000, DRYAllowedLength: 2, DRYLastN: PenaltyAll}
		}},
		{"dry with breakers", func(r *ServeRequest) {
			r.Sampling = &Sampling{DRYMultiplierE6: 800_000, DRYBaseE6: 1_750_000, DRYAllowedLength: 2, DRYLastN: 64, DRYBreakers: []string{"\n"}}
		}},
		{"mirostat 2", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, Mirostat: 2, MirostatTauE6: 5 * e6, MirostatEtaE6: 100_000}
		}},
		{"mirostat 1", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, Mirostat: 1, MirostatTauE6: 5 * e6, MirostatEtaE6: 100_000}
		}},
		{"another mirostat target", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, Mirostat: 2, MirostatTauE6: 4 * e6, MirostatEtaE6: 100_000}
		}},
		{"another mirostat rate", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, Mirostat: 2, MirostatTauE6: 5 * e6, MirostatEtaE6: 200_000}
		}},
		{"adaptive-p at 0", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 1, AdaptiveTargetE6: new(uint32(0))} }},
		{"adaptive-p at 0.5", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, AdaptiveTargetE6: new(uint32(500_000)), AdaptiveDecayE6: 900_000}
		}},
		{"min_tokens", func(r *ServeRequest) { r.Sampling = &Sampling{MinTokens: 4} }},
		{"adaptive-p with another decay", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, AdaptiveTargetE6: new(uint32(500_000)), AdaptiveDecayE6: 800_000}
		}},
	}
	seen := map[ContentID]string{base: "base"}
	for _, tt := range differ {
		r := testRequest()
		tt.mod(&r)
		id := mustID(t, r)
		if prev, dup := seen[id]; dup {
			t.Errorf("%s: id %s equals %s's", tt.name, id, prev)
		}
		seen[id] = tt.name
	}
}

func TestRequestValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*ServeRequest)
	}{
		{"fidelity above F4", func(r *ServeRequest) { r.FidelityFloor = 5 }},
		{"decision without questions", func(r *ServeRequest) { r.Decision = &Decision{OptionsScored: 2} }},
		{"fewer options than questions", func(r *ServeRequest) { r.Decision = &Decision{Questions: 3, OptionsScored: 2} }},
		{"schema beyond prompt", func(r *ServeRequest) { r.Decision = &Decision{Questions: 1, OptionsScored: 2, SchemaTokens: 26} }},
		{"top_p above one", func(r *ServeRequest) { r.Sampling = &Sampling{TopPE6: 1_000_001} }},
		{"min_p above one", func(r *ServeRequest) { r.Sampling = &Sampling{MinPE6: 1_000_001} }},
		{"repeat penalty of one", func(r *ServeRequest) { r.Sampling = &Sampling{RepeatPenaltyE6: 1_000_000} }},
		{"penalty_last_n without a penalty", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 1, PenaltyLastN: 64} }},
		{"too many stops", func(r *ServeRequest) { r.Sampling = &Sampling{Stop: make([]string, MaxStops+1)} }},
		{"empty stop", func(r *ServeRequest) { r.Sampling = &Sampling{Stop: []string{""}} }},
		{"long stop", func(r *ServeRequest) { r.Sampling = &Sampling{Stop: []string{strings.Repeat("x", MaxStopBytes+1)}} }},
		{"invalid utf-8 stop", func(r *ServeRequest) { r.Sampling = &Sampling{Stop: []string{"\xff"}} }},
		{"draft on a greedy request", func(r *ServeRequest) { r.Sampling = &Sampling{Draft: "lookup"} }},
		{"long draft", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, Draft: strings.Repeat("x", MaxDraftBytes+1)}
		}},
		{"draft with a space", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 1, Draft: "a b"} }},
		{"zero grammar", func(r *ServeRequest) { r.Sampling = &Sampling{Grammar: &ContentID{}} }},
		{"zero logit bias", func(r *ServeRequest) { r.Sampling = &Sampling{LogitBias: []LogitBias{{Token: 1}}} }},
		{"logit bias past 100", func(r *ServeRequest) {
			r.Sampling = &Sampling{LogitBias: []LogitBias{{Token: 1, BiasE6: -MaxLogitBiasE6 - 1}}}
		}},
		{"logit biases out of order", func(r *ServeRequest) {
			r.Sampling = &Sampling{LogitBias: []LogitBias{{Token: 2, BiasE6: 1}, {Token: 1, BiasE6: 1}}}
		}},
		{"a token biased twice", func(r *ServeRequest) {
			r.Sampling = &Sampling{LogitBias: []LogitBias{{Token: 2, BiasE6: 1}, {Token: 2, BiasE6: 3}}}
		}},
		{"too many logit biases", func(r *ServeRequest) { r.Sampling = &Sampling{LogitBias: manyBiases(MaxLogitBias + 1)} }},
		{"a sampler that is not one", func(r *ServeRequest) { r.Sampling = &Sampling{Samplers: "kz"} }},
		{"a sampler twice", func(r *ServeRequest) { r.Sampling = &Sampling{Samplers: "kpk"} }},
		{"too many samplers", func(r *ServeRequest) { r.Sampling = &Sampling{Samplers: "edskypmxtie"} }},
		{"typical_p on a greedy request", func(r *ServeRequest) { r.Sampling = &Sampling{TypicalPE6: 500_000} }},
		{"typical_p of one", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 1, TypicalPE6: e6} }},
		{"top_n_sigma past its bound", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, TopNSigmaE6: MaxTopNSigmaE6 + 1}
		}},
		{"xtc probability past one", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 1, XTCProbabilityE6: e6 + 1} }},
		{"xtc threshold alone", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 1, XTCThresholdE6: 100_000} }},
		{"xtc threshold that drops nothing", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, XTCProbabilityE6: 1, XTCThresholdE6: xtcOff + 1}
		}},
		{"dynatemp range alone", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 1, DynaTempRangeE6: 1} }},
		{"dynatemp exponent alone", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 1, DynaTempExponentE6: 1} }},
		{"dynatemp exponent past its bound", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, DynaTempRangeE6: 1, DynaTempExponentE6: MaxDynaTempExponentE6 + 1}
		}},
		{"min_keep of one", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 1, TopPE6: 1, MinKeep: 1} }},
		{"min_keep alone", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 1, TopK: 4, MinKeep: 2} }},
		{"dry base alone", func(r *ServeRequest) { r.Sampling = &Sampling{DRYBaseE6: 1_750_000} }},
		{"dry base under one", func(r *ServeRequest) { r.Sampling = &Sampling{DRYMultiplierE6: 1, DRYBaseE6: 999_999, DRYLastN: 64} }},
		{"dry scanning nothing", func(r *ServeRequest) { r.Sampling = &Sampling{DRYMultiplierE6: 1, DRYBaseE6: e6} }},
		{"dry multiplier past its bound", func(r *ServeRequest) {
			r.Sampling = &Sampling{DRYMultiplierE6: MaxDRYMultiplierE6 + 1, DRYBaseE6: e6, DRYLastN: 64}
		}},
		{"dry's default breakers spelled out", func(r *ServeRequest) {
			r.Sampling = &Sampling{DRYMultiplierE6: 1, DRYBaseE6: e6, DRYLastN: 64, DRYBreakers: DefaultDRYBreakers}
		}},
		{"no dry breakers", func(r *ServeRequest) {
			r.Sampling = &Sampling{DRYMultiplierE6: 1, DRYBaseE6: e6, DRYLastN: 64, DRYBreakers: []string{}}
		}},
		{"an empty dry breaker", func(r *ServeRequest) {
			r.Sampling = &Sampling{DRYMultiplierE6: 1, DRYBaseE6: e6, DRYLastN: 64, DRYBreakers: []string{""}}
		}},
		{"a long dry breaker", func(r *ServeRequest) {
			r.Sampling = &Sampling{DRYMultiplierE6: 1, DRYBaseE6: e6, DRYLastN: 64, DRYBreakers: []string{strings.Repeat("x", MaxDRYBreakerBytes+1)}}
		}},
		{"too many dry breakers", func(r *ServeRequest) {
			r.Sampling = &Sampling{DRYMultiplierE6: 1, DRYBaseE6: e6, DRYLastN: 64, DRYBreakers: make([]string, MaxDRYBreakers+1)}
		}},
		{"min_keep past its bound", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 1, TopPE6: 1, MinKeep: MaxMinKeep + 1} }},
		{"n_indent past its bound", func(r *ServeRequest) { r.Sampling = &Sampling{MinIndent: MaxIndent + 1} }},
		{"mirostat 3", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, Mirostat: 3, MirostatTauE6: 1, MirostatEtaE6: 1}
		}},
		{"mirostat's target alone", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 1, MirostatTauE6: 1} }},
		{"mirostat without a rate", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 1, Mirostat: 2, MirostatTauE6: 1} }},
		{"mirostat's target past its bound", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, Mirostat: 2, MirostatTauE6: MaxMirostatTauE6 + 1, MirostatEtaE6: 1}
		}},
		{"mirostat's rate past one", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, Mirostat: 2, MirostatTauE6: 1, MirostatEtaE6: e6 + 1}
		}},
		{"mirostat on a greedy request", func(r *ServeRequest) { r.Sampling = &Sampling{Mirostat: 2, MirostatTauE6: 1, MirostatEtaE6: 1} }},
		{"mirostat beside top_k", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, TopK: 40, Mirostat: 2, MirostatTauE6: 1, MirostatEtaE6: 1}
		}},
		{"mirostat beside a penalty", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, RepeatPenaltyE6: 1_100_000, Mirostat: 1, MirostatTauE6: 1, MirostatEtaE6: 1}
		}},
		{"mirostat beside dry", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, DRYMultiplierE6: 1, DRYBaseE6: e6, DRYLastN: 64, Mirostat: 2, MirostatTauE6: 1, MirostatEtaE6: 1}
		}},
		{"mirostat with a draft", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, Draft: "lookup", Mirostat: 2, MirostatTauE6: 1, MirostatEtaE6: 1}
		}},
		{"mirostat beside adaptive-p", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, Mirostat: 2, MirostatTauE6: 1, MirostatEtaE6: 1, AdaptiveTargetE6: new(uint32(1))}
		}},
		{"min_tokens past max_tokens", func(r *ServeRequest) { r.Sampling = &Sampling{MinTokens: r.MaxTokens + 1} }},
		{"adaptive-p's decay alone", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 1, AdaptiveDecayE6: 1} }},
		{"adaptive-p's target past one", func(r *ServeRequest) { r.Sampling = &Sampling{TemperatureE6: 1, AdaptiveTargetE6: new(uint32(e6 + 1))} }},
		{"adaptive-p's decay past its bound", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, AdaptiveTargetE6: new(uint32(1)), AdaptiveDecayE6: MaxAdaptiveDecayE6 + 1}
		}},
		{"adaptive-p on a greedy request", func(r *ServeRequest) { r.Sampling = &Sampling{AdaptiveTargetE6: new(uint32(1))} }},
		{"adaptive-p with a draft", func(r *ServeRequest) {
			r.Sampling = &Sampling{TemperatureE6: 1, Draft: "lookup", AdaptiveTargetE6: new(uint32(1))}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testRequest()
			tt.mod(&r)
			if _, err := r.ID(); !errors.Is(err, ErrInvalid) {
				t.Fatalf("ID() error = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestDecodeRequest(t *testing.T) {
	full := testRequest()
	full.Decision = &Decision{Questions: 2, OptionsScored: 4, SchemaTokens: 5}
	g := Sum([]byte("grammar"))
	full.Sampling = &Sampling{TemperatureE6: 800_000, Seed: ptr(uint64(42)), Stop: []string{"</s>", "\n"}, Grammar: &g,
		LogitBias: []LogitBias{{Token: 0, BiasE6: -MaxLogitBiasE6}, {Token: 50256, BiasE6: 2_500_000}}}
	// The largest sampling block there is: every bound at once.
	largest := testRequest()
	largest.Sampling = &Sampling{TemperatureE6: 2 * e6, TopPE6: 999_999, TopK: 1 << 31, MinPE6: 999_999,
		PresencePenaltyE6: -2 * e6, FrequencyPenaltyE6: -2 * e6, RepeatPenaltyE6: 10 * e6, PenaltyLastN: PenaltyAll, Seed: ptr(uint64(1 << 63)),
		TypicalPE6: 999_999, TopNSigmaE6: MaxTopNSigmaE6, XTCProbabilityE6: e6, XTCThresholdE6: xtcOff,
		DynaTempRangeE6: MaxDynaTempRangeE6, DynaTempExponentE6: MaxDynaTempExponentE6, MinKeep: MaxMinKeep, Samplers: "edskypmxti",
		DRYMultiplierE6: MaxDRYMultiplierE6, DRYBaseE6: MaxDRYBaseE6, DRYAllowedLength: MaxDRYAllowedLength, DRYLastN: PenaltyAll,
		DRYBreakers: slices.Repeat([]string{strings.Repeat("\u00e9", MaxDRYBreakerBytes/2)}, MaxDRYBreakers),
		Stop:        make([]string, MaxStops), Draft: strings.Repeat("d", MaxDraftBytes), LogitBias: manyBiases(MaxLogitBias)}
	for i := range largest.Sampling.Stop {
		largest.Sampling.Stop[i] = strings.Repeat("s", MaxStopBytes-1) + string(rune('a'+i))
	}
	for _, r := range []ServeRequest{testRequest(), full, largest} {
		b, err := r.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > maxRequestSize {
			t.Fatalf("a valid request of %d bytes exceeds the decoder's %d", len(b), maxRequestSize)
		}
		got, err := DecodeRequest(b)
		if err != nil {
			t.Fatalf("DecodeRequest(%x): %v", b, err)
		}
		if mustID(t, got) != mustID(t, r) {
			t.Fatalf("round trip changed the request: %+v", got)
		}
	}

	base := genericMap(t, mustCanonical(t, testRequest()))
	tests := []struct {
		name string
		raw  func() []byte
		want error
	}{
		{"unknown key", func() []byte { return withKey(t, base, "priority", uint64(1)) }, ErrMalformed},
		{"empty sampling block", func() []byte { return withKey(t, base, "sampling", map[string]any{}) }, ErrNonCanonical},
		{"missing max_tokens", func() []byte { return withKey(t, base, "max_tokens", nil) }, ErrNonCanonical},
		{"upper-case prompt hash", func() []byte {
			return withKey(t, base, "prompt_hash", strings.ToUpper(base["prompt_hash"].(string)))
		}, ErrMalformed},
		{"float ceiling", func() []byte { return withKey(t, base, "joule_ceiling_uj", 10000.0) }, ErrMalformed},
		{"fidelity 9", func() []byte { return withKey(t, base, "fidelity_floor", uint64(9)) }, ErrInvalid},
		{"non-shortest head", func() []byte {
			b := mustCanonical(t, testRequest())
			// max_tokens 16 is the one-byte 0x10; spell it 0x18 0x10.
			i := strings.Index(string(b), "max_tokens") + len("max_tokens")
			return append(append(append([]byte{}, b[:i]...), 0x18), b[i:]...)
		}, ErrNonCanonical},
		{"trailing byte", func() []byte { return append(mustCanonical(t, testRequest()), 0) }, ErrMalformed},
		{"logit bias as a map", func() []byte {
			return withKey(t, base, "sampling", map[string]any{"logit_bias": map[string]any{"7": int64(-1)}})
		}, ErrMalformed},
		{"logit bias pair of three", func() []byte {
			return withKey(t, base, "sampling", map[string]any{"logit_bias": []any{[]any{uint64(7), int64(-1), uint64(0)}}})
		}, ErrMalformed},
		{"too large", func() []byte { return make([]byte, maxRequestSize+1) }, ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeRequest(tt.raw()); !errors.Is(err, tt.want) {
				t.Fatalf("DecodeRequest error = %v, want %v", err, tt.want)
			}
		})
	}
}

// manyBiases is n logit biases, tokens spread wide, biases large.
func manyBiases(n int) []LogitBias {
	b := make([]LogitBias, n)
	for i := range b {
		b[i] = LogitBias{Token: uint32(i) * 14_000_000, BiasE6: -MaxLogitBiasE6 + int32(i)}
	}
	return b
}

func mustCanonical(t testing.TB, r ServeRequest) []byte {
	t.Helper()
	b, err := r.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withKey returns m's canonical encoding with key set to v, or removed
// when v is nil.
func withKey(t testing.TB, m map[string]any, key string, v any) []byte {
	t.Helper()
	c := make(map[string]any, len(m)+1)
	for k, x := range m {
		c[k] = x
	}
	if v == nil {
		delete(c, key)
	} else {
		c[key] = v
	}
	return canonicalOf(t, c)
}

func FuzzDecodeRequest(f *testing.F) {
	full := testRequest()
	full.Decision = &Decision{Questions: 2, OptionsScored: 4, SchemaTokens: 5}
	full.Sampling = &Sampling{TemperatureE6: 800_000, TopK: 40, Seed: ptr(uint64(42)), Stop: []string{"</s>"},
		LogitBias: []LogitBias{{Token: 3, BiasE6: -100 * e6}, {Token: 70000, BiasE6: 5}}}
	penalised := testRequest()
	penalised.Sampling = &Sampling{RepeatPenaltyE6: 1_100_000, FrequencyPenaltyE6: -5, PenaltyLastN: 64}
	f.Add(mustCanonical(f, testRequest()))
	f.Add(mustCanonical(f, full))
	f.Add(mustCanonical(f, penalised))
	filtered := testRequest()
	filtered.Sampling = &Sampling{TemperatureE6: 700_000, TopPE6: 900_000, TypicalPE6: 950_000, TopNSigmaE6: e6, XTCProbabilityE6: 500_000,
		XTCThresholdE6: 100_000, DynaTempRangeE6: 200_000, DynaTempExponentE6: e6, MinKeep: 3, Samplers: "tdskypmx",
		DRYMultiplierE6: 800_000, DRYBaseE6: 1_750_000, DRYAllowedLength: 2, DRYLastN: PenaltyAll, DRYBreakers: []string{"\n", "Bob:"}}
	f.Add(mustCanonical(f, filtered))
	mirostat := testRequest()
	mirostat.Sampling = &Sampling{TemperatureE6: 800_000, Mirostat: 2, MirostatTauE6: 5 * e6, MirostatEtaE6: 100_000,
		LogitBias: []LogitBias{{Token: 2, BiasE6: -MaxLogitBiasE6}}, Stop: []string{"\n"}}
	f.Add(mustCanonical(f, mirostat))
	adaptive := testRequest()
	adaptive.Sampling = &Sampling{TemperatureE6: 800_000, MinPE6: 50_000, AdaptiveTargetE6: new(uint32(0)), AdaptiveDecayE6: 900_000, MinTokens: 3}
	f.Add(mustCanonical(f, adaptive))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil {
			return
		}
		again, err := r.Canonical()
		if err != nil {
			t.Fatalf("decoded request does not re-encode: %v", err)
		}
		if string(again) != string(b) {
			t.Fatalf("decoded %x, re-encoded %x", b, again)
		}
	})
}
