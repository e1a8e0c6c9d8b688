package steward

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward/change"
	"github.com/meshnode/meshnode/node/steward/grant"
	"github.com/meshnode/meshnode/node/steward/journal"
)

// durable is the steward's grant gate over its decision journal (§2,
// §2.2): it decides presentations in a grant.Ledger and records each
// decision, debit and receipt in the journal before acting on it, in the
// order the ledger applies them, so that replaying the journal rebuilds
// the ledger exactly.
type durable struct {
	j        *journal.Journal
	holder   string // the steward's did:key, the subject its grants name
	verifier *grant.Verifier

	mu        sync.Mutex // orders ledger changes with their journal appends
	ledger    *grant.Ledger
	revoked   *grant.Revocations   // as journaled; the ledger consults these
	open      map[uint64]*inFlight // authorisations awaiting their debit, by record
	stranded  map[uint64]bool      // of those, the ones that will never be debited
	suspended *journal.Witnessed   // set once shown a receipt the journal lacks

	smu    sync.Mutex          // guards sealed
	sealed []receipt.ContentID // envelope id of each receipt, by sequence
}

// inFlight is an authorised serve not yet debited.
type inFlight struct {
	decision  *grant.Decision
	backend   string
	requestID receipt.ContentID
	at        time.Time
}

func newDurable(j *journal.Journal, holder string) *durable {
	revoked := grant.NewRevocations()
	return &durable{
		j: j, holder: holder, verifier: grant.NewVerifier(), ledger: grant.NewLedger(revoked), revoked: revoked,
		open: map[uint64]*inFlight{}, stranded: map[uint64]bool{},
	}
}

// Revoke records that grant id is revoked from at on — or from now, when
// at is earlier: a revocation never reaches back past decisions the
// journal already holds (those stand, and a replay must decide them as
// before). It is journaled before any decision sees it. A grant revoked
// already from no later than that is left as it is. It returns when the
// revocation takes effect, and whether this call recorded it.
func (s *Steward) Revoke(id receipt.ContentID, at time.Time) (time.Time, bool, error) {
	d := s.durable
	if d == nil {
		return time.Time{}, false, ErrNoJournal
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if now := s.now(); at.Before(now) {
		at = now
	}
	if prev, ok := d.revoked.RevokedAt(id); ok && !prev.After(at) {
		return prev, false, nil
	}
	r := &journal.Revoked{Grant: id, At: at.UnixNano()}
	if _, err := d.j.Append(journal.Entry{Revoked: r}); err != nil {
		return time.Time{}, false, fmt.Errorf("%w: the revocation of %s could not be recorded: %w", ErrJournal, id, err)
	}
	d.revoked.Revoke(id, r.Time())
	return r.Time(), true, nil
}

// Revoked returns the revocations the steward decides with: those its
// journal holds.
func (s *Steward) Revoked() *grant.Revocations {
	if s.durable == nil {
		return grant.NewRevocations()
	}
	return s.durable.revoked
}

// honouring returns nil while the steward honours grants.
func (d *durable) honouring() error {
	if w := d.suspended; w != nil {
		return fmt.Errorf("%w (receipt %d, envelope %s)", grant.ErrSuspended, w.Sequence, w.Envelope)
	}
	return nil
}

// verify checks a presentation's proofs for request id.
func (d *durable) verify(p *grant.Presentation, id receipt.ContentID) (*grant.Verified, error) {
	d.mu.Lock()
	err := d.honouring()
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return d.verifier.Verify(p, id, d.holder)
}

func frameOf(a *Authorization) grant.Frame {
	f := grant.Frame{RequestID: a.RequestID, Payload: a.Request.PromptHash, CeilingUJ: a.Request.JouleCeilingUJ, At: a.At}
	if a.Weights != nil {
		f.Model = &a.Weights.Digest
	}
	return f
}

// authorize decides v for the serve a describes and records the decision
// before anything runs (§2 phase 2): a decision the journal cannot record
// refuses the serve.
func (d *durable) authorize(v *grant.Verified, a Authorization) (Debit, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.honouring(); err != nil {
		return nil, err
	}
	dec, err := d.ledger.Decide(v, frameOf(&a))
	if err != nil {
		return nil, err
	}
	p, err := v.Presentation().MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("%w: presentation: %w", ErrJournal, err)
	}
	entry := &journal.Authorised{Presentation: p, Request: a.Request, Backend: a.Backend, Recipe: a.Recipe, At: a.At.UnixNano()}
	if w := a.Weights; w != nil {
		entry.Model, entry.Precision = &w.Digest, w.Precision
	}
	rec, err := d.j.Append(journal.Entry{Authorised: entry})
	if err != nil {
		return nil, fmt.Errorf("%w: the authorisation could not be recorded: %w", ErrJournal, err)
	}
	d.commit(rec.Seq, dec, entry)
	return &durableDebit{d: d, seq: rec.Seq, dec: dec}, nil
}

