package steward

import (
	"fmt"
	"math/bits"
	"strings"

	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

// Backend is a registered engine under its name. Registration order is
// the router's tie-break (§4).
type Backend struct {
	Name   string
	Engine engine.Engine
}

// RouteCandidate is the router's record of one backend it weighed (§4).
type RouteCandidate struct {
	Backend  string           `json:"backend"`
	Recipe   string           `json:"recipe"`
	Fidelity receipt.Fidelity `json:"fidelity"`
	// EstimateUJ is est_total_uj, saturated at the largest uint64 when the
	// product overflows (such a backend is inadmissible).
	EstimateUJ uint64 `json:"estimate_uj"`
	// PromptTokens is the prompt length EstimateUJ priced when it is not
	// the request's declared prompt_tokens: the steward's own count of
	// the payload, where that is larger (WithPromptTokens). Zero (and
	// absent in JSON) when the declared figure was priced.
	PromptTokens uint32 `json:"prompt_tokens,omitempty"`
	Admissible   bool   `json:"admissible"`
	// Reason says why an inadmissible backend was passed over.
	Reason string `json:"reason,omitempty"`
}

// Route is the router's decision: every candidate weighed, in
// registration order, the chosen one, and its one-line justification.
type Route struct {
	Candidates []RouteCandidate `json:"candidates"`
	// Chosen indexes Candidates; -1 when no backend is admissible.
	Chosen        int    `json:"chosen"`
	Justification string `json:"justification,omitempty"`
}

// Estimate is §4's est_total_uj for engine e serving req:
// uj_per_token × (prompt_tokens + max_tokens) for a generation, and
// uj_per_token × prompt_tokens + uj_per_option_scored × options_scored for
// a typed decision, which is never priced for tokens it cannot emit
// (§3.6). ok is false when the figure does not fit in a uint64.
func Estimate(e engine.Engine, req *receipt.ServeRequest) (uj uint64, ok bool) {
	if d := req.Decision; d != nil {
		a, okA := mulU64(e.UJPerToken(), uint64(req.PromptTokens))
		b, okB := mulU64(e.UJPerOptionScored(), uint64(d.OptionsScored))
		sum, carry := bits.Add64(a, b, 0)
		if !okA || !okB || carry != 0 {
			return ^uint64(0), false
		}
		return sum, true
	}
	return mulU64(e.UJPerToken(), uint64(req.PromptTokens)+uint64(req.MaxTokens))
}

// priced is req as the router prices it: its prompt_tokens raised to
// counted, the payload's length as the steward's caller tokenized it,
// where the request declares fewer. The declared figure stays in the
// request's identity (a granted request is signed over it, mesh/1 §2.3),
// but it is the caller's to choose, and a price it could lower would let
// a request past a ceiling its work does not fit.
func priced(req *receipt.ServeRequest, counted uint32) *receipt.ServeRequest {
	if counted <= req.PromptTokens {
		return req
	}
	p := *req
	p.PromptTokens = counted
	return &p
}

func mulU64(a, b uint64) (uint64, bool) {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return ^uint64(0), false
	}
	return lo, true
}

// route weighs every backend for req and picks the admissible one with the
// lowest estimate, the earliest registered on a tie. admit, when set,
// names a further reason a backend is inadmissible ("" when it is not):
// weights its change record does not have in effect (§6.5), or a model the
// request's grant does not permit (§2 phase 1).
//
// counted is the prompt's length as the caller tokenized it (0: not
// counted); the estimates price the larger of it and the declared figure,
// and the reasons and justification say so when the count is the larger.
func route(backends []Backend, req *receipt.ServeRequest, counted uint32, admit func(Backend) string) Route {
	rt := Route{Candidates: make([]RouteCandidate, len(backends)), Chosen: -1}
	p := priced(req, counted)
	basis, pricedTokens := "", uint32(0)
	if p != req {
		basis = fmt.Sprintf(" on %d prompt tokens counted, %d declared", p.PromptTokens, req.PromptTokens)
		pricedTokens = p.PromptTokens
	}
	admissible := 0
	for i, b := range backends {
		est, fits := Estimate(b.Engine, p)
		c := RouteCandidate{Backend: b.Name, Recipe: b.Engine.Recipe(), Fidelity: b.Engine.Fidelity(), EstimateUJ: est, PromptTokens: pricedTokens}
		var why []string
		if c.Fidelity < req.FidelityFloor {
			why = append(why, fmt.Sprintf("below floor (%v < %v)", c.Fidelity, req.FidelityFloor))
		}
		switch {
		case !fits:
			why = append(why, "over ceiling (estimate overflows uint64)")
		case est > req.JouleCeilingUJ:
			why = append(why, fmt.Sprintf("over ceiling (%d uJ%s > %d uJ)", est, basis, req.JouleCeilingUJ))
		}
		if admit != nil {
			if reason := admit(b); reason != "" {
				why = append(why, reason)
			}
		}
		if len(why) == 0 {
			c.Admissible = true
			admissible++
			if rt.Chosen < 0 || est < rt.Candidates[rt.Chosen].EstimateUJ {
				rt.Chosen = i
			}
		} else {
			c.Reason = strings.Join(why, "; ")
		}
		rt.Candidates[i] = c
	}
	if rt.Chosen >= 0 {
		c := rt.Candidates[rt.Chosen]
		// The justification is part of the signed core, so it is one line
		// (ASCII but for the backend's name, which checkBackend holds to
		// UTF-8 without control characters) and a function of the
		// candidates alone.
		rt.Justification = fmt.Sprintf("%s: cheapest admissible of %d weighed (%d admissible): %v >= floor %v, est %d uJ%s <= ceiling %d uJ",
			c.Backend, len(backends), admissible, c.Fidelity, req.FidelityFloor, c.EstimateUJ, basis, req.JouleCeilingUJ)
	}
	return rt
}
