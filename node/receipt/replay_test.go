package receipt

import (
	"bytes"
	"errors"
	"testing"
)

func TestReplayVerdicts(t *testing.T) {
	s := testSealer(t, 1)
	req := testRequest()
	prompt, output := []uint32{1, 2, 3}, []uint32{7, 8, 9}
	gen := generation(t, s)
	gen.Weights = &Weights{Digest: Sum([]byte("w")), Precision: "q8_0"}
	opening := s.Opening(gen.RequestID, gen.Nonce)
	on := Replayer{Backend: gen.Backend, Recipe: gen.Recipe, Weights: gen.Weights, Deterministic: true}

	tests := []struct {
		name      string
		receipt   func() Receipt
		replay    func(*Replay)
		rerun     []uint32
		want      VerdictKind
		firstDiff int
		runs      bool
	}{
		{"verified", nil, nil, output, Verified, 0, true},
		{"diverged at 1", nil, func(p *Replay) { p.Disclosed = output }, []uint32{7, 5, 9}, Diverged, 1, true},
		{"diverged: re-run stops early", nil, func(p *Replay) { p.Disclosed = output }, []uint32{7, 8}, Diverged, 2, true},
		{"no disclosure: not attributable", nil, nil, []uint32{7, 5, 9}, NotReplayable, 0, true},
		{"disclosure does not open on the replay's payload", nil, func(p *Replay) {
			p.Prompt = []uint32{1, 2, 4}
			p.Disclosed = output
		}, output, NotReplayable, 0, true},
		{"disclosure with another opening", nil, func(p *Replay) { p.Opening[0] ^= 1; p.Disclosed = output }, []uint32{7, 5, 9}, NotReplayable, 0, true},
		{"engine samples", nil, func(p *Replay) { p.On.Deterministic = false }, output, NotReplayable, 0, false},
		{"request samples unseeded", func() Receipt {
			r := gen
			sreq := req
			sreq.Sampling = &Sampling{TemperatureE6: 700_000}
			r.RequestID = mustID(t, sreq)
			return r
		}, func(p *Replay) { p.Request.Sampling = &Sampling{TemperatureE6: 700_000} }, output, NotReplayable, 0, false},
		{"other backend", nil, func(p *Replay) { p.On.Backend = "ref-large" }, output, NotReplayable, 0, false},
		{"other recipe", nil, func(p *Replay) { p.On.Recipe = "other" }, output, NotReplayable, 0, false},
		{"other weights", nil, func(p *Replay) { p.On.Weights = &Weights{Digest: Sum([]byte("v")), Precision: "q8_0"} }, output, NotReplayable, 0, false},
		{"other precision", nil, func(p *Replay) { p.On.Weights = &Weights{Digest: gen.Weights.Digest, Precision: "f16"} }, output, NotReplayable, 0, false},
		{"engine names no weights", nil, func(p *Replay) { p.On.Weights = nil }, output, NotReplayable, 0, false},
		{"other request", nil, func(p *Replay) { p.Request.MaxTokens++ }, output, NotReplayable, 0, false},
		{"no commitment", func() Receipt { r := gen; r.OutputCommitment = nil; return r }, nil, output, NotReplayable, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := gen
			if tt.receipt != nil {
				r = tt.receipt()
			}
			in := Replay{Request: req, Prompt: prompt, Opening: opening, On: on}
			if tt.replay != nil {
				tt.replay(&in)
			}
			ran := false
			v, err := r.Replay(in, func() ([]uint32, error) { ran = true; return tt.rerun, nil })
			if err != nil {
				t.Fatal(err)
			}
			if v.Kind != tt.want || v.FirstDivergence != tt.firstDiff {
				t.Fatalf("verdict %v, want %v (first divergence %d)", v, tt.want, tt.firstDiff)
			}
			if v.Kind == NotReplayable && v.Reason == "" {
				t.Fatal("not replayable without a reason")
			}
			if ran != tt.runs {
				t.Fatalf("re-run ran = %v, want %v", ran, tt.runs)
			}
		})
	}

	// A receipt that seals no weights binds the model by name: any weights
	// replay it.
	noWeights := gen
	noWeights.Weights = nil
	v, err := noWeights.Replay(Replay{Request: req, Prompt: prompt, Opening: opening, On: Replayer{Backend: gen.Backend, Recipe: gen.Recipe, Deterministic: true}},
		func() ([]uint32, error) { return output, nil })
	if err != nil || v.Kind != Verified {
		t.Fatalf("weightless receipt: %v, %v", v, err)
	}

	boom := errors.New("engine failed")
	if _, err := gen.Replay(Replay{Request: req, Prompt: prompt, Opening: opening, On: on}, func() ([]uint32, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("failed re-run: %v, want the run's error", err)
	}
}

