package steward

import (
	"fmt"

	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward/change"
	"github.com/meshnode/meshnode/node/steward/grant"
	"github.com/meshnode/meshnode/node/steward/journal"
)

// verify checks a presentation before routing. With a decision journal
// the steward verifies it itself; with an Authorizer hook, the hook
// decides it whole; with neither, no grant is honoured.
func (s *Steward) verify(p *grant.Presentation, id receipt.ContentID) (*grant.Verified, error) {
	switch {
	case s.durable != nil:
		return s.durable.verify(p, id)
	case s.auth != nil:
		return nil, nil
	}
	return nil, grant.ErrNoJournal
}

// admit returns the router's further admission test: a backend serves
// only the weights its change record has in effect (§6.5), and only a
// model the request's grant permits (§2 phase 1, ModelIn). The engine's
// weights are read only when one of the two applies.
func (s *Steward) admit(v *grant.Verified) func(Backend) string {
	return func(b Backend) string {
		gated := s.gated(b.Name)
		if !gated && (v == nil || !v.RestrictsModel()) {
			return ""
		}
		w := namedWeights(b.Engine)
		if gated && s.gate(b.Name, w) != nil {
			return "weights not in effect (change record)"
		}
		if v != nil {
			var model *receipt.ContentID
			if w != nil {
				model = &w.Digest
			}
			if !v.PermitsModel(model) {
				return "model not permitted by the grant (ModelIn)"
			}
		}
		return ""
	}
}

// gated reports whether backend's change record puts weights in effect.
func (s *Steward) gated(backend string) bool {
	s.cmu.RLock()
	defer s.cmu.RUnlock()
	rec := s.changes[backend]
	if rec == nil {
		return false
	}
	_, ok := rec.InEffect()
	return ok
}

// gate is §6.5's gate: once a backend's change record puts weights in
// effect, the backend serves on those and no others.
func (s *Steward) gate(backend string, w *receipt.Weights) error {
	s.cmu.RLock()
	defer s.cmu.RUnlock()
	rec := s.changes[backend]
	if rec == nil || rec.Admits(w) {
		return nil
	}
	want, _ := rec.InEffect()
	return fmt.Errorf("%w: %s's change record has %s in effect; the engine names %s", ErrWeightsNotInEffect, backend, describe(&want), describe(w))
}

// RecordChange seals e as the next entry of backend's change record,
// journals it and puts it in effect (§6.5). The caller fills the kind's
// fields, and the recipe when it differs from the engine's; the steward
// fills the backend, seq, prev and made_at, and for a weights change its
// from (when nil: the weights in effect) and effective_from: the next
// receipt's sequence, so that from the next receipt on the backend serves
// on the new weights only. An entry the record's rules refuse is not
// recorded.
func (s *Steward) RecordChange(backend string, e change.Entry) (*change.Sealed, error) {
	if s.durable == nil {
		return nil, ErrNoJournal
	}
	b, ok := s.backend(backend)
	if !ok {
		return nil, fmt.Errorf("steward: no backend %q", backend)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cmu.Lock()
	defer s.cmu.Unlock()
	rec := s.changes[backend]
	if rec == nil {
		rec = change.NewRecord(backend)
	}
	e.Backend = backend
	if e.Recipe == "" {
		e.Recipe = b.Engine.Recipe()
	}
	e.Seq, e.Prev = rec.Next()
	e.MadeAt = uint64(max(s.now().Unix(), 0))
	if w := e.Weights; w != nil {
		// Copy so the caller's Weights is not rewritten.
		cw := *w
		if cw.From == nil {
			if last, ok := rec.LastWeights(); ok {
				from := last.Entry.Weights.To
				cw.From = &from
			}
		}
		cw.EffectiveFrom = s.head.Next
		e.Weights = &cw
	}
	sealed, err := change.Seal(s.sealer, e)
	if err != nil {
		return nil, err
	}
	if err := rec.Check(sealed); err != nil {
		return nil, err
	}
	if _, err := s.durable.j.Append(journal.Entry{Change: &journal.Change{Envelope: sealed.Envelope}}); err != nil {
		return nil, fmt.Errorf("%w: the change could not be recorded: %w", ErrJournal, err)
	}
	if err := rec.Append(sealed); err != nil {
		return nil, err // Check passed under the same lock; cannot happen
	}
	s.changes[backend] = rec
	s.log.Info("steward: change recorded", "backend", backend, "kind", e.Kind(), "seq", e.Seq, "id", sealed.ID)
	return sealed, nil
}

// WeightsInEffect returns the weights backend's change record has in
// effect (§6.5); ok is false when it has none, and the gate then admits
// any weights.
func (s *Steward) WeightsInEffect(backend string) (w receipt.Weights, ok bool) {
	s.cmu.RLock()
	defer s.cmu.RUnlock()
	if rec := s.changes[backend]; rec != nil {
		return rec.InEffect()
	}
	return receipt.Weights{}, false
}

// ChangeRecord returns backend's change record, entry by entry; nil when
// it has none.
func (s *Steward) ChangeRecord(backend string) []*change.Sealed {
	s.cmu.RLock()
	defer s.cmu.RUnlock()
	if rec := s.changes[backend]; rec != nil {
		return rec.Entries()
	}
	return nil
}

// Coverage reads the change entry in effect at r's sequence in its
// backend's record and reports whether it covers r (§6.5).
func (s *Steward) Coverage(r *receipt.Receipt) (*change.Sealed, error) {
	s.cmu.RLock()
	defer s.cmu.RUnlock()
	rec := s.changes[r.Backend]
	if rec == nil {
		return nil, fmt.Errorf("%w: backend %s has no change record", change.ErrNotCovered, r.Backend)
	}
	return rec.Coverage(r)
}
