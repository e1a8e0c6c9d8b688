package spec

import "context"

// The parts of a speculative round every decoder shares (Generate, the
// GGUF engine's scheduler, a split model's head): drafting, the window
// verified, and what the round keeps.

// Draft asks p for up to k drafts after seq, whose first prompt tokens are
// the prompt, and counts a round that drafted fewer as declined.
func (w *Window) Draft(ctx context.Context, p Proposer, seq []uint32, prompt, k int) ([]Draft, error) {
	drafts, err := p.Propose(ctx, seq, prompt, k)
	if err != nil {
		return nil, err
	}
	if len(drafts) < k {
		w.Declined()
	}
	return drafts, nil
}

// Tokens is the window a round verifies: the token generated last, which
// the target has not evaluated yet, then the drafts.
func Tokens(last uint32, drafts []Draft) []uint32 {
	window := make([]uint32, 0, len(drafts)+1)
	window = append(window, last)
	for _, d := range drafts {
		window = append(window, d.Token)
	}
	return window
}

// Keep records a verified round whose first accepted drafts stood, and
// returns the tokens it yields: those drafts, then the target's next.
func (w *Window) Keep(drafts []Draft, accepted int, next uint32) []uint32 {
	w.Record(len(drafts), accepted)
	kept := make([]uint32, 0, accepted+1)
	for _, d := range drafts[:accepted] {
		kept = append(kept, d.Token)
	}
	return append(kept, next)
}
