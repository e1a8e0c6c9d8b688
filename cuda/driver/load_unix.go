//go:build darwin || freebsd || linux || netbsd

package driver

import (
	"fmt"
	"runtime"

	"github.com/ebitengine/purego"
)

// Load opens the driver library at path (DefaultPath when empty) and
// resolves its functions. It does not initialise the driver (Init does).
// The library stays loaded for the process's life. Only Linux has a CUDA
// driver; elsewhere Load reports that.
func Load(path string) (*Lib, error) {
	if path == "" {
		path = DefaultPath
	}
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("%w: no CUDA driver on %s", ErrNoLibrary, runtime.GOOS)
	}
	// RTLD_LOCAL: nothing else binds to the driver's symbols, so a second
	// library loaded later (a stand-in in tests) cannot have its own calls
	// to cu* functions resolved into this one.
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %v", ErrNoLibrary, path, err)
	}
	l := &Lib{path: path}
	for f := range numFuncs {
		name := funcNames[f]
		sym, err := purego.Dlsym(h, name)
		if legacy, ok := legacyNames[f]; err != nil && ok {
			name = legacy
			sym, err = purego.Dlsym(h, name)
		}
		if err != nil {
			if f < firstOptional {
				return nil, l.missing(f)
			}
			continue
		}
		l.fn[f], l.names[f] = sym, name
	}
	return l, nil
}

// call calls function f with integer and pointer arguments (every driver
// function the backend uses takes only those) and returns its CUresult.
// Pointers converted to uintptr in the call's arguments stay valid, and
// where they are, for the call (go:uintptrescapes moves them to the heap).
//
//go:uintptrescapes
func (l *Lib) call(f funcID, args ...uintptr) uintptr {
	if l.fn[f] == 0 {
		return uintptr(ErrNotSupported)
	}
	r, _, _ := purego.SyscallN(l.fn[f], args...)
	return r
}
