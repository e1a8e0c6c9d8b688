package change

import (
	"crypto/ed25519"
	"fmt"
	"slices"

	"github.com/meshnode/meshnode/node/receipt"
)

// Record is one backend's change record: its entries in order, each
// admitted under the §6.5 rules. The zero Record is not usable; see
// [NewRecord]. A Record is not safe for concurrent use.
type Record struct {
	backend string
	entries []*Sealed
	// lastWeights indexes the last weights entry; -1 when there is none.
	lastWeights int
}

// NewRecord returns an empty record for backend.
func NewRecord(backend string) *Record { return &Record{backend: backend, lastWeights: -1} }

// Backend returns the backend the record is for.
func (r *Record) Backend() string { return r.backend }

// Entries returns the record's entries in order.
func (r *Record) Entries() []*Sealed { return slices.Clone(r.entries) }

// Next returns the seq and prev the next entry must carry.
func (r *Record) Next() (seq uint64, prev *receipt.ContentID) {
	if len(r.entries) == 0 {
		return 0, nil
	}
	last := r.entries[len(r.entries)-1].ID
	return uint64(len(r.entries)), &last
}

// LastWeights returns the last weights entry; ok is false when the record
// has none.
func (r *Record) LastWeights() (*Sealed, bool) {
	if r.lastWeights < 0 {
		return nil, false
	}
	return r.entries[r.lastWeights], true
}

// InEffect returns the weights the record has in effect: the to and
// precision of its last weights entry. ok is false when the record has no
// weights entry, and so puts no weights in effect.
func (r *Record) InEffect() (w receipt.Weights, ok bool) {
	s, ok := r.LastWeights()
	if !ok {
		return receipt.Weights{}, false
	}
	return receipt.Weights{Digest: s.Entry.Weights.To, Precision: s.Entry.Weights.Precision}, true
}

// Admits reports whether an engine naming weights w (nil for none) may
// serve under the record (the gate, §6.5): always when the record puts
// no weights in effect; otherwise only the digest in effect, at its
// precision where the entry names one.
func (r *Record) Admits(w *receipt.Weights) bool {
	want, ok := r.InEffect()
	if !ok {
		return true
	}
	return w != nil && w.Digest == want.Digest && (want.Precision == "" || w.Precision == want.Precision)
}

// Check reports whether s may be appended, under every §6.5 rule.
func (r *Record) Check(s *Sealed) error {
	e := &s.Entry
	refuse := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s entry %d for %s: "+format, append([]any{ErrRefused, e.Kind(), e.Seq, e.Backend}, a...)...)
	}
	if e.Backend != r.backend {
		return refuse("the record is for backend %s", r.backend)
	}
	seq, prev := r.Next()
	switch {
	case e.Seq != seq:
		return refuse("seq is not the next (%d)", seq)
	case (e.Prev == nil) != (prev == nil) || prev != nil && *e.Prev != *prev:
		return refuse("prev is not the content id of the envelope before it")
	case len(r.entries) > 0 && e.MadeAt < r.entries[len(r.entries)-1].Entry.MadeAt:
		return refuse("made_at %d is earlier than the entry before it (%d)", e.MadeAt, r.entries[len(r.entries)-1].Entry.MadeAt)
	}
	w := e.Weights
	if w == nil {
		return nil
	}
	if last, ok := r.LastWeights(); ok {
		lw := last.Entry.Weights
		switch {
		case w.From == nil || *w.From != lw.To:
			return refuse("from is not the to of the last weights entry (%s)", lw.To)
		case w.EffectiveFrom < lw.EffectiveFrom:
			return refuse("effective_from %d is earlier than the last change's (%d)", w.EffectiveFrom, lw.EffectiveFrom)
		}
	} else if w.From != nil {
		return refuse("from is set on the backend's first weights entry")
	}
	if w.From != nil && *w.From == w.To {
		return refuse("to equals from")
	}
	if w.Plan == nil {
		return nil
	}
	var plan *Sealed
	for _, p := range r.entries {
		if p.ID == *w.Plan && p.Entry.Plan != nil {
			plan = p
		}
	}
	if plan == nil {
		return refuse("plan %s is not a plan entry earlier in this record", *w.Plan)
	}
	p := plan.Entry.Plan
	switch {
	case e.Recipe != plan.Entry.Recipe:
		return refuse("outside its plan: recipe %q, the plan's is %q", e.Recipe, plan.Entry.Recipe)
	case w.Precision == "":
		return refuse("outside its plan: it names no precision")
	case len(p.Precisions) > 0 && !slices.Contains(p.Precisions, w.Precision):
		return refuse("outside its plan: precision %q is not one of %v", w.Precision, p.Precisions)
	case w.Fidelity < p.FidelityFloor:
		return refuse("outside its plan: fidelity %v below the plan's floor %v", w.Fidelity, p.FidelityFloor)
	case w.ValidationResult == "":
		return refuse("outside its plan: no validation_result")
	}
	return nil
}

// Append checks s and, when it holds, adds it to the record.
func (r *Record) Append(s *Sealed) error {
	if err := r.Check(s); err != nil {
		return err
	}
	r.entries = append(r.entries, s)
	if s.Entry.Weights != nil {
		r.lastWeights = len(r.entries) - 1
	}
	return nil
}

// Verify rebuilds backend's record from its envelopes, in order: every
// entry must verify under the steward's key and be admitted by the rules.
func Verify(backend string, envelopes [][]byte, steward ed25519.PublicKey) (*Record, error) {
	r := NewRecord(backend)
	for i, env := range envelopes {
		s, err := Open(env, steward)
		if err != nil {
			return nil, fmt.Errorf("change record %s: entry %d: %w", backend, i, err)
		}
		if err := r.Append(s); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Coverage returns the weights entry in effect at rec's sequence, the last
// whose effective_from is at or before it, when that entry covers rec
// (§6.5): it is for rec's backend and recipe, its to is rec's
// weights_digest, and where both name a precision they agree. Otherwise
// it returns an error wrapping ErrNotCovered that says why.
func (r *Record) Coverage(rec *receipt.Receipt) (*Sealed, error) {
	var in *Sealed
	for _, s := range r.entries {
		if w := s.Entry.Weights; w != nil && w.EffectiveFrom <= rec.Sequence {
			in = s
		}
	}
	switch {
	case in == nil:
		return nil, fmt.Errorf("%w: no weights entry is in effect at sequence %d", ErrNotCovered, rec.Sequence)
	case in.Entry.Backend != rec.Backend || in.Entry.Recipe != rec.Recipe:
		return in, fmt.Errorf("%w: the entry in effect is for %s/%s, the receipt for %s/%s", ErrNotCovered, in.Entry.Backend, in.Entry.Recipe, rec.Backend, rec.Recipe)
	case rec.Weights == nil:
		return in, fmt.Errorf("%w: the receipt binds no weights", ErrNotCovered)
	case rec.Weights.Digest != in.Entry.Weights.To:
		return in, fmt.Errorf("%w: the receipt's weights %s are not the %s in effect", ErrNotCovered, rec.Weights.Digest, in.Entry.Weights.To)
	case in.Entry.Weights.Precision != "" && rec.Weights.Precision != in.Entry.Weights.Precision:
		return in, fmt.Errorf("%w: precision %s, the entry in effect names %s", ErrNotCovered, rec.Weights.Precision, in.Entry.Weights.Precision)
	}
	return in, nil
}
