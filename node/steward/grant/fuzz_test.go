package grant

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/meshnode/meshnode/node/receipt"
)

// FuzzParseSigned: the decoder never panics, and what it accepts
// re-encodes to the same bytes.
func FuzzParseSigned(f *testing.F) {
	for _, s := range delegated(f, func(g *Grant) { g.Caveats = []Caveat{ModelIn(receipt.ContentID{1}), MaxCostUJ(3)} }, nil) {
		f.Add(s.Bytes())
	}
	f.Add([]byte{0x82, 0x40, 0x40})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSigned(b)
		if err != nil {
			return
		}
		if !bytes.Equal(s.Bytes(), b) || s.ID != receipt.Sum(s.Core) {
			t.Fatalf("accepted %x, re-encodes as %x", b, s.Bytes())
		}
	})
}

// FuzzParsePresentation: the body form never panics, and what it accepts
// marshals back to an equal presentation.
func FuzzParsePresentation(f *testing.F) {
	p := present(f, delegated(f, nil, nil), seedCaller, receipt.ContentID{1}, 5)
	b, err := json.Marshal(p)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"chain":[],"caller":"","nonce":"","signature":""}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePresentation(b)
		if err != nil {
			return
		}
		out, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		q, err := ParsePresentation(out)
		if err != nil || q.SpendKey() != p.SpendKey() || q.Signature != p.Signature || q.Caller != p.Caller {
			t.Fatalf("round trip: %v", err)
		}
	})
}

// FuzzGrantedServeRequest: the derivation never panics, and what it
// derives is a valid, content-addressable request.
func FuzzGrantedServeRequest(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"metadata":{"joule_ceiling_uj":"9000"}}`,
		`{"input":"x","instructions":"y","temperature":1,"seed":2,"stop":"z","metadata":{"joule_ceiling_uj":1,"fidelity_floor":3}}`,
		`{"prompt":["a"],"top_p":0.5,"metadata":{"joule_ceiling_uj":1,"prompt_tokens":"2"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := GrantedServeRequest(b)
		if err != nil {
			return
		}
		if _, err := r.ID(); err != nil {
			t.Fatalf("derived an invalid request: %v", err)
		}
	})
}
