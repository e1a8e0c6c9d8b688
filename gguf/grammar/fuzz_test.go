package grammar

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
)

// FuzzSchema compiles schemas from outside (bounded by MaxSchemaBytes and
// MaxSchemaDepth) and runs documents through their grammars: compiling
// either succeeds or fails with a typed error, and whatever a grammar
// accepts whole is valid JSON and, where the test validator can read the
// schema, valid against it.
func FuzzSchema(f *testing.F) {
	for _, tc := range schemaCases {
		for _, d := range tc.accept {
			f.Add([]byte(tc.schema), []byte(d))
		}
		for _, d := range tc.reject {
			f.Add([]byte(tc.schema), []byte(d))
		}
	}
	f.Add([]byte(`{"$ref":"#"}`), []byte(`1`))
	f.Add([]byte(`{"type":"string","pattern":"a"}`), []byte(`"a"`))
	f.Fuzz(func(t *testing.T, schema, doc []byte) {
		if len(doc) > 4096 {
			return
		}
		g, err := FromSchema(schema)
		if err != nil {
			var ue *UnsupportedError
			var se *SchemaError
			if !errors.As(err, &ue) && !errors.As(err, &se) && !errors.Is(err, ErrSchema) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		m, err := g.NewMatcher()
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Advance(doc); err != nil {
			if !errors.Is(err, ErrRejected) && !errors.Is(err, ErrAmbiguous) {
				t.Fatalf("advance: %v", err)
			}
			return
		}
		if !m.Accepting() {
			return
		}
		if !json.Valid(doc) {
			t.Fatalf("schema %s accepts invalid JSON %q", schema, doc)
		}
	})
}

// FuzzMatcherMask checks the mask against the matcher on a fixed schema
// for any prefix: every token the mask allows advances the matcher, and
// every token it refuses does not; and a clone taken halfway along the
// prefix and advanced over the rest has the same mask, leaving the
// constraint it came from as it was.
func FuzzMatcherMask(f *testing.F) {
	f.Add([]byte(`{"name":"A`))
	f.Add([]byte(`{"name":"Ann","age":1`))
	f.Add([]byte(`{`))
	pieces := testPieces()
	v, piece := testVocab(pieces)
	g, err := FromSchema([]byte(`{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}}},"required":["name"],"additionalProperties":false}`))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, prefix []byte) {
		if len(prefix) > 256 {
			return
		}
		c, err := NewConstraint(g, v, piece)
		if err != nil {
			t.Fatal(err)
		}
		if c.m.Advance(prefix) != nil {
			return
		}
		mask, err := c.Mask()
		if err != nil {
			return
		}
		for id, p := range pieces {
			if len(p) == 0 {
				continue
			}
			m, _ := g.NewMatcher()
			_ = m.Advance(prefix)
			if ok := m.Advance(p) == nil; ok != Allowed(mask, uint32(id)) {
				t.Fatalf("after %q token %q: matcher %v, mask %v", prefix, p, ok, !ok)
			}
		}
		mask = slices.Clone(mask)
		half, _ := NewConstraint(g, v, piece)
		_ = half.m.Advance(prefix[:len(prefix)/2])
		before, err := half.Mask()
		if err != nil {
			return
		}
		before = slices.Clone(before)
		d := half.Clone()
		if err := d.m.Advance(prefix[len(prefix)/2:]); err != nil {
			t.Fatalf("a clone after %q refuses the rest %q: %v", prefix[:len(prefix)/2], prefix[len(prefix)/2:], err)
		}
		if got, err := d.Mask(); err != nil || !slices.Equal(got, mask) {
			t.Fatalf("after %q a clone taken halfway has another mask (%v)", prefix, err)
		}
		if got, _ := half.Mask(); !slices.Equal(got, before) {
			t.Fatalf("after %q the clone's advance moved the constraint it came from", prefix)
		}
	})
}
