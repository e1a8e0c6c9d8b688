//go:build !(darwin || freebsd || linux || netbsd)

package driver

import (
	"fmt"
	"runtime"
)

// Load reports that the driver cannot be opened on this system.
func Load(path string) (*Lib, error) {
	return nil, fmt.Errorf("%w: no dynamic loader on %s", ErrNoLibrary, runtime.GOOS)
}

func (l *Lib) call(funcID, ...uintptr) uintptr { return uintptr(ErrNotSupported) }
