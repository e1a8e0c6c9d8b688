package spec

import (
	"slices"

	"github.com/meshnode/meshnode/gguf/grammar"
)

// A round of output held to a grammar (a response format, tools held to
// their schemas) drafts as any other (a draft model held to the grammar
// too: ModelProposer.Hold); its window keeps the drafts the grammar can
// take (Allowed), and each of its rows is verified against the grammar's
// mask after the drafts before it (Masks, VerifyAllowed), the mask plain
// constrained decoding would pick that token under. So a greedy window's
// tokens are plain constrained decoding's, one for one, and a sampled
// one's are distributed as plain constrained sampling's.
//
// A draft the grammar refuses falls for certain (the target gives it no
// probability). Where it was proposed deterministically (Q nil: prompt
// lookup, any greedy draft) it is dropped, and its row's pick is the
// target's own, as the rejection rule's would be (the residual of a
// one-hot q the target gives nothing to is the target's distribution).
// A sampled draft (Q set) is kept and verified: drawn from a q with mass
// on refused tokens, its rejection draws from the residual max(0, p − q),
// which is not p, and dropping it would skew the output toward the
// tokens q favours.

// Allowed returns drafts up to the first the grammar refuses after the
// ones before it — that one included where it was sampled (above) — and
// none after one where the grammar must end (the generation ends there),
// walking a clone of con (con stays where it is). A dropped draft would
// fall anyway and costs no row.
func Allowed(con *grammar.Constraint, drafts []Draft) []Draft {
	c := con.Clone()
	for j, d := range drafts {
		if c.Done() {
			return drafts[:j]
		}
		if c.Accept(d.Token) != nil {
			if d.Q != nil {
				return drafts[:j+1]
			}
			return drafts[:j]
		}
	}
	return drafts
}

// Masks returns the masks of a window's rows under con, reusing buf's
// slices: row j's is the tokens the grammar allows after drafts[:j] (nil
// where it allows every token: a lazy grammar before its trigger), found
// on a clone of con. The first row's error (the state the output is in
// has no token) is returned. A later row's error, or a draft the grammar
// refuses, ends the masks there: the caller verifies only as many drafts
// as have a mask after them (len(masks)-1), and a pick that leads into
// such a state meets the error in the next round, as plain decoding
// would. A refused draft that was sampled is verified all the same
// (above): the row after it, which its certain rejection never reaches,
// has a nil mask. The masks are copies: con's cache may reuse its own.
func Masks(con *grammar.Constraint, drafts []Draft, buf [][]uint64) ([][]uint64, error) {
	c := con.Clone()
	masks := buf[:0]
	for j := 0; ; j++ {
		mk, err := c.Mask()
		if err != nil {
			if j == 0 {
				return nil, err
			}
			return masks, nil
		}
		var cp []uint64
		if mk != nil {
			if j < cap(buf) {
				cp = buf[:j+1][j]
			}
			cp = append(slices.Grow(cp[:0], len(mk)), mk...)
		}
		masks = append(masks, cp)
		if j == len(drafts) {
			return masks, nil
		}
		if c.Accept(drafts[j].Token) != nil {
			if drafts[j].Q != nil {
				masks = append(masks, nil)
			}
			return masks, nil
		}
	}
}

// Found is what Masks found: the masks, or the first row's error.
type Found struct {
	Masks [][]uint64
	Err   error
}

// MasksAhead runs Masks on a goroutine of its own, so that a window's
// masks are found while its step runs (they need the grammar's state, not
// the logits); the channel gets the one result, and the goroutine never
// blocks. Until it has, con (and its clones) must not be used.
func MasksAhead(con *grammar.Constraint, drafts []Draft, buf [][]uint64) <-chan Found {
	ready := make(chan Found, 1)
	go func() {
		masks, err := Masks(con, drafts, buf)
		ready <- Found{masks, err}
	}()
	return ready
}
