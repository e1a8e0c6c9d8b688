package conformance

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward"
	"github.com/meshnode/meshnode/node/steward/change"
	"github.com/meshnode/meshnode/node/steward/grant"
	"github.com/meshnode/meshnode/node/steward/journal"
)

// These tests hold §7 items 1, 2 and 7 through the public API: a steward
// over a real journal file, grants issued and presented as a caller would.

var (
	grantT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ownerK  = seededKey(20)
	callerK = seededKey(21)
)

func seededKey(n byte) *identity.Key {
	k, err := identity.KeyFromSeed(bytes.Repeat([]byte{n}, ed25519.SeedSize))
	if err != nil {
		panic(err)
	}
	return k
}

// durableSteward runs the reference steward over the journal at path.
type durableSteward struct {
	t        *testing.T
	path     string
	backends []steward.Backend
	rev      *grant.Revocations
	j        *journal.Journal
	s        *steward.Steward
}

func newDurableSteward(t *testing.T, backends []steward.Backend) *durableSteward {
	d := &durableSteward{t: t, path: filepath.Join(t.TempDir(), "journal", "steward.jsonl"), backends: backends, rev: grant.NewRevocations()}
	d.start()
	return d
}

func (d *durableSteward) start() {
	d.t.Helper()
	j, err := journal.Open(d.path, journal.Options{})
	if err != nil {
		d.t.Fatal(err)
	}
	key, err := identity.KeyFromSeed(ReferenceSeed())
	if err != nil {
		d.t.Fatal(err)
	}
	s, err := steward.New(steward.Config{Key: key, Meter: fixedMeter{hw.Estimated(3_000)}, Backends: d.backends, Durable: j,
		Revocations: d.rev, Now: func() time.Time { return grantT0 }})
	if err != nil {
		j.Close()
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { j.Close() })
	d.j, d.s = j, s
}

func (d *durableSteward) restart() { d.j.Close(); d.start() }

// chain issues owner → caller → this steward, as meshcli grant issue does.
func (d *durableSteward) chain(leafBudget uint64, root, leaf []grant.Caveat) grant.Chain {
	d.t.Helper()
	r, err := grant.Issue(grant.Issuance{Issuer: ownerK, Subject: callerK.DIDKey(), BudgetUJ: 1_000_000, Expiry: grantT0.Add(time.Hour), Caveats: root})
	if err != nil {
		d.t.Fatal(err)
	}
	c, err := grant.Issue(grant.Issuance{Issuer: callerK, Subject: d.s.DID(), BudgetUJ: leafBudget, Expiry: grantT0.Add(time.Hour), Parent: r, Caveats: leaf})
	if err != nil {
		d.t.Fatal(err)
	}
	return c
}

func (d *durableSteward) serve(req receipt.ServeRequest, c grant.Chain, caller *identity.Key) (*steward.Served, error) {
	d.t.Helper()
	var opts []steward.ServeOption
	if c != nil {
		id, _ := req.ID()
		p, err := grant.Present(c, callerK, id, nil)
		if err != nil {
			d.t.Fatal(err)
		}
		p.Caller = caller.DIDKey()
		opts = append(opts, steward.WithPresentation(p))
	}
	return d.s.Serve(context.Background(), req, ReferencePrompt(), nil, opts...)
}

