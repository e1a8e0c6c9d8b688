package cpu

import (
	"fmt"
	"math"

	"github.com/meshnode/meshnode/gguf/backend"
)

// ropeJob rotates the heads of one row (one position) per task.
type ropeJob struct {
	x          []float32
	cols       int
	headDim    int
	pos        int
	r          *backend.RoPE
	thetaScale float32
	corr       [2]float32
	scratch    [][]float32
}

// RoPE implements backend.Backend, following ggml's rope kernel: per
// position a cache of (cos, sin) for each pair, θ advancing by
// base^(-2/dims) per pair in float32, then YaRN's ramp and scaling.
func (b *Backend) RoPE(x backend.Tensor, headDim, pos int, r *backend.RoPE) {
	if headDim <= 0 || x.Cols%headDim != 0 || r.Dims > headDim || r.Dims%2 != 0 || (r.Factors != nil && len(r.Factors) < r.Dims/2) {
		panic(fmt.Sprintf("cpu: RoPE of %d columns, head %d, dims %d, %d factors", x.Cols, headDim, r.Dims, len(r.Factors)))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.growScratch(headDim)
	j := ropeJob{
		x: data(x), cols: x.Cols, headDim: headDim, pos: pos, r: r, scratch: b.scratch,
		thetaScale: float32(math.Pow(float64(r.Base), float64(-2/float32(r.Dims)))),
	}
	if r.ExtFactor != 0 {
		j.corr = yarnCorrDims(r.Dims, r.OrigCtx, r.Base, r.BetaFast, r.BetaSlow)
	}
	b.rope = j
	b.pool.run(x.Rows, &b.rope)
	b.rope = ropeJob{}
}

func (j *ropeJob) do(w, t int) {
	r := j.r
	cache := j.scratch[w][:j.headDim]
	theta := float32(j.pos + t)
	mscale := r.AttnFactor
	if mscale == 0 {
		mscale = 1
	}
	for i0 := 0; i0 < j.headDim; i0 += 2 {
		ff := float32(1)
		if r.Factors != nil && i0/2 < len(r.Factors) {
			ff = r.Factors[i0/2]
		}
		cache[i0], cache[i0+1] = ropeYaRN(theta/ff, r.FreqScale, j.corr, i0, r.ExtFactor, mscale)
		theta *= j.thetaScale
	}
	row := j.x[t*j.cols : (t+1)*j.cols]
	n := r.Dims
	for h := 0; h < j.cols; h += j.headDim {
		x := row[h : h+j.headDim]
		for i0 := 0; i0 < n; i0 += 2 {
			c, s := cache[i0], cache[i0+1]
			a, b := i0, i0+1 // llama's adjacent pairs
			if r.NeoX {
				a, b = i0/2, i0/2+n/2
			}
			x0, x1 := x[a], x[b]
			x[a] = float32(x0*c) - float32(x1*s)
			x[b] = float32(x0*s) + float32(x1*c)
		}
	}
}

// ropeYaRN is ggml's rope_yarn: the interpolated angle, ramped towards the
// extrapolated one where YaRN asks, and its cos and sin times mscale.
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

// yarnCorrDims is ggml_rope_yarn_corr_dims: the first and last dimension
// YaRN's ramp covers.
func yarnCorrDims(dims, origCtx int, base, betaFast, betaSlow float32) [2]float32 {
	corrDim := func(nRot float32) float32 {
		return float32(dims) * float32(math.Log(float64(float32(origCtx)/(nRot*2*math.Pi)))) / (2 * float32(math.Log(float64(base))))
	}
	start := float32(math.Floor(float64(corrDim(betaFast))))
	end := float32(math.Ceil(float64(corrDim(betaSlow))))
	return [2]float32{max(0, start), min(float32(dims-1), end)}
}
