//go:build !(darwin && arm64)

package mtl

import (
	"fmt"
	"runtime"
)

// SystemDefault reports that Metal is unavailable: the Metal backend runs
// on Apple Silicon Macs only (darwin/arm64).
func SystemDefault() (Device, error) {
	return nil, fmt.Errorf("%w on %s/%s: the Metal backend runs on Apple Silicon Macs (darwin/arm64)", ErrUnavailable, runtime.GOOS, runtime.GOARCH)
}
