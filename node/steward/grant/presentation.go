package grant

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/receipt"
)

// Presentation spends a chain for one request (§2.1): the leaf's issuer,
// as caller, signs the request id, the leaf's id and a fresh nonce.
type Presentation struct {
	Chain     Chain
	Caller    string
	Nonce     [16]byte
	Signature [ed25519.SignatureSize]byte
}

// MaxPresentationJSON bounds a presentation's JSON form: a chain of
// MaxChain grants in hex and the few fields beside it.
const MaxPresentationJSON = MaxChain*2*maxSigned + 1024

// presentationMessage is what a caller signs (§2.1):
// canonical_cbor({request_id, grant_id, caller, nonce}), the ids as
// lowercase hex text and the nonce as a byte string.
func presentationMessage(requestID, grantID receipt.ContentID, caller string, nonce [16]byte) []byte {
	b, err := receipt.MarshalCanonical(struct {
		RequestID receipt.ContentID `cbor:"request_id"`
		GrantID   receipt.ContentID `cbor:"grant_id"`
		Caller    string            `cbor:"caller"`
		Nonce     [16]byte          `cbor:"nonce"`
	}{requestID, grantID, caller, nonce})
	if err != nil {
		panic(err) // fixed types always encode
	}
	return b
}

// Present signs a presentation of chain for the request requestID as
// caller, who must be the leaf's issuer, with a nonce drawn from rnd (nil
// is crypto/rand).
func Present(chain Chain, caller *identity.Key, requestID receipt.ContentID, rnd io.Reader) (*Presentation, error) {
	if rnd == nil {
		rnd = rand.Reader
	}
	if err := chain.link(); err != nil {
		return nil, err
	}
	if chain.Leaf().Grant.Issuer != caller.DIDKey() {
		return nil, fmt.Errorf("%w: %s is not the leaf's issuer %s", ErrNotIssuer, caller.DIDKey(), chain.Leaf().Grant.Issuer)
	}
	p := &Presentation{Chain: chain, Caller: caller.DIDKey()}
	if _, err := io.ReadFull(rnd, p.Nonce[:]); err != nil {
		return nil, fmt.Errorf("grant: nonce: %w", err)
	}
	copy(p.Signature[:], caller.Sign(presentationMessage(requestID, chain.Leaf().ID, p.Caller, p.Nonce)))
	return p, nil
}

// SpendKey identifies the presentation at a steward: the leaf and the
// nonce (§2.1).
type SpendKey struct {
	Leaf  receipt.ContentID
	Nonce [16]byte
}

// SpendKey returns the key the presentation spends under.
func (p *Presentation) SpendKey() SpendKey { return SpendKey{Leaf: p.Chain.Leaf().ID, Nonce: p.Nonce} }

// jsonPresentation is the body field jcp_presentation (§2.3).
type jsonPresentation struct {
	Chain     Chain  `json:"chain"`
	Caller    string `json:"caller"`
	Nonce     string `json:"nonce"`
	Signature string `json:"signature"`
}

// MarshalJSON writes the presentation as the OpenAI binding carries it:
// {"chain": [hex…], "caller": did:key, "nonce": hex, "signature": hex}.
func (p *Presentation) MarshalJSON() ([]byte, error) {
	return json.Marshal(jsonPresentation{
		Chain: p.Chain, Caller: p.Caller,
		Nonce: hex.EncodeToString(p.Nonce[:]), Signature: hex.EncodeToString(p.Signature[:]),
	})
}

// UnmarshalJSON reads the form MarshalJSON writes; see [ParsePresentation].
func (p *Presentation) UnmarshalJSON(b []byte) error {
	v, err := ParsePresentation(b)
	if err != nil {
		return err
	}
	*p = *v
	return nil
}

