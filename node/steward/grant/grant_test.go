package grant

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/receipt"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors.json")

// TestVerifyRefusals: every check of a presentation's proofs, each with
// its own error and the HTTP status the binding answers with.
func TestVerifyRefusals(t *testing.T) {
	id := requestID(t, request(1000))
	other := requestID(t, request(1001))
	steward := key(t, seedSteward).DIDKey()
	tests := []struct {
		name   string
		p      func(t *testing.T) *Presentation
		want   error
		status int
	}{
		{"valid", func(t *testing.T) *Presentation { return present(t, delegated(t, nil, nil), seedCaller, id, 1) }, nil, 0},
		{"caller is not the leaf's issuer", func(t *testing.T) *Presentation {
			p := present(t, delegated(t, nil, nil), seedCaller, id, 1)
			p.Caller = key(t, seedOwner).DIDKey()
			return p
		}, ErrNotIssuer, http.StatusUnauthorized},
		{"signed for another request", func(t *testing.T) *Presentation {
			return present(t, delegated(t, nil, nil), seedCaller, other, 1)
		}, ErrPresentationSignature, http.StatusUnauthorized},
		{"nonce changed after signing", func(t *testing.T) *Presentation {
			p := present(t, delegated(t, nil, nil), seedCaller, id, 1)
			p.Nonce[0] ^= 1
			return p
		}, ErrPresentationSignature, http.StatusUnauthorized},
		{"held by another steward", func(t *testing.T) *Presentation {
			c := chainOf(t, link{seedOwner, seedCaller, nil}, link{seedCaller, seedOther, nil})
			return present(t, c, seedCaller, id, 1)
		}, ErrNotHolder, http.StatusForbidden},
		{"root names a parent", func(t *testing.T) *Presentation {
			return presentUnlinked(t, delegated(t, func(g *Grant) { g.Parent = &receipt.ContentID{1} }, nil), id)
		}, ErrChain, http.StatusForbidden},
		{"child names another parent", func(t *testing.T) *Presentation {
			return presentUnlinked(t, delegated(t, nil, func(g *Grant) { g.Parent = &receipt.ContentID{2} }), id)
		}, ErrChain, http.StatusForbidden},
		{"child not issued by its parent's subject", func(t *testing.T) *Presentation {
			c := chainOf(t, link{seedOwner, seedOther, nil}, link{seedCaller, seedSteward, nil})
			return presentUnlinked(t, c, id)
		}, ErrChain, http.StatusForbidden},
		{"chain too long", func(t *testing.T) *Presentation {
			links := []link{{seedOwner, seedCaller, nil}}
			for range MaxChain {
				links = append(links, link{seedCaller, seedCaller, func(g *Grant) { g.BudgetUJ = 1 }})
			}
			links = append(links, link{seedCaller, seedSteward, func(g *Grant) { g.BudgetUJ = 1 }})
			return presentUnlinked(t, chainOf(t, links...), id)
		}, ErrChain, http.StatusForbidden},
		{"child adds an action", func(t *testing.T) *Presentation {
			return presentUnlinked(t, delegated(t, nil, func(g *Grant) { g.Capability.Actions = []string{"embed", ActionInfer} }), id)
		}, ErrAttenuation, http.StatusForbidden},
		{"child widens the resource", func(t *testing.T) *Presentation {
			return presentUnlinked(t, delegated(t, func(g *Grant) { g.Capability.Resource = RequestResource(id) }, nil), id)
		}, ErrAttenuation, http.StatusForbidden},
		{"child raises the budget", func(t *testing.T) *Presentation {
			return presentUnlinked(t, delegated(t, nil, func(g *Grant) { g.BudgetUJ = 2_000_000 }), id)
		}, ErrAttenuation, http.StatusForbidden},
		{"child outlives its parent", func(t *testing.T) *Presentation {
			return presentUnlinked(t, delegated(t, nil, func(g *Grant) { g.Expiry += 1 }), id)
		}, ErrAttenuation, http.StatusForbidden},
		{"a grant's signature does not verify", func(t *testing.T) *Presentation {
			c := delegated(t, nil, nil)
			c[0].Signature[5] ^= 1
			return present(t, c, seedCaller, id, 1)
		}, ErrSignature, http.StatusForbidden},
		{"a grant's core changed after signing", func(t *testing.T) *Presentation {
			// The root's budget is raised without its issuer, and the
			// child re-issued under the forged root: only the root's
			// signature can tell.
			c := delegated(t, nil, nil)
			forged := *c[0]
			forged.Grant.BudgetUJ *= 10
			forged.Core = mustCore(t, &forged.Grant)
			forged.ID = receipt.Sum(forged.Core)
			leaf := c[1].Grant
			leaf.Parent = &forged.ID
			s, err := Sign(leaf, key(t, seedCaller))
			if err != nil {
				t.Fatal(err)
			}
			return present(t, Chain{&forged, s}, seedCaller, id, 1)
		}, ErrSignature, http.StatusForbidden},
		{"unknown caveat", func(t *testing.T) *Presentation {
			c := delegated(t, func(g *Grant) { g.Caveats = []Caveat{{Type: "Geofence", UJ: new(uint64)}} }, nil)
			return present(t, c, seedCaller, id, 1)
		}, ErrUnknownCaveat, http.StatusForbidden},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(tc.p(t), id, steward)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !errors.Is(err, ErrRefused) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if got := HTTPStatus(err); got != tc.status {
				t.Errorf("HTTP status %d, want %d", got, tc.status)
			}
			if Label(err) == "" {
				t.Error("refusal has no label")
			}
		})
	}
}