// TestReplayCutShort: a serve cut short handed out a prefix of what its
// engine makes. Unmarked, an honest one replayed as "diverged" where it
// stopped; marked (cut_short), it is judged by its prefix, and still
// diverges where its tokens differ or run past what the engine makes.
func TestReplayCutShort(t *testing.T) {
	s := testSealer(t, 1)
	req := testRequest()
	prompt, served := []uint32{1, 2, 3}, []uint32{7, 8}
	cut := generation(t, s)
	commit := Commit(s.Opening(cut.RequestID, cut.Nonce), cut.RequestID, PayloadDigest(prompt), served)
	cut.OutputCommitment, cut.TokensOut, cut.TokensAccepted, cut.CutShort = &commit, 2, 2, CutClient
	unmarked := cut
	unmarked.CutShort = ""
	in := Replay{Request: req, Prompt: prompt, Opening: s.Opening(cut.RequestID, cut.Nonce),
		On: Replayer{Backend: cut.Backend, Recipe: cut.Recipe, Deterministic: true}}
	disclosed := in
	disclosed.Disclosed = served

	for _, tt := range []struct {
		name   string
		r      Receipt
		in     Replay
		rerun  []uint32
		want   VerdictKind
		prefix int
		first  int
	}{
		{"cut short, the re-run goes on", cut, in, []uint32{7, 8, 9}, Verified, 2, 0},
		{"cut short, the re-run ends there too", cut, in, []uint32{7, 8}, Verified, 2, 0},
		{"unmarked, the re-run goes on", unmarked, disclosed, []uint32{7, 8, 9}, Diverged, 0, 2},
		{"cut short, a token differs", cut, disclosed, []uint32{7, 5, 9}, Diverged, 0, 1},
		{"cut short past where the engine ends", cut, disclosed, []uint32{7}, Diverged, 0, 1},
		{"cut short, differs, nothing disclosed", cut, in, []uint32{7, 5, 9}, NotReplayable, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v, err := tt.r.Replay(tt.in, func() ([]uint32, error) { return tt.rerun, nil })
			if err != nil {
				t.Fatal(err)
			}
			if v.Kind != tt.want || v.Prefix != tt.prefix || v.FirstDivergence != tt.first {
				t.Fatalf("verdict %+v, want %v prefix %d first %d", v, tt.want, tt.prefix, tt.first)
			}
		})
	}
}

// TestCutShortIsSealed: cut_short travels in the core and back, is
// absent (the core byte-stable) when a serve ran to its end, and only
// takes its three values, on generations whose every token was accepted.
func TestCutShortIsSealed(t *testing.T) {
	s := testSealer(t, 1)
	for _, why := range []string{CutClient, CutCeiling, CutEngine} {
		r := generation(t, s)
		r.CutShort = why
		b, err := r.Core()
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeCore(b)
		if err != nil || back.CutShort != why {
			t.Fatalf("%s: decoded %q, %v", why, back.CutShort, err)
		}
	}
	whole := generation(t, s)
	b, err := whole.Core()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("cut_short")) {
		t.Fatal("a whole serve's core names cut_short")
	}
	for name, mutate := range map[string]func(*Receipt){
		"unknown reason":      func(r *Receipt) { r.CutShort = "bored" },
		"a decision":          func(r *Receipt) { *r = decision(t, s); r.CutShort = CutClient },
		"tokens not accepted": func(r *Receipt) { r.CutShort = CutClient; r.TokensAccepted = 2 },
	} {
		r := generation(t, s)
		mutate(&r)
		if err := r.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}
