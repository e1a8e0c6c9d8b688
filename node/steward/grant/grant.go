package grant

import (
	"crypto/ed25519"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/receipt"
)

// ActionInfer is the action a serve is decided over (§2).
const ActionInfer = "infer"

// The caveats this steward evaluates (JCP §4.9, named as mesh-spec names
// them). A chain carrying any other caveat type is refused.
const (
	// CaveatModelIn admits a serve only on weights whose content address
	// is listed; a backend that names no weights is inadmissible.
	CaveatModelIn = "ModelIn"
	// CaveatMaxCostUJ bounds what one serve may cost, in µJ. It is
	// cost-dependent: it binds when the metered joules are debited, and a
	// breach is recorded on the receipt rather than undoing the work.
	CaveatMaxCostUJ = "MaxCostUj"
)

// Resources. A capability's resource is a pattern: an exact resource, or a
// prefix followed by "*" that matches every resource it begins.
const (
	// RequestResourcePrefix begins the resource of every request:
	// RequestResourcePrefix + the request id in hex.
	RequestResourcePrefix = "mesh:request:"
	// AnyRequest matches every request.
	AnyRequest = RequestResourcePrefix + "*"
)

// RequestResource is the resource a serve of request id is decided on.
func RequestResource(id receipt.ContentID) string { return RequestResourcePrefix + id.String() }

// Bounds on what a grant holds; the decoder refuses more.
const (
	// MaxChain is the longest chain a presentation may carry.
	MaxChain = 8
	// MaxList bounds every list in a grant (actions, caveats, models).
	MaxList = 16
	// maxResource and maxName bound a resource pattern and an action or
	// caveat type.
	maxResource = 256
	maxName     = 64
	// maxCore bounds a grant's canonical core, maxSigned its signed form.
	maxCore   = 4 << 10
	maxSigned = maxCore + 80
)

// Grant is a JCP grant: its issuer hands its subject a capability with a
// joule budget until an expiry, under caveats. A root grant has no
// parent; a child names its parent's id and may only narrow it.
type Grant struct {
	// Issuer and Subject are Ed25519 did:keys. The subject of a chain's
	// leaf is the steward that spends it.
	Issuer  string `cbor:"issuer"`
	Subject string `cbor:"subject"`
	// Capability is what the grant permits.
	Capability Capability `cbor:"capability"`
	// BudgetUJ is the most the grant may be debited, in µJ, over every
	// serve on it and on its children.
	BudgetUJ uint64 `cbor:"budget_uj"`
	// Expiry is Unix seconds; the grant admits serves decided strictly
	// before it.
	Expiry uint64 `cbor:"expiry"`
	// Parent is the content id of the grant this one attenuates; nil for
	// a root.
	Parent *receipt.ContentID `cbor:"parent,omitempty"`
	// Nonce makes otherwise equal grants distinct.
	Nonce [16]byte `cbor:"nonce"`
	// Caveats add conditions; every caveat on every link of a chain
	// applies.
	Caveats []Caveat `cbor:"caveats,omitempty"`
}

// Capability is a resource pattern and the actions permitted on it.
// Actions are sorted and distinct, so one capability has one encoding.
type Capability struct {
	Resource string   `cbor:"resource"`
	Actions  []string `cbor:"actions"`
}

// Caveat is one condition on a grant. Models is set for ModelIn (sorted,
// distinct), UJ for MaxCostUj.
type Caveat struct {
	Type   string              `cbor:"type"`
	Models []receipt.ContentID `cbor:"models,omitempty"`
	UJ     *uint64             `cbor:"uj,omitempty"`
}

// ModelIn admits serves only on the listed weights (content addresses).
func ModelIn(models ...receipt.ContentID) Caveat {
	m := slices.Clone(models)
	slices.SortFunc(m, func(a, b receipt.ContentID) int { return strings.Compare(string(a[:]), string(b[:])) })
	return Caveat{Type: CaveatModelIn, Models: slices.Compact(m)}
}

// MaxCostUJ bounds the cost of one serve.
func MaxCostUJ(uj uint64) Caveat { return Caveat{Type: CaveatMaxCostUJ, UJ: &uj} }

// Validate checks the rules every grant meets, signed or not. It does not
// judge caveat types: an unknown caveat is well formed, and refused when a
// chain carrying it is decided.
func (g *Grant) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, a...)...)
	}
	if _, err := identity.ParseDIDKey(g.Issuer); err != nil {
		return bad("issuer: %v", err)
	}
	if _, err := identity.ParseDIDKey(g.Subject); err != nil {
		return bad("subject: %v", err)
	}
	if err := validPattern(g.Capability.Resource); err != nil {
		return bad("resource: %v", err)
	}
	if err := sortedNames(g.Capability.Actions); err != nil {
		return bad("actions: %v", err)
	}
	if g.Expiry == 0 {
		return bad("expiry is 0; a grant must expire")
	}
	if len(g.Caveats) > MaxList {
		return bad("%d caveats, at most %d", len(g.Caveats), MaxList)
	}
	for i, c := range g.Caveats {
		if err := c.validate(); err != nil {
			return bad("caveat %d: %v", i, err)
		}
	}
	return nil
}

func (c *Caveat) validate() error {
	if c.Type == "" || len(c.Type) > maxName || !utf8.ValidString(c.Type) {
		return fmt.Errorf("type must be 1 … %d bytes of UTF-8", maxName)
	}
	switch c.Type {
	case CaveatModelIn:
		if len(c.Models) == 0 || len(c.Models) > MaxList || c.UJ != nil {
			return fmt.Errorf("%s holds 1 … %d models and nothing else", c.Type, MaxList)
		}
		for i := 1; i < len(c.Models); i++ {
			if strings.Compare(string(c.Models[i-1][:]), string(c.Models[i][:])) >= 0 {
				return fmt.Errorf("%s models must be sorted and distinct", c.Type)
			}
		}
	case CaveatMaxCostUJ:
		if c.UJ == nil || c.Models != nil {
			return fmt.Errorf("%s holds uj and nothing else", c.Type)
		}
	}
	return nil
}

