package grammar

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestClone: a clone taken anywhere along an output continues as a
// constraint started afresh and fed the same tokens would (the same
// masks, Done and Accepting after each token), and walking it leaves the
// constraint it was taken from where it was, for a grammar held from
// the start, a lazy one on both sides of its trigger, and one with a
// budgeted block (the forced closing tag included).
func TestClone(t *testing.T) {
	sv, spiece := testVocab(testPieces())
	lv, lpiece, lid := lazyVocab()
	bv, btext, bid := budgetVocab()
	schema, err := FromSchema([]byte(`{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"]}`))
	if err != nil {
		t.Fatal(err)
	}
	budgeted, err := literal("{}").Budgeted(Block{Open: "<t>", Close: "</t>"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	ids := func(id func(string) uint32, toks ...string) []uint32 {
		var out []uint32
		for _, s := range toks {
			out = append(out, id(s))
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		start  func() (*Constraint, error)
		script []uint32 // the output's first tokens; then a random walk over the masks
	}{
		{"schema", func() (*Constraint, error) { return NewConstraint(schema, sv, spiece) }, nil},
		{"lazy", func() (*Constraint, error) {
			return NewConstraint(lazy(t, `{"const":"ab"}`, Trigger{Text: "CALL"}), lv, lpiece)
		}, ids(lid, "hello", " ", "CA", "LL", `"`)},
		{"budgeted block", func() (*Constraint, error) { return NewConstraint(budgeted, bv, btext) }, ids(bid, "<t>", "a", "b")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			for walk := range 20 {
				// The reference: one constraint fed the whole output, its
				// state after each token recorded.
				ref, err := tc.start()
				if err != nil {
					t.Fatal(err)
				}
				var out []uint32
				var states []cloneState
				for len(out) < 40 {
					st := stateOf(t, ref)
					states = append(states, st)
					var tok uint32
					if len(out) < len(tc.script) {
						tok = tc.script[len(out)]
					} else {
						if st.done || st.mask == nil {
							break
						}
						var allowed []uint32
						for id := range uint32(len(st.mask) * 64) {
							if Allowed(st.mask, id) && !slices.Contains(ref.v.eog, id) {
								allowed = append(allowed, id)
							}
						}
						if len(allowed) == 0 {
							break
						}
						tok = allowed[rng.IntN(len(allowed))]
					}
					if err := ref.Accept(tok); err != nil {
						t.Fatalf("walk %d: token %d after %v: %v", walk, tok, out, err)
					}
					out = append(out, tok)
				}
				states = append(states, stateOf(t, ref))
				// A clone taken after each prefix walks the rest; the
				// constraint it was taken from then walks it too.
				for i := range out {
					c, _ := tc.start()
					for _, tok := range out[:i] {
						if err := c.Accept(tok); err != nil {
							t.Fatal(err)
						}
					}
					d := c.Clone()
					for j := i; j < len(out); j++ {
						if err := d.Accept(out[j]); err != nil {
							t.Fatalf("walk %d: the clone taken after %d tokens refuses token %d: %v", walk, i, j, err)
						}
						if got := stateOf(t, d); !got.equal(states[j+1]) {
							t.Fatalf("walk %d: the clone taken after %d tokens, after token %d: %+v, want %+v", walk, i, j, got, states[j+1])
						}
					}
					for j := i; j < len(out); j++ {
						if got := stateOf(t, c); !got.equal(states[j]) {
							t.Fatalf("walk %d: the constraint a clone was taken from after %d tokens, at token %d: %+v, want %+v", walk, i, j, got, states[j])
						}
						if err := c.Accept(out[j]); err != nil {
							t.Fatalf("walk %d: after its clone's walk, token %d: %v", walk, j, err)
						}
					}
				}
			}
		})
	}
}

// cloneState is what a constraint says at one point of an output.
type cloneState struct {
	mask            []uint64 // nil: every token
	done, accepting bool
}

func stateOf(t *testing.T, c *Constraint) cloneState {
	t.Helper()
	mask, err := c.Mask()
	if err != nil {
		t.Fatal(err)
	}
	return cloneState{slices.Clone(mask), c.Done(), c.Accepting()}
}

func (s cloneState) equal(o cloneState) bool {
	return slices.Equal(s.mask, o.mask) && (s.mask == nil) == (o.mask == nil) && s.done == o.done && s.accepting == o.accepting
}
