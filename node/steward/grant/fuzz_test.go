package grant

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

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
		`{"prompt":"a","temperature":0.8,"top_k":40,"min_p":0.05,"repeat_penalty":1.1,"metadata":{"joule_ceiling_uj":1}}`,
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

// FuzzParseChainFile: a chain file (meshcli grant's --chain, --parent)
// never panics the parser, fails only with ErrMalformed, and what it
// accepts writes back to a file that parses to the same grants.
func FuzzParseChainFile(f *testing.F) {
	b, err := json.Marshal(ChainFile{Chain: delegated(f, nil, nil)})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Add([]byte(`{"chain":[]}`))
	f.Add([]byte(`{"chain":["82"],"extra":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseChainFile(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		out, err := json.Marshal(ChainFile{Chain: c})
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseChainFile(out)
		if err != nil || len(again) != len(c) {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		for i := range c {
			if again[i].ID != c[i].ID {
				t.Fatalf("link %d: %s became %s", i, c[i].ID, again[i].ID)
			}
		}
	})
}

// FuzzReadRevocations: a revocation file never panics the reader, fails
// only with ErrMalformed, and every line it accepts revokes its grant no
// later than the line says.
func FuzzReadRevocations(f *testing.F) {
	id := receipt.Sum([]byte("revoked"))
	f.Add([]byte("# grant id  takes effect\n" + id.String() + " 2026-03-01T12:00:00Z\n\n"))
	f.Add([]byte(id.String() + " 2026-03-01T12:00:00+02:00\n" + id.String() + " 2026-02-01T00:00:00Z"))
	f.Add([]byte(id.String() + "\n"))
	f.Add([]byte(strings.Repeat("x", maxRevocationLine+1)))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ReadRevocations(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		for _, line := range strings.Split(string(b), "\n") {
			fields := strings.Fields(line)
			if len(fields) != 2 || strings.HasPrefix(fields[0], "#") {
				continue
			}
			id, err := receipt.ParseContentID(fields[0])
			if err != nil {
				t.Fatalf("accepted line %q with a bad id: %v", line, err)
			}
			want, err := time.Parse(time.RFC3339, fields[1])
			if err != nil {
				t.Fatalf("accepted line %q with a bad time: %v", line, err)
			}
			if at, ok := r.RevokedAt(id); !ok || at.After(want) {
				t.Fatalf("line %q: revoked %v at %v", line, ok, at)
			}
		}
	})
}
