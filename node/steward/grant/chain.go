package grant

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
)

// Chain is a grant chain, root first and leaf last (JCP §4.2); a direct
// grant is a chain of one.
type Chain []*Signed

// Leaf returns the chain's last grant, the one a presentation spends.
func (c Chain) Leaf() *Signed { return c[len(c)-1] }

// link checks the chain's structure: its length, that each grant names
// the one before as its parent and was issued by that parent's subject,
// and that each narrows its parent (JCP §4.5): its actions a subset, its
// resource within, its budget and expiry no larger. Signatures are checked
// separately ([Verifier]).
func (c Chain) link() error {
	if len(c) == 0 || len(c) > MaxChain {
		return fmt.Errorf("%w: a chain holds 1 … %d grants, got %d", ErrChain, MaxChain, len(c))
	}
	if c[0].Grant.Parent != nil {
		return fmt.Errorf("%w: the root grant %s names a parent", ErrChain, c[0].ID)
	}
	for i := 1; i < len(c); i++ {
		parent, child := &c[i-1].Grant, &c[i].Grant
		switch {
		case child.Parent == nil || *child.Parent != c[i-1].ID:
			return fmt.Errorf("%w: grant %d does not name grant %d (%s) as its parent", ErrChain, i, i-1, c[i-1].ID)
		case child.Issuer != parent.Subject:
			return fmt.Errorf("%w: grant %d is issued by %s, not by its parent's subject %s", ErrChain, i, child.Issuer, parent.Subject)
		}
		for _, a := range child.Capability.Actions {
			if !slices.Contains(parent.Capability.Actions, a) {
				return fmt.Errorf("%w: grant %d adds action %q", ErrAttenuation, i, a)
			}
		}
		switch {
		case !narrows(child.Capability.Resource, parent.Capability.Resource):
			return fmt.Errorf("%w: grant %d's resource %q is not within %q", ErrAttenuation, i, child.Capability.Resource, parent.Capability.Resource)
		case child.BudgetUJ > parent.BudgetUJ:
			return fmt.Errorf("%w: grant %d's budget %d µJ exceeds its parent's %d µJ", ErrAttenuation, i, child.BudgetUJ, parent.BudgetUJ)
		case child.Expiry > parent.Expiry:
			return fmt.Errorf("%w: grant %d expires after its parent (%d > %d)", ErrAttenuation, i, child.Expiry, parent.Expiry)
		}
	}
	return nil
}

// caveats returns every caveat on every link, in chain order.
func (c Chain) caveats() []Caveat {
	var out []Caveat
	for _, s := range c {
		out = append(out, s.Grant.Caveats...)
	}
	return out
}

// MarshalJSON writes the chain as an array of the signed grants' wire
// forms in lowercase hex, root first.
func (c Chain) MarshalJSON() ([]byte, error) {
	out := make([]string, len(c))
	for i, s := range c {
		out[i] = hex.EncodeToString(s.Bytes())
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads the form MarshalJSON writes.
func (c *Chain) UnmarshalJSON(b []byte) error {
	var links []string
	if err := json.Unmarshal(b, &links); err != nil {
		return fmt.Errorf("%w: chain: %v", ErrMalformed, err)
	}
	if len(links) == 0 || len(links) > MaxChain {
		return fmt.Errorf("%w: a chain holds 1 … %d grants, got %d", ErrMalformed, MaxChain, len(links))
	}
	out := make(Chain, len(links))
	for i, l := range links {
		if len(l) > 2*maxSigned {
			return fmt.Errorf("%w: chain[%d] is %d hex digits, limit %d", ErrMalformed, i, len(l), 2*maxSigned)
		}
		raw, err := parseHex(l)
		if err != nil {
			return fmt.Errorf("%w: chain[%d]: %v", ErrMalformed, i, err)
		}
		if out[i], err = ParseSigned(raw); err != nil {
			return fmt.Errorf("chain[%d]: %w", i, err)
		}
	}
	*c = out
	return nil
}

// parseHex decodes lowercase hex only: signed bytes have one spelling.
func parseHex(s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return nil, fmt.Errorf("character %d is %q, not a lowercase hex digit", i, c)
		}
	}
	return hex.DecodeString(s)
}
