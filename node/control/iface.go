package control

import (
	"context"
	"time"

	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// ConfigStore holds the node's owner-managed configuration. FileStore is
// the implementation the daemon uses.
type ConfigStore interface {
	// Snapshot returns the current configuration and its revision. The
	// caller must not modify it.
	Snapshot() (revision uint64, cfg *nodev1.NodeConfigSnapshot)
	// Apply replaces the configuration if it is still at revision
	// expected, returning RevisionConflict(current) if not. A
	// configuration its checks reject is reported in ApplyResult, not as
	// an error; an error means the store could not do its job.
	Apply(ctx context.Context, expected uint64, cfg *nodev1.NodeConfigSnapshot) (ApplyResult, error)
}

// ApplyResult is what became of an apply.
type ApplyResult struct {
	// Applied is false when the configuration was rejected; Error and
	// Diagnostics say why.
	Applied bool
	// Revision is the revision now current.
	Revision uint64
	// Mode says how the configuration took effect: LIVE, STAGED for the
	// next start, or NOOP when it equalled the current one.
	Mode        nodev1.ConfigApplyMode
	Diagnostics []*nodev1.ConfigDiagnostic
	Error       string
}

// Scanner inventories the models on the node's disk.
type Scanner interface {
	// Scan lists the models in the models dir. It is never called
	// concurrently with itself, and ctx carries the scan deadline.
	Scan(ctx context.Context) ([]*nodev1.OwnerControlInventoryEntry, error)
	// Publish makes a successful scan the node's advertised
	// available-model projection. A failed scan is never published.
	Publish(entries []*nodev1.OwnerControlInventoryEntry)
}

// Lifecycle takes model lifecycle intents. Reconciler implements it.
type Lifecycle interface {
	// Submit records an intent and returns once it is accepted, never
	// waiting for a load or drain to finish.
	Submit(ctx context.Context, in Intent) (Ack, error)
}

// IntentKind is what an intent wants of a model.
type IntentKind uint8

// The lifecycle intents, one per command.
const (
	IntentLoad   IntentKind = iota + 1 // present, once
	IntentUnload                       // absent
	IntentEnsure                       // present, retried for the session
	IntentDrain                        // finish admitted work, then absent
)

func (k IntentKind) String() string {
	switch k {
	case IntentLoad:
		return "load"
	case IntentUnload:
		return "unload"
	case IntentEnsure:
		return "ensure"
	case IntentDrain:
		return "drain"
	}
	return "intent?"
}

// Intent is a lifecycle command.
type Intent struct {
	Kind IntentKind
	// Model names the model by canonical ref, or (unload, drain) by
	// instance id.
	Model   *nodev1.OwnerControlModelRef
	Profile string
	// DrainTimeout is the drain deadline; zero means the default.
	DrainTimeout time.Duration
}

// Ack is an accepted intent: its id, the model's lifecycle state at
// acceptance, and the model it resolved to when known.
type Ack struct {
	IntentID string
	State    string
	Target   *nodev1.OwnerControlModelRef
}
