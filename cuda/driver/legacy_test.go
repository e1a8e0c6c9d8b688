package driver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestLoadLegacyNames loads a driver of CUDA 10's vintage: every required
// function under its current name except cuDevicePrimaryCtxRelease, which
// it has only under the original name. Load binds that, calls reach it,
// and errors name the function actually called.
func TestLoadLegacyNames(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the driver exists on Linux only")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build the stand-in")
	}
	var code strings.Builder
	for f := range firstOptional {
		switch f {
		case fPrimaryCtxRelease:
			// 101 is CUDA_ERROR_INVALID_DEVICE: any device but 7.
			code.WriteString("int cuDevicePrimaryCtxRelease(int d) { return d == 7 ? 0 : 101; }\n")
		case fGetErrorName, fGetErrorString:
			fmt.Fprintf(&code, "int %s() { return 1; }\n", funcNames[f]) // no names: Error falls back to ours
		default:
			fmt.Fprintf(&code, "int %s() { return 0; }\n", funcNames[f])
		}
	}
	dir := t.TempDir()
	src, so := filepath.Join(dir, "legacy.c"), filepath.Join(dir, "liblegacy.so")
	if err := os.WriteFile(src, []byte(code.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	l, err := Load(so)
	if err != nil {
		t.Fatalf("Load of a driver with only the legacy cuDevicePrimaryCtxRelease: %v", err)
	}
	if l.HasGraphs() || l.HasHostRegister() {
		t.Error("optional functions bound from a library without them")
	}
	if err := l.PrimaryCtxRelease(7); err != nil {
		t.Errorf("PrimaryCtxRelease(7) through the legacy symbol: %v", err)
	}
	err = l.PrimaryCtxRelease(0)
	var de *Error
	if !errors.As(err, &de) || de.Code != ErrInvalidDevice || de.Func != "cuDevicePrimaryCtxRelease" {
		t.Errorf("PrimaryCtxRelease(0) = %#v, want CUDA_ERROR_INVALID_DEVICE from cuDevicePrimaryCtxRelease", err)
	}
	// An optional function the driver lacks is refused under its own name.
	if _, err := l.StreamEndCapture(0); !errors.As(err, &de) || de.Code != ErrNotSupported || de.Func != "cuStreamEndCapture" {
		t.Errorf("a missing optional function: %#v", err)
	}
}
