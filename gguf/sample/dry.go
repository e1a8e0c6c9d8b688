package sample

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/meshnode/meshnode/gguf/detmath"
)

// DRY is llama.cpp's DRY ("don't repeat yourself") penalty, from
// koboldcpp: a token that would extend a sequence the text already
// holds — its latest tokens repeated earlier, followed there by this
// token — loses Multiplier·Base^(n − AllowedLength) from its logit, n
// the longest such repeat of at least AllowedLength tokens. A sequence
// breaker (a newline, a quote…) restarts the count: no repeat reaches
// back past the latest one, and a token that is one is never penalised.
type DRY struct {
	Multiplier, Base float64
	AllowedLength    int
	// LastN is how many of the latest tokens, of Context and the
	// history together, it scans; 0 all of them.
	LastN int
	// Breakers are the sequence breakers as token sequences (Breakers
	// makes them): by head token, the tails that follow it; an empty
	// tail is a breaker of that token alone.
	Breakers map[uint32][][]uint32
	// Context is the tokens before the history (the prompt), which it
	// scans too, as llama-server does. The sampler reads it and does not
	// change it.
	Context []uint32
}

// DefaultBreakers are llama.cpp's sequence breakers.
var DefaultBreakers = []string{"\n", ":", "\"", "*"}

// Bounds on a breaker, llama.cpp's: its text (longer ones it truncates)
// and its tail's tokens.
const (
	MaxBreakerBytes = 40
	maxBreakerTail  = 20
)

// validate checks d's ranges.
func (d *DRY) validate() error {
	switch {
	case !(d.Multiplier > 0) || math.IsInf(d.Multiplier, 0):
		return fmt.Errorf("sample: dry multiplier %v", d.Multiplier)
	case !(d.Base >= 1) || math.IsInf(d.Base, 0):
		return fmt.Errorf("sample: dry base %v is below 1", d.Base)
	case d.AllowedLength < 0 || d.LastN < 0:
		return fmt.Errorf("sample: dry allowed length %d, last n %d", d.AllowedLength, d.LastN)
	}
	return nil
}

// BreakerVocab is what Breakers reads a vocabulary's tokens with.
type BreakerVocab interface {
	NumTokens() int
	Text(id uint32) string // the token's text, a control token's included
	Tokenize(text string) []uint32
}

// Breakers are the token sequences of DRY's sequence breakers, as
// llama.cpp finds them: every token whose text holds a breaker is one on
// its own; a token whose text ends with a breaker's beginning heads a
// sequence whose tail is the rest of the breaker, tokenized (at most 20
// tokens). A breaker is at most MaxBreakerBytes.
func Breakers(v BreakerVocab, breakers []string) (map[uint32][][]uint32, error) {
	out := map[uint32][][]uint32{}
	texts := make([]string, v.NumTokens())
	for id := range texts {
		texts[id] = v.Text(uint32(id))
	}
	for _, b := range breakers {
		if b == "" || len(b) > MaxBreakerBytes {
			return nil, fmt.Errorf("sample: dry sequence breaker %q: 1 to %d bytes", b, MaxBreakerBytes)
		}
		for id, w := range texts {
			add := func(tail []uint32) {
				for _, t := range out[uint32(id)] {
					if slices.Equal(t, tail) {
						return
					}
				}
				out[uint32(id)] = append(out[uint32(id)], tail)
			}
			if strings.Contains(w, b) {
				add(nil)
				continue
			}
			// Each place where the text's end begins the breaker.
			for pos := strings.IndexByte(w, b[0]); pos >= 0; {
				if n := len(w) - pos; n < len(b) && w[pos:] == b[:n] {
					tail := v.Tokenize(b[n:])
					add(tail[:min(len(tail), maxBreakerTail)])
				}
				next := strings.IndexByte(w[pos+1:], b[0])
				if next < 0 {
					break
				}
				pos += 1 + next
			}
		}
	}
	return out, nil
}

// dryPenalties sets s.dryPen to each token's DRY penalty after
// Context and history, none where DRY is off or finds no repeat.
func (s *Sampler) dryPenalties(history []uint32) {
	clear(s.dryPen)
	d := s.p.DRY
	if d == nil || !s.dries {
		return
	}
	// The scanned tokens, latest last.
	n := len(d.Context) + len(history)
	if d.LastN > 0 {
		n = min(n, d.LastN)
	}
	if n <= d.AllowedLength {
		return
	}
	seq := s.drySeq[:0]
	if rest := n - len(history); rest > 0 {
		seq = append(seq, d.Context[len(d.Context)-rest:]...)
		seq = append(seq, history...)
	} else {
		seq = append(seq, history[len(history)-n:]...)
	}
	s.drySeq = seq
	at := func(i int) uint32 { return seq[n-1-i] } // i tokens from the end

	// A repeat reaches back no further than the latest breaker: a head
	// i tokens from the end whose tail follows it.
	limit := n
	for i := range n {
		tails, ok := d.Breakers[at(i)]
		if !ok {
			continue
		}
		longest := -1
		for _, tail := range tails {
			if len(tail) <= longest || len(tail) > i {
				continue
			}
			match := true
			for o, t := range tail {
				if at(i-o-1) != t {
					match = false
					break
				}
			}
			if match {
				longest = len(tail)
			}
		}
		if longest >= 0 {
			limit = i - longest
			break
		}
	}
	if limit < d.AllowedLength {
		return
	}

	// z[k]: how many tokens, read backwards from the end, equal those
	// read backwards from k tokens before the end (the Z-function of the
	// reversed sequence): the token after that earlier place would
	// extend a repeat of min(z[k], limit) tokens.
	z := slices.Grow(s.dryZ[:0], n)[:n]
	s.dryZ = z
	z[0] = n
	for k, l, r := 1, 0, 0; k < n; k++ {
		m := 0
		if k < r {
			m = min(r-k, z[k-l])
		}
		for k+m < n && at(m) == at(k+m) {
			m++
		}
		z[k] = m
		if k+m > r {
			l, r = k, k+m
		}
	}
	var maxExp float64
	if d.Base > 1.000001 {
		// Past this the power overflows float32 (llama.cpp's clamp).
		maxExp = math.Floor(88.7228391 / detmath.Log(d.Base))
	}
	for k := 1; k < n; k++ {
		rep := min(z[k], limit)
		if rep < d.AllowedLength {
			continue
		}
		next := at(k - 1)
		if tails := d.Breakers[next]; slices.ContainsFunc(tails, func(t []uint32) bool { return len(t) == 0 }) {
			continue // a breaker on its own is never penalised
		}
		e := float64(rep - d.AllowedLength)
		if maxExp > 0 {
			e = min(e, maxExp)
		}
		if p := d.Multiplier * detmath.Pow(d.Base, e); p > s.dryPen[next] {
			s.dryPen[next] = p
		}
	}
}
