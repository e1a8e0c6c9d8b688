package change

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/meshnode/meshnode/node/receipt"
)

// Profile is the mesh_change tag of every entry.
const Profile = "mesh/1"

// The two kinds of entry.
const (
	KindPlan    = "plan"
	KindWeights = "weights"
)

// maxCore bounds an entry's canonical core.
const maxCore = 8 << 10

// Sentinel errors.
var (
	// ErrMalformed: bytes that are not a sealed change entry of this
	// profile.
	ErrMalformed = errors.New("change: malformed entry")
	// ErrRefused: an entry §6.5 refuses; the error says which rule.
	ErrRefused = errors.New("change: entry refused")
	// ErrNotCovered: a receipt its backend's record does not cover.
	ErrNotCovered = errors.New("change: receipt not covered by the change record")
)

// Entry is one change-record entry: the fields every entry carries, and
// exactly one of Plan and Weights.
type Entry struct {
	Backend string
	Recipe  string
	// Seq is the entry's position from 0; Prev the content id of the
	// envelope before it, nil for the first.
	Seq  uint64
	Prev *receipt.ContentID
	// MadeAt is Unix seconds, the steward's statement of the time.
	MadeAt  uint64
	Plan    *Plan
	Weights *Weights
}

// Plan records the changes the steward foresees for a backend, before
// them.
type Plan struct {
	// Precisions lists the precisions a change under the plan may run at;
	// empty admits any (but a change must name one).
	Precisions []string
	// FidelityFloor is the least fidelity a change under the plan may
	// have.
	FidelityFloor receipt.Fidelity
	// Validation says how a change under the plan is validated; Foresees
	// what changes the plan foresees.
	Validation string
	Foresees   string
	// RiskAssessment is optional.
	RiskAssessment string
}

// Weights records one change of a backend's weights.
type Weights struct {
	// From and To are the weights before and after; From is nil for the
	// backend's first weights entry.
	From *receipt.ContentID
	To   receipt.ContentID
	// Precision is the precision the new weights run at; optional, but a
	// change under a plan must name one.
	Precision string
	// Fidelity is the new weights' level.
	Fidelity receipt.Fidelity
	// Plan is the content id of the plan entry the change falls under;
	// nil for a change no plan foresaw.
	Plan *receipt.ContentID
	// ValidationResult is optional; a change under a plan must carry one.
	ValidationResult string
	// EffectiveFrom is the first sequence of the steward's receipt log
	// served on the new weights.
	EffectiveFrom uint64
	// Reason says why.
	Reason string
}

// Kind returns the entry's kind.
func (e *Entry) Kind() string {
	if e.Plan != nil {
		return KindPlan
	}
	return KindWeights
}

// wireEntry is an entry's canonical core: one flat map with text keys,
// the kind's fields present only for that kind.
type wireEntry struct {
	MeshChange string             `cbor:"mesh_change"`
	Backend    string             `cbor:"backend"`
	Recipe     string             `cbor:"recipe"`
	Seq        uint64             `cbor:"seq"`
	Prev       *receipt.ContentID `cbor:"prev,omitempty"`
	MadeAt     uint64             `cbor:"made_at"`
	Kind       string             `cbor:"kind"`
	// plan
	Precisions     *[]string         `cbor:"precisions,omitempty"`
	FidelityFloor  *receipt.Fidelity `cbor:"fidelity_floor,omitempty"`
	Validation     *string           `cbor:"validation,omitempty"`
	Foresees       *string           `cbor:"foresees,omitempty"`
	RiskAssessment string            `cbor:"risk_assessment,omitempty"`
	// weights
	From             *receipt.ContentID `cbor:"from,omitempty"`
	To               *receipt.ContentID `cbor:"to,omitempty"`
	Precision        string             `cbor:"precision,omitempty"`
	Fidelity         *receipt.Fidelity  `cbor:"fidelity,omitempty"`
	Plan             *receipt.ContentID `cbor:"plan,omitempty"`
	ValidationResult string             `cbor:"validation_result,omitempty"`
	EffectiveFrom    *uint64            `cbor:"effective_from,omitempty"`
	Reason           *string            `cbor:"reason,omitempty"`
}

// validate checks what every entry must hold on its own.
func (e *Entry) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, a...)...)
	}
	switch {
	case e.Backend == "" || e.Recipe == "":
		return bad("backend and recipe are required")
	case (e.Plan == nil) == (e.Weights == nil):
		return bad("an entry is exactly one of plan and weights")
	case (e.Prev == nil) != (e.Seq == 0):
		return bad("prev must be absent exactly at seq 0 (seq %d)", e.Seq)
	}
	if p := e.Plan; p != nil {
		switch {
		case !p.FidelityFloor.Valid():
			return bad("fidelity_floor %d is not F0 … F4", p.FidelityFloor)
		case p.Validation == "" || p.Foresees == "":
			return bad("a plan names its validation and what it foresees")
		case len(p.Precisions) > 16:
			return bad("%d precisions, at most 16", len(p.Precisions))
		}
		for i, pr := range p.Precisions {
			if pr == "" {
				return bad("precision %d is empty", i)
			}
		}
	}
	if w := e.Weights; w != nil {
		switch {
		case !w.Fidelity.Valid():
			return bad("fidelity %d is not F0 … F4", w.Fidelity)
		case w.Reason == "":
			return bad("a weights change gives its reason")
		}
	}
	// Open's strict decoder refuses text that is not UTF-8, so an entry
	// holding some would be sealed and journaled, then refused when the
	// steward replays its journal: it would not start again.
	for _, s := range e.text() {
		if !utf8.ValidString(s) {
			return bad("%q is not valid UTF-8", s)
		}
	}
	return nil
}

