//go:build !unix

package modelfetch

// freeSpace cannot be told here.
func freeSpace(string) (uint64, bool) { return 0, false }
