package grant

import (
	"errors"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/receipt"
)

func verified(t *testing.T, c Chain, id receipt.ContentID, nonce byte) *Verified {
	t.Helper()
	v, err := Verify(present(t, c, seedCaller, id, nonce), id, key(t, seedSteward).DIDKey())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestDecideRefusals: every check of the first phase that depends on time,
// spend or the frame.
func TestDecideRefusals(t *testing.T) {
	id := requestID(t, request(1000))
	model, otherModel := receipt.ContentID{0x11}, receipt.ContentID{0x22}
	tests := []struct {
		name  string
		chain func(t *testing.T) Chain
		setup func(l *Ledger, rev *Revocations, c Chain)
		frame func(f *Frame)
		want  error
	}{
		{name: "admitted", want: nil},
		{name: "spent", setup: func(l *Ledger, _ *Revocations, c Chain) {
			d, err := l.Decide(verified(t, c, id, 1), frame(id, 1000, nil))
			if err != nil {
				t.Fatal(err)
			}
			l.Commit(d)
		}, want: ErrSpent},
		{name: "expired at the decision time", frame: func(f *Frame) { f.At = t0.Add(24 * time.Hour) }, want: ErrExpired},
		{name: "root expired before the leaf would", chain: func(t *testing.T) Chain {
			return delegated(t, func(g *Grant) { g.Expiry = uint64(t0.Unix()) }, func(g *Grant) { g.Expiry = uint64(t0.Unix()) })
		}, want: ErrExpired},
		{name: "root revoked before", setup: func(_ *Ledger, rev *Revocations, c Chain) { rev.Revoke(c[0].ID, t0.Add(-time.Second)) }, want: ErrRevoked},
		{name: "leaf revoked at the decision time", setup: func(_ *Ledger, rev *Revocations, c Chain) { rev.Revoke(c[1].ID, t0) }, want: ErrRevoked},
		{name: "revoked later does not reach back", setup: func(_ *Ledger, rev *Revocations, c Chain) { rev.Revoke(c[1].ID, t0.Add(time.Second)) }, want: nil},
		{name: "no infer", chain: func(t *testing.T) Chain {
			return delegated(t, func(g *Grant) { g.Capability.Actions = []string{"embed", "infer"} }, func(g *Grant) { g.Capability.Actions = []string{"embed"} })
		}, want: ErrNotPermitted},
		{name: "another request's resource", chain: func(t *testing.T) Chain {
			return delegated(t, nil, func(g *Grant) { g.Capability.Resource = RequestResource(receipt.ContentID{9}) })
		}, want: ErrNotPermitted},
		{name: "this request's resource", chain: func(t *testing.T) Chain {
			return delegated(t, nil, func(g *Grant) { g.Capability.Resource = RequestResource(id) })
		}, want: nil},
		{name: "ModelIn, backend names no weights", chain: modelInChain(model), want: ErrCaveat},
		{name: "ModelIn, other weights", chain: modelInChain(model), frame: func(f *Frame) { f.Model = &otherModel }, want: ErrCaveat},
		{name: "ModelIn, listed weights", chain: modelInChain(model), frame: func(f *Frame) { f.Model = &model }, want: nil},
		{name: "ceiling above the leaf's budget", frame: func(f *Frame) { f.CeilingUJ = 100_001 }, want: ErrBudget},
		{name: "ceiling equal to the leaf's budget", frame: func(f *Frame) { f.CeilingUJ = 100_000 }, want: nil},
		{name: "leaf budget debited by earlier serves", setup: func(l *Ledger, _ *Revocations, c Chain) {
			d := mustDecide(t, l, verified(t, c, id, 2), frame(id, 1000, nil))
			l.Settle(d, 99_500)
		}, want: ErrBudget},
		{name: "leaf budget held by a serve in flight", setup: func(l *Ledger, _ *Revocations, c Chain) {
			mustDecide(t, l, verified(t, c, id, 2), frame(id, 99_500, nil))
		}, want: ErrBudget},
		{name: "root budget spent through a sibling", setup: func(l *Ledger, _ *Revocations, c Chain) {
			sibling := chainOf(t, link{seedOwner, seedCaller, nil}, link{seedCaller, seedSteward, func(g *Grant) { g.BudgetUJ = 1_000_000; g.Nonce[1] = 0xbb }})
			d := mustDecide(t, l, verified(t, sibling, id, 3), frame(id, 1000, nil))
			l.Settle(d, 999_500)
		}, want: ErrBudget},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := delegated(t, nil, nil)
			if tc.chain != nil {
				c = tc.chain(t)
			}
			rev := NewRevocations()
			l := NewLedger(rev)
			if tc.setup != nil {
				tc.setup(l, rev, c)
			}
			f := frame(id, 1000, nil)
			if tc.frame != nil {
				tc.frame(&f)
			}
			_, err := l.Decide(verified(t, c, id, 1), f)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tc.want) || HTTPStatus(err) != 403 {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func modelInChain(model receipt.ContentID) func(t *testing.T) Chain {
	return func(t *testing.T) Chain {
		return delegated(t, func(g *Grant) { g.Caveats = []Caveat{ModelIn(model, receipt.ContentID{0x33})} }, nil)
	}
}

func mustDecide(t *testing.T, l *Ledger, v *Verified, f Frame) *Decision {
	t.Helper()
	d, err := l.Decide(v, f)
	if err != nil {
		t.Fatal(err)
	}
	l.Commit(d)
	return d
}

// TestDecideOtherRequest: a verification for one request does not decide
// another.
func TestDecideOtherRequest(t *testing.T) {
	id := requestID(t, request(1000))
	l := NewLedger(nil)
	_, err := l.Decide(verified(t, delegated(t, nil, nil), id, 1), frame(receipt.ContentID{1}, 1000, nil))
	if !errors.Is(err, ErrPresentationSignature) {
		t.Fatalf("got %v", err)
	}
}

// TestTwoPhases: the ceiling is held on every link from commit to settle,
// then the metered joules are debited on every link, and breaches are
// labelled but debited all the same.
func TestTwoPhases(t *testing.T) {
	id := requestID(t, request(1000))
	c := delegated(t, func(g *Grant) { g.Caveats = []Caveat{MaxCostUJ(800)} }, nil)
	l := NewLedger(nil)
	d := mustDecide(t, l, verified(t, c, id, 1), frame(id, 1000, nil))
	for i, s := range c {
		a, ok := l.Account(s.ID)
		if !ok || a.HeldUJ != 1000 || a.DebitedUJ != 0 || a.LeftUJ() != s.Grant.BudgetUJ-1000 {
			t.Fatalf("link %d after commit: %+v", i, a)
		}
	}
	if d.GrantID != c[1].ID || d.Caller != key(t, seedCaller).DIDKey() {
		t.Fatalf("decision %+v", d)
	}
	if breach := l.Settle(d, 700); breach != "" {
		t.Fatalf("breach %q within the caveat", breach)
	}
	for i, s := range c {
		if a, _ := l.Account(s.ID); a.HeldUJ != 0 || a.DebitedUJ != 700 {
			t.Fatalf("link %d after settle: %+v", i, a)
		}
	}
	// Over MaxCostUj: debited in full, labelled.
	d = mustDecide(t, l, verified(t, c, id, 2), frame(id, 1000, nil))
	if breach := l.Settle(d, 900); breach != LabelCaveat {
		t.Fatalf("breach %q, want %q", breach, LabelCaveat)
	}
	if a, _ := l.Account(c[1].ID); a.DebitedUJ != 1600 {
		t.Fatalf("leaf debited %d, want 1600", a.DebitedUJ)
	}
	// Unresolved: the ceiling is debited, on every link, and the hold goes.
	d = mustDecide(t, l, verified(t, c, id, 3), frame(id, 1000, nil))
	l.Strand(d)
	for i, s := range c {
		if a, _ := l.Account(s.ID); a.HeldUJ != 0 || a.DebitedUJ != 2600 {
			t.Fatalf("link %d after strand: %+v", i, a)
		}
	}
	// Over what the leaf has left: debited, labelled, and nothing is left.
	plain := delegated(t, nil, func(g *Grant) { g.BudgetUJ = 1500 })
	l = NewLedger(nil)
	d = mustDecide(t, l, verified(t, plain, id, 1), frame(id, 1000, nil))
	if breach := l.Settle(d, 2000); breach != LabelBudget {
		t.Fatalf("breach %q, want %q", breach, LabelBudget)
	}
	if a, _ := l.Account(plain[1].ID); a.DebitedUJ != 2000 || a.LeftUJ() != 0 {
		t.Fatalf("leaf %+v", a)
	}
	if _, err := l.Decide(verified(t, plain, id, 2), frame(id, 1, nil)); !errors.Is(err, ErrBudget) {
		t.Fatalf("an exhausted grant admitted a serve: %v", err)
	}
}
