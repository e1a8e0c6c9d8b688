package receipt

import (
	"crypto/ed25519"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/identity"
)

// testKey returns a fixed Ed25519 key, different for each n.
func testKey(n byte) ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = n + byte(i)
	}
	return ed25519.NewKeyFromSeed(seed)
}

func testSealer(t testing.TB, n byte) *Sealer {
	t.Helper()
	k, err := identity.NewKey(testKey(n))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSealer(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testRequest() ServeRequest {
	return ServeRequest{
		PromptHash:     PromptHash([]byte("What does one token cost?")),
		PromptTokens:   25,
		MaxTokens:      16,
		FidelityFloor:  F2,
		JouleCeilingUJ: 10_000,
	}
}

func mustID(t testing.TB, r ServeRequest) ContentID {
	t.Helper()
	id, err := r.ID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// generation is a valid, unsealed generation receipt for steward s.
func generation(t testing.TB, s *Sealer) Receipt {
	t.Helper()
	req := testRequest()
	id := mustID(t, req)
	out := []uint32{7, 8, 9}
	var nonce Nonce
	nonce[0] = 1
	commit := Commit(s.Opening(id, nonce), id, PayloadDigest([]uint32{1, 2, 3}), out)
	return Receipt{
		RequestID:        id,
		Backend:          "ref-mid",
		Recipe:           "mesh-reference",
		Route:            "ref-mid: cheapest admissible",
		TokensIn:         3,
		TokensOut:        3,
		TokensAccepted:   3,
		FidelityFloor:    F2,
		Fidelity:         &FidelityReport{Advertised: F3, Delivered: F3},
		FidelityMet:      true,
		Energy:           hw.Estimated(1000),
		OutputCommitment: &commit,
		Nonce:            nonce,
		Steward:          s.DID(),
	}
}

// decision is a valid, unsealed typed-decision receipt for steward s.
func decision(t testing.TB, s *Sealer) Receipt {
	t.Helper()
	req := testRequest()
	req.Decision = &Decision{Questions: 2, OptionsScored: 7, SchemaTokens: 20}
	m := uint64(901)
	return Receipt{
		RequestID:     mustID(t, req),
		Backend:       "decider",
		Recipe:        "gemma-decide",
		Weights:       &Weights{Digest: Sum([]byte("weights")), Precision: "fp32"},
		Training:      &Training{Digest: Sum([]byte("corpus")), Authority: TrainingLogged},
		Route:         "decider: only admissible",
		TokensIn:      25,
		FidelityFloor: F1,
		FidelityMet:   true,
		Energy:        hw.Modelled(880, &m),
		Decision:      &DecisionFigures{QuestionsAnswered: 2, OptionsScored: 7, SchemaTokens: 20},
		Steward:       s.DID(),
	}
}

// genericMap decodes CBOR into a plain map, for tests that edit a core key
// by key.
func genericMap(t testing.TB, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := cbor.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// canonicalOf encodes v with an independent core-deterministic encoder.
func canonicalOf(t testing.TB, v any) []byte {
	t.Helper()
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		t.Fatal(err)
	}
	b, err := em.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
