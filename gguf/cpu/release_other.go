//go:build !linux

package cpu

// releasePages: pages are reclaimed only on Linux (MADV_PAGEOUT); here a
// packed weight's file pages stay until the system reclaims them.
func releasePages([]byte) error { return nil }
