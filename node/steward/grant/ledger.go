package grant

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/meshnode/meshnode/node/receipt"
)

// Frame is what a serve's grant is decided over (§2 phase 2): the action
// infer on the request, its prompt_hash as payload, the content address
// of the weights the chosen backend runs (nil when it names none), the
// request's joule ceiling, and the decision time.
type Frame struct {
	RequestID receipt.ContentID
	Payload   receipt.ContentID
	Model     *receipt.ContentID
	CeilingUJ uint64
	At        time.Time
}

// Account is one grant's spend at this steward.
type Account struct {
	// BudgetUJ is the grant's budget.
	BudgetUJ uint64
	// DebitedUJ is what settled serves were debited, and unresolved
	// serves their ceilings ([Ledger.Strand]).
	DebitedUJ uint64
	// HeldUJ is the joule ceilings of serves decided and in flight.
	HeldUJ uint64
}

// LeftUJ is what the grant has left: its budget less what it was debited
// and what it holds for serves in flight.
func (a Account) LeftUJ() uint64 {
	used := satAdd(a.DebitedUJ, a.HeldUJ)
	if used >= a.BudgetUJ {
		return 0
	}
	return a.BudgetUJ - used
}

// Decision is a grant decided for one serve: what to hold now and debit
// after the work.
type Decision struct {
	// GrantID is the leaf's id, the receipt's grant_id.
	GrantID receipt.ContentID
	// Caller is the presentation's caller.
	Caller string
	// Key is what the presentation spends under.
	Key SpendKey
	// CeilingUJ is held on every link until the debit.
	CeilingUJ uint64
	links     []receipt.ContentID
	budgets   []uint64
	maxCost   []uint64 // every MaxCostUj on the chain
}

// Ledger is a steward's grant state: each grant's account and the
// presentations spent. The steward rebuilds it by replaying its journal
// (§2.2), so it is a pure function of the decisions fed to it, in order.
// It is not safe for concurrent use; the steward serialises it with its
// journal.
type Ledger struct {
	accounts map[receipt.ContentID]*Account
	spent    map[SpendKey]struct{}
	revoked  Revoked
}

// Revoked reports when a grant was revoked; ok is false for one that was
// not. A decision at or after that time refuses the grant.
type Revoked interface {
	RevokedAt(id receipt.ContentID) (at time.Time, ok bool)
}

// NewLedger returns an empty ledger that consults revoked (which may be
// nil: nothing is revoked).
func NewLedger(revoked Revoked) *Ledger {
	return &Ledger{accounts: map[receipt.ContentID]*Account{}, spent: map[SpendKey]struct{}{}, revoked: revoked}
}

// Account returns grant id's account; ok is false when nothing was ever
// decided on it here.
func (l *Ledger) Account(id receipt.ContentID) (Account, bool) {
	a, ok := l.accounts[id]
	if !ok {
		return Account{}, false
	}
	return *a, true
}

