package steward

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward/change"
	"github.com/meshnode/meshnode/node/steward/grant"
	"github.com/meshnode/meshnode/node/steward/journal"
)

// t0 is the durable tests' clock; their grants expire a day later.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fixture is a steward over a real journal file, and a grant chain from
// an owner through a caller to that steward.
type fixture struct {
	t       testing.TB
	path    string
	key     *identity.Key // the steward's
	caller  *identity.Key
	chain   grant.Chain
	kinds   []string // the kind of every record appended, in order
	j       *journal.Journal
	s       *Steward
	cfg     Config
	nonce   uint64
	meterUJ uint64
}

func newFixture(t testing.TB, caveats ...grant.Caveat) *fixture {
	return newFixtureOn(t, referenceBackends(), caveats...)
}

// newBenchFixture is newFixture for a benchmark: the grant's budget
// outlasts any b.N.
func newBenchFixture(b *testing.B) *fixture {
	f := newFixtureOn(b, referenceBackends())
	f.j.Close()
	root, err := grant.Issue(grant.Issuance{Issuer: testKey(b, 10), Subject: f.caller.DIDKey(), BudgetUJ: 1 << 60, Expiry: t0.Add(time.Hour), Rand: &counterReader{}})
	if err != nil {
		b.Fatal(err)
	}
	if f.chain, err = grant.Issue(grant.Issuance{Issuer: f.caller, Subject: f.key.DIDKey(), BudgetUJ: 1 << 59, Expiry: t0.Add(time.Hour), Parent: root, Rand: &counterReader{}}); err != nil {
		b.Fatal(err)
	}
	f.start()
	return f
}

