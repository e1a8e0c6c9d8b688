package grant

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/receipt"
)

// What a person runs to try grants (meshcli grant): issue a grant, or a
// child of one, into a chain file, and present a chain for a request body.

// ChainFile is a chain as a file holds it: {"chain": [hex…]}, the same
// shape as a presentation's chain.
type ChainFile struct {
	Chain Chain `json:"chain"`
}

// ParseChainFile reads a chain file.
func ParseChainFile(b []byte) (Chain, error) {
	if len(b) > MaxPresentationJSON {
		return nil, fmt.Errorf("%w: chain file is %d bytes, limit %d", ErrMalformed, len(b), MaxPresentationJSON)
	}
	var f ChainFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: chain file: %v", ErrMalformed, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: chain file: trailing data after the JSON object", ErrMalformed)
	}
	if len(f.Chain) == 0 {
		return nil, fmt.Errorf("%w: chain file holds no chain", ErrMalformed)
	}
	return f.Chain, nil
}

// Issuance is what [Issue] signs.
type Issuance struct {
	// Issuer signs the grant. Under a parent it must be the parent's
	// subject.
	Issuer *identity.Key
	// Subject is who the grant is for: the next issuer down the chain, or,
	// for a leaf, the steward that spends it (GET /v1/mesh/steward).
	Subject string
	// Resource defaults to AnyRequest (or the parent's); Actions to
	// {infer}.
	Resource string
	Actions  []string
	BudgetUJ uint64
	Expiry   time.Time
	Caveats  []Caveat
	// Parent is the chain the grant extends; nil issues a root.
	Parent Chain
	// Rand draws the nonce; nil is crypto/rand.
	Rand io.Reader
}

// Issue signs a grant as iss describes and returns the chain it ends: the
// parent chain with the grant appended, or a chain of one. It refuses a
// grant its chain would refuse (one that widens its parent).
func Issue(iss Issuance) (Chain, error) {
	if iss.Issuer == nil {
		return nil, fmt.Errorf("%w: no issuer key", ErrMalformed)
	}
	g := Grant{
		Issuer:     iss.Issuer.DIDKey(),
		Subject:    iss.Subject,
		Capability: Capability{Resource: iss.Resource, Actions: slices.Clone(iss.Actions)},
		BudgetUJ:   iss.BudgetUJ,
		Caveats:    iss.Caveats,
	}
	if g.Capability.Resource == "" {
		g.Capability.Resource = AnyRequest
		if len(iss.Parent) > 0 {
			g.Capability.Resource = iss.Parent.Leaf().Grant.Capability.Resource
		}
	}
	if len(g.Capability.Actions) == 0 {
		g.Capability.Actions = []string{ActionInfer}
	}
	slices.Sort(g.Capability.Actions)
	g.Capability.Actions = slices.Compact(g.Capability.Actions)
	if !iss.Expiry.IsZero() && iss.Expiry.Unix() > 0 {
		g.Expiry = uint64(iss.Expiry.Unix())
	}
	if len(iss.Parent) > 0 {
		id := iss.Parent.Leaf().ID
		g.Parent = &id
	}
	rnd := iss.Rand
	if rnd == nil {
		rnd = rand.Reader
	}
	if _, err := io.ReadFull(rnd, g.Nonce[:]); err != nil {
		return nil, fmt.Errorf("grant: nonce: %w", err)
	}
	s, err := Sign(g, iss.Issuer)
	if err != nil {
		return nil, err
	}
	chain := append(slices.Clone(iss.Parent), s)
	if err := chain.link(); err != nil {
		return nil, err
	}
	return chain, nil
}

// PresentBody derives the request body is served as, signs a presentation
// of chain for it as caller, and returns the body with jcp_presentation
// set (every other field kept as it was) and the request id it was signed
// for.
func PresentBody(body []byte, chain Chain, caller *identity.Key, rnd io.Reader) ([]byte, receipt.ContentID, error) {
	var id receipt.ContentID
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, id, fmt.Errorf("%w: body must be a JSON object: %v", ErrMalformed, err)
	}
	delete(fields, PresentationField) // a presentation is never part of what it signs
	req, err := GrantedServeRequest(body)
	if err != nil {
		return nil, id, err
	}
	if id, err = req.ID(); err != nil {
		return nil, id, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	p, err := Present(chain, caller, id, rnd)
	if err != nil {
		return nil, id, err
	}
	if fields[PresentationField], err = p.MarshalJSON(); err != nil {
		return nil, id, err
	}
	out, err := json.MarshalIndent(fields, "", "  ")
	return out, id, err
}
