package node

import (
	"fmt"
	"path/filepath"

	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/statedir"
	"github.com/meshnode/meshnode/node/steward/journal"
)

// checkPermissions refuses to start on a state dir, or a file the node
// trusts, that another user could change: one who could write the
// ownership certificate would own the node, one who could cut the journal
// would roll back its spend, one who could read the key would be the node.
func (n *Node) checkPermissions() error {
	d := n.cfg.StateDir
	jpath := JournalPath(d)
	items := []statedir.Item{
		{Path: d, Kind: statedir.Dir},
		{Path: filepath.Dir(jpath), Kind: statedir.Dir},
		{Path: filepath.Join(d, "grants"), Kind: statedir.Dir},
		{Path: filepath.Join(d, identity.KeyFile), Kind: statedir.Secret},
		{Path: filepath.Join(d, control.SecretFile), Kind: statedir.Secret},
		{Path: n.ownershipPath(), Kind: statedir.File},
		{Path: jpath, Kind: statedir.File},
		{Path: journal.HeadPath(jpath), Kind: statedir.File},
		{Path: ReceiptLogPath(d), Kind: statedir.File},
		{Path: filepath.Join(d, ownerStoreFile), Kind: statedir.File},
		{Path: OwnerConfigPath(d), Kind: statedir.File},
		{Path: revocationsPath(d), Kind: statedir.File},
	}
	seen := map[string]bool{}
	for _, it := range items {
		seen[it.Path] = true
	}
	for _, f := range n.cfg.Files {
		if !seen[f] {
			seen[f] = true
			items = append(items, statedir.Item{Path: f, Kind: statedir.File})
		}
	}
	if err := statedir.Check(items...); err != nil {
		return fmt.Errorf("refusing to start: other users could change what the node trusts:\n%w", err)
	}
	return nil
}

// ownershipPath is the node's ownership certificate (control.ownership),
// relative to the state dir unless absolute.
func (n *Node) ownershipPath() string {
	p := n.cfg.Control.Ownership
	if !filepath.IsAbs(p) {
		p = filepath.Join(n.cfg.StateDir, p)
	}
	return p
}

// revocationsPath is the grant revocation list in stateDir.
func revocationsPath(stateDir string) string {
	return filepath.Join(stateDir, "grants", "revoked")
}
