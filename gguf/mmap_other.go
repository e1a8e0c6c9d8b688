//go:build !linux && !darwin

package gguf

import "os"

// mapFile reads the whole file: the portable fallback where mmap is not used.
func mapFile(path string) (data []byte, unmap func() error, mapped bool, err error) {
	b, err := os.ReadFile(path)
	return b, nil, false, err
}
