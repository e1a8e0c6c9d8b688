package cuda

import (
	"math"
	"strings"
	"unsafe"

	"github.com/meshnode/meshnode/cuda/driver"
	"github.com/meshnode/meshnode/gguf/backend"
)

// RoPE's angles are computed on the host, with the CPU backend's
// arithmetic (gguf/cpu/rope.go: θ advancing by base^(-2/dims) per pair in
// float32, YaRN's ramp, cos and sin in float64), into a table of (cos, sin)
// per position and pair that the kernel reads at the step's position. One
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
	ptr       driver.DevicePtr
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
// growing it. With b locked.
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
	b.bind()
	m, err := b.alloc(4 * len(host))
	must(err)
	must(b.lib.MemcpyHtoD(m.ptr, unsafe.Pointer(&host[0]), 4*len(host)))
	k.factors = strings.Clone(k.factors) // a stored key must not alias r
	// A table it replaces may still be read by the recorded step; it is
	// freed at a sync, after that step has run.
	nt := &ropeTable{mem: m, ptr: m.ptr, positions: positions}
	b.ropes[k] = nt
	return nt
}

// ropeAngles is (cos, sin) for each of r.Dims/2 pairs at positions
// [0, positions), as gguf/cpu's ropeJob computes its cache.
func ropeAngles(r *backend.RoPE, positions int) []float32 {
	dims := r.Dims
	out := make([]float32, positions*dims)
	thetaScale := float32(math.Pow(float64(r.Base), float64(-2/float32(dims))))
	var corr [2]float32
	if r.ExtFactor != 0 {
		corr = yarnCorrDims(dims, r.OrigCtx, r.Base, r.BetaFast, r.BetaSlow)
	}
	mscale := r.AttnFactor
	if mscale == 0 {
		mscale = 1
	}
	for p := range positions {
		theta := float32(p)
		row := out[p*dims : (p+1)*dims]
		for i0 := 0; i0 < dims; i0 += 2 {
			ff := float32(1)
			if r.Factors != nil && i0/2 < len(r.Factors) {
				ff = r.Factors[i0/2]
			}
			row[i0], row[i0+1] = ropeYaRN(theta/ff, r.FreqScale, corr, i0, r.ExtFactor, mscale)
			theta *= thetaScale
		}
	}
	return out
}

// ropeYaRN is ggml's rope_yarn, as gguf/cpu's.
func ropeYaRN(thetaExtrap, freqScale float32, corr [2]float32, i0 int, extFactor, mscale float32) (cos, sin float32) {
	thetaInterp := freqScale * thetaExtrap
	theta := thetaInterp
	if extFactor != 0 {
		y := (float32(i0/2) - corr[0]) / max(0.001, corr[1]-corr[0])
		rampMix := (1 - min(1, max(0, y))) * extFactor
		theta = float32(thetaInterp*(1-rampMix)) + float32(thetaExtrap*rampMix)
		mscale *= 1 + 0.1*float32(math.Log(float64(1/freqScale)))
	}
	return float32(math.Cos(float64(theta))) * mscale, float32(math.Sin(float64(theta))) * mscale
}

// yarnCorrDims is ggml_rope_yarn_corr_dims, as gguf/cpu's.
func yarnCorrDims(dims, origCtx int, base, betaFast, betaSlow float32) [2]float32 {
	corrDim := func(nRot float32) float32 {
		return float32(dims) * float32(math.Log(float64(float32(origCtx)/(nRot*2*math.Pi)))) / (2 * float32(math.Log(float64(base))))
	}
	start := float32(math.Floor(float64(corrDim(betaFast))))
	end := float32(math.Ceil(float64(corrDim(betaSlow))))
	return [2]float32{max(0, start), min(float32(dims-1), end)}
}
