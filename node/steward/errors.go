package steward

import (
	"errors"
	"fmt"

	"github.com/meshnode/meshnode/node/receipt"
)

// Sentinel errors, each the reason a serve was refused or cut short. A
// serve's error is always a *ServeError wrapping one of them (or the
// engine's, authoriser's or journal's own error).
var (
	// ErrInvalidRequest: the request breaks a §3.1 rule.
	ErrInvalidRequest = errors.New("steward: invalid request")
	// ErrNoAdmissibleBackend: no backend is at or above the floor and
	// within the ceiling (§4); the ServeError carries every candidate.
	ErrNoAdmissibleBackend = errors.New("steward: no admissible backend")
	// ErrFidelityOverclaim: the engine reported a delivered fidelity above
	// its advertised level; the serve is refused, never clamped (§3.2.1).
	ErrFidelityOverclaim = errors.New("steward: engine reported a delivered fidelity above its advertised level")
	// ErrWeightsChanged: the engine named other weights after the serve
	// than before it (§2).
	ErrWeightsChanged = errors.New("steward: engine weights changed during the serve")
	// ErrMaxTokens: the engine tried to emit more than the request's
	// max_tokens (or any token of a decision).
	ErrMaxTokens = errors.New("steward: engine emitted past max_tokens")
	// ErrBadOutcome: the engine's outcome contradicts what it emitted.
	ErrBadOutcome = errors.New("steward: engine outcome contradicts its output")
	// ErrMeter: the meter could not open or close the span.
	ErrMeter = errors.New("steward: meter failed")
	// ErrJournal: the journal could not record an entry (§2.2): an
	// authorisation, and the serve is refused before any work; a debit,
	// and the serve is unresolved; a receipt, and it is not handed out and
	// the chain does not advance; or a change-record entry, which is then
	// not in effect.
	ErrJournal = errors.New("steward: the journal could not record it")
	// ErrWeightsNotInEffect: the backend's change record has other weights
	// in effect than the engine names (§6.5's gate): the backend is
	// inadmissible, and a serve whose engine reports such weights after
	// the work is not sealed.
	ErrWeightsNotInEffect = errors.New("steward: weights not in effect under the backend's change record")
	// ErrNoJournal: the call needs a decision journal (Config.Durable).
	ErrNoJournal = errors.New("steward: this steward keeps no decision journal")
	// ErrNotHeld: a witnessed receipt the journal does not hold (§2.2);
	// the steward now refuses every grant. The binding answers 409.
	ErrNotHeld = errors.New("steward: the journal does not hold this receipt; records were cut from it, and grants are refused until it is restored")
	// ErrWitnessInvalid: a witnessed envelope that does not verify as a
	// receipt this steward sealed. The binding answers 400.
	ErrWitnessInvalid = errors.New("steward: not a receipt this steward sealed")
	// ErrIncomplete: the engine stopped before finishing (the client
	// cancelled, emit failed, the engine failed). The work it did is
	// sealed; the ServeError comes with the Served.
	ErrIncomplete = errors.New("steward: serve incomplete")
	// ErrCeilingReached: the steward stopped a generation before a step
	// that would have taken its metered energy past the request's joule
	// ceiling (§3.1: the ceiling is a hard budget). It is not a failure:
	// the tokens emitted so far are sealed, a grant is debited what was
	// metered, and the ServeError comes with the Served. It does not wrap
	// ErrIncomplete, so that a caller tells it from a client leaving.
	ErrCeilingReached = errors.New("steward: joule ceiling reached")
	// ErrLimit is what an emit function returns to end a generation at a
	// time limit its client set (llama.cpp's t_max_predict_ms and
	// t_max_prompt_ms): the token it was handed is not served, the engine
	// is stopped, and what was served is sealed as cut short
	// (receipt.CutLimit). Like ErrCeilingReached it is not a failure: the
	// ServeError wrapping it comes with the Served, and it does not wrap
	// ErrIncomplete.
	ErrLimit = errors.New("steward: the client's time limit was reached")
)

// Stage names where in the lifecycle a serve stopped.
type Stage string

// The stages of one serve, in order.
const (
	StageRequest   Stage = "request"
	StageRoute     Stage = "route"
	StageAuthorise Stage = "authorise"
	StageMeter     Stage = "meter"
	StageEngine    Stage = "engine"
	StageDebit     Stage = "debit"
	StageCheck     Stage = "check"
	StageSeal      Stage = "seal"
	StageJournal   Stage = "journal"
)

// ServeError is every error Serve returns: where the serve stopped, the
// request it was for, and the route when routing ran (so a refusal for
// lack of an admissible backend carries every candidate and its reason).
type ServeError struct {
	Stage     Stage
	RequestID receipt.ContentID
	Route     *Route
	Err       error
}

func (e *ServeError) Error() string {
	msg := fmt.Sprintf("serve %s: %s: %v", e.RequestID.String()[:12], e.Stage, e.Err)
	if e.Route != nil && e.Stage == StageRoute {
		for _, c := range e.Route.Candidates {
			msg += fmt.Sprintf("; %s: %s", c.Backend, c.Reason)
		}
	}
	return msg
}

func (e *ServeError) Unwrap() error { return e.Err }
