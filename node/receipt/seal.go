package receipt

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/veraison/go-cose"
	"github.com/zeebo/blake3"
)

// maxEnvelopeSize bounds an envelope: a core plus the COSE framing, the
// kid and a 64-byte signature.
const maxEnvelopeSize = maxCoreSize + 512

// The mesh/1 envelope profile (DESIGN.md), checked exactly by [Open]:
//
//	18([ h'{1: -8, 4: h'<did:key bytes>'}', {}, h'<signed core>', h'<Ed25519 signature>' ])
//
// The protected header holds exactly alg = EdDSA (-8) and kid = the
// steward's did:key as bytes, canonically encoded; the unprotected header
// is the empty map; the payload is attached; the external AAD is empty.
// The envelope's content id, the prev of the next receipt, is BLAKE3-256
// of these bytes.

// Sealed is a receipt with its signed core, its envelope and the envelope's
// content id.
type Sealed struct {
	Receipt  Receipt
	Core     []byte
	Envelope []byte
	ID       ContentID
}

// Sealer seals receipts under one steward key, the node key (DESIGN.md).
// It is safe for concurrent use.
type Sealer struct {
	priv       ed25519.PrivateKey
	did        string
	protected  []byte // the protected header, as it sits in the envelope
	signer     cose.Signer
	openingKey [32]byte
}

// openingKeyContext separates the output-commitment opening key from every
// other use of the steward key (BLAKE3 derive_key).
const openingKeyContext = "meshnode 2026 mesh/1 output commitment opening key"

// NewSealer returns a Sealer for the steward key, the node key.
func NewSealer(key *identity.Key) (*Sealer, error) {
	priv := key.Private()
	did := key.DIDKey()
	signer, err := cose.NewSigner(cose.AlgorithmEdDSA, priv)
	if err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	s := &Sealer{priv: priv, did: did, protected: protectedHeader([]byte(did)), signer: signer}
	blake3.DeriveKey(openingKeyContext, priv.Seed(), s.openingKey[:])
	return s, nil
}

// DID returns the steward's did:key, the kid of every envelope it seals.
func (s *Sealer) DID() string { return s.did }

// Public returns the steward's public key.
func (s *Sealer) Public() ed25519.PublicKey { return s.priv.Public().(ed25519.PublicKey) }

// protectedHeader is the canonical bstr-wrapped {1: -8, 4: kid}.
func protectedHeader(kid []byte) []byte {
	inner, err := encMode.Marshal(map[int]any{1: int(cose.AlgorithmEdDSA), 4: kid})
	if err != nil {
		panic(err) // an int and a byte string always encode
	}
	outer, err := encMode.Marshal(inner)
	if err != nil {
		panic(err)
	}
	return outer
}

// Seal encodes r's signed core and signs it. r.Steward is set to the
// sealer's did:key when empty and must equal it otherwise. Seal does not
// stamp the chain position: that is the log's job ([Head.Stamp]).
func (s *Sealer) Seal(r Receipt) (*Sealed, error) {
	if r.Steward == "" {
		r.Steward = s.did
	} else if r.Steward != s.did {
		return nil, fmt.Errorf("receipt: %w: steward %q is not the sealer %q", ErrInvalid, truncate(r.Steward), s.did)
	}
	core, err := r.Core()
	if err != nil {
		return nil, fmt.Errorf("receipt: seal: %w", err)
	}
	env, err := s.SealPayload(core)
	if err != nil {
		return nil, err
	}
	return &Sealed{Receipt: r, Core: core, Envelope: env, ID: Sum(env)}, nil
}

// SealPayload signs payload, a canonical det-CBOR core, into an envelope
// of the profile above under the steward key. Seal uses it for receipts;
// other records the steward signs under the same key (the §6.5 change
// record) use it for theirs, so every envelope the steward writes has one
// framing.
func (s *Sealer) SealPayload(payload []byte) ([]byte, error) {
	msg := cose.Sign1Message{
		Headers: cose.Headers{
			RawProtected: s.protected,
			Protected:    cose.ProtectedHeader{cose.HeaderLabelAlgorithm: cose.AlgorithmEdDSA, cose.HeaderLabelKeyID: []byte(s.did)},
		},
		Payload: payload,
	}
	// Ed25519 is deterministic; go-cose passes the reader to
	// ed25519.PrivateKey.Sign, which ignores it.
	if err := msg.Sign(nil, nil, s.signer); err != nil {
		return nil, fmt.Errorf("receipt: seal: %w", err)
	}
	env, err := msg.MarshalCBOR()
	if err != nil {
		return nil, fmt.Errorf("receipt: seal: %w", err)
	}
	return env, nil
}

