package quant_test

import (
	"os"
	"os/exec"
	"regexp"
	"testing"
)

// TestNoFusedMultiplyAdd compiles this package for targets whose compilers
// fuse a*b+c into one instruction (arm64 always, amd64 at GOAMD64=v3) and
// fails if any was emitted: ggml's reference code rounds every product, so
// a fused one breaks bit-exactness on those machines while passing here.
// The cure is an explicit float32(a*b), which Go never fuses.
func TestNoFusedMultiplyAdd(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the package for two more targets")
	}
	fused := regexp.MustCompile(`(?m)^.*\b(V?F(N?M(ADD|SUB))\w*)\b.*$`)
	for _, env := range [][]string{
		{"GOARCH=arm64"},
		{"GOARCH=amd64", "GOAMD64=v3"},
	} {
		cmd := exec.Command("go", "build", "-gcflags=-S", ".")
		cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v go build: %v\n%s", env, err, out)
		}
		for _, m := range fused.FindAll(out, 20) {
			t.Errorf("%v: fused multiply-add: %s", env, m)
		}
	}
}
