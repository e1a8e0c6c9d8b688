package steward

import (
	"context"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward/grant"
)

// Authorizer decides a serve before any work runs (§2 phase 2). The JCP
// grant gate implements it; a steward without one serves every request
// ungranted.
type Authorizer interface {
	// Authorize decides the serve and returns the debit to settle after
	// metering, or nil when the serve rides on no grant. An error refuses
	// the serve before the meter opens.
	Authorize(ctx context.Context, a Authorization) (Debit, error)
}

// Authorization is what the gate decides over: the request, the route's
// choice, and the decision time.
type Authorization struct {
	RequestID receipt.ContentID
	Request   receipt.ServeRequest
	Backend   string
	Recipe    string
	// Weights are the weights the chosen engine names before the serve;
	// nil when it names none.
	Weights *receipt.Weights
	// Presentation is the grant the serve rides on (WithPresentation);
	// nil for an ungranted serve.
	Presentation *grant.Presentation
	At           time.Time
}

// Debit settles an authorised serve against its grant after the work
// (§2 phase 3).
type Debit interface {
	// GrantID is the grant the serve debits; it goes on the receipt.
	GrantID() receipt.ContentID
	// Settle debits the metered energy. The work has run, so it debits
	// even when that breaches a caveat, and returns the JCP denial label
	// (the receipt's grant_breach) rather than an error. An error means
	// the debit could not be recorded; the serve is then not sealed.
	Settle(e hw.Energy) (breach string, err error)
}

// ReceiptArchive keeps the envelopes of the receipts the steward seals,
// for export (the node's receipt log): the journal records only their ids.
type ReceiptArchive interface {
	// Archive is given each receipt after it is sealed and before the
	// journal records it, in chain order, one at a time. An error
	// withholds the receipt as a journal error does. A receipt archived
	// and then withheld (its journal record failed) is followed by one of
	// the same sequence, which replaces it.
	Archive(s *receipt.Sealed) error
}

// Journal durably records what the steward hands out (§2.2). The file
// journal implements it; a steward without one cannot restart its chain.
type Journal interface {
	// Sealed records a receipt (the Sealed entry: its sequence and its
	// envelope's content id) before it is handed out. It is called in
	// chain order, one receipt at a time. An error withholds the receipt
	// and leaves the chain where it was.
	Sealed(s *receipt.Sealed) error
}

// SealObserver hears of every receipt the steward hands out, for the
// node's metrics.
type SealObserver interface {
	// ObserveSealed is given each receipt once it is sealed, archived and
	// journaled, in chain order. It runs under the steward's chain lock:
	// it must be quick and must not call the steward.
	ObserveSealed(s *receipt.Sealed)
}