// text returns every text field of the entry.
func (e *Entry) text() []string {
	out := []string{e.Backend, e.Recipe}
	if p := e.Plan; p != nil {
		out = append(append(out, p.Precisions...), p.Validation, p.Foresees, p.RiskAssessment)
	}
	if w := e.Weights; w != nil {
		out = append(out, w.Precision, w.ValidationResult, w.Reason)
	}
	return out
}

func (e *Entry) wire() wireEntry {
	w := wireEntry{MeshChange: Profile, Backend: e.Backend, Recipe: e.Recipe, Seq: e.Seq, Prev: e.Prev, MadeAt: e.MadeAt, Kind: e.Kind()}
	if p := e.Plan; p != nil {
		pr := append([]string{}, p.Precisions...)
		w.Precisions, w.FidelityFloor = &pr, &p.FidelityFloor
		w.Validation, w.Foresees, w.RiskAssessment = &p.Validation, &p.Foresees, p.RiskAssessment
	}
	if c := e.Weights; c != nil {
		w.From, w.To, w.Precision, w.Fidelity = c.From, &c.To, c.Precision, &c.Fidelity
		w.Plan, w.ValidationResult, w.EffectiveFrom, w.Reason = c.Plan, c.ValidationResult, &c.EffectiveFrom, &c.Reason
	}
	return w
}

func (w *wireEntry) entry() (Entry, error) {
	e := Entry{Backend: w.Backend, Recipe: w.Recipe, Seq: w.Seq, Prev: w.Prev, MadeAt: w.MadeAt}
	planKeys := w.Precisions != nil || w.FidelityFloor != nil || w.Validation != nil || w.Foresees != nil || w.RiskAssessment != ""
	weightKeys := w.From != nil || w.To != nil || w.Precision != "" || w.Fidelity != nil || w.Plan != nil ||
		w.ValidationResult != "" || w.EffectiveFrom != nil || w.Reason != nil
	switch {
	case w.MeshChange != Profile:
		return e, fmt.Errorf("%w: mesh_change %q, want %q", ErrMalformed, w.MeshChange, Profile)
	case w.Kind == KindPlan && !weightKeys && w.Precisions != nil && w.FidelityFloor != nil && w.Validation != nil && w.Foresees != nil:
		e.Plan = &Plan{Precisions: *w.Precisions, FidelityFloor: *w.FidelityFloor, Validation: *w.Validation,
			Foresees: *w.Foresees, RiskAssessment: w.RiskAssessment}
	case w.Kind == KindWeights && !planKeys && w.To != nil && w.Fidelity != nil && w.EffectiveFrom != nil && w.Reason != nil:
		e.Weights = &Weights{From: w.From, To: *w.To, Precision: w.Precision, Fidelity: *w.Fidelity, Plan: w.Plan,
			ValidationResult: w.ValidationResult, EffectiveFrom: *w.EffectiveFrom, Reason: *w.Reason}
	default:
		return e, fmt.Errorf("%w: kind %q with the keys of another kind, or without its own", ErrMalformed, w.Kind)
	}
	return e, e.validate()
}

// Core returns the entry's canonical det-CBOR core. It refuses a core
// over the bound Open holds entries to: journaled, such an entry would
// stop the steward from replaying its journal.
func (e *Entry) Core() ([]byte, error) {
	if err := e.validate(); err != nil {
		return nil, err
	}
	w := e.wire()
	core, err := receipt.MarshalCanonical(&w)
	if err != nil {
		return nil, err
	}
	if len(core) > maxCore {
		return nil, fmt.Errorf("%w: the entry's core is %d bytes, limit %d", ErrMalformed, len(core), maxCore)
	}
	return core, nil
}

// Sealed is an entry with its core, its envelope and the envelope's
// content id, which the next entry's prev and a change's plan name.
type Sealed struct {
	Entry    Entry
	Core     []byte
	Envelope []byte
	ID       receipt.ContentID
}

// Seal signs e under the steward's sealer, in the envelope profile its
// receipts use.
func Seal(s *receipt.Sealer, e Entry) (*Sealed, error) {
	core, err := e.Core()
	if err != nil {
		return nil, err
	}
	env, err := s.SealPayload(core)
	if err != nil {
		return nil, err
	}
	return &Sealed{Entry: e, Core: core, Envelope: env, ID: receipt.Sum(env)}, nil
}

// Open verifies an envelope signed by steward and decodes the entry in
// it, refusing anything that is not exactly the canonical core of a valid
// entry.
func Open(envelope []byte, steward ed25519.PublicKey) (*Sealed, error) {
	payload, _, err := receipt.OpenPayload(envelope, steward)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	var w wireEntry
	if err := receipt.UnmarshalCanonical(payload, maxCore, &w); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	e, err := w.entry()
	if err != nil {
		return nil, err
	}
	return &Sealed{Entry: e, Core: payload, Envelope: envelope, ID: receipt.Sum(envelope)}, nil
}