// newFixtureOn is newFixture on the given backends.
func newFixtureOn(t testing.TB, backends []Backend, caveats ...grant.Caveat) *fixture {
	f := &fixture{t: t, path: filepath.Join(t.TempDir(), "journal", "steward.jsonl"), key: testKey(t, 1), caller: testKey(t, 11), meterUJ: 4_000}
	root, err := grant.Issue(grant.Issuance{Issuer: testKey(t, 10), Subject: f.caller.DIDKey(), BudgetUJ: 1_000_000,
		Expiry: t0.Add(24 * time.Hour), Caveats: caveats, Rand: &counterReader{n: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if f.chain, err = grant.Issue(grant.Issuance{Issuer: f.caller, Subject: f.key.DIDKey(), BudgetUJ: 100_000,
		Expiry: t0.Add(24 * time.Hour), Parent: root, Rand: &counterReader{n: 200}}); err != nil {
		t.Fatal(err)
	}
	f.cfg = Config{Backends: backends}
	f.start()
	return f
}

// start opens the journal and a steward over it, as a restart does.
func (f *fixture) start() {
	f.t.Helper()
	if err := f.open(); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) open() error {
	j, err := journal.Open(f.path, journal.Options{AfterAppend: func(r journal.Record) { f.kinds = append(f.kinds, r.Entry.Kind()) }})
	if err != nil {
		return err
	}
	cfg := f.cfg
	cfg.Key, cfg.Durable, cfg.Now = f.key, j, func() time.Time { return t0 }
	cfg.Meter = &fakeMeter{energy: hw.Estimated(f.meterUJ)}
	cfg.Rand = &counterReader{n: uint64(j.Len()) << 20}
	s, err := New(cfg)
	if err != nil {
		j.Close()
		return err
	}
	f.t.Cleanup(func() { j.Close() })
	f.j, f.s = j, s
	return nil
}

// restart closes the journal, as a killed process would leave it, and
// starts again.
func (f *fixture) restart() {
	f.t.Helper()
	f.j.Close()
	f.start()
}

func (f *fixture) present(req receipt.ServeRequest) *grant.Presentation {
	f.t.Helper()
	id, err := req.ID()
	if err != nil {
		f.t.Fatal(err)
	}
	f.nonce++
	p, err := grant.Present(f.chain, f.caller, id, &counterReader{n: f.nonce << 8})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fixture) serve(req receipt.ServeRequest, p *grant.Presentation) (*Served, error) {
	opts := []ServeOption{}
	if p != nil {
		opts = append(opts, WithPresentation(p))
	}
	return f.s.Serve(f.t.Context(), req, promptOf(int(req.PromptTokens)), nil, opts...)
}

// serveGranted serves req n times, each on a new presentation, and
// returns the envelopes handed out.
func (f *fixture) serveGranted(n int, req receipt.ServeRequest) [][]byte {
	f.t.Helper()
	var envs [][]byte
	for range n {
		served, err := f.serve(req, f.present(req))
		if err != nil {
			f.t.Fatal(err)
		}
		envs = append(envs, served.Receipt.Envelope)
	}
	return envs
}

func (f *fixture) account(i int) grant.Account {
	a, _ := f.s.Account(f.chain[i].ID)
	return a
}

// TestGrantedServesConcurrent: serves racing for one grant's budget, with
// witnesses and status reads alongside, never overspend it or fork the
// chain. Each serve costs exactly its ceiling, so exactly budget/ceiling
// are admitted whatever the interleaving; the rest are refused for
// budget, and a restart replays to the same spend and chain.
func TestGrantedServesConcurrent(t *testing.T) {
	f := newFixture(t)
	const ceiling, tries = 10_000, 30
	f.meterUJ = ceiling
	f.restart()
	leaf := f.chain.Leaf().Grant.BudgetUJ
	req := genRequest(8, 4, receipt.F2, ceiling)
	presentations := make([]*grant.Presentation, tries)
	for i := range presentations {
		presentations[i] = f.present(req)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		envs [][]byte
	)
	errs := make(chan error, tries)
	for _, p := range presentations {
		wg.Go(func() {
			served, err := f.serve(req, p)
			if err != nil {
				errs <- err
				return
			}
			if err := f.s.Witness(served.Receipt.Envelope); err != nil {
				errs <- fmt.Errorf("witness of a receipt just handed out: %w", err)
			}
			mu.Lock()
			envs = append(envs, served.Receipt.Envelope)
			mu.Unlock()
			_ = f.s.Grants()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, grant.ErrBudget) {
			t.Fatalf("a serve failed other than for budget: %v", err)
		}
	}
	want := int(leaf / ceiling)
	if len(envs) != want {
		t.Fatalf("%d serves admitted on a budget for %d", len(envs), want)
	}
	// Receipts were handed out in whatever order the serves finished;
	// sorted by sequence they form one chain.
	slices.SortFunc(envs, func(a, b []byte) int {
		ra, _ := receipt.Open(a, nil)
		rb, _ := receipt.Open(b, nil)
		return cmp.Compare(ra.Receipt.Sequence, rb.Receipt.Sequence)
	})
	head, err := receipt.VerifyLog(envs, receipt.Head{}, f.key.Public())
	if err != nil || head != f.s.Head() {
		t.Fatalf("chain of concurrent serves: %v", err)
	}
	before := f.account(1)
	if before.DebitedUJ != leaf || before.HeldUJ != 0 {
		t.Fatalf("leaf after the race: %+v", before)
	}
	f.restart()
	if after := f.account(1); after != before || f.s.Head() != head {
		t.Fatalf("after a restart: leaf %+v head %+v; before %+v %+v", after, f.s.Head(), before, head)
	}
}

// TestGrantedServe: a granted serve is decided and journaled before the
// engine runs, debited on every link after, and its receipt names the
// leaf; the presentation then spends no more, here or after a restart.
func TestGrantedServe(t *testing.T) {
	f := newFixture(t)
	req := genRequest(8, 4, receipt.F2, 1_000)
	p := f.present(req)
	served, err := f.serve(req, p)
	if err != nil {
		t.Fatal(err)
	}
	r := served.Receipt.Receipt
	if r.GrantID == nil || *r.GrantID != f.chain.Leaf().ID || r.GrantBreach != "" {
		t.Fatalf("receipt grant %v breach %q", r.GrantID, r.GrantBreach)
	}
	if want := []string{"authorised", "debited", "sealed"}; !slices.Equal(f.kinds, want) {
		t.Fatalf("journal %v, want %v", f.kinds, want)
	}
	for i := range f.chain {
		if a := f.account(i); a.DebitedUJ != 4_000 || a.HeldUJ != 0 {
			t.Fatalf("link %d: %+v", i, a)
		}
	}
	_, err = f.serve(req, p)
	if !errors.Is(err, grant.ErrSpent) || grant.HTTPStatus(err) != 403 {
		t.Fatalf("second spend: %v", err)
	}
	f.restart()
	if _, err = f.serve(req, p); !errors.Is(err, grant.ErrSpent) {
		t.Fatalf("spend after restart: %v", err)
	}
	for i := range f.chain {
		if a := f.account(i); a.DebitedUJ != 4_000 {
			t.Fatalf("link %d after restart: %+v", i, a)
		}
	}
	// A new presentation of the same request is a new serve, debited too.
	if _, err := f.serve(req, f.present(req)); err != nil {
		t.Fatal(err)
	}
	if a := f.account(1); a.DebitedUJ != 8_000 {
		t.Fatalf("leaf after two serves: %+v", a)
	}
	if st := f.s.Grants(); !st.Honoured || len(st.Unresolved) != 0 || st.Records != 6 {
		t.Fatalf("status %+v", st)
	}
}

// TestGrantRefusalsAtSteward: every refusal comes before any work, leaves
// nothing in the journal, and maps to its HTTP status.
func TestGrantRefusalsAtSteward(t *testing.T) {
	model := receipt.Sum([]byte("weights"))
	tests := []struct {
		name    string
		caveats []grant.Caveat
		setup   func(f *fixture, req *receipt.ServeRequest) *grant.Presentation
		stage   Stage
		want    error
		status  int
	}{
		{"caller not the issuer", nil, func(f *fixture, req *receipt.ServeRequest) *grant.Presentation {
			p := f.present(*req)
			p.Caller = testKey(t, 10).DIDKey()
			return p
		}, StageAuthorise, grant.ErrNotIssuer, 401},
		{"signed for another request", nil, func(f *fixture, req *receipt.ServeRequest) *grant.Presentation {
			p := f.present(*req)
			req.MaxTokens++
			return p
		}, StageAuthorise, grant.ErrPresentationSignature, 401},
		{"held by another steward", nil, func(f *fixture, req *receipt.ServeRequest) *grant.Presentation {
			f.key = testKey(t, 2)
			f.restart()
			return f.present(*req)
		}, StageAuthorise, grant.ErrNotHolder, 403},
		{"ceiling above what is left", nil, func(f *fixture, req *receipt.ServeRequest) *grant.Presentation {
			req.JouleCeilingUJ = 100_001
			return f.present(*req)
		}, StageAuthorise, grant.ErrBudget, 403},
		{"revoked", nil, func(f *fixture, req *receipt.ServeRequest) *grant.Presentation {
			rev := grant.NewRevocations()
			rev.Revoke(f.chain[0].ID, t0.Add(-time.Hour))
			f.cfg.Revocations = rev
			f.restart()
			return f.present(*req)
		}, StageAuthorise, grant.ErrRevoked, 403},
		{"ModelIn and no backend names permitted weights", []grant.Caveat{grant.ModelIn(model)}, func(f *fixture, req *receipt.ServeRequest) *grant.Presentation {
			return f.present(*req)
		}, StageRoute, ErrNoAdmissibleBackend, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.caveats...)
			req := genRequest(8, 4, receipt.F2, 1_000)
			p := tc.setup(f, &req)
			meter := f.s.meter.(*fakeMeter)
			before := f.j.Len()
			_, err := f.serve(req, p)
			var se *ServeError
			if !errors.As(err, &se) || se.Stage != tc.stage || !errors.Is(err, tc.want) || grant.HTTPStatus(err) != tc.status {
				t.Fatalf("got %v (status %d), want %s-stage %v", err, grant.HTTPStatus(err), tc.stage, tc.want)
			}
			if meter.open != 0 || f.j.Len() != before {
				t.Fatalf("refused serve ran (meter opened %d) or journaled (%d records)", meter.open, f.j.Len()-before)
			}
			if tc.stage == StageRoute && !strings.Contains(err.Error(), "ModelIn") {
				t.Fatalf("route reasons do not name the grant: %v", err)
			}
		})
	}
}

// TestNoJournalNoGrants: a steward without a decision journal honours no
// grant (it could not hold the spend across a restart).
func TestNoJournalNoGrants(t *testing.T) {
	s := newSteward(t, Config{Backends: referenceBackends()})
	f := newFixture(t)
	req := genRequest(8, 4, receipt.F2, 1_000)
	_, err := s.Serve(t.Context(), req, promptOf(8), nil, WithPresentation(f.present(req)))
	if !errors.Is(err, grant.ErrNoJournal) || grant.HTTPStatus(err) != 503 {
		t.Fatalf("got %v", err)
	}
	if err := s.Witness([]byte{1}); !errors.Is(err, ErrNoJournal) {
		t.Fatalf("witness without a journal: %v", err)
	}
}

// TestGrantBreachOnReceipt: a debit over MaxCostUj is made and recorded
// as the receipt's grant_breach; a later serve sees the debit.
func TestGrantBreachOnReceipt(t *testing.T) {
	f := newFixture(t, grant.MaxCostUJ(3_000))
	req := genRequest(8, 4, receipt.F2, 1_000)
	served, err := f.serve(req, f.present(req))
	if err != nil {
		t.Fatal(err)
	}
	if b := served.Receipt.Receipt.GrantBreach; b != grant.LabelCaveat {
		t.Fatalf("grant_breach %q", b)
	}
	if a := f.account(0); a.DebitedUJ != 4_000 {
		t.Fatalf("root %+v", a)
	}
	f.restart()
	if a := f.account(0); a.DebitedUJ != 4_000 {
		t.Fatalf("root after restart %+v", a)
	}
}

// TestJournalFailuresAtSteward: an authorisation the journal cannot record
// refuses the serve before it runs; a receipt it cannot record is not
// handed out and the chain stays where it was.
func TestJournalFailuresAtSteward(t *testing.T) {
	f := newFixture(t)
	req := genRequest(8, 4, receipt.F2, 1_000)
	f.j.Close()
	meter := f.s.meter.(*fakeMeter)
	_, err := f.serve(req, f.present(req))
	if !errors.Is(err, ErrJournal) || !errors.Is(err, journal.ErrClosed) || meter.open != 0 {
		t.Fatalf("got %v (meter opened %d)", err, meter.open)
	}
	served, err := f.serve(req, nil)
	if !errors.Is(err, ErrJournal) || served != nil || f.s.Head() != (receipt.Head{}) {
		t.Fatalf("ungranted serve with a dead journal: %v", err)
	}
}

// panickingEngine is a reference backend whose Serve panics.
type panickingEngine struct{ engine.Engine }

func (panickingEngine) Serve(context.Context, receipt.ServeRequest, []uint32, func(uint32) error) (engine.Outcome, error) {
	panic("engine bug")
}

// TestEnginePanicIsDebited: an engine that panics ran under the meter, so
// its grant is debited the metered energy and journaled as such before
// the panic goes on up (net/http recovers it and the node keeps serving);
// the serve is not left held and unreported until a restart.
func TestEnginePanicIsDebited(t *testing.T) {
	backends := referenceBackends()
	backends[2].Engine = panickingEngine{backends[2].Engine}
	f := newFixtureOn(t, backends)
	req := genRequest(8, 4, receipt.F2, 1_000)
	func() {
		defer func() {
			if p := recover(); p != "engine bug" {
				t.Fatalf("recovered %v, want the engine's panic", p)
			}
		}()
		f.serve(req, f.present(req))
	}()
	check := func(when string) {
		t.Helper()
		if a := f.account(1); a.DebitedUJ != f.meterUJ || a.HeldUJ != 0 || len(f.s.Grants().Unresolved) != 0 {
			t.Fatalf("%s: leaf %+v, unresolved %+v; want the metered %d µJ debited", when, a, f.s.Grants().Unresolved, f.meterUJ)
		}
	}
	check("live")
	if !slices.Equal(f.kinds, []string{"authorised", "debited"}) || f.s.Head() != (receipt.Head{}) {
		t.Fatalf("records %v, head %+v", f.kinds, f.s.Head())
	}
	f.restart()
	check("after a restart")
}

// TestRestartReplay: the chain continues from the last sealed receipt; a
// serve authorised and never debited comes back unresolved, held at its
// ceiling, never retried, and stays so across restarts.
func TestRestartReplay(t *testing.T) {
	f := newFixture(t)
	req := genRequest(8, 4, receipt.F2, 1_000)
	envs := f.serveGranted(3, req)
	// A serve in flight when the steward stops: authorised, then nothing.
	inFlight := genRequest(8, 4, receipt.F2, 2_500)
	id, _ := inFlight.ID()
	v, err := grant.Verify(f.present(inFlight), id, f.key.DIDKey())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.durable.authorize(v, Authorization{RequestID: id, Request: inFlight, Backend: "ref-mid", Recipe: "mesh-reference", At: t0}); err != nil {
		t.Fatal(err)
	}
	head := f.s.Head()
	for range 2 {
		f.restart()
		if f.s.Head() != head {
			t.Fatalf("head %+v, want %+v", f.s.Head(), head)
		}
		st := f.s.Grants()
		if len(st.Unresolved) != 1 {
			t.Fatalf("unresolved %+v", st.Unresolved)
		}
		u := st.Unresolved[0]
		if u.Caller != f.caller.DIDKey() || u.Backend != "ref-mid" || u.RequestID != id || u.CeilingUJ != 2_500 || u.GrantID != f.chain.Leaf().ID || !u.At.Equal(t0) {
			t.Fatalf("unresolved %+v", u)
		}
		if a := f.account(1); a.DebitedUJ != 12_000+2_500 || a.HeldUJ != 0 {
			t.Fatalf("leaf %+v", a)
		}
	}
	served, err := f.serve(req, f.present(req))
	if err != nil {
		t.Fatal(err)
	}
	envs = append(envs, served.Receipt.Envelope)
	if end, err := receipt.VerifyLog(envs, receipt.Head{}, f.key.Public()); err != nil || end != f.s.Head() {
		t.Fatalf("chain across restarts: %v", err)
	}
}

// TestReplayRefuses: a journal the gate refuses on replay is not served
// from, and the error names the record.
func TestReplayRefuses(t *testing.T) {
	req := genRequest(8, 4, receipt.F2, 1_000)
	// authorisedLine is one authorisation record's entry.
	authorised := func(f *fixture, p *grant.Presentation, at time.Time) journal.Entry {
		pj, _ := p.MarshalJSON()
		return journal.Entry{Authorised: &journal.Authorised{Presentation: pj, Request: req, Backend: "ref-mid", Recipe: "mesh-reference", At: at.UnixNano()}}
	}
	tests := []struct {
		name  string
		write func(f *fixture, j *journal.Journal)
		seq   uint64
		want  error
	}{
		{"presentation spent twice", func(f *fixture, j *journal.Journal) {
			p := f.present(req)
			mustAppend(t, j, authorised(f, p, t0), authorised(f, p, t0))
		}, 1, grant.ErrSpent},
		{"decided after expiry", func(f *fixture, j *journal.Journal) {
			mustAppend(t, j, authorised(f, f.present(req), t0.Add(48*time.Hour)))
		}, 0, grant.ErrExpired},
		{"over budget", func(f *fixture, j *journal.Journal) {
			big := req
			big.JouleCeilingUJ = 60_000
			for range 2 {
				id, _ := big.ID()
				p, _ := grant.Present(f.chain, f.caller, id, bytes.NewReader(bytes.Repeat([]byte{byte(j.Len())}, 16)))
				pj, _ := p.MarshalJSON()
				mustAppend(t, j, journal.Entry{Authorised: &journal.Authorised{Presentation: pj, Request: big, Backend: "b", Recipe: "r", At: t0.UnixNano()}})
			}
		}, 1, grant.ErrBudget},
		{"presentation for another request", func(f *fixture, j *journal.Journal) {
			e := authorised(f, f.present(req), t0)
			e.Authorised.Request.MaxTokens++
			mustAppend(t, j, e)
		}, 0, grant.ErrPresentationSignature},
		{"change signed by another key", func(f *fixture, j *journal.Journal) {
			other, _ := receipt.NewSealer(testKey(t, 7))
			env, _ := other.SealPayload([]byte{0xa0})
			mustAppend(t, j, journal.Entry{Change: &journal.Change{Envelope: env}})
		}, 0, receipt.ErrSignature},
		{"change taking effect before a receipt already sealed", func(f *fixture, j *journal.Journal) {
			mustAppend(t, j, journal.Entry{Sealed: &journal.Sealed{Sequence: 0, Envelope: receipt.Sum([]byte("r0"))}},
				firstChange(t, f))
		}, 1, change.ErrRefused},
		{"change the record refuses", func(f *fixture, j *journal.Journal) {
			mustAppend(t, j, firstChange(t, f), firstChange(t, f)) // seq 0 twice
		}, 1, change.ErrRefused},
		{"authorisation after suspension", func(f *fixture, j *journal.Journal) {
			mustAppend(t, j, journal.Entry{Witnessed: &journal.Witnessed{Sequence: 3}}, authorised(f, f.present(req), t0))
		}, 1, grant.ErrSuspended},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.j.Close()
			j, err := journal.Open(f.path, journal.Options{})
			if err != nil {
				t.Fatal(err)
			}
			tc.write(f, j)
			j.Close()
			err = f.open()
			var re *journal.RecordError
			if !errors.As(err, &re) || re.Seq != tc.seq || !errors.Is(err, journal.ErrReplay) || !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want record %d refused with %v", err, tc.seq, tc.want)
			}
			// The lock was released: the operator can inspect and repair.
			j, err = journal.Open(f.path, journal.Options{})
			if err != nil {
				t.Fatal(err)
			}
			j.Close()
		})
	}
}

