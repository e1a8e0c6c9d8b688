package quant_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// xmmOperand matches an operand X0–X31.
var xmmOperand = regexp.MustCompile(`(^|[\s,(])X([0-9]|[12][0-9]|3[01])([\s,)]|$)`)

// TestAMD64KernelsStayVEX: the amd64 kernels of gguf's packages use only
// VEX- or EVEX-encoded instructions on vector registers. A legacy-SSE
// instruction there (MOVD AX, X6 after VPBROADCASTD X5, Y5) runs in the
// state an AVX instruction left dirty, and the processor pays a
// transition for it: f32ToF16 took 130 ns a call for it, ten times the
// conversions of attention's 48-float rows (BenchmarkQuantizeActivation).
func TestAMD64KernelsStayVEX(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "*", "*_amd64.[sh]"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("found %d amd64 assembly files under gguf, want the kernels'", len(files))
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			line, _, _ := strings.Cut(sc.Text(), "//")
			line = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line), `\`))
			if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "TEXT") || strings.HasSuffix(line, ":") {
				continue
			}
			fields := strings.Fields(line)
			mnemonic, operands := fields[0], strings.Join(fields[1:], " ")
			if strings.Contains(mnemonic, "(") {
				continue // a macro's use: its body is checked where it is defined
			}
			if !strings.HasPrefix(mnemonic, "V") && xmmOperand.MatchString(operands) {
				t.Errorf("%s:%d: %q is legacy SSE on a vector register; use the VEX form", name, n, line)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
}
