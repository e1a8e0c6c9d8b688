package change

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/receipt"
)

func sealer(t testing.TB, n byte) *receipt.Sealer {
	t.Helper()
	k, err := identity.KeyFromSeed(bytes.Repeat([]byte{n}, ed25519.SeedSize))
	if err != nil {
		t.Fatal(err)
	}
	s, err := receipt.NewSealer(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var (
	wA, wB, wC = receipt.ContentID{0xa}, receipt.ContentID{0xb}, receipt.ContentID{0xc}
)

// builder appends entries to a record, filling seq and prev.
type builder struct {
	t   testing.TB
	s   *receipt.Sealer
	rec *Record
}

func newBuilder(t testing.TB) *builder {
	return &builder{t: t, s: sealer(t, 1), rec: NewRecord("gpu")}
}

func (b *builder) entry(made uint64) Entry {
	seq, prev := b.rec.Next()
	return Entry{Backend: "gpu", Recipe: "llama-3b", Seq: seq, Prev: prev, MadeAt: made}
}

func (b *builder) seal(e Entry) *Sealed {
	b.t.Helper()
	s, err := Seal(b.s, e)
	if err != nil {
		b.t.Fatal(err)
	}
	return s
}

func (b *builder) add(e Entry) *Sealed {
	b.t.Helper()
	s := b.seal(e)
	if err := b.rec.Append(s); err != nil {
		b.t.Fatal(err)
	}
	return s
}

func (b *builder) plan(made uint64) *Sealed {
	e := b.entry(made)
	e.Plan = &Plan{Precisions: []string{"fp16", "int8"}, FidelityFloor: receipt.F2, Validation: "eval suite v3 ≥ 0.9", Foresees: "quantise to int8"}
	return b.add(e)
}

func (b *builder) weights(made uint64, from *receipt.ContentID, to receipt.ContentID, eff uint64, plan *receipt.ContentID) *Sealed {
	e := b.entry(made)
	e.Weights = &Weights{From: from, To: to, Precision: "fp16", Fidelity: receipt.F3, Plan: plan, ValidationResult: "0.93", EffectiveFrom: eff, Reason: "initial"}
	return b.add(e)
}

// TestAppendRefuses: every §6.5 rule that refuses an entry.
func TestAppendRefuses(t *testing.T) {
	// The record before each case: a plan (seq 0, made 100), weights A
	// (seq 1, made 110, effective 5), an unplanned change A→B (seq 2,
	// made 120, effective 9).
	setup := func(t *testing.T) (*builder, *Sealed) {
		b := newBuilder(t)
		plan := b.plan(100)
		b.weights(110, nil, wA, 5, nil)
		b.weights(120, &wA, wB, 9, nil)
		return b, plan
	}
	change := func(b *builder, mut func(*Entry)) Entry {
		e := b.entry(130)
		e.Weights = &Weights{From: &wB, To: wC, Precision: "int8", Fidelity: receipt.F2, ValidationResult: "ok", EffectiveFrom: 12, Reason: "quantised"}
		mut(&e)
		return e
	}
	tests := []struct {
		name string
		mut  func(*Entry, *Sealed)
		want string
	}{
		{"valid planned change", func(e *Entry, p *Sealed) { e.Weights.Plan = &p.ID }, ""},
		{"valid unplanned change", func(e *Entry, _ *Sealed) {}, ""},
		{"another backend", func(e *Entry, _ *Sealed) { e.Backend = "cpu" }, "record is for backend"},
		{"seq not next", func(e *Entry, _ *Sealed) { e.Seq = 4 }, "seq is not the next"},
		{"prev not the envelope before", func(e *Entry, p *Sealed) { e.Prev = &p.ID }, "prev is not"},
		{"made before the entry before", func(e *Entry, _ *Sealed) { e.MadeAt = 119 }, "made_at 119"},
		{"from is not the last to", func(e *Entry, _ *Sealed) { e.Weights.From = &wA }, "from is not the to"},
		{"from absent after a weights entry", func(e *Entry, _ *Sealed) { e.Weights.From = nil }, "from is not the to"},
		{"to equals from", func(e *Entry, _ *Sealed) { e.Weights.To = wB }, "to equals from"},
		{"effective before the last change", func(e *Entry, _ *Sealed) { e.Weights.EffectiveFrom = 8 }, "effective_from 8"},
		{"plan is not an entry", func(e *Entry, _ *Sealed) { e.Weights.Plan = &receipt.ContentID{9} }, "not a plan entry"},
		{"plan names a weights entry", func(e *Entry, _ *Sealed) { id := *e.Prev; e.Weights.Plan = &id }, "not a plan entry"},
		{"outside the plan: recipe", func(e *Entry, p *Sealed) { e.Weights.Plan = &p.ID; e.Recipe = "llama-3b-q" }, "recipe"},
		{"outside the plan: precision", func(e *Entry, p *Sealed) { e.Weights.Plan = &p.ID; e.Weights.Precision = "bf16" }, "precision \"bf16\""},
		{"outside the plan: no precision", func(e *Entry, p *Sealed) { e.Weights.Plan = &p.ID; e.Weights.Precision = "" }, "names no precision"},
		{"outside the plan: fidelity", func(e *Entry, p *Sealed) { e.Weights.Plan = &p.ID; e.Weights.Fidelity = receipt.F1 }, "below the plan's floor"},
		{"outside the plan: no validation", func(e *Entry, p *Sealed) { e.Weights.Plan = &p.ID; e.Weights.ValidationResult = "" }, "no validation_result"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, plan := setup(t)
			s := b.seal(change(b, func(e *Entry) { tc.mut(e, plan) }))
			err := b.rec.Append(s)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if w, _ := b.rec.InEffect(); w.Digest != wC {
					t.Fatalf("in effect %v", w)
				}
				return
			}
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if w, _ := b.rec.InEffect(); w.Digest != wB || len(b.rec.Entries()) != 3 {
				t.Fatal("a refused entry changed the record")
			}
		})
	}
	// The first weights entry of a backend has no from.
	b := newBuilder(t)
	e := b.entry(1)
	e.Weights = &Weights{From: &wA, To: wB, Fidelity: receipt.F1, Reason: "r"}
	if err := b.rec.Append(b.seal(e)); !errors.Is(err, ErrRefused) {
		t.Fatalf("first weights entry with from: %v", err)
	}
	// A plan recorded after a change does not reach back over it.
	b = newBuilder(t)
	w := b.weights(1, nil, wA, 0, nil)
	late := b.plan(2)
	e = b.entry(3)
	e.Weights = &Weights{From: &wA, To: wB, Precision: "fp16", Fidelity: receipt.F3, ValidationResult: "ok", Plan: &late.ID, Reason: "r"}
	if err := b.rec.Append(b.seal(e)); err != nil {
		t.Fatalf("a change after its plan: %v", err)
	}
	if w.Entry.Weights.Plan != nil {
		t.Fatal("the earlier change acquired a plan")
	}
}

