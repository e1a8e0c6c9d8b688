package backend

import (
	"math"

	"github.com/meshnode/meshnode/gguf/detmath"
)

// RoPEAngles computes a RoPE's (cos, sin) per rotated pair as ggml's rope
// kernel caches them: θ advancing by base^(-2/dims) per pair in float32,
// divided by the pair's factor, then YaRN's ramp and the magnitude
// scaling. Backends share it so that their angles agree bit for bit, and
// its functions are gguf/detmath's, so that they agree on every platform.
type RoPEAngles struct {
	r          *RoPE
	thetaScale float32
	corr       [2]float32
	mscale     float32
}

// Angles prepares r's angle computation (what does not depend on the
// position).
func (r *RoPE) Angles() RoPEAngles {
	a := RoPEAngles{r: r, thetaScale: float32(detmath.Pow(float64(r.Base), float64(-2/float32(r.Dims)))), mscale: r.AttnFactor}
	if r.ExtFactor != 0 {
		a.corr = yarnCorrDims(r.Dims, r.OrigCtx, r.Base, r.BetaFast, r.BetaSlow)
	}
	if a.mscale == 0 {
		a.mscale = 1
	}
	return a
}

// At writes (cos, sin) for each of the r.Dims/2 pairs at position pos into
// dst[:r.Dims], pair i at dst[2i], dst[2i+1].
func (a *RoPEAngles) At(pos int, dst []float32) {
	r := a.r
	theta := float32(pos)
	for i0 := 0; i0 < r.Dims; i0 += 2 {
		ff := float32(1)
		if r.Factors != nil && i0/2 < len(r.Factors) {
			ff = r.Factors[i0/2]
		}
		dst[i0], dst[i0+1] = ropeYaRN(theta/ff, r.FreqScale, a.corr, i0, r.ExtFactor, a.mscale)
		theta *= a.thetaScale
	}
}

// ropeYaRN is ggml's rope_yarn: the interpolated angle, ramped towards the
// extrapolated one where YaRN asks, and its cos and sin times mscale.
func ropeYaRN(thetaExtrap, freqScale float32, corr [2]float32, i0 int, extFactor, mscale float32) (cos, sin float32) {
	thetaInterp := freqScale * thetaExtrap
	theta := thetaInterp
	if extFactor != 0 {
		y := (float32(i0/2) - corr[0]) / max(0.001, corr[1]-corr[0])
		// Every product rounded (float32(…)): Go fuses a·b+c into one
		// FMA on arm64 and at GOAMD64=v3, even across statements.
		rampMix := float32((1 - min(1, max(0, y))) * extFactor)
		theta = float32(thetaInterp*(1-rampMix)) + float32(thetaExtrap*rampMix)
		mscale *= 1 + float32(0.1*float32(detmath.Log(float64(1/freqScale))))
	}
	return float32(detmath.Cos(float64(theta))) * mscale, float32(detmath.Sin(float64(theta))) * mscale
}

// yarnCorrDims is ggml_rope_yarn_corr_dims: the first and last dimension
// YaRN's ramp covers.
func yarnCorrDims(dims, origCtx int, base, betaFast, betaSlow float32) [2]float32 {
	corrDim := func(nRot float32) float32 {
		return float32(dims) * float32(detmath.Log(float64(float32(origCtx)/(nRot*2*math.Pi)))) / (2 * float32(detmath.Log(float64(base))))
	}
	start := float32(math.Floor(float64(corrDim(betaFast))))
	end := float32(math.Ceil(float64(corrDim(betaSlow))))
	return [2]float32{max(0, start), min(float32(dims-1), end)}
}
