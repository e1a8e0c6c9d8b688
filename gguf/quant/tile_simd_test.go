//go:build (amd64 || arm64) && !purego

package quant

import "testing"

// TestSIMDPrefetchRows runs prefetchRows over every byte count and row
// spacing of a small buffer, to its last byte: a prefetch has no effect
// to check, but the loop must stay in bounds and end.
func TestSIMDPrefetchRows(t *testing.T) {
	buf := make([]byte, 4096)
	for rs := 1; rs <= 300; rs += 37 {
		for bytes := 1; bytes <= rs; bytes += 13 {
			rows := (len(buf)-bytes)/rs + 1
			prefetchRows(&buf[0], rs, rows, bytes)
		}
	}
	prefetchRows(&buf[0], 64, 0, 64)
}
