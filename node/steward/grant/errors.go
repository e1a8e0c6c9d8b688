package grant

import (
	"errors"
	"net/http"
)

// refusal is one reason a grant is refused. Each carries the JCP-style
// denial label a receipt or a log names it by, and the class it belongs
// to, so that errors.Is(err, ErrUnauthenticated) holds for every refusal
// of the caller's proof.
type refusal struct {
	label string
	msg   string
	class *refusal
}

func (r *refusal) Error() string { return "grant: " + r.msg }

// Is reports whether target is r's class or a class above it.
func (r *refusal) Is(target error) bool {
	for c := r.class; c != nil; c = c.class {
		if c == target {
			return true
		}
	}
	return false
}

// The classes of refusal. The OpenAI binding answers 401 for
// ErrUnauthenticated, 503 for ErrUnavailable and 403 for any other
// ErrRefused (mesh-spec §2.3; see [HTTPStatus]).
var (
	// ErrRefused is the class of every refusal of a grant.
	ErrRefused error = errRefused
	// ErrUnauthenticated: the presentation does not show that the caller
	// is the leaf grant's issuer.
	ErrUnauthenticated error = errUnauthenticated
	// ErrUnavailable: the steward is not honouring grants at all.
	ErrUnavailable error = errUnavailable

	errRefused         = &refusal{label: "denied", msg: "refused"}
	errUnauthenticated = &refusal{label: "unauthenticated", msg: "caller not authenticated", class: errRefused}
	errUnavailable     = &refusal{label: "unavailable", msg: "grants are not honoured here", class: errRefused}
)

// Every specific refusal, each wrapped (with detail) by the error a
// decision returns.
var (
	// ErrNotIssuer: the presentation's caller is not the leaf's issuer
	// (§2.1).
	ErrNotIssuer error = &refusal{label: "caller-not-issuer", msg: "the caller is not the leaf grant's issuer", class: errUnauthenticated}
	// ErrPresentationSignature: the presentation's signature does not
	// verify for the request being served (§2.1).
	ErrPresentationSignature error = &refusal{label: "presentation-invalid", msg: "the presentation's signature does not verify for this request", class: errUnauthenticated}

	// ErrSignature: a grant in the chain is not signed by its issuer.
	ErrSignature error = &refusal{label: "signature-invalid", msg: "a grant's signature does not verify under its issuer", class: errRefused}
	// ErrChain: the chain does not link root to leaf (a parent that is not
	// the grant before, or an issuer that is not its parent's subject).
	ErrChain error = &refusal{label: "chain-broken", msg: "the chain does not link", class: errRefused}
	// ErrAttenuation: a link widens what its parent granted.
	ErrAttenuation error = &refusal{label: "attenuation-violated", msg: "a grant widens its parent", class: errRefused}
	// ErrNotHolder: the leaf's subject is another steward (§2.1).
	ErrNotHolder error = &refusal{label: "holder-mismatch", msg: "the grant is held by another steward", class: errRefused}
	// ErrSpent: this steward has already spent the presentation (§2.1).
	ErrSpent error = &refusal{label: "presentation-spent", msg: "the presentation has already been spent here", class: errRefused}
	// ErrExpired: a link has expired at the decision time.
	ErrExpired error = &refusal{label: "expired", msg: "the grant has expired", class: errRefused}
	// ErrRevoked: a link was revoked at or before the decision time.
	ErrRevoked error = &refusal{label: "revoked", msg: "the grant has been revoked", class: errRefused}
	// ErrNotPermitted: a link does not permit infer on the request.
	ErrNotPermitted error = &refusal{label: "capability-denied", msg: "the grant does not permit infer on this request", class: errRefused}
	// ErrUnknownCaveat: a link carries a caveat this steward cannot
	// evaluate; an enforcement point refuses what it cannot check.
	ErrUnknownCaveat error = &refusal{label: "caveat-unknown", msg: "the grant carries a caveat this steward does not know", class: errRefused}
	// ErrCaveat: a cost-independent caveat does not hold (ModelIn).
	ErrCaveat error = &refusal{label: LabelCaveat, msg: "a caveat does not hold", class: errRefused}
	// ErrBudget: what the grant has left is below the request's joule
	// ceiling (§2).
	ErrBudget error = &refusal{label: LabelBudget, msg: "the grant has less left than the request's joule ceiling", class: errRefused}

	// ErrSuspended: the steward was shown a receipt its journal does not
	// hold and refuses every grant until an operator restores the journal
	// (§2.2).
	ErrSuspended error = &refusal{label: "suspended", msg: "grants are suspended: the steward was shown a receipt its journal does not hold", class: errUnavailable}
	// ErrNoJournal: the steward keeps no durable journal, so it cannot
	// hold a grant's spend across a restart and honours none.
	ErrNoJournal error = &refusal{label: "no-journal", msg: "this steward keeps no durable journal and honours no grants", class: errUnavailable}
)

// The denial labels a debit can put on a receipt's grant_breach (§6.1).
const (
	// LabelCaveat: the metered joules breached a cost-dependent caveat
	// (MaxCostUj).
	LabelCaveat = "caveat-unsatisfied"
	// LabelBudget: the metered joules exceeded what a link had left.
	LabelBudget = "budget-exhausted"
)

// ErrMalformed is wrapped by every failure to parse a grant, a chain, a
// presentation or a request body: bytes, not a decision.
var ErrMalformed = errors.New("grant: malformed")

// Label returns the denial label of the refusal err wraps, or "" when err
// is no refusal.
func Label(err error) string {
	var r *refusal
	if errors.As(err, &r) {
		return r.label
	}
	return ""
}

// HTTPStatus is the status the OpenAI binding answers a refused grant
// with (mesh-spec §2.3): 401 when the caller is not shown to be the leaf's
// issuer, 503 once the steward has stopped honouring grants, 403 for any
// other refusal, and 400 for a presentation or body that does not parse.
// It returns 0 for an error that is none of these.
func HTTPStatus(err error) int {
	switch {
	case errors.Is(err, ErrUnauthenticated):
		return http.StatusUnauthorized
	case errors.Is(err, ErrUnavailable):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrRefused):
		return http.StatusForbidden
	case errors.Is(err, ErrMalformed):
		return http.StatusBadRequest
	}
	return 0
}