// TestGate: what a record admits to serve.
func TestGate(t *testing.T) {
	b := newBuilder(t)
	if !b.rec.Admits(nil) {
		t.Fatal("an empty record refuses")
	}
	b.plan(1)
	if !b.rec.Admits(nil) {
		t.Fatal("a record with only a plan puts weights in effect")
	}
	b.weights(2, nil, wA, 0, nil)
	for _, tc := range []struct {
		w    *receipt.Weights
		want bool
	}{
		{&receipt.Weights{Digest: wA, Precision: "fp16"}, true},
		{&receipt.Weights{Digest: wA, Precision: "int8"}, false},
		{&receipt.Weights{Digest: wB, Precision: "fp16"}, false},
		{nil, false},
	} {
		if got := b.rec.Admits(tc.w); got != tc.want {
			t.Errorf("Admits(%v) = %v", tc.w, got)
		}
	}
}

// TestCoverage: the entry in effect at a receipt's sequence, and every way
// a receipt fails to be covered.
func TestCoverage(t *testing.T) {
	b := newBuilder(t)
	first := b.weights(1, nil, wA, 3, nil)
	second := b.weights(2, &wA, wB, 10, nil)
	rec := func(seq uint64, w receipt.ContentID, mut func(*receipt.Receipt)) *receipt.Receipt {
		r := &receipt.Receipt{Backend: "gpu", Recipe: "llama-3b", Sequence: seq, Weights: &receipt.Weights{Digest: w, Precision: "fp16"}}
		if mut != nil {
			mut(r)
		}
		return r
	}
	for _, tc := range []struct {
		name string
		r    *receipt.Receipt
		want *Sealed
		ok   bool
	}{
		{"first change, its first receipt", rec(3, wA, nil), first, true},
		{"first change, last receipt before the second", rec(9, wA, nil), first, true},
		{"second change", rec(10, wB, nil), second, true},
		{"before any change", rec(2, wA, nil), nil, false},
		{"old weights after the change", rec(10, wA, nil), second, false},
		{"another backend", rec(4, wA, func(r *receipt.Receipt) { r.Backend = "cpu" }), first, false},
		{"another recipe", rec(4, wA, func(r *receipt.Receipt) { r.Recipe = "x" }), first, false},
		{"another precision", rec(4, wA, func(r *receipt.Receipt) { r.Weights.Precision = "int8" }), first, false},
		{"no weights", rec(4, wA, func(r *receipt.Receipt) { r.Weights = nil }), first, false},
	} {
		got, err := b.rec.Coverage(tc.r)
		if got != tc.want || (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrNotCovered)) {
			t.Errorf("%s: entry %v, err %v", tc.name, got, err)
		}
	}
}