func (d *durable) commit(seq uint64, dec *grant.Decision, a *journal.Authorised) {
	d.ledger.Commit(dec)
	id, _ := a.Request.ID() // the journal holds only valid requests
	d.open[seq] = &inFlight{decision: dec, backend: a.Backend, requestID: id, at: a.Time()}
}

// durableDebit settles one authorised serve.
type durableDebit struct {
	d   *durable
	seq uint64
	dec *grant.Decision
}

func (b *durableDebit) GrantID() receipt.ContentID { return b.dec.GrantID }

// Settle records the debit, then applies it (§2 phase 3). A debit that
// cannot be recorded leaves the serve unresolved: held at its ceiling, as
// a restart would find it.
func (b *durableDebit) Settle(e hw.Energy) (string, error) {
	d := b.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.j.Append(journal.Entry{Debited: journal.NewDebited(b.seq, e)}); err != nil {
		d.stranded[b.seq] = true
		d.ledger.Strand(b.dec)
		return "", fmt.Errorf("%w: the debit could not be recorded, so the serve is unresolved: %w", ErrJournal, err)
	}
	delete(d.open, b.seq)
	return d.ledger.Settle(b.dec, e.UJ()), nil
}

// Sealed implements Journal: the receipt is recorded before it is handed
// out (§2.2).
func (d *durable) Sealed(s *receipt.Sealed) error {
	if _, err := d.j.Append(journal.Entry{Sealed: &journal.Sealed{Sequence: s.Receipt.Sequence, Envelope: s.ID}}); err != nil {
		return err
	}
	d.smu.Lock()
	d.sealed = append(d.sealed, s.ID)
	d.smu.Unlock()
	return nil
}

// holds reports whether the journal holds receipt seq with envelope id.
func (d *durable) holds(seq uint64, id receipt.ContentID) bool {
	d.smu.Lock()
	defer d.smu.Unlock()
	return seq < uint64(len(d.sealed)) && d.sealed[seq] == id
}

// replay re-establishes the steward's state from its journal (§2.2,
// §6.3, §6.5), before it serves: every authorisation verified and decided
// again at its recorded time, every debit applied, every receipt taken as
// the chain's head, every change-record entry verified under the
// steward's key and admitted by the record's rules. Authorisations left
// without a debit are unresolved: debited at their ceiling, never
// retried.
func (d *durable) replay(s *Steward) error {
	var head receipt.Head
	pub := s.sealer.Public()
	err := d.j.Replay(func(r journal.Record) error {
		e := r.Entry
		switch {
		case e.Authorised != nil:
			a := e.Authorised
			if err := d.honouring(); err != nil {
				return fmt.Errorf("an authorisation after the steward stopped honouring grants: %w", err)
			}
			p, err := grant.ParsePresentation(a.Presentation)
			if err != nil {
				return err
			}
			id, err := a.Request.ID()
			if err != nil {
				return err
			}
			v, err := d.verifier.Verify(p, id, d.holder)
			if err != nil {
				return err
			}
			az := Authorization{RequestID: id, Request: a.Request, Backend: a.Backend, Recipe: a.Recipe, At: a.Time()}
			if a.Model != nil {
				az.Weights = &receipt.Weights{Digest: *a.Model, Precision: a.Precision}
			}
			dec, err := d.ledger.Decide(v, frameOf(&az))
			if err != nil {
				return err
			}
			d.commit(r.Seq, dec, a)
		case e.Debited != nil:
			f := d.open[e.Debited.Auth] // the journal checked it is open
			energy, err := e.Debited.Energy()
			if err != nil {
				return err
			}
			d.ledger.Settle(f.decision, energy.UJ())
			delete(d.open, e.Debited.Auth)
		case e.Sealed != nil:
			// The journal checked the sequence; the chain continues from
			// the last envelope sealed (§6.3).
			head = receipt.Head{Next: e.Sealed.Sequence + 1, Last: e.Sealed.Envelope}
			d.sealed = append(d.sealed, e.Sealed.Envelope)
		case e.Change != nil:
			c, err := change.Open(e.Change.Envelope, pub)
			if err != nil {
				return err
			}
			if w := c.Entry.Weights; w != nil && w.EffectiveFrom < head.Next {
				return fmt.Errorf("%w: change %d for %s takes effect from receipt %d, but receipt %d was already sealed",
					change.ErrRefused, c.Entry.Seq, c.Entry.Backend, w.EffectiveFrom, head.Next-1)
			}
			rec := s.changes[c.Entry.Backend]
			if rec == nil {
				rec = change.NewRecord(c.Entry.Backend)
				s.changes[c.Entry.Backend] = rec
			}
			if err := rec.Append(c); err != nil {
				return err
			}
		case e.Witnessed != nil:
			d.suspended = e.Witnessed
		case e.Revoked != nil:
			// From here on, as when it was recorded.
			d.revoked.Revoke(e.Revoked.Grant, e.Revoked.Time())
		}
		return nil
	})
	if err != nil {
		return err
	}
	for seq, f := range d.open {
		d.stranded[seq] = true
		d.ledger.Strand(f.decision)
	}
	s.head = head
	return nil
}

