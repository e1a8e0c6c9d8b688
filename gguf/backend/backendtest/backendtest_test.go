package backendtest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/backend/backendtest"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/quant"
)

// exact is every kernel's tolerance zero.
var exact = backendtest.Tolerances{"matmul": 0, "embed": 0, "rmsnorm": 0, "elementwise": 0, "rope": 0, "attend": 0,
	"shortconv": 0, "deltascan": 0, "sigmoidmul": 0, "gatedconv": 0}

// TestCPUPassesAgainstItself: the whole suite, every feature, with the
// CPU backend on one thread as the device and no tolerance: its kernels
// give the same bits on one thread as on two.
func TestCPUPassesAgainstItself(t *testing.T) {
	dev := cpu.New(cpu.Options{Threads: 1})
	defer dev.Close()
	backendtest.Kernels(t, dev, exact, backendtest.Features{GptOss: true, DeltaNet: true, GatedConv: true})
}

// skewed is the CPU backend with its products one part in 10⁶ too large.
type skewed struct{ *cpu.Backend }

func (s skewed) MatMul(dst backend.Tensor, w backend.Weight, x backend.Tensor) {
	s.Backend.MatMul(dst, w, x)
	s.Backend.Scale(dst, 1+1e-6)
}

// recorder is a testing.TB that keeps what fails instead of failing.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCompareCatchesDifferences: a product off by a part in a million is
// reported against a zero tolerance and passes one above it.
func TestCompareCatchesDifferences(t *testing.T) {
	dev := skewed{cpu.New(cpu.Options{Threads: 1})}
	defer dev.Close()
	for _, tol := range []float64{0, 1e-5} {
		r := &recorder{TB: t}
		p := backendtest.NewPair(r, dev, backendtest.Tolerances{"matmul": tol})
		w := p.Weight(quant.Q8_0, 16, 64, p.Encode(quant.Q8_0, 16, 64, 1))
		x, y := p.Tensor(3, 64, p.Random(3*64, 1)), p.Tensor(3, 16, nil)
		p.CPU.MatMul(y.C, w.C, x.C)
		p.Dev.MatMul(y.D, w.D, x.D)
		worst := p.Compare("matmul", "skewed", y)
		if worst == 0 || worst > 1e-5 {
			t.Errorf("tolerance %g: relative error %g, want about 1e-6", tol, worst)
		}
		if failed := len(r.errs) > 0; failed != (tol == 0) {
			t.Errorf("tolerance %g: failures %q", tol, r.errs)
		}
		if tol == 0 && (len(r.errs) != 1 || !strings.Contains(r.errs[0], "matmul skewed: relative error")) {
			t.Errorf("the failure says %q", r.errs)
		}
	}
}