// TestSealOpenVerify: entries round-trip through their envelopes; a record
// re-verifies from them under its steward's key and no other's.
func TestSealOpenVerify(t *testing.T) {
	b := newBuilder(t)
	p := b.plan(1)
	b.weights(2, nil, wA, 0, &p.ID)
	var envs [][]byte
	for _, s := range b.rec.Entries() {
		envs = append(envs, s.Envelope)
	}
	r, err := Verify("gpu", envs, b.s.Public())
	if err != nil {
		t.Fatal(err)
	}
	if w, _ := r.InEffect(); w.Digest != wA || len(r.Entries()) != 2 || r.Entries()[0].Entry.Plan.RiskAssessment != "" {
		t.Fatalf("verified record %+v", r.Entries())
	}
	if _, err := Verify("gpu", envs, sealer(t, 2).Public()); !errors.Is(err, ErrMalformed) || !errors.Is(err, receipt.ErrSignature) {
		t.Fatalf("another steward's key: %v", err)
	}
	if _, err := Verify("gpu", [][]byte{envs[1]}, b.s.Public()); !errors.Is(err, ErrRefused) {
		t.Fatalf("a record missing its first entry: %v", err)
	}
	// A receipt envelope is not a change entry.
	if _, err := Open(envs[0][:len(envs[0])-1], nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated: %v", err)
	}
}

// TestEntryKeys: the canonical core carries exactly the keys of its kind.
func TestEntryKeys(t *testing.T) {
	b := newBuilder(t)
	p := b.plan(1)
	w := b.weights(2, nil, wA, 0, &p.ID)
	keys := func(core []byte) string {
		var m map[string]any
		if err := receiptDecode(core, &m); err != nil {
			t.Fatal(err)
		}
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		return strings.Join(sortStrings(ks), ",")
	}
	if got := keys(p.Core); got != "backend,fidelity_floor,foresees,kind,made_at,mesh_change,precisions,recipe,seq,validation" {
		t.Errorf("plan keys %s", got)
	}
	if got := keys(w.Core); got != "backend,effective_from,fidelity,kind,made_at,mesh_change,plan,precision,prev,reason,recipe,seq,to,validation_result" {
		t.Errorf("weights keys %s", got)
	}
	for name, e := range map[string]Entry{
		"both kinds":        {Backend: "b", Recipe: "r", Plan: &Plan{Validation: "v", Foresees: "f"}, Weights: &Weights{Reason: "x"}},
		"neither":           {Backend: "b", Recipe: "r"},
		"no backend":        {Recipe: "r", Weights: &Weights{Reason: "x"}},
		"prev at seq 0":     {Backend: "b", Recipe: "r", Prev: &wA, Weights: &Weights{Reason: "x"}},
		"no reason":         {Backend: "b", Recipe: "r", Weights: &Weights{}},
		"plan without what": {Backend: "b", Recipe: "r", Plan: &Plan{Validation: "v"}},
		"fidelity above F4": {Backend: "b", Recipe: "r", Weights: &Weights{Reason: "x", Fidelity: 5}},
		// Text Open would refuse is never sealed.
		"backend not UTF-8":   {Backend: "b\xff", Recipe: "r", Weights: &Weights{Reason: "x"}},
		"reason not UTF-8":    {Backend: "b", Recipe: "r", Weights: &Weights{Reason: "caf\xe9"}},
		"precision not UTF-8": {Backend: "b", Recipe: "r", Weights: &Weights{Reason: "x", Precision: "\x80"}},
		"result not UTF-8":    {Backend: "b", Recipe: "r", Weights: &Weights{Reason: "x", ValidationResult: "\xc3"}},
		"plan not UTF-8":      {Backend: "b", Recipe: "r", Plan: &Plan{Validation: "v", Foresees: "f", Precisions: []string{"\xfe"}}},
		"risk not UTF-8":      {Backend: "b", Recipe: "r", Plan: &Plan{Validation: "v", Foresees: "f", RiskAssessment: "\xfe"}},
		// Nor is a core Open would refuse as too large.
		"core over the bound": {Backend: "b", Recipe: "r", Weights: &Weights{Reason: strings.Repeat("x", maxCore)}},
	} {
		if _, err := Seal(b.s, e); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func receiptDecode(b []byte, v any) error { return cbor.Unmarshal(b, v) }

func sortStrings(s []string) []string { slices.Sort(s); return s }
