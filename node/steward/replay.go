package steward

import (
	"context"
	"errors"
	"fmt"

	"github.com/meshnode/meshnode/node/receipt"
)

// Replay re-executes the serve r records on backend b and judges it
// against r's output commitment (§6.4). in.On is filled from b. The engine
// runs unmetered and nothing is sealed: a replay is a check anyone can
// make, not a serve.
func Replay(ctx context.Context, b Backend, r *receipt.Receipt, in receipt.Replay) (receipt.Verdict, error) {
	v, _, err := replay(ctx, b, r, in)
	return v, err
}

// replay is Replay that also returns the tokens the re-run produced (nil
// when the serve was judged without running it).
func replay(ctx context.Context, b Backend, r *receipt.Receipt, in receipt.Replay) (receipt.Verdict, []uint32, error) {
	in.On = receipt.Replayer{
		Backend:       b.Name,
		Recipe:        b.Engine.Recipe(),
		Weights:       namedWeights(b.Engine),
		Deterministic: b.Engine.Deterministic(),
	}
	// A serve cut short is judged by its prefix: the re-run need go no
	// further (one more token would show nothing the commitment binds).
	limit := in.Request.MaxTokens
	if r.CutShort != "" {
		limit = min(limit, r.TokensOut)
	}
	var out []uint32
	v, err := r.Replay(in, func() ([]uint32, error) {
		out = []uint32{}
		_, err := b.Engine.Serve(ctx, in.Request, in.Prompt, func(tok uint32) error {
			if uint32(len(out)) >= limit {
				if limit < in.Request.MaxTokens {
					return errEnough
				}
				return ErrMaxTokens
			}
			out = append(out, tok)
			return nil
		})
		if err != nil && !errors.Is(err, errEnough) {
			return nil, fmt.Errorf("steward: replay on %s: %w", b.Name, err)
		}
		return out, nil
	})
	if v.Prefix > 0 {
		out = out[:v.Prefix]
	}
	return v, out, err
}

// errEnough stops a re-run that has made every token a replay compares.
var errEnough = errors.New("steward: replay: the tokens the receipt holds are made")

// ReplayReceipt replays one of this steward's own receipts for whoever
// holds its request and prompt: it re-runs req on prompt on the backend
// r names, with the opening this steward derives for r, so that the
// verdict can be Verified (§6.4). disclosed is an output disclosed for r
// earlier, or nil. When the re-run opens the commitment, the disclosure
// of r (opening, payload, output) comes with the verdict, for anyone to
// check with [receipt.Disclosure.Opens]. A backend no longer registered
// here makes the serve NotReplayable. r must be this steward's: check
// its envelope under the steward's key first.
func (s *Steward) ReplayReceipt(ctx context.Context, r *receipt.Receipt, req receipt.ServeRequest, prompt, disclosed []uint32) (receipt.Verdict, *receipt.Disclosure, error) {
	if r.Steward != s.DID() {
		return receipt.Verdict{}, nil, fmt.Errorf("steward: replay: the receipt was sealed by %s, not this steward", r.Steward)
	}
	b, ok := s.backend(r.Backend)
	if !ok {
		return receipt.Verdict{Kind: receipt.NotReplayable,
			Reason: fmt.Sprintf("backend %s is not registered on this node now", r.Backend)}, nil, nil
	}
	in := receipt.Replay{Request: req, Prompt: prompt, Opening: s.sealer.Opening(r.RequestID, r.Nonce), Disclosed: disclosed}
	v, out, err := replay(ctx, b, r, in)
	if err != nil || v.Kind != receipt.Verified {
		return v, nil, err
	}
	d, err := s.Disclose(r, prompt, out)
	if err != nil {
		return v, nil, fmt.Errorf("steward: replay: verified, yet %w", err)
	}
	return v, &d, nil
}