// validPattern checks a resource pattern: 1 … 256 bytes of UTF-8, with
// "*" only as the last character.
func validPattern(p string) error {
	switch {
	case p == "" || len(p) > maxResource || !utf8.ValidString(p):
		return fmt.Errorf("must be 1 … %d bytes of UTF-8", maxResource)
	case strings.Contains(strings.TrimSuffix(p, "*"), "*"):
		return fmt.Errorf("%q has a * before its end", p)
	}
	return nil
}

// sortedNames checks a non-empty list of short names, sorted and distinct.
func sortedNames(names []string) error {
	if len(names) == 0 || len(names) > MaxList {
		return fmt.Errorf("must hold 1 … %d names", MaxList)
	}
	for i, n := range names {
		if n == "" || len(n) > maxName || !utf8.ValidString(n) {
			return fmt.Errorf("name %d must be 1 … %d bytes of UTF-8", i, maxName)
		}
		if i > 0 && names[i-1] >= n {
			return fmt.Errorf("names must be sorted and distinct (%q, %q)", names[i-1], n)
		}
	}
	return nil
}

// matches reports whether pattern p matches resource r.
func matches(p, r string) bool {
	if prefix, ok := strings.CutSuffix(p, "*"); ok {
		return strings.HasPrefix(r, prefix)
	}
	return p == r
}

// narrows reports whether pattern child matches nothing parent does not.
func narrows(child, parent string) bool {
	prefix, wild := strings.CutSuffix(parent, "*")
	if !wild {
		return child == parent
	}
	return strings.HasPrefix(strings.TrimSuffix(child, "*"), prefix)
}

// Core returns the grant's canonical det-CBOR encoding, the bytes its
// issuer signs and its id is taken over. It refuses a core over the bound
// ParseSigned holds grants to, which no steward would accept.
func (g *Grant) Core() ([]byte, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	core, err := receipt.MarshalCanonical(g)
	if err != nil {
		return nil, err
	}
	if len(core) > maxCore {
		return nil, fmt.Errorf("%w: the grant's core is %d bytes, limit %d", ErrMalformed, len(core), maxCore)
	}
	return core, nil
}

// ID is the grant's content id: BLAKE3-256 of its core.
func (g *Grant) ID() (receipt.ContentID, error) {
	core, err := g.Core()
	if err != nil {
		return receipt.ContentID{}, err
	}
	return receipt.Sum(core), nil
}

// Signed is a grant with its issuer's signature over its core.
type Signed struct {
	Grant     Grant
	Core      []byte
	Signature [ed25519.SignatureSize]byte
	// ID is the grant's content id.
	ID receipt.ContentID
}

// Sign signs g as issuer. g.Issuer is set to issuer's did:key when empty
// and must equal it otherwise.
func Sign(g Grant, issuer *identity.Key) (*Signed, error) {
	if g.Issuer == "" {
		g.Issuer = issuer.DIDKey()
	} else if g.Issuer != issuer.DIDKey() {
		return nil, fmt.Errorf("%w: issuer %s is not the signing key %s", ErrMalformed, g.Issuer, issuer.DIDKey())
	}
	core, err := g.Core()
	if err != nil {
		return nil, err
	}
	s := &Signed{Grant: g, Core: core, ID: receipt.Sum(core)}
	copy(s.Signature[:], issuer.Sign(core))
	return s, nil
}

// verify checks the signature under the issuer's key.
func (s *Signed) verify() error {
	id, err := identity.ParseDIDKey(s.Grant.Issuer)
	if err != nil {
		return fmt.Errorf("%w: grant %s: issuer: %v", ErrSignature, s.ID, err)
	}
	if !ed25519.Verify(id.PublicKey(), s.Core, s.Signature[:]) {
		return fmt.Errorf("%w: grant %s", ErrSignature, s.ID)
	}
	return nil
}

// wireSigned is a signed grant on the wire: the two-element array
// [core, signature], both byte strings. The core travels as the bytes
// that were signed, so nothing is re-encoded between signer and verifier.
type wireSigned struct {
	_         struct{} `cbor:",toarray"`
	Core      []byte
	Signature [ed25519.SignatureSize]byte
}

// Bytes returns the signed grant's wire form.
func (s *Signed) Bytes() []byte {
	b, err := receipt.MarshalCanonical(&wireSigned{Core: s.Core, Signature: s.Signature})
	if err != nil {
		panic(err) // two byte strings always encode
	}
	return b
}

// ParseSigned decodes a signed grant's wire form, refusing anything that is
// not the canonical encoding of a valid grant. It does not check the
// signature: deciding a chain does ([Verify]).
func ParseSigned(b []byte) (*Signed, error) {
	var w wireSigned
	if err := receipt.UnmarshalCanonical(b, maxSigned, &w); err != nil {
		return nil, fmt.Errorf("%w: signed grant: %w", ErrMalformed, err)
	}
	var g Grant
	if err := receipt.UnmarshalCanonical(w.Core, maxCore, &g); err != nil {
		return nil, fmt.Errorf("%w: grant core: %w", ErrMalformed, err)
	}
	if err := g.Validate(); err != nil {
		return nil, err
	}
	return &Signed{Grant: g, Core: w.Core, Signature: w.Signature, ID: receipt.Sum(w.Core)}, nil
}