// TestItem1Grants: §7.1, every refusal before any work, and the debit on
// every link after it, breach and all.
func TestItem1Grants(t *testing.T) {
	req := ReferenceRequest()
	id, _ := req.ID()
	tests := []struct {
		name   string
		chain  func(d *durableSteward) grant.Chain
		caller *identity.Key
		want   error
		status int
	}{
		{"presented by someone other than the leaf's issuer", nil, ownerK, grant.ErrNotIssuer, 401},
		{"held by another steward", func(d *durableSteward) grant.Chain {
			r, _ := grant.Issue(grant.Issuance{Issuer: ownerK, Subject: callerK.DIDKey(), BudgetUJ: 10_000, Expiry: grantT0.Add(time.Hour)})
			c, _ := grant.Issue(grant.Issuance{Issuer: callerK, Subject: ownerK.DIDKey(), BudgetUJ: 10_000, Expiry: grantT0.Add(time.Hour), Parent: r})
			return c
		}, callerK, grant.ErrNotHolder, 403},
		{"expired", func(d *durableSteward) grant.Chain {
			r, _ := grant.Issue(grant.Issuance{Issuer: ownerK, Subject: callerK.DIDKey(), BudgetUJ: 10_000, Expiry: grantT0})
			c, _ := grant.Issue(grant.Issuance{Issuer: callerK, Subject: d.s.DID(), BudgetUJ: 10_000, Expiry: grantT0, Parent: r})
			return c
		}, callerK, grant.ErrExpired, 403},
		{"revoked", func(d *durableSteward) grant.Chain {
			c := d.chain(10_000, nil, nil)
			if _, _, err := d.s.Revoke(c[0].ID, grantT0.Add(-time.Minute)); err != nil {
				d.t.Fatal(err)
			}
			return c
		}, callerK, grant.ErrRevoked, 403},
		{"does not permit infer on the request", func(d *durableSteward) grant.Chain {
			r, _ := grant.Issue(grant.Issuance{Issuer: ownerK, Subject: callerK.DIDKey(), BudgetUJ: 10_000, Expiry: grantT0.Add(time.Hour)})
			c, _ := grant.Issue(grant.Issuance{Issuer: callerK, Subject: d.s.DID(), BudgetUJ: 10_000, Expiry: grantT0.Add(time.Hour), Parent: r,
				Resource: grant.RequestResource(receipt.ContentID{1})})
			return c
		}, callerK, grant.ErrNotPermitted, 403},
		{"a cost-independent caveat that does not hold", func(d *durableSteward) grant.Chain {
			return d.chain(10_000, []grant.Caveat{grant.ModelIn(receipt.ContentID{7})}, nil)
		}, callerK, steward.ErrNoAdmissibleBackend, 0},
		{"less left than the ceiling", func(d *durableSteward) grant.Chain { return d.chain(999, nil, nil) }, callerK, grant.ErrBudget, 403},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDurableSteward(t, ReferenceBackends())
			c := d.chain(10_000, nil, nil)
			if tc.chain != nil {
				c = tc.chain(d)
			}
			before := d.j.Len() // a revocation is journaled
			_, err := d.serve(req, c, tc.caller)
			if !errors.Is(err, tc.want) || grant.HTTPStatus(err) != tc.status {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if d.j.Len() != before {
				t.Fatal("a refused grant left a record")
			}
		})
	}
	// Admitted: debited on every link after the work, the breach of a
	// per-call cost caveat recorded; spent once.
	d := newDurableSteward(t, ReferenceBackends())
	c := d.chain(10_000, nil, []grant.Caveat{grant.MaxCostUJ(2_000)})
	p, err := grant.Present(c, callerK, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	served, err := d.s.Serve(context.Background(), req, ReferencePrompt(), nil, steward.WithPresentation(p))
	if err != nil {
		t.Fatal(err)
	}
	if r := served.Receipt.Receipt; r.GrantID == nil || *r.GrantID != c.Leaf().ID || r.GrantBreach != grant.LabelCaveat {
		t.Fatalf("grant_id %v, grant_breach %q", r.GrantID, r.GrantBreach)
	}
	for i, s := range c {
		if a, _ := d.s.Account(s.ID); a.DebitedUJ != 3_000 || a.HeldUJ != 0 {
			t.Fatalf("link %d: %+v", i, a)
		}
	}
	if _, err := d.s.Serve(context.Background(), req, ReferencePrompt(), nil, steward.WithPresentation(p)); !errors.Is(err, grant.ErrSpent) {
		t.Fatalf("second spend: %v", err)
	}
}

