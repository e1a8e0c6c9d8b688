package change

import (
	"bytes"
	"testing"
)

// FuzzOpen: the entry decoder never panics, and what it accepts is the
// canonical core of the entry it decoded.
func FuzzOpen(f *testing.F) {
	b := newBuilder(f)
	p := b.plan(1)
	b.weights(2, nil, wA, 0, &p.ID)
	for _, s := range b.rec.Entries() {
		f.Add(s.Envelope)
	}
	f.Fuzz(func(t *testing.T, env []byte) {
		s, err := Open(env, nil)
		if err != nil {
			return
		}
		core, err := s.Entry.Core()
		if err != nil || !bytes.Equal(core, s.Core) {
			t.Fatalf("accepted a core that is not the entry's own: %v", err)
		}
	})
}
