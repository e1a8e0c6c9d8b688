package receipt

import (
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