// Decide is JCP's first phase for a verified presentation over frame f:
// the presentation is not spent here; on every link, the grant has not
// expired or been revoked at f.At, permits infer on the request and its
// ModelIn caveats admit f.Model; and the least any link has left is at
// least f.CeilingUJ. It changes nothing: [Ledger.Commit] applies the
// decision once it is recorded.
func (l *Ledger) Decide(v *Verified, f Frame) (*Decision, error) {
	if v.requestID != f.RequestID {
		return nil, fmt.Errorf("%w: verified for request %s, decided for %s", ErrPresentationSignature, v.requestID, f.RequestID)
	}
	p := v.p
	key := p.SpendKey()
	if _, ok := l.spent[key]; ok {
		return nil, fmt.Errorf("%w: grant %s, nonce %x", ErrSpent, key.Leaf, key.Nonce)
	}
	resource := RequestResource(f.RequestID)
	d := &Decision{GrantID: key.Leaf, Caller: p.Caller, Key: key, CeilingUJ: f.CeilingUJ}
	for i, s := range p.Chain {
		g := &s.Grant
		if exp := time.Unix(int64(min(g.Expiry, math.MaxInt64)), 0); !f.At.Before(exp) {
			return nil, fmt.Errorf("%w: grant %d (%s) expired at %s; decided at %s", ErrExpired, i, s.ID, exp.UTC().Format(time.RFC3339), f.At.UTC().Format(time.RFC3339))
		}
		if l.revoked != nil {
			if at, ok := l.revoked.RevokedAt(s.ID); ok && !f.At.Before(at) {
				return nil, fmt.Errorf("%w: grant %d (%s) revoked at %s", ErrRevoked, i, s.ID, at.UTC().Format(time.RFC3339))
			}
		}
		if !permits(g.Capability, resource) {
			return nil, fmt.Errorf("%w: grant %d (%s) permits %v on %q", ErrNotPermitted, i, s.ID, g.Capability.Actions, g.Capability.Resource)
		}
		for _, c := range g.Caveats {
			switch c.Type {
			case CaveatModelIn:
				if f.Model == nil {
					return nil, fmt.Errorf("%w: grant %d's ModelIn admits named weights only, and the backend names none", ErrCaveat, i)
				}
				if !slices.Contains(c.Models, *f.Model) {
					return nil, fmt.Errorf("%w: grant %d's ModelIn does not list weights %s", ErrCaveat, i, *f.Model)
				}
			case CaveatMaxCostUJ:
				d.maxCost = append(d.maxCost, *c.UJ)
			default:
				return nil, fmt.Errorf("%w: %q", ErrUnknownCaveat, c.Type)
			}
		}
		left := g.BudgetUJ
		if a, ok := l.accounts[s.ID]; ok {
			left = a.LeftUJ()
		}
		if left < f.CeilingUJ {
			return nil, fmt.Errorf("%w: grant %d (%s) has %d µJ left, the request's ceiling is %d µJ", ErrBudget, i, s.ID, left, f.CeilingUJ)
		}
		d.links = append(d.links, s.ID)
		d.budgets = append(d.budgets, g.BudgetUJ)
	}
	return d, nil
}

func permits(c Capability, resource string) bool {
	for _, a := range c.Actions {
		if a == ActionInfer {
			return matches(c.Resource, resource)
		}
	}
	return false
}

// Commit applies a decision: the presentation is spent, and the ceiling is
// held on every link until [Ledger.Settle].
func (l *Ledger) Commit(d *Decision) {
	l.spent[d.Key] = struct{}{}
	for i, id := range d.links {
		a := l.account(id, d.budgets[i])
		a.HeldUJ = satAdd(a.HeldUJ, d.CeilingUJ)
	}
}

// Settle is JCP's second phase: it releases the decision's hold and
// debits uj on every link. The work has run, so the debit is made even
// when it breaches the grant; the breach comes back as its denial label
// for the receipt's grant_breach: LabelCaveat when uj exceeds a MaxCostUj,
// else LabelBudget when it exceeds what a link had left, else "".
func (l *Ledger) Settle(d *Decision, uj uint64) (breach string) {
	for _, c := range d.maxCost {
		if uj > c {
			breach = LabelCaveat
		}
	}
	for i, id := range d.links {
		a := l.account(id, d.budgets[i])
		a.HeldUJ -= min(a.HeldUJ, d.CeilingUJ)
		if breach == "" && uj > a.LeftUJ() {
			breach = LabelBudget
		}
		a.DebitedUJ = satAdd(a.DebitedUJ, uj)
	}
	return breach
}

// Strand settles a decision whose serve is unresolved (§2.2): in flight
// when the steward stopped, or its debit never recorded. Whether its work
// finished is unknowable, so it is debited the ceiling its decision
// admitted, on every link, and never settled again.
func (l *Ledger) Strand(d *Decision) {
	for i, id := range d.links {
		a := l.account(id, d.budgets[i])
		a.HeldUJ -= min(a.HeldUJ, d.CeilingUJ)
		a.DebitedUJ = satAdd(a.DebitedUJ, d.CeilingUJ)
	}
}

func (l *Ledger) account(id receipt.ContentID, budget uint64) *Account {
	a, ok := l.accounts[id]
	if !ok {
		a = &Account{BudgetUJ: budget}
		l.accounts[id] = a
	}
	return a
}

func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}
