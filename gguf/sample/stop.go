package sample

import (
	"bytes"
	"strings"
)

// Stopper ends a generation at the first of a set of stop strings, on the
// text of the tokens generated. Tokens are released only once no stop
// string can start in their text: a token whose text might be the
// beginning of one is held until the next tokens show whether it is. When
// a stop string is found, the tokens before the one it starts in are
// released and the rest are dropped, so the output never shows any part of
// it (though it may lose the text a dropped token had before the stop).
//
// A Stopper is not safe for concurrent use.
type Stopper struct {
	stops   [][]byte
	maxLen  int
	piece   func(id uint32) ([]byte, error)
	text    []byte   // the held tokens' text
	held    []uint32 // tokens held back
	ends    []int    // end offset of each held token's text in text
	ready   []uint32 // scratch for Push's result
	stopped bool
	matched []byte // the stop string found
}

// NewStopper returns a Stopper for stops (empty strings are ignored), with
// piece giving a token's text as bytes.
func NewStopper(stops []string, piece func(id uint32) ([]byte, error)) *Stopper {
	s := &Stopper{piece: piece}
	for _, st := range stops {
		if st != "" {
			s.stops = append(s.stops, []byte(st))
			s.maxLen = max(s.maxLen, len(st))
		}
	}
	return s
}

// Active reports whether there are stop strings to look for.
func (s *Stopper) Active() bool { return len(s.stops) > 0 }

// Push adds the next token. It returns the tokens that are now final (the
// slice is reused by the next call) and whether a stop string was found,
// which ends the generation: later Pushes return nothing.
func (s *Stopper) Push(id uint32) (ready []uint32, stop bool, err error) {
	if s.stopped {
		return nil, true, nil
	}
	if len(s.stops) == 0 {
		s.ready = append(s.ready[:0], id)
		return s.ready, false, nil
	}
	p, err := s.piece(id)
	if err != nil {
		return nil, false, err
	}
	s.text = append(s.text, p...)
	s.held = append(s.held, id)
	s.ends = append(s.ends, len(s.text))

	if at, st := s.find(); at >= 0 {
		s.stopped, s.matched = true, st
		return s.release(at), true, nil
	}
	return s.release(len(s.text) - s.partial()), false, nil
}

// Flush returns the tokens still held when the generation ends otherwise.
func (s *Stopper) Flush() []uint32 {
	if s.stopped {
		return nil
	}
	return s.release(len(s.text))
}

// find returns the offset of the first stop string in the held text and
// that string (the first listed, of those starting there), or -1. The
// held text is short: released text cannot be part of a match.
func (s *Stopper) find() (int, []byte) {
	best, which := -1, []byte(nil)
	for _, st := range s.stops {
		if i := bytes.Index(s.text, st); i >= 0 && (best < 0 || i < best) {
			best, which = i, st
		}
	}
	return best, which
}

// Matched is the stop string that ended the generation; "" while none
// has.
func (s *Stopper) Matched() string { return string(s.matched) }

// partial is the length of the longest suffix of text that is a proper
// prefix of a stop string: the text that must wait for what follows.
func (s *Stopper) partial() int {
	for n := min(len(s.text), s.maxLen-1); n > 0; n-- {
		suffix := s.text[len(s.text)-n:]
		for _, st := range s.stops {
			if len(st) > n && bytes.HasPrefix(st, suffix) {
				return n
			}
		}
	}
	return 0
}

// release hands out the held tokens whose text ends at or before offset
// limit, and forgets them.
func (s *Stopper) release(limit int) []uint32 {
	n := 0
	for n < len(s.held) && s.ends[n] <= limit {
		n++
	}
	s.ready = append(s.ready[:0], s.held[:n]...)
	if n > 0 {
		cut := s.ends[n-1]
		s.text = s.text[:copy(s.text, s.text[cut:])]
		s.held = s.held[:copy(s.held, s.held[n:])]
		ends := s.ends[:copy(s.ends, s.ends[n:])]
		for i := range ends {
			ends[i] -= cut
		}
		s.ends = ends
	}
	return s.ready
}

// String describes the stop strings, for errors and logs.
func (s *Stopper) String() string {
	q := make([]string, len(s.stops))
	for i, st := range s.stops {
		q[i] = string(st)
	}
	return strings.Join(q, ", ")
}