// TestVerifierMemory: a Verifier skips only a signature it has checked on
// the very same bytes.
func TestVerifierMemory(t *testing.T) {
	id := requestID(t, request(1000))
	steward := key(t, seedSteward).DIDKey()
	v := NewVerifier()
	c := delegated(t, nil, nil)
	if _, err := v.Verify(present(t, c, seedCaller, id, 1), id, steward); err != nil {
		t.Fatal(err)
	}
	forged := *c[0]
	forged.Signature[0] ^= 1
	if _, err := v.Verify(present(t, Chain{&forged, c[1]}, seedCaller, id, 2), id, steward); !errors.Is(err, ErrSignature) {
		t.Fatalf("a forged signature on a remembered grant: %v", err)
	}
	if _, err := v.Verify(present(t, c, seedCaller, id, 3), id, steward); err != nil {
		t.Fatal(err)
	}
	p := present(t, c, seedCaller, id, 4)
	p.Signature[0] ^= 1
	if _, err := v.Verify(p, id, steward); !errors.Is(err, ErrPresentationSignature) {
		t.Fatalf("the presentation's own signature is always checked: %v", err)
	}
}

// presentUnlinked signs a presentation without Present's chain check, as
// a hostile caller would.
func presentUnlinked(t *testing.T, c Chain, id receipt.ContentID) *Presentation {
	t.Helper()
	k := key(t, seedCaller)
	p := &Presentation{Chain: c, Caller: k.DIDKey(), Nonce: [16]byte{9}}
	copy(p.Signature[:], k.Sign(presentationMessage(id, c.Leaf().ID, p.Caller, p.Nonce)))
	return p
}

func mustCore(t *testing.T, g *Grant) []byte {
	t.Helper()
	b, err := g.Core()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPresentRefusesWrongCaller: Present signs only as the leaf's issuer.
func TestPresentRefusesWrongCaller(t *testing.T) {
	_, err := Present(delegated(t, nil, nil), key(t, seedOwner), receipt.ContentID{1}, fixedRand(1))
	if !errors.Is(err, ErrNotIssuer) {
		t.Fatalf("got %v", err)
	}
	_, err = Present(delegated(t, nil, func(g *Grant) { g.BudgetUJ = 1 << 40 }), key(t, seedCaller), receipt.ContentID{1}, fixedRand(1))
	if !errors.Is(err, ErrAttenuation) {
		t.Fatalf("got %v", err)
	}
}

// TestGrantValidate: what a grant must be before it is signed or decoded.
func TestGrantValidate(t *testing.T) {
	ok := func() Grant { return delegated(t, nil, nil)[0].Grant }
	tests := []struct {
		name   string
		mutate func(*Grant)
	}{
		{"issuer not a did:key", func(g *Grant) { g.Issuer = "alice" }},
		{"subject not a did:key", func(g *Grant) { g.Subject = "did:key:zzz" }},
		{"empty resource", func(g *Grant) { g.Capability.Resource = "" }},
		{"star inside the resource", func(g *Grant) { g.Capability.Resource = "mesh:*:x" }},
		{"no actions", func(g *Grant) { g.Capability.Actions = nil }},
		{"unsorted actions", func(g *Grant) { g.Capability.Actions = []string{"infer", "embed"} }},
		{"duplicate actions", func(g *Grant) { g.Capability.Actions = []string{"infer", "infer"} }},
		{"no expiry", func(g *Grant) { g.Expiry = 0 }},
		{"ModelIn without models", func(g *Grant) { g.Caveats = []Caveat{{Type: CaveatModelIn}} }},
		{"ModelIn unsorted", func(g *Grant) {
			g.Caveats = []Caveat{{Type: CaveatModelIn, Models: []receipt.ContentID{{2}, {1}}}}
		}},
		{"MaxCostUj without uj", func(g *Grant) { g.Caveats = []Caveat{{Type: CaveatMaxCostUJ}} }},
		{"caveat without type", func(g *Grant) { g.Caveats = []Caveat{{UJ: new(uint64)}} }},
		// ParseSigned refuses text that is not UTF-8: such a grant could be
		// signed but never presented.
		{"action not UTF-8", func(g *Grant) { g.Capability.Actions = []string{"infer\xff"} }},
		{"caveat type not UTF-8", func(g *Grant) { g.Caveats = []Caveat{{Type: "Max\xff", UJ: new(uint64)}} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := ok()
			tc.mutate(&g)
			if err := g.Validate(); !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v", err)
			}
			if _, err := Sign(g, key(t, seedOwner)); err == nil {
				t.Fatal("signed an invalid grant")
			}
		})
	}
	g := ok()
	if _, err := Sign(g, key(t, seedCaller)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("signed as someone other than the issuer: %v", err)
	}
}

