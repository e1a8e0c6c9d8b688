package receipt

import (
	"crypto/ed25519"
	"fmt"
)

// Head is the position of a receipt log (§6.3): the sequence the next
// receipt takes and the content id of the last envelope sealed. The zero
// Head is genesis. A steward that restarts resumes from the Head its
// journal recorded, so its chain continues rather than restarting at 0.
type Head struct {
	Next uint64
	Last ContentID // meaningful only when Next > 0
}

// Stamp writes h's position into r: sequence Next and, past genesis, prev
// Last.
func (h Head) Stamp(r *Receipt) {
	r.Sequence = h.Next
	r.Prev = nil
	if h.Next > 0 {
		last := h.Last
		r.Prev = &last
	}
}

// Check reports whether s is the receipt that comes next at h.
func (h Head) Check(s *Sealed) error {
	r := &s.Receipt
	if r.Sequence != h.Next {
		return fmt.Errorf("%w: sequence %d, want %d", ErrChain, r.Sequence, h.Next)
	}
	if h.Next == 0 {
		if r.Prev != nil {
			return fmt.Errorf("%w: genesis receipt has a prev", ErrChain)
		}
		return nil
	}
	if r.Prev == nil || *r.Prev != h.Last {
		got := "none"
		if r.Prev != nil {
			got = r.Prev.String()
		}
		return fmt.Errorf("%w: prev %s, want %s", ErrChain, got, h.Last)
	}
	return nil
}

// Advance returns the Head after s, which must [Head.Check] at h.
func (h Head) Advance(s *Sealed) Head {
	return Head{Next: s.Receipt.Sequence + 1, Last: s.ID}
}

// LinkError names the first bad link of a receipt log: the index of the
// envelope in the log, and what is wrong with it (an envelope that does
// not verify, or a sequence or prev that does not follow).
type LinkError struct {
	Index int
	Err   error
}

func (e *LinkError) Error() string {
	return fmt.Sprintf("receipt log: envelope %d: %v", e.Index, e.Err)
}
func (e *LinkError) Unwrap() error { return e.Err }

// VerifyLog walks a receipt log from start (the zero Head for a log from
// genesis), verifying every envelope and every sequence/prev link, and
// returns the Head after the last envelope. With steward set, every
// envelope must be signed by it; without, by the steward of the first.
// The first bad link is returned as a *LinkError.
func VerifyLog(envelopes [][]byte, start Head, steward ed25519.PublicKey) (Head, error) {
	h := start
	for i, env := range envelopes {
		s, err := Open(env, steward)
		if err != nil {
			return h, &LinkError{Index: i, Err: err}
		}
		if err := h.Check(s); err != nil {
			return h, &LinkError{Index: i, Err: err}
		}
		if steward == nil {
			steward, _ = parseDIDKey(s.Receipt.Steward) // Open parsed it already
		}
		h = h.Advance(s)
	}
	return h, nil
}
