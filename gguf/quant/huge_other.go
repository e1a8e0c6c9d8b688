//go:build (amd64 || arm64) && !purego && !linux

package quant

// adviseHuge: transparent huge pages are Linux's.
func adviseHuge([]byte) {}
