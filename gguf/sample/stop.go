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
// It also ends a generation at llama.cpp's n_indent (MinIndent): a line
// after the first whose text begins with fewer spaces or tabs before it
// than asked. The token that shows that text is dropped with the rest, as
// the token a stop string starts in is.
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

	// n_indent: the least indentation, and where the text stands: a
	// newline seen, the current line's spaces and tabs, whether it has
	// shown text yet. indented says the indentation ended it.
	indent   int
	newline  bool
	col      int
	lineText bool
	indented bool
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

// MinIndent ends the generation at a line, after the first, whose text
// begins after fewer than n spaces or tabs (llama.cpp's n_indent, which
// keeps a code completion within the block it began in); 0 is off.
func (s *Stopper) MinIndent(n int) { s.indent = max(n, 0) }

// Active reports whether there are stop strings to look for, or an
// indentation to hold lines to.
func (s *Stopper) Active() bool { return len(s.stops) > 0 || s.indent > 0 }

// Indented reports whether MinIndent ended the generation.
func (s *Stopper) Indented() bool { return s.indented }

// Push adds the next token. It returns the tokens that are now final (the
// slice is reused by the next call) and whether a stop string was found,
// which ends the generation: later Pushes return nothing.
func (s *Stopper) Push(id uint32) (ready []uint32, stop bool, err error) {
	if s.stopped {
		return nil, true, nil
	}
	if !s.Active() {
		s.ready = append(s.ready[:0], id)
		return s.ready, false, nil
	}
	p, err := s.piece(id)
	if err != nil {
		return nil, false, err
	}
	start := len(s.text)
	s.text = append(s.text, p...)
	s.held = append(s.held, id)
	s.ends = append(s.ends, len(s.text))

	at, st := s.find()
	if i := s.underIndented(p); i >= 0 && (at < 0 || start+i < at) {
		at, st, s.indented = start+i, nil, true
	}
	if at >= 0 {
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

// underIndented follows the lines through a token's text p and returns
// the offset in p of the first text of a line, after the first, that
// begins under the indentation asked; -1 if none does (or none is asked).
func (s *Stopper) underIndented(p []byte) int {
	if s.indent == 0 {
		return -1
	}
	for i, b := range p {
		switch {
		case b == '\n':
			s.newline, s.col, s.lineText = true, 0, false
		case s.lineText:
		case b == ' ' || b == '\t':
			s.col++
		default:
			s.lineText = true
			if s.newline && s.col < s.indent {
				return i
			}
		}
	}
	return -1
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
