package meshnode_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestNoFusedMultiplyAdd compiles the engine's packages (everything whose
// arithmetic reaches a serve's tokens: gguf/..., node/engine/...) for the
// targets whose compilers fuse a*b+c into one instruction, arm64 always and
// amd64 at GOAMD64=v3, even across statements, and fails on every fused
// instruction not written as math.FMA. A fused product rounds once where
// this machine's build rounds twice, so the logits, a sampled draw or a
// speculative window would differ there, and a receipt sealed on one
// machine would not replay on another; the fix is an explicit float32(a*b)
// or float64(a*b), which Go never fuses. (It once caught Qwen3.5's delta
// nets, YaRN's RoPE and the frequency penalty.)
func TestNoFusedMultiplyAdd(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the engine for two more targets")
	}
	// "0x0068 00104 (/path/file.go:486)	FMSUBD	F3, F5, F2, F2"
	fused := regexp.MustCompile(`\((/[^():]+\.go):(\d+)\)\s+V?FN?M(ADD|SUB)\w*\b`)
	for _, env := range [][]string{{"GOARCH=arm64"}, {"GOARCH=amd64", "GOAMD64=v3"}} {
		cmd := exec.Command("go", "build", "-gcflags=-S", "./gguf/...", "./node/engine/...")
		cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v go build: %v\n%s", env, err, out)
		}
		seen := map[string]bool{}
		sc := bufio.NewScanner(bytes.NewReader(out))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			m := fused.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			at := m[1] + ":" + m[2]
			if seen[at] {
				continue
			}
			seen[at] = true
			if line := sourceLine(t, m[1], m[2]); !strings.Contains(line, "math.FMA(") {
				t.Errorf("%v: fused multiply-add at %s: %s", env, at, strings.TrimSpace(line))
			}
		}
	}
}

// sourceLine is line n of file.
func sourceLine(t *testing.T, file, n string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var i int
	fmt.Sscan(n, &i)
	lines := strings.Split(string(b), "\n")
	if i < 1 || i > len(lines) {
		t.Fatalf("%s has no line %d", file, i)
	}
	return lines[i-1]
}