// firstChange is a journal record of ref-mid's first weights change,
// effective from receipt 0, sealed under the fixture's steward key.
func firstChange(t *testing.T, f *fixture) journal.Entry {
	t.Helper()
	sealer, err := receipt.NewSealer(f.key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := change.Seal(sealer, change.Entry{Backend: "ref-mid", Recipe: "mesh-reference", MadeAt: 1,
		Weights: &change.Weights{To: receipt.Sum([]byte("w")), Fidelity: receipt.F3, Reason: "first load"}})
	if err != nil {
		t.Fatal(err)
	}
	return journal.Entry{Change: &journal.Change{Envelope: c.Envelope}}
}

func mustAppend(t *testing.T, j *journal.Journal, es ...journal.Entry) {
	t.Helper()
	for _, e := range es {
		if _, err := j.Append(e); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWitness: a receipt the journal holds is acknowledged; one it does not
// (records cut from its end) stops every grant, across restarts, until
// the journal is restored. Ungranted serves go on. The journal's checkpoint
// refuses a cut on its own; the witness catches the cut the checkpoint
// cannot see, one rolled back together with its checkpoint, or accepted
// by an operator.
func TestWitness(t *testing.T) {
	f := newFixture(t)
	req := genRequest(8, 4, receipt.F2, 1_000)
	envs := f.serveGranted(3, req)
	for _, env := range envs {
		if err := f.s.Witness(env); err != nil {
			t.Fatal(err)
		}
	}
	other := newSteward(t, Config{Backends: referenceBackends(), Key: testKey(t, 3)})
	foreign, err := other.Serve(t.Context(), req, promptOf(8), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.s.Witness(foreign.Receipt.Envelope); !errors.Is(err, ErrWitnessInvalid) {
		t.Fatalf("foreign receipt: %v", err)
	}
	if err := f.s.Witness([]byte("junk")); !errors.Is(err, ErrWitnessInvalid) {
		t.Fatalf("junk: %v", err)
	}
	// Cut the journal after the second receipt's records.
	f.j.Close()
	whole, _ := os.ReadFile(f.path)
	lines := bytes.SplitAfter(whole, []byte("\n"))
	if err := os.WriteFile(f.path, bytes.Join(lines[:6], nil), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.open(); !errors.Is(err, journal.ErrRolledBack) {
		t.Fatalf("a cut journal: %v, want ErrRolledBack", err)
	}
	if _, err := journal.AcceptRollback(f.path, journal.Options{}); err != nil {
		t.Fatal(err)
	}
	f.start()
	if err := f.s.Witness(envs[1]); err != nil {
		t.Fatalf("a receipt before the cut: %v", err)
	}
	if err := f.s.Witness(envs[2]); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("a receipt after the cut: %v", err)
	}
	check := func(when string) {
		if _, err := f.serve(req, f.present(req)); !errors.Is(err, grant.ErrSuspended) || grant.HTTPStatus(err) != 503 {
			t.Fatalf("%s: granted serve %v", when, err)
		}
		if _, err := f.serve(req, nil); err != nil {
			t.Fatalf("%s: ungranted serve %v", when, err)
		}
		if st := f.s.Grants(); st.Honoured || st.Suspended == nil || st.Suspended.Sequence != 2 {
			t.Fatalf("%s: status %+v", when, st)
		}
	}
	check("suspended")
	f.restart()
	check("after a restart")
	// The operator restores the journal (which differs from the one the
	// checkpoint names, at its witnessed record, so they accept it): grants
	// are honoured again.
	f.j.Close()
	if err := os.WriteFile(f.path, whole, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := journal.AcceptRollback(f.path, journal.Options{}); err != nil {
		t.Fatal(err)
	}
	f.start()
	if st := f.s.Grants(); !st.Honoured {
		t.Fatalf("restored journal: %+v", st)
	}
	if _, err := f.serve(req, f.present(req)); err != nil {
		t.Fatal(err)
	}
}
