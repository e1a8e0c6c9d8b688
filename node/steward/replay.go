package steward

import (
	"context"
	"fmt"

	"github.com/meshnode/meshnode/node/receipt"
)

// Replay re-executes the serve r records on backend b and judges it
// against r's output commitment (§6.4). in.On is filled from b. The engine
// runs unmetered and nothing is sealed: a replay is a check anyone can
// make, not a serve.
func Replay(ctx context.Context, b Backend, r *receipt.Receipt, in receipt.Replay) (receipt.Verdict, error) {
	in.On = receipt.Replayer{
		Backend:       b.Name,
		Recipe:        b.Engine.Recipe(),
		Weights:       namedWeights(b.Engine),
		Deterministic: b.Engine.Deterministic(),
	}
	return r.Replay(in, func() ([]uint32, error) {
		var out []uint32
		_, err := b.Engine.Serve(ctx, in.Request, in.Prompt, func(tok uint32) error {
			if uint32(len(out)) >= in.Request.MaxTokens {
				return ErrMaxTokens
			}
			out = append(out, tok)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("steward: replay on %s: %w", b.Name, err)
		}
		return out, nil
	})
}