// Open verifies an envelope and returns what it seals. With want set, the
// envelope must be signed by that key; without, by the key its kid names
// (a did:key is self-certifying, so the caller then learns the steward
// from Receipt.Steward). Everything outside the profile above is refused.
func Open(envelope []byte, want ed25519.PublicKey) (*Sealed, error) {
	payload, kid, err := OpenPayload(envelope, want)
	if err != nil {
		return nil, err
	}
	r, err := DecodeCore(payload)
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	if r.Steward != kid {
		return nil, fmt.Errorf("envelope: %w: core names steward %s, kid is %s", ErrEnvelope, truncate(r.Steward), kid)
	}
	return &Sealed{Receipt: r, Core: payload, Envelope: envelope, ID: Sum(envelope)}, nil
}

// OpenPayload verifies an envelope of the profile above, whatever it
// seals, and returns its payload and its kid (the signer's did:key). With
// want set, the envelope must be signed by that key. The payload is
// returned undecoded: the caller decodes it as the record it expects.
func OpenPayload(envelope []byte, want ed25519.PublicKey) (payload []byte, kid string, err error) {
	if len(envelope) > maxEnvelopeSize {
		return nil, "", fmt.Errorf("envelope: %w: %d bytes, limit %d", ErrTooLarge, len(envelope), maxEnvelopeSize)
	}
	if len(envelope) == 0 || envelope[0] != 0xd2 {
		return nil, "", fmt.Errorf("envelope: %w: not a tagged (18) COSE_Sign1", ErrEnvelope)
	}
	var msg cose.Sign1Message
	if err := msg.UnmarshalCBOR(envelope); err != nil {
		return nil, "", fmt.Errorf("envelope: %w: %v", ErrEnvelope, err)
	}
	rawKid, ok := msg.Headers.Protected[cose.HeaderLabelKeyID].([]byte)
	if !ok {
		return nil, "", fmt.Errorf("envelope: %w: no kid in the protected header", ErrEnvelope)
	}
	if !bytes.Equal(msg.Headers.RawProtected, protectedHeader(rawKid)) {
		return nil, "", fmt.Errorf("envelope: %w: protected header %x is not exactly {1: -8, 4: kid}", ErrEnvelope, []byte(msg.Headers.RawProtected))
	}
	if !bytes.Equal(msg.Headers.RawUnprotected, []byte{0xa0}) {
		return nil, "", fmt.Errorf("envelope: %w: unprotected header is not empty", ErrEnvelope)
	}
	if msg.Payload == nil {
		return nil, "", fmt.Errorf("envelope: %w: detached payload", ErrEnvelope)
	}
	pub, err := parseDIDKey(string(rawKid))
	if err != nil {
		return nil, "", fmt.Errorf("envelope: kid: %w", err)
	}
	if want != nil && !pub.Equal(want) {
		return nil, "", fmt.Errorf("envelope: %w: signed by %s, want %s", ErrSignature, string(rawKid), didKey(want))
	}
	verifier, err := cose.NewVerifier(cose.AlgorithmEdDSA, pub)
	if err != nil {
		return nil, "", fmt.Errorf("envelope: %w: %v", ErrSignature, err)
	}
	if err := msg.Verify(nil, verifier); err != nil {
		return nil, "", fmt.Errorf("envelope: %w: %v", ErrSignature, err)
	}
	// Only the canonical framing is an envelope: the id is taken over these
	// bytes, so a second framing of one signature would be a second id.
	again, err := msg.MarshalCBOR()
	if err != nil || !bytes.Equal(again, envelope) {
		return nil, "", fmt.Errorf("envelope: %w", ErrNonCanonical)
	}
	return msg.Payload, string(rawKid), nil
}

// Usage is the JSON object an OpenAI-compatible response carries as
// usage.energy: the receipt under its §6.1 keys and the envelope that
// verifies it, in hex (the body §2.3's witness endpoint takes back).
type Usage struct {
	Receipt     Receipt `json:"receipt"`
	EnvelopeHex string  `json:"envelope_hex"`
}

// Usage returns s in its usage.energy form.
func (s *Sealed) Usage() Usage {
	return Usage{Receipt: s.Receipt, EnvelopeHex: hex.EncodeToString(s.Envelope)}
}
