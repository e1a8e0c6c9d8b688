package grammar

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/gguf/grammar/grammartest"
)

// testPieces is a small vocabulary with the overlaps a real one has:
// tokens that are prefixes of others, tokens spanning JSON's structure,
// single bytes (as byte fallback) and an empty control token.
func testPieces() [][]byte {
	var p [][]byte
	for _, s := range []string{
		"", "{", "}", "[", "]", ",", ":", "\"", " ", "\n", "  ", "\t",
		"{\"", "\":", "\": ", "\",", "\"}", "},", "}]", "[\"", "\"]", ", ", ": ",
		"a", "ab", "abc", "name", "age", "\"name", "\"age", "Ann", "Bob", " Ann",
		"0", "1", "12", "-", ".", "e", "5", "9",
		"true", "tr", "ue", "false", "null", "nu", "ll",
		"red", "green", "\"red\"", "\\", "\\n", "\\u", "00e9",
	} {
		p = append(p, []byte(s))
	}
	for b := range 256 {
		p = append(p, []byte{byte(b)})
	}
	return p
}

const testEOS = 1000

func testVocab(pieces [][]byte) (*Vocab, func(uint32) []byte) {
	piece := func(id uint32) []byte {
		if int(id) < len(pieces) {
			return pieces[id]
		}
		return nil
	}
	return NewVocab(testEOS+1, len(pieces), piece, []uint32{testEOS}), piece
}

// bruteMask is the mask by definition: each token tried on a fresh
// matcher over the prefix.
func bruteMask(t *testing.T, g *Grammar, prefix []byte, pieces [][]byte, size int) []bool {
	allowed := make([]bool, size)
	m, err := g.NewMatcher()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Advance(prefix); err != nil {
		t.Fatal(err)
	}
	allowed[testEOS] = m.Accepting()
	for id, p := range pieces {
		if len(p) == 0 {
			continue
		}
		m, _ := g.NewMatcher()
		_ = m.Advance(prefix)
		if m.Advance(p) == nil {
			allowed[id] = true
		}
	}
	return allowed
}

func TestMaskMatchesBruteForce(t *testing.T) {
	pieces := testPieces()
	v, piece := testVocab(pieces)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, schema := range []string{
		`{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false}`,
		`{"type":"array","items":{"enum":["red","green"]},"maxItems":4}`,
		`{"anyOf":[{"type":"number"},{"type":"boolean"},{"type":"null"}]}`,
		`{"type":"object"}`,
	} {
		g, err := FromSchema([]byte(schema))
		if err != nil {
			t.Fatal(err)
		}
		for range 8 {
			c, err := NewConstraint(g, v, piece)
			if err != nil {
				t.Fatal(err)
			}
			var out []byte
			for step := 0; step < 60; step++ {
				mask, err := c.Mask()
				if err != nil {
					t.Fatalf("%s after %q: %v", schema, out, err)
				}
				want := bruteMask(t, g, out, pieces, v.Size())
				var allowed []uint32
				for id := range v.Size() {
					if Allowed(mask, uint32(id)) != want[id] {
						t.Fatalf("%s after %q: token %d (%q): mask %v, brute force %v", schema, out, id, piece(uint32(id)), Allowed(mask, uint32(id)), want[id])
					}
					if want[id] {
						allowed = append(allowed, uint32(id))
					}
				}
				if len(allowed) == 0 {
					t.Fatalf("%s after %q: nothing allowed", schema, out)
				}
				id := allowed[rng.IntN(len(allowed))]
				if want[testEOS] && rng.IntN(3) == 0 {
					id = testEOS
				}
				if err := c.Accept(id); err != nil {
					t.Fatal(err)
				}
				if id == testEOS {
					if !json.Valid(out) {
						t.Fatalf("%s: ended on invalid JSON %q", schema, out)
					}
					if err := grammartest.Validate([]byte(schema), out); err != nil {
						t.Fatalf("%s: %q: %v", schema, out, err)
					}
					break
				}
				out = append(out, piece(id)...)
				if c.Done() {
					if err := grammartest.Validate([]byte(schema), out); err != nil {
						t.Fatalf("%s: %q: %v", schema, out, err)
					}
					break
				}
			}
		}
	}
}

func TestMaskRefusals(t *testing.T) {
	pieces := testPieces()
	v, piece := testVocab(pieces)
	g, _ := FromSchema([]byte(`{"const":"ab"}`))
	c, _ := NewConstraint(g, v, piece)
	if err := c.Accept(testEOS); err == nil {
		t.Fatal("EOS accepted before the grammar may end")
	}
	if err := c.Accept(uint32(len(pieces) - 256 + '{')); err == nil {
		t.Fatal("a refused token accepted")
	}
	if err := c.Accept(0); err == nil {
		t.Fatal("a token with no bytes accepted")
	}
	// A vocabulary without the bytes the grammar needs next.
	small := NewVocab(3, 2, func(id uint32) []byte { return [][]byte{[]byte("x"), []byte("y")}[id] }, []uint32{2})
	c2, _ := NewConstraint(g, small, func(id uint32) []byte { return nil })
	if _, err := c2.Mask(); err == nil {
		t.Fatal("a mask with no token")
	}
}

// BenchmarkMask is the trie walk on the test vocabulary inside a string
// and between an object's members (make bench-grammar measures a real
// model's).
func BenchmarkMask(b *testing.B) {
	v, _ := testVocab(testPieces())
	g, err := FromSchema([]byte(`{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false}`))
	if err != nil {
		b.Fatal(err)
	}
	for _, at := range []string{`{"name":"An`, `{"name":"Ann"`} {
		b.Run(at, func(b *testing.B) {
			m, _ := g.NewMatcher()
			if err := m.Advance([]byte(at)); err != nil {
				b.Fatal(err)
			}
			var dst []uint64
			for b.Loop() {
				if dst, err = v.Mask(m, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
