package spec

import (
	"context"
	"fmt"

	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/sample"
)

// Stats count what a speculative generation did.
type Stats struct {
	Rounds   int // target steps after the prompt
	Proposed int // drafts verified
	Accepted int // of which accepted
}

// Generate decodes n tokens after prompt on s (a session of b's model),
// speculating with prop under w (a nil prop or w decodes plainly): each
// round drafts, verifies [last, drafts…] as one window in a step of b,
// keeps the accepted drafts and the target's next token, and trims the
// rejected drafts from s's cache. A proposer with prompt work of its own
// (a draft model) does it after the target's prefill. Generation goes on past end-of-text
// tokens (the engine stops at them). With greedy p the tokens are plain
// greedy decoding's; with sampled p they are distributed as plain
// sampling's (see the package doc). It is the engine's algorithm with one
// sequence, for tests and benchmarks.
func Generate(ctx context.Context, b *model.Batch, s *model.Session, prompt []uint32, n int, p sample.Params, prop Proposer, w *Window) ([]uint32, Stats, error) {
	var st Stats
	smp := sample.New(p)
	s.Truncate(0)
	logits, err := s.Eval(ctx, prompt)
	if err != nil {
		return nil, st, err
	}
	next := smp.Sample(logits, nil)
	if prop != nil {
		if err := Prefill(ctx, prop, w, prompt); err != nil {
			return nil, st, err
		}
	}
	seq := append([]uint32(nil), prompt...)
	gen := len(prompt)
	for {
		seq = append(seq, next)
		if len(seq)-gen >= n {
			return seq[gen : gen+n], st, nil
		}
		k := 0
		if prop != nil && w != nil {
			// The last token generated is never evaluated: at most n−1 are.
			k = min(w.Size(), n-(len(seq)-gen)-1, s.Context()-s.Len()-1, b.Seqs()-1, b.Tokens()-1)
		}
		var drafts []Draft
		if k > 0 {
			if drafts, err = w.Draft(ctx, prop, seq, gen, k); err != nil {
				return nil, st, err
			}
		}
		window := Tokens(next, drafts)
		base := s.Len()
		if err := b.Step(ctx, []model.Seq{{Session: s, Tokens: window, Logits: len(window)}}); err != nil {
			return nil, st, fmt.Errorf("spec: %w", err)
		}
		acc, nxt := Verify(smp, p.ArgMax(), BatchRows{b, 0}, drafts, seq[gen:])
		s.Truncate(base + 1 + acc)
		st.Rounds++
		if len(drafts) == 0 {
			next = nxt
			continue
		}
		kept := w.Keep(drafts, acc, nxt)
		seq, next = append(seq, kept[:acc]...), kept[acc]
		st.Proposed += len(drafts)
		st.Accepted += acc
	}
}

// BatchRows are the rows of sequence I of b's last step.
type BatchRows struct {
	B *model.Batch
	I int
}

// Logits implements Rows.
func (r BatchRows) Logits(j int) []float32 { return r.B.LogitsAt(r.I, j) }

// ArgMax implements Rows.
func (r BatchRows) ArgMax(j int) uint32 { return r.B.ArgMaxAt(r.I, j) }
