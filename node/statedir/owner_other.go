//go:build !unix

package statedir

import "io/fs"

// owner is unknown where files have no unix owner; only the mode bits are
// checked there. (meshnode serves on unix systems only: elsewhere the
// steward's journal cannot be locked and the node does not start.)
func owner(fs.FileInfo) (int, bool) { return 0, false }