// TestParseSigned: the wire form round-trips, and everything that is not
// the canonical encoding of a valid grant is refused.
// TestSignBound: a grant every rule admits, but whose core is over the
// bound ParseSigned holds grants to, is not signed: no steward would take
// it.
func TestSignBound(t *testing.T) {
	g := delegated(t, nil, nil)[0].Grant
	models := make([]receipt.ContentID, MaxList)
	for i := range models {
		models[i][0] = byte(i)
	}
	for range MaxList {
		g.Caveats = append(g.Caveats, ModelIn(models...))
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := Sign(g, key(t, seedOwner)); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("signed a grant over the bound: %v", err)
	}
}

func TestParseSigned(t *testing.T) {
	s := delegated(t, func(g *Grant) { g.Caveats = []Caveat{ModelIn(receipt.ContentID{3}), MaxCostUJ(500)} }, nil)[0]
	got, err := ParseSigned(s.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != s.ID || !bytes.Equal(got.Core, s.Core) || got.Signature != s.Signature {
		t.Fatal("round trip changed the grant")
	}
	if err := got.verify(); err != nil {
		t.Fatal(err)
	}
	canonical := func(v any) []byte {
		b, err := receipt.MarshalCanonical(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	wrap := func(core []byte) []byte { return canonical(&wireSigned{Core: core, Signature: s.Signature}) }
	bad := map[string][]byte{
		"empty":            nil,
		"trailing byte":    append(s.Bytes(), 0),
		"not an array":     canonical(map[string]int{"a": 1}),
		"short signature":  canonical([]any{s.Core, make([]byte, 63)}),
		"core not a grant": wrap(canonical(map[string]string{"issuer": "x"})),
		"core unknown key": wrap(canonical(map[string]any{"issuer": s.Grant.Issuer, "colour": "red"})),
		"core empty caveats written out": wrap(canonical(map[string]any{
			"issuer": s.Grant.Issuer, "subject": s.Grant.Subject, "budget_uj": 1, "expiry": 1, "nonce": make([]byte, 16),
			"capability": map[string]any{"resource": "*", "actions": []string{"infer"}}, "caveats": []any{},
		})),
		"oversized": make([]byte, maxSigned+1),
	}
	for name, b := range bad {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseSigned(b); !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v", err)
			}
		})
	}
}

