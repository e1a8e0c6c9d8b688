package grammar

import "math/rand/v2"

// sample draws a random sentence of g byte by byte, favouring the bytes
// that close strings and structures so that it ends; it reports false if
// it had not ended within limit bytes.
func sample(g *Grammar, rng *rand.Rand, limit int) (string, bool) {
	m, err := g.NewMatcher()
	if err != nil {
		return "", false
	}
	var out []byte
	for len(out) < limit {
		if m.Done() || m.Accepting() && rng.IntN(4) == 0 {
			return string(out), true
		}
		next := m.Next()
		var choices []byte
		for b := 0; b < 256; b++ {
			if next.Has(byte(b)) {
				choices = append(choices, byte(b))
			}
		}
		if len(choices) == 0 {
			return string(out), m.Accepting()
		}
		c := choices[rng.IntN(len(choices))]
		for _, pref := range []byte{'"', '}', ']'} {
			if next.Has(pref) && rng.IntN(3) == 0 {
				c = pref
			}
		}
		if err := m.Advance([]byte{c}); err != nil {
			return string(out), false
		}
		out = append(out, c)
	}
	return string(out), false
}
