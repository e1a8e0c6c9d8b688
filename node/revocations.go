package node

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"time"

	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/statedir"
	"github.com/meshnode/meshnode/node/steward/grant"
)

// defaultRevocationPoll is how often the node looks at its revocation
// file for changes: a revoked grant is refused within this long of being
// written there, without a restart.
const defaultRevocationPoll = 2 * time.Second

// fileStamp is what tells a changed file from the one last read. Its
// mode is in it, so that a file refused for its permissions is read again
// once they are fixed.
type fileStamp struct {
	mod    time.Time
	size   int64
	mode   os.FileMode
	exists bool
}

func stampOf(path string) fileStamp {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{mod: st.ModTime(), size: st.Size(), mode: st.Mode(), exists: true}
}

// watchRevocations reloads the revocation file whenever it changes, until
// ctx ends. The steward journals each new revocation before any decision
// sees it, so they survive a restart as they were applied.
func (n *Node) watchRevocations(ctx context.Context) error {
	path := revocationsPath(n.cfg.StateDir)
	last := stampOf(path) // read at start by openSteward
	return pollEvery(ctx, n.revocationPoll, defaultRevocationPoll, func() {
		if now := stampOf(path); now != last {
			last = now
			n.reloadRevocations(path)
		}
	})
}

// reloadRevocations takes the revocations in the file at path that the
// steward does not hold yet. A file that cannot be trusted or read
// changes nothing: the revocations in effect stay. One removed from the
// file stays in effect: a revocation is never withdrawn.
func (n *Node) reloadRevocations(path string) {
	if err := statedir.Check(statedir.Item{Path: path, Kind: statedir.File}); err != nil {
		n.log.Warn("grant revocations not reloaded: the file could be changed by others", "file", path, "err", err)
		return
	}
	rev, err := grant.LoadRevocations(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		n.log.Warn("grant revocations not reloaded; those in effect stay", "file", path, "err", err)
		return
	}
	rev.Each(func(id receipt.ContentID, at time.Time) {
		from, added, err := n.steward.Revoke(id, at)
		switch {
		case err != nil:
			n.log.Error("a grant revocation could not be recorded; it is not in effect", "grant", id, "err", err)
		case added && from.After(at):
			n.log.Warn("grant revoked from now: its revocation was dated earlier, and never reaches back past decisions already made",
				"grant", id, "dated", at.UTC().Format(time.RFC3339), "from", from.UTC().Format(time.RFC3339))
		case added:
			n.log.Info("grant revoked", "grant", id, "from", from.UTC().Format(time.RFC3339))
		}
	})
	withdrawn := 0
	n.steward.Revoked().Each(func(id receipt.ContentID, _ time.Time) {
		if _, ok := rev.RevokedAt(id); !ok {
			withdrawn++
		}
	})
	if withdrawn > 0 {
		n.log.Warn("revocations removed from the file stay in effect: a revocation cannot be withdrawn", "file", path, "removed", withdrawn)
	}
}
