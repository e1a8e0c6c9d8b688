//go:build !(darwin || freebsd || linux || netbsd)

package nvml

import (
	"errors"
	"runtime"
)

// DefaultPath is the NVML library the driver installs.
const DefaultPath = "libnvidia-ml.so.1"

// Load reports that NVML cannot be opened on this system.
func Load(path string) (*Lib, error) {
	return nil, errors.New("nvml: no dynamic loader on " + runtime.GOOS)
}
