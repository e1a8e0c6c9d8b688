package steward

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/receipt"
)

// TestReplayReceipt: the steward replays its own receipt with the opening
// it derives: the same output verifies and comes with a disclosure that
// opens the receipt; another output is a divergence only against a
// disclosed output; a backend gone or a receipt of another steward is no
// replay.
func TestReplayReceipt(t *testing.T) {
	e := newFake(receipt.F3, 10)
	s := newSteward(t, Config{Backends: []Backend{{Name: "f", Engine: e}}})
	req := genRequest(8, 4, receipt.F1, 10_000)
	prompt := promptOf(8)
	served, err := s.Serve(t.Context(), req, prompt, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := served.Receipt.Receipt

	v, d, err := s.ReplayReceipt(t.Context(), &r, req, prompt, nil)
	if err != nil || v.Kind != receipt.Verified || d == nil || !d.Opens(&r) || !slices.Equal(d.Output, served.Output) ||
		d.Payload != receipt.PayloadDigest(prompt) {
		t.Fatalf("replay of an honest serve: %v %+v %v", v, d, err)
	}

	e.tokens = []uint32{5, 6, 9, 9} // the engine now answers otherwise
	if v, d, err := s.ReplayReceipt(t.Context(), &r, req, prompt, nil); err != nil || v.Kind != receipt.NotReplayable || d != nil {
		t.Fatalf("another output, nothing disclosed: %v %+v %v", v, d, err)
	}
	v, d, err = s.ReplayReceipt(t.Context(), &r, req, prompt, served.Output)
	if err != nil || v.Kind != receipt.Diverged || v.FirstDivergence != 2 || d != nil {
		t.Fatalf("another output against the disclosed one: %v %+v %v", v, d, err)
	}

	s.RemoveBackend("f")
	if v, _, err := s.ReplayReceipt(t.Context(), &r, req, prompt, nil); err != nil || v.Kind != receipt.NotReplayable ||
		!strings.Contains(v.Reason, "backend f is not registered") {
		t.Fatalf("backend gone: %v %v", v, err)
	}
	foreign := r
	foreign.Steward = "did:key:z6MkOther"
	if _, _, err := s.ReplayReceipt(t.Context(), &foreign, req, prompt, nil); err == nil {
		t.Fatal("replayed another steward's receipt")
	}
}

// TestReplayCutShortReceipt: a serve the client left after two tokens is
// sealed cut short, and its replay re-runs only as far as those two and
// verifies them (an honest serve cut short used to replay as diverged at
// token 2); the disclosure opens the receipt on the tokens handed out.
func TestReplayCutShortReceipt(t *testing.T) {
	e := newFake(receipt.F3, 10)
	s := newSteward(t, Config{Backends: []Backend{{Name: "f", Engine: e}}})
	req := genRequest(8, 4, receipt.F1, 10_000)
	prompt := promptOf(8)
	gone := errors.New("client gone")
	n := 0
	served, err := s.Serve(t.Context(), req, prompt, func(uint32) error {
		if n++; n == 3 {
			return gone
		}
		return nil
	})
	if !errors.Is(err, ErrIncomplete) || served == nil {
		t.Fatalf("serve: %v", err)
	}
	r := served.Receipt.Receipt
	if r.CutShort != receipt.CutClient || r.TokensOut != 2 {
		t.Fatalf("receipt cut_short %q, tokens_out %d", r.CutShort, r.TokensOut)
	}
	made := 0
	e.onToken = func() { made++ }
	v, d, err := s.ReplayReceipt(t.Context(), &r, req, prompt, nil)
	if err != nil || v.Kind != receipt.Verified || v.Prefix != 2 || d == nil || !d.Opens(&r) || !slices.Equal(d.Output, served.Output) {
		t.Fatalf("replay of a serve cut short: %v %+v %v", v, d, err)
	}
	if made > 3 {
		t.Fatalf("the replay ran the engine for %d tokens; two are all it compares", made)
	}
}
