package metal

import (
	"strings"
	"unsafe"

	"github.com/meshnode/meshnode/gguf/backend"
)

// RoPE's angles are computed on the host, with the arithmetic the CPU
// backend uses (backend.RoPEAngles), into a table of (cos, sin) per
// position and pair that the kernel reads at the dispatch's position. One
// table per distinct RoPE, grown as positions advance.

// ropeKey identifies a RoPE by value (sessions hold their own copies).
type ropeKey struct {
	dims                          int
	neox                          bool
	base, freqScale, attnFactor   float32
	extFactor, betaFast, betaSlow float32
	origCtx                       int
	factors                       string // the factors' bytes
}

type ropeTable struct {
	mem       *devMem
	positions int
}

func keyOf(r *backend.RoPE) ropeKey {
	k := ropeKey{dims: r.Dims, neox: r.NeoX, base: r.Base, freqScale: r.FreqScale, attnFactor: r.AttnFactor,
		extFactor: r.ExtFactor, betaFast: r.BetaFast, betaSlow: r.BetaSlow, origCtx: r.OrigCtx}
	if len(r.Factors) > 0 {
		// Aliases the factors for the lookup; copied if stored.
		k.factors = unsafe.String((*byte)(unsafe.Pointer(&r.Factors[0])), 4*len(r.Factors))
	}
	return k
}

// ropeTable returns r's table covering positions [0, n), making or
// growing it. With b locked. A table it replaces stays alive while a
// recorded dispatch binds it.
func (b *Backend) ropeTable(r *backend.RoPE, n int) *ropeTable {
	k := keyOf(r)
	t := b.ropes[k]
	if t != nil && t.positions >= n {
		return t
	}
	positions := max(n, 256)
	if t != nil {
		positions = max(positions, 2*t.positions)
	}
	host := ropeAngles(r, positions)
	m, err := b.alloc(4 * len(host))
	must(err)
	copy(unsafe.Slice((*float32)(m.ptr()), len(host)), host)
	k.factors = strings.Clone(k.factors) // a stored key must not alias r
	nt := &ropeTable{mem: m, positions: positions}
	b.ropes[k] = nt
	return nt
}

// ropeAngles is (cos, sin) for each of r.Dims/2 pairs at positions
// [0, positions), as gguf/cpu computes them per position.
func ropeAngles(r *backend.RoPE, positions int) []float32 {
	dims := r.Dims
	out := make([]float32, positions*dims)
	a := r.Angles()
	for p := range positions {
		a.At(p, out[p*dims:(p+1)*dims])
	}
	return out
}