// ParsePresentation reads a presentation's JSON form, strictly: bounded,
// no unknown keys, no trailing data, lowercase hex of the exact lengths,
// a caller that is a did:key and every grant canonical. Nothing is
// verified: that is the steward's decision ([Verify]).
func ParsePresentation(b []byte) (*Presentation, error) {
	if len(b) > MaxPresentationJSON {
		return nil, fmt.Errorf("%w: presentation is %d bytes, limit %d", ErrMalformed, len(b), MaxPresentationJSON)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var j jsonPresentation
	if err := dec.Decode(&j); err != nil {
		if errors.Is(err, ErrMalformed) {
			return nil, fmt.Errorf("presentation: %w", err)
		}
		return nil, fmt.Errorf("%w: presentation: %v", ErrMalformed, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: presentation: trailing data after the JSON object", ErrMalformed)
	}
	if j.Chain == nil {
		return nil, fmt.Errorf("%w: presentation has no chain", ErrMalformed)
	}
	if _, err := identity.ParseDIDKey(j.Caller); err != nil {
		return nil, fmt.Errorf("%w: presentation caller: %v", ErrMalformed, err)
	}
	p := &Presentation{Chain: j.Chain, Caller: j.Caller}
	if err := fixedHex(p.Nonce[:], j.Nonce); err != nil {
		return nil, fmt.Errorf("%w: presentation nonce: %v", ErrMalformed, err)
	}
	if err := fixedHex(p.Signature[:], j.Signature); err != nil {
		return nil, fmt.Errorf("%w: presentation signature: %v", ErrMalformed, err)
	}
	return p, nil
}

func fixedHex(dst []byte, s string) error {
	if len(s) != 2*len(dst) {
		return fmt.Errorf("%d hex digits, want %d", len(s), 2*len(dst))
	}
	b, err := parseHex(s)
	if err != nil {
		return err
	}
	copy(dst, b)
	return nil
}

// Verified is a presentation whose proofs hold for one request at one
// holder: the caller is the leaf's issuer and signed for the request, the
// chain links and narrows, every grant is signed by its issuer, the leaf
// is held by this steward and every caveat is one it can evaluate. What
// depends on time and spend is decided by a [Ledger].
type Verified struct {
	p         *Presentation
	requestID receipt.ContentID
}

// Presentation returns the verified presentation.
func (v *Verified) Presentation() *Presentation { return v.p }

// Verify checks p's proofs for serving requestID at the steward whose
// did:key is holder. The caller's proof is checked first, so that a
// presentation from anyone but the leaf's issuer is refused as
// unauthenticated whatever its chain says.
func Verify(p *Presentation, requestID receipt.ContentID, holder string) (*Verified, error) {
	return (*Verifier)(nil).Verify(p, requestID, holder)
}

// Verifier verifies presentations, remembering the grant signatures it has
// checked: a steward sees one chain in many presentations (and again in
// every replay of its journal), and a grant's signature is a function of
// its bytes alone. The presentation's own signature, which binds the
// request, is checked every time. It is safe for concurrent use; the nil
// Verifier remembers nothing.
type Verifier struct {
	mu   sync.Mutex
	seen map[signedKey]struct{}
}

// signedKey identifies a signed grant by its id (its core) and signature.
type signedKey struct {
	id  receipt.ContentID
	sig [ed25519.SignatureSize]byte
}

// maxSeen bounds what a Verifier remembers; past it, it starts afresh.
const maxSeen = 4096

// NewVerifier returns a Verifier that remembers the grants it verified.
func NewVerifier() *Verifier { return &Verifier{seen: map[signedKey]struct{}{}} }

// verifySignatures checks every grant's signature that v has not seen.
func (v *Verifier) verifySignatures(c Chain) error {
	for _, s := range c {
		k := signedKey{s.ID, s.Signature}
		if v != nil {
			v.mu.Lock()
			_, ok := v.seen[k]
			v.mu.Unlock()
			if ok {
				continue
			}
		}
		if err := s.verify(); err != nil {
			return err
		}
		if v != nil {
			v.mu.Lock()
			if len(v.seen) >= maxSeen {
				clear(v.seen)
			}
			v.seen[k] = struct{}{}
			v.mu.Unlock()
		}
	}
	return nil
}

// Verify is the package's Verify, with v's memory of grant signatures.
func (v *Verifier) Verify(p *Presentation, requestID receipt.ContentID, holder string) (*Verified, error) {
	if len(p.Chain) == 0 {
		return nil, fmt.Errorf("%w: presentation has no chain", ErrChain)
	}
	leaf := p.Chain.Leaf()
	if p.Caller != leaf.Grant.Issuer {
		return nil, fmt.Errorf("%w: caller %s, leaf issuer %s", ErrNotIssuer, p.Caller, leaf.Grant.Issuer)
	}
	caller, err := identity.ParseDIDKey(p.Caller)
	if err != nil {
		return nil, fmt.Errorf("%w: caller: %v", ErrNotIssuer, err)
	}
	if !ed25519.Verify(caller.PublicKey(), presentationMessage(requestID, leaf.ID, p.Caller, p.Nonce), p.Signature[:]) {
		return nil, fmt.Errorf("%w: request %s, grant %s", ErrPresentationSignature, requestID, leaf.ID)
	}
	if err := p.Chain.link(); err != nil {
		return nil, err
	}
	if err := v.verifySignatures(p.Chain); err != nil {
		return nil, err
	}
	if leaf.Grant.Subject != holder {
		return nil, fmt.Errorf("%w: the leaf's subject is %s, this steward is %s", ErrNotHolder, leaf.Grant.Subject, holder)
	}
	for _, c := range p.Chain.caveats() {
		if c.Type != CaveatModelIn && c.Type != CaveatMaxCostUJ {
			return nil, fmt.Errorf("%w: %q", ErrUnknownCaveat, c.Type)
		}
	}
	return &Verified{p: p, requestID: requestID}, nil
}

// RestrictsModel reports whether the chain carries a ModelIn caveat.
func (v *Verified) RestrictsModel() bool {
	for _, c := range v.p.Chain.caveats() {
		if c.Type == CaveatModelIn {
			return true
		}
	}
	return false
}

// PermitsModel reports whether every ModelIn caveat on the chain admits
// weights with content address model; nil is weights that name none,
// which a ModelIn admits never. A router makes a backend the grant does
// not permit inadmissible (§2 phase 1).
func (v *Verified) PermitsModel(model *receipt.ContentID) bool {
	for _, c := range v.p.Chain.caveats() {
		if c.Type != CaveatModelIn {
			continue
		}
		if model == nil || !slices.Contains(c.Models, *model) {
			return false
		}
	}
	return true
}