// TestItem2Journal: §7.2. Decisions and receipts are journaled before the
// work and the hand-out; a restart re-establishes spend and chain; a
// receipt the journal does not hold stops grants.
func TestItem2Journal(t *testing.T) {
	d := newDurableSteward(t, ReferenceBackends())
	c := d.chain(100_000, nil, nil)
	var envs [][]byte
	for range 3 {
		served, err := d.serve(ReferenceRequest(), c, callerK)
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, served.Receipt.Envelope)
	}
	if d.j.Len() != 9 {
		t.Fatalf("%d records for three granted serves, want 9", d.j.Len())
	}
	before, _ := d.s.Account(c.Leaf().ID)
	d.restart()
	if after, _ := d.s.Account(c.Leaf().ID); after != before || after.DebitedUJ != 9_000 {
		t.Fatalf("spend after restart %+v, before %+v", after, before)
	}
	served, err := d.serve(ReferenceRequest(), c, callerK)
	if err != nil {
		t.Fatal(err)
	}
	envs = append(envs, served.Receipt.Envelope)
	if _, err := receipt.VerifyLog(envs, receipt.Head{}, nil); err != nil {
		t.Fatalf("chain across the restart: %v", err)
	}
	for _, env := range envs {
		if err := d.s.Witness(env); err != nil {
			t.Fatal(err)
		}
	}
	// Cut the last serve's records from the journal: its receipt is then
	// evidence of the cut.
	d.j.Close()
	whole, _ := os.ReadFile(d.path)
	lines := bytes.SplitAfter(whole, []byte("\n"))
	if err := os.WriteFile(d.path, bytes.Join(lines[:9], nil), 0o600); err != nil {
		t.Fatal(err)
	}
	// The checkpoint beside the journal catches the cut at once; an
	// operator who accepts the journal as it stands is still caught out
	// by the receipt the journal lacks.
	if _, err := journal.Open(d.path, journal.Options{}); !errors.Is(err, journal.ErrRolledBack) {
		t.Fatalf("reopening the cut journal: %v, want it refused as rolled back", err)
	}
	if _, err := journal.AcceptRollback(d.path, journal.Options{}); err != nil {
		t.Fatal(err)
	}
	d.start()
	if err := d.s.Witness(envs[3]); !errors.Is(err, steward.ErrNotHeld) {
		t.Fatalf("witness after a cut: %v", err)
	}
	if _, err := d.serve(ReferenceRequest(), c, callerK); !errors.Is(err, grant.ErrSuspended) || grant.HTTPStatus(err) != 503 {
		t.Fatalf("grant after a failed witness: %v", err)
	}
}

// weightsEngine is a reference backend that names weights.
type weightsEngine struct {
	engine.Engine
	mu sync.Mutex
	w  receipt.Weights
}

func (e *weightsEngine) Weights() (receipt.Weights, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.w, true
}
func (e *weightsEngine) set(w receipt.Weights) { e.mu.Lock(); e.w = w; e.mu.Unlock() }

// TestItem7ChangeRecord: §7.7. Entries the record refuses are not
// recorded; a backend serves only the weights its record has in effect,
// across a restart; receipts are covered by the entry in effect.
func TestItem7ChangeRecord(t *testing.T) {
	a := receipt.Weights{Digest: receipt.Sum([]byte("a")), Precision: "fp16"}
	b := receipt.Weights{Digest: receipt.Sum([]byte("b")), Precision: "fp16"}
	e := &weightsEngine{Engine: ReferenceBackends()[2].Engine, w: a}
	d := newDurableSteward(t, []steward.Backend{{Name: "ref-mid", Engine: e}})
	change1, err := d.s.RecordChange("ref-mid", change.Entry{Weights: &change.Weights{To: a.Digest, Precision: "fp16", Fidelity: receipt.F3, Reason: "first load"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.s.RecordChange("ref-mid", change.Entry{Weights: &change.Weights{To: a.Digest, Precision: "fp16", Fidelity: receipt.F3, Reason: "no-op"}}); !errors.Is(err, change.ErrRefused) {
		t.Fatalf("to equals from: %v", err)
	}
	served, err := d.serve(ReferenceRequest(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if in, err := d.s.Coverage(&served.Receipt.Receipt); err != nil || in.ID != change1.ID {
		t.Fatalf("coverage: %v", err)
	}
	e.set(b)
	if _, err := d.serve(ReferenceRequest(), nil, nil); !errors.Is(err, steward.ErrNoAdmissibleBackend) {
		t.Fatalf("serve on unrecorded weights: %v", err)
	}
	d.restart()
	if _, err := d.serve(ReferenceRequest(), nil, nil); !errors.Is(err, steward.ErrNoAdmissibleBackend) {
		t.Fatalf("after restart, serve on unrecorded weights: %v", err)
	}
	if _, err := d.s.RecordChange("ref-mid", change.Entry{Weights: &change.Weights{To: b.Digest, Precision: "fp16", Fidelity: receipt.F3, Reason: "upgrade"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.serve(ReferenceRequest(), nil, nil); err != nil {
		t.Fatal(err)
	}
	var envs [][]byte
	for _, s := range d.s.ChangeRecord("ref-mid") {
		envs = append(envs, s.Envelope)
	}
	key, _ := identity.KeyFromSeed(ReferenceSeed())
	if rec, err := change.Verify("ref-mid", envs, key.Public()); err != nil || len(rec.Entries()) != 2 {
		t.Fatalf("the record does not verify from its envelopes: %v", err)
	}
}
