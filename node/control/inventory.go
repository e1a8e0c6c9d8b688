package control

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// Inventory dispositions, as the protocol names them.
const (
	dispositionExecuted  = nodev1.OwnerControlRefreshInventoryDisposition_OWNER_CONTROL_REFRESH_INVENTORY_DISPOSITION_EXECUTED
	dispositionCoalesced = nodev1.OwnerControlRefreshInventoryDisposition_OWNER_CONTROL_REFRESH_INVENTORY_DISPOSITION_COALESCED
)

// coalescer runs one inventory scan at a time. A caller that arrives while
// a scan runs joins it: every caller of one scan gets the same snapshot, or
// the same error. Only a successful scan is published, so a failed one
// leaves the node's last good projection in place.
type coalescer struct {
	scanner  Scanner
	deadline time.Duration
	base     context.Context // the server's life: a scan outlives its callers, not the server

	mu       sync.Mutex
	inFlight *scan
}

type scan struct {
	callers int // guarded by coalescer.mu
	done    chan struct{}
	entries []*nodev1.OwnerControlInventoryEntry
	err     error
}

// refresh returns the inventory of the scan this call led (EXECUTED) or
// joined (COALESCED).
func (c *coalescer) refresh(ctx context.Context) ([]*nodev1.OwnerControlInventoryEntry, nodev1.OwnerControlRefreshInventoryDisposition, error) {
	c.mu.Lock()
	s, disposition := c.inFlight, dispositionCoalesced
	if s == nil {
		s, disposition = &scan{done: make(chan struct{})}, dispositionExecuted
		c.inFlight = s
		go c.run(s)
	}
	s.callers++
	c.mu.Unlock()
	select {
	case <-s.done:
		return s.entries, disposition, s.err
	case <-ctx.Done():
		return nil, disposition, ctx.Err()
	}
}

func (c *coalescer) run(s *scan) {
	ctx, cancel := context.WithTimeout(c.base, c.deadline)
	entries, err := c.scanner.Scan(ctx)
	cancel()
	if err == nil {
		entries, err = sortInventory(entries)
	} else if ctx.Err() != nil {
		err = fmt.Errorf("inventory scan did not finish within %v: %w", c.deadline, err)
	}
	if err == nil {
		c.scanner.Publish(entries)
	}
	c.mu.Lock()
	c.inFlight = nil
	c.mu.Unlock()
	s.entries, s.err = entries, err
	close(s.done)
}

// waiting is how many callers the scan in flight has.
func (c *coalescer) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlight == nil {
		return 0
	}
	return c.inFlight.callers
}

// sortInventory orders entries strictly by canonical_model_ref, as the
// protocol requires; a blank or repeated ref is the scanner's fault.
func sortInventory(entries []*nodev1.OwnerControlInventoryEntry) ([]*nodev1.OwnerControlInventoryEntry, error) {
	out := slices.Clone(entries)
	slices.SortFunc(out, func(a, b *nodev1.OwnerControlInventoryEntry) int {
		return strings.Compare(a.GetCanonicalModelRef(), b.GetCanonicalModelRef())
	})
	for i, e := range out {
		ref := e.GetCanonicalModelRef()
		switch {
		case strings.TrimSpace(ref) != ref || ref == "":
			return nil, fmt.Errorf("inventory entry %q: canonical_model_ref must be non-blank without surrounding space", ref)
		case i > 0 && ref == out[i-1].GetCanonicalModelRef():
			return nil, fmt.Errorf("inventory lists %q twice", ref)
		}
	}
	return out, nil
}
