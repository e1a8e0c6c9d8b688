//go:build !unix

package journal

import "os"

// lock refuses: without an exclusive lock the operating system releases
// on process death, two stewards could serve from one journal (§2.2).
func lock(*os.File) error { return ErrNoLock }
