package grant

import (
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/receipt"
)

// The cast: an owner with a budget, a caller it delegates to, the steward
// that spends it, and an outsider.
const (
	seedOwner = iota + 1
	seedCaller
	seedSteward
	seedOther
)

func key(t testing.TB, n byte) *identity.Key {
	t.Helper()
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = n*31 ^ byte(i)
	}
	k, err := identity.KeyFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// t0 is the tests' decision time; grants expire a day later.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// link describes one grant of a test chain: a mutation of the default.
type link struct {
	issuer, subject byte
	mutate          func(*Grant)
}

// chainOf signs a chain whose defaults are a root from the owner to the
// caller (1e6 µJ) and a leaf from the caller to the steward (1e5 µJ),
// both for infer on any request, expiring a day after t0. Mutations run
// before signing, and each child names the real id of the grant before it
// unless a mutation says otherwise.
func chainOf(t testing.TB, links ...link) Chain {
	t.Helper()
	var c Chain
	for i, l := range links {
		g := Grant{
			Issuer:     key(t, l.issuer).DIDKey(),
			Subject:    key(t, l.subject).DIDKey(),
			Capability: Capability{Resource: AnyRequest, Actions: []string{ActionInfer}},
			BudgetUJ:   1_000_000 / uint64(1+9*i),
			Expiry:     uint64(t0.Add(24 * time.Hour).Unix()),
			Nonce:      [16]byte{byte(i), 0xaa},
		}
		if i > 0 {
			id := c[i-1].ID
			g.Parent = &id
		}
		if l.mutate != nil {
			l.mutate(&g)
		}
		s, err := Sign(g, key(t, l.issuer))
		if err != nil {
			t.Fatalf("link %d: %v", i, err)
		}
		c = append(c, s)
	}
	return c
}

// delegated is the default two-link chain owner → caller → steward.
func delegated(t testing.TB, mutRoot, mutLeaf func(*Grant)) Chain {
	return chainOf(t, link{seedOwner, seedCaller, mutRoot}, link{seedCaller, seedSteward, mutLeaf})
}

func request(ceiling uint64) receipt.ServeRequest {
	return receipt.ServeRequest{
		PromptHash: receipt.PromptHash([]byte("hello")), PromptTokens: 2, MaxTokens: 8,
		FidelityFloor: receipt.F1, JouleCeilingUJ: ceiling,
	}
}

func requestID(t testing.TB, r receipt.ServeRequest) receipt.ContentID {
	t.Helper()
	id, err := r.ID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// fixedRand fills every read with one byte.
type fixedRand byte

func (f fixedRand) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(f)
	}
	return len(p), nil
}

func present(t testing.TB, c Chain, caller byte, id receipt.ContentID, nonce byte) *Presentation {
	t.Helper()
	p, err := Present(c, key(t, caller), id, fixedRand(nonce))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func frame(id receipt.ContentID, ceiling uint64, model *receipt.ContentID) Frame {
	return Frame{RequestID: id, Payload: receipt.PromptHash([]byte("hello")), Model: model, CeilingUJ: ceiling, At: t0}
}
