package node

import (
	"context"
	"fmt"
	"net/http"

	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

// Replay re-runs a generation this node served and judges it against its
// receipt (mesh/1 §6.4; POST /v1/mesh/replay). The prompt is tokenized
// and the request built exactly as the serve did, under the node's
// defaults as they stand now; the steward re-runs it on the backend the
// receipt names, unmetered and unsealed, and discloses the receipt when
// the re-run opens its output commitment.
func (a *apiNode) Replay(ctx context.Context, rp *api.Replay) (*api.ReplayResult, error) {
	env, err := energyEnvelope(rp.Energy, "energy")
	if err != nil {
		return nil, err
	}
	// Opened under its own kid first, so that a broken envelope (400) is
	// told apart from another node's receipt (404).
	sealed, err := receipt.Open(env, nil)
	if err != nil {
		return nil, api.Errorf(http.StatusBadRequest, "invalid_request_error", "invalid_receipt",
			"energy.envelope_hex is not a valid receipt envelope: %v", err)
	}
	if self := a.n.steward.DID(); sealed.Receipt.Steward != self {
		e := api.Errorf(http.StatusNotFound, "not_found_error", "receipt_not_ours",
			"the receipt was sealed by %s, not by this node (%s); replay it on the node that served it", sealed.Receipt.Steward, self)
		e.Param = "energy"
		return nil, e
	}
	r := &sealed.Receipt
	res := &api.ReplayResult{
		Receipt: sealed.ID.String(), Sequence: r.Sequence, Steward: r.Steward,
		RequestID: r.RequestID.String(), Backend: r.Backend, Recipe: r.Recipe,
	}
	notReplayable := func(format string, args ...any) (*api.ReplayResult, error) {
		res.Verdict, res.Reason = api.VerdictNotReplayable, fmt.Sprintf(format, args...)
		return res, nil
	}
	g := rp.Generation
	if g.Model != r.Recipe {
		return notReplayable("the request names model %q; the receipt's serve ran %q", g.Model, r.Recipe)
	}
	m, ok := (&registry{n: a.n}).served(g.Model)
	if !ok {
		return notReplayable("model %q is not loaded on this node now", g.Model)
	}
	ctx, leave, err := m.in.gate.enter(ctx)
	if err != nil {
		return nil, api.Errorf(http.StatusServiceUnavailable, "server_error", "model_draining", "model %q is draining: %v", g.Model, err)
	}
	defer leave()
	req, prompt, _, err := m.prepare(g)
	if err != nil {
		return nil, err
	}
	if req.Sampling.Unseeded() {
		// The serve drew a seed and handed it back with the receipt.
		if req.Sampling.Seed, err = energySeed(rp.Energy); err != nil {
			return nil, err
		}
	}
	if m.namesDraft(g, prompt.prediction) && req.Sampling != nil {
		// The draft the serve named, where its answer says (a model
		// reloaded since may name another: Energy.Draft).
		d, ok, err := energyDraft(rp.Energy)
		if err != nil {
			return nil, err
		}
		if ok {
			req.Sampling.Draft = d
			err := req.Validate()
			if err == nil {
				_, _, _, err = spec.SplitDraft(d)
			}
			if err != nil {
				return nil, api.Errorf(http.StatusBadRequest, "invalid_request_error", "invalid_request", "energy.draft: %v", err)
			}
		}
	}
	if id, err := req.ID(); err == nil {
		res.ReplayedRequestID = id.String()
	}
	if g.Grammar != nil {
		// The grammar the request derives, which its id names: the re-run
		// is held to it as the serve was.
		ctx = engine.WithGrammar(ctx, g.Grammar)
	}
	if len(prompt.prediction) > 0 {
		// A sampled serve's tokens depend on the drafts its prediction
		// gave, which its draft name names.
		ctx = engine.WithPrediction(ctx, prompt.prediction)
	}
	v, d, err := a.n.steward.ReplayReceipt(ctx, r, req, prompt.ids, rp.Disclosed)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, api.Errorf(http.StatusInternalServerError, "server_error", "replay_failed", "%v", err)
	}
	switch v.Kind {
	case receipt.Verified:
		res.Verdict, res.Disclosure = api.VerdictVerified, d
		if r.CutShort != "" {
			// Verified, a cut serve's output is the re-run's first
			// tokens (none, where it was cut before its first).
			res.CutShort, res.PrefixTokens = r.CutShort, v.Prefix
		}
	case receipt.Diverged:
		at := v.FirstDivergence
		res.Verdict, res.FirstDivergence = api.VerdictDiverged, &at
	default:
		return notReplayable("%s", v.Reason)
	}
	return res, nil
}