// Unresolved is a serve that was authorised and never debited its metered
// energy: in flight when the steward stopped, or one whose debit could not
// be recorded.
// Whether its engine finished is not knowable, so it is neither retried
// nor reported as completed or failed; it stays debited at its request's
// joule ceiling for an operator to settle (§2.2).
type Unresolved struct {
	// Record is the authorisation's record in the journal.
	Record    uint64            `json:"record"`
	Caller    string            `json:"caller"`
	Backend   string            `json:"backend"`
	RequestID receipt.ContentID `json:"request_id"`
	GrantID   receipt.ContentID `json:"grant_id"`
	CeilingUJ uint64            `json:"ceiling_uj"`
	At        time.Time         `json:"authorised_at"`
}

func (d *durable) unresolvedList() []Unresolved {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Unresolved, 0, len(d.stranded))
	for seq := range d.stranded {
		f := d.open[seq]
		out = append(out, Unresolved{Record: seq, Caller: f.decision.Caller, Backend: f.backend, RequestID: f.requestID,
			GrantID: f.decision.GrantID, CeilingUJ: f.decision.CeilingUJ, At: f.at.UTC()})
	}
	slices.SortFunc(out, func(a, b Unresolved) int { return int(a.Record) - int(b.Record) })
	return out
}

// GrantStatus is the steward's grant state, for /api/status and the CLI.
type GrantStatus struct {
	// Honoured is false when the steward refuses every grant: it keeps no
	// journal, or it was shown a receipt its journal does not hold.
	Honoured bool `json:"honoured"`
	// Suspended names the receipt that stopped grants.
	Suspended *journal.Witnessed `json:"suspended,omitempty"`
	// Unresolved lists the serves an operator must settle (§2.2).
	Unresolved []Unresolved `json:"unresolved"`
	// Journal, Records and Bytes describe the decision journal.
	Journal string `json:"journal,omitempty"`
	Records uint64 `json:"records"`
	Bytes   int64  `json:"bytes"`
}

// Grants reports the steward's grant state.
func (s *Steward) Grants() GrantStatus {
	d := s.durable
	if d == nil {
		return GrantStatus{Unresolved: []Unresolved{}}
	}
	st := GrantStatus{Unresolved: d.unresolvedList(), Journal: d.j.Path(), Records: d.j.Len(), Bytes: d.j.Size()}
	d.mu.Lock()
	st.Suspended = d.suspended
	d.mu.Unlock()
	st.Honoured = st.Suspended == nil
	return st
}

// Account returns a grant's spend at this steward (budget, debited —
// unresolved serves at their ceiling — and held for serves in flight); ok
// is false when the steward has decided nothing on it.
func (s *Steward) Account(id receipt.ContentID) (grant.Account, bool) {
	if s.durable == nil {
		return grant.Account{}, false
	}
	s.durable.mu.Lock()
	defer s.durable.mu.Unlock()
	return s.durable.ledger.Account(id)
}

// Witness answers a receipt shown back to the steward (§2.2, §2.3's POST
// /v1/mesh/witness): nil when the journal holds it; an error wrapping
// ErrNotHeld when it does not, after which every grant is refused until an
// operator restores the journal (the refusal is itself journaled, so it
// survives a restart); ErrWitnessInvalid for an envelope this steward did
// not seal.
func (s *Steward) Witness(envelope []byte) error {
	d := s.durable
	if d == nil {
		return ErrNoJournal
	}
	sealed, err := receipt.Open(envelope, s.sealer.Public())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrWitnessInvalid, err)
	}
	seq := sealed.Receipt.Sequence
	if d.holds(seq, sealed.ID) {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	w := &journal.Witnessed{Sequence: seq, Envelope: sealed.ID}
	var jerr error
	if d.suspended == nil {
		// Journaled so that a restart keeps refusing; if even that fails,
		// the steward still stops honouring grants now.
		if _, jerr = d.j.Append(journal.Entry{Witnessed: w}); jerr != nil {
			jerr = fmt.Errorf("; recording it failed too: %w", jerr)
		}
		d.suspended = w
	}
	s.log.Error("steward: shown a receipt the journal does not hold; refusing every grant until the journal is restored",
		"sequence", seq, "envelope", sealed.ID, "journal", d.j.Path())
	if jerr != nil {
		return errors.Join(fmt.Errorf("%w: receipt %d (%s)", ErrNotHeld, seq, sealed.ID), jerr)
	}
	return fmt.Errorf("%w: receipt %d (%s)", ErrNotHeld, seq, sealed.ID)
}