// TestPresentationJSON: the body form round-trips and is parsed strictly.
func TestPresentationJSON(t *testing.T) {
	id := requestID(t, request(1000))
	p := present(t, delegated(t, nil, nil), seedCaller, id, 7)
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParsePresentation(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(got, id, key(t, seedSteward).DIDKey()); err != nil {
		t.Fatalf("round-tripped presentation does not verify: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	mutated := func(f func(map[string]any)) []byte {
		c := map[string]any{}
		for k, v := range m {
			c[k] = v
		}
		f(c)
		out, _ := json.Marshal(c)
		return out
	}
	bad := map[string][]byte{
		"unknown key":      mutated(func(c map[string]any) { c["extra"] = 1 }),
		"no chain":         mutated(func(c map[string]any) { delete(c, "chain") }),
		"empty chain":      mutated(func(c map[string]any) { c["chain"] = []string{} }),
		"upper-case hex":   mutated(func(c map[string]any) { c["nonce"] = "AA" + c["nonce"].(string)[2:] }),
		"short nonce":      mutated(func(c map[string]any) { c["nonce"] = "00" }),
		"short signature":  mutated(func(c map[string]any) { c["signature"] = c["signature"].(string)[2:] }),
		"caller not a did": mutated(func(c map[string]any) { c["caller"] = "bob" }),
		"chain not hex":    mutated(func(c map[string]any) { c["chain"] = []string{"zz"} }),
		"trailing data":    append(append([]byte(nil), b...), []byte(" {}")...),
		"not an object":    []byte(`"x"`),
		"oversized":        bytes.Repeat([]byte(" "), MaxPresentationJSON+1),
	}
	for name, b := range bad {
		t.Run(name, func(t *testing.T) {
			if _, err := ParsePresentation(b); !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v", err)
			}
			if HTTPStatus(fmtErr(ParsePresentation(b))) != http.StatusBadRequest {
				t.Fatal("a malformed presentation is not a 400")
			}
		})
	}
}

func fmtErr(_ *Presentation, err error) error { return err }

// TestHTTPStatus: the §2.3 mapping.
func TestHTTPStatus(t *testing.T) {
	for err, want := range map[error]int{
		ErrNotIssuer: 401, ErrPresentationSignature: 401,
		ErrSpent: 403, ErrExpired: 403, ErrRevoked: 403, ErrBudget: 403, ErrCaveat: 403, ErrNotHolder: 403,
		ErrSuspended: 503, ErrNoJournal: 503,
		ErrMalformed: 400, ErrNoCeiling: 400,
		errors.New("other"): 0,
	} {
		if got := HTTPStatus(errors.Join(errors.New("wrapped"), err)); got != want {
			t.Errorf("%v: %d, want %d", err, got, want)
		}
	}
}

// TestRevocationFile: the file format and that a revocation keeps its
// earliest time.
func TestRevocationFile(t *testing.T) {
	id := receipt.ContentID{7}
	r, err := ReadRevocations(bytes.NewBufferString("# revoked\n\n" + id.String() + " 2026-03-01T12:00:00Z\n" + id.String() + " 2026-04-01T00:00:00Z\n"))
	if err != nil {
		t.Fatal(err)
	}
	if at, ok := r.RevokedAt(id); !ok || !at.Equal(t0) {
		t.Fatalf("revoked at %v %v", at, ok)
	}
	for _, bad := range []string{"x\n", id.String() + "\n", id.String() + " yesterday\n", "ABC 2026-03-01T12:00:00Z\n"} {
		if _, err := ReadRevocations(bytes.NewBufferString(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: got %v", bad, err)
		}
	}
	empty, err := LoadRevocations(filepath.Join(t.TempDir(), "none"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := empty.RevokedAt(id); ok {
		t.Fatal("a missing file revoked something")
	}
}

// vectors pins the grant encoding: fixed keys and nonces in, exact bytes
// out. Another implementation of the same assumptions must reproduce them.
type vectors struct {
	Owner, Caller, Steward string
	RootHex, LeafHex       string
	RootID, LeafID         string
	RequestID              string
	MessageHex             string
	Presentation           json.RawMessage
}

func TestVectors(t *testing.T) {
	c := delegated(t, func(g *Grant) { g.Caveats = []Caveat{MaxCostUJ(50_000)} }, nil)
	id := requestID(t, request(1000))
	p := present(t, c, seedCaller, id, 0x42)
	pj, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got := vectors{
		Owner: key(t, seedOwner).DIDKey(), Caller: key(t, seedCaller).DIDKey(), Steward: key(t, seedSteward).DIDKey(),
		RootHex: hex.EncodeToString(c[0].Bytes()), LeafHex: hex.EncodeToString(c[1].Bytes()),
		RootID: c[0].ID.String(), LeafID: c[1].ID.String(), RequestID: id.String(),
		MessageHex:   hex.EncodeToString(presentationMessage(id, c[1].ID, p.Caller, p.Nonce)),
		Presentation: pj,
	}
	b, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "vectors.json")
	if *update {
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(want), b) {
		t.Fatalf("grant vectors changed; if intended, go test ./node/steward/grant -run TestVectors -update\n got %s", b)
	}
}
