//go:build !linux

package pages

// Release: pages are reclaimed on request only on Linux (MADV_PAGEOUT);
// here they stay until the system reclaims them.
func Release([]byte) error { return nil }

// AdviseHuge: transparent huge pages are Linux's.
func AdviseHuge([]byte) {}
