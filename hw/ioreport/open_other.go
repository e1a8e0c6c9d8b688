//go:build !darwin

package ioreport

// Open reports that IOReport exists only on macOS.
func Open() (*Counter, error) { return nil, ErrUnsupported }
