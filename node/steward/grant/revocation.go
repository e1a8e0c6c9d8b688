package grant

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/meshnode/meshnode/node/receipt"
)

// Revocations is a revocation list: each revoked grant with the time its
// revocation took effect. A revocation is not retroactive: decisions made
// before its time stand, so a journal replayed at its recorded times
// replays the same. It is safe for concurrent use.
type Revocations struct {
	mu sync.RWMutex
	at map[receipt.ContentID]time.Time
}

// NewRevocations returns an empty list.
func NewRevocations() *Revocations {
	return &Revocations{at: map[receipt.ContentID]time.Time{}}
}

// Revoke revokes grant id from time at on. Revoking a grant again keeps
// the earlier time.
func (r *Revocations) Revoke(id receipt.ContentID, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev, ok := r.at[id]; !ok || at.Before(prev) {
		r.at[id] = at
	}
}

// RevokedAt implements [Revoked].
func (r *Revocations) RevokedAt(id receipt.ContentID) (time.Time, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	at, ok := r.at[id]
	return at, ok
}

// Each calls fn with every revoked grant and its time, in no set order.
func (r *Revocations) Each(fn func(id receipt.ContentID, at time.Time)) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for id, at := range r.at {
		fn(id, at)
	}
}

// Len is how many grants are revoked.
func (r *Revocations) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.at)
}

// maxRevocationLine bounds a line of a revocation file.
const maxRevocationLine = 4096

// ReadRevocations parses a revocation list: one revocation a line, the
// grant id in hex and the RFC 3339 time it takes effect, separated by
// white space. Blank lines and lines starting with # are skipped.
func ReadRevocations(r io.Reader) (*Revocations, error) {
	out := NewRevocations()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 256), maxRevocationLine)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%w: revocations line %d: want \"<grant id> <RFC 3339 time>\"", ErrMalformed, n)
		}
		id, err := receipt.ParseContentID(fields[0])
		if err != nil {
			return nil, fmt.Errorf("%w: revocations line %d: %v", ErrMalformed, n, err)
		}
		at, err := time.Parse(time.RFC3339, fields[1])
		if err != nil {
			return nil, fmt.Errorf("%w: revocations line %d: %v", ErrMalformed, n, err)
		}
		out.Revoke(id, at)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: revocations: %v", ErrMalformed, err)
	}
	return out, nil
}

// LoadRevocations reads the revocation file at path (see
// [ReadRevocations]); a file that does not exist is an empty list.
func LoadRevocations(path string) (*Revocations, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return NewRevocations(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("grant: %w", err)
	}
	defer f.Close()
	r, err := ReadRevocations(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}
