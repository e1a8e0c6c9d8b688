package cpu

import (
	"fmt"
	"github.com/meshnode/meshnode/gguf/deltanet"
	"unsafe"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// The delta net's short convolution and scan (backend.DeltaNetter), the
// arithmetic gguf/model's host path had, operation for operation, so a
// Qwen3.5 model's logits keep their bits: exp and log in float64 rounded
// to float32, Σ of squares in float64 in element order. The scan's state
// is kept as the host kept it: per head, row j (the j-th value component)
// holds HeadDim floats. Tasks are (sequence, head) pairs, each its
// sequence's rows in order, so threads change no bits.

var _ backend.DeltaNetter = (*Backend)(nil)

// DeltaNetFits implements backend.DeltaNetter: any shape.
func (b *Backend) DeltaNetFits(headDim, convKernel int) bool { return headDim > 0 && convKernel > 1 }

// f32Weight is an F32 weight's elements, read in place.
func f32Weight(w backend.Weight) []float32 {
	cw := asWeight(w)
	if cw.typ != quant.F32 {
		panic(fmt.Sprintf("cpu: delta-net weight of type %s, want F32", cw.typ))
	}
	if cw.vec != nil {
		return cw.vec
	}
	if len(cw.data) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&cw.data[0])), len(cw.data)/4)
}

// checkSeqs panics on spans outside rows or states of the wrong size.
func checkSeqs(op string, rows int, seqs []backend.DeltaSeq, conv, ssm int) {
	for i, s := range seqs {
		if err := s.Check(rows, conv, ssm); err != nil {
			panic(fmt.Sprintf("cpu: %s: sequence %d: %v", op, i, err))
		}
	}
}

// convChunk is the channels one convolution task takes.
const convChunk = 256

// ShortConv implements backend.DeltaNetter.
func (b *Backend) ShortConv(x backend.Tensor, w backend.Weight, seqs []backend.DeltaSeq) {
	ch, k := x.Cols, asWeight(w).cols
	if asWeight(w).rows != ch || k < 2 {
		panic(fmt.Sprintf("cpu: ShortConv of %d channels with a %d × %d weight", ch, asWeight(w).rows, k))
	}
	checkSeqs("ShortConv", x.Rows, seqs, (k-1)*ch, 0)
	if len(seqs) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.growScratch(k)
	chunks := ceilDiv(ch, convChunk)
	b.conv = convJob{x: data(x), w: f32Weight(w), seqs: seqs, ch: ch, k: k, chunks: chunks, scratch: b.scratch}
	b.pool.run(len(seqs)*chunks, &b.conv)
	b.conv = convJob{}
}

type convJob struct {
	x, w          []float32
	seqs          []backend.DeltaSeq
	ch, k, chunks int
	scratch       [][]float32
}

func (j *convJob) do(w, t int) {
	s := &j.seqs[t/j.chunks]
	c0 := t % j.chunks * convChunk
	ch, k := j.ch, j.k
	prev, next := data(s.Prev.Conv), data(s.Next.Conv)
	win := j.scratch[w][:k]
	for i := c0; i < min(c0+convChunk, ch); i++ {
		// The window is the state's K−1 inputs then the row's; the
		// state drops the oldest (ggml_ssm_conv over the concatenation).
		for r := range k - 1 {
			win[r] = prev[r*ch+i]
		}
		wt := j.w[i*k : (i+1)*k]
		for _, sp := range s.Spans {
			for r := sp.Row; r < sp.Row+sp.N; r++ {
				win[k-1] = j.x[r*ch+i]
				var sum float32
				for t := range k {
					sum += float32(win[t] * wt[t]) // rounded: no FMA on arm64 either
				}
				j.x[r*ch+i] = deltanet.Silu(sum)
				copy(win, win[1:])
			}
		}
		for r := range k - 1 {
			next[r*ch+i] = win[r]
		}
	}
}

// DeltaScan implements backend.DeltaNetter.
func (b *Backend) DeltaScan(y, x, z, beta, alpha backend.Tensor, d *backend.DeltaNet, seqs []backend.DeltaSeq) {
	kh, nh, sz := d.KeyHeads, d.Heads, d.HeadDim
	n := x.Rows
	if kh <= 0 || nh%kh != 0 || sz <= 0 || x.Cols != (2*kh+nh)*sz || y.Cols != nh*sz || z.Cols != nh*sz ||
		beta.Cols != nh || alpha.Cols != nh || y.Rows != n || z.Rows != n || beta.Rows != n || alpha.Rows != n {
		panic(fmt.Sprintf("cpu: DeltaScan of %d × %d rows for %+v", n, x.Cols, *d))
	}
	checkSeqs("DeltaScan", n, seqs, 0, nh*sz*sz)
	if len(seqs) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.growScratch(2 * sz)
	b.scan = scanJob{y: data(y), x: data(x), z: data(z), beta: data(beta), alpha: data(alpha), d: d,
		dtBias: f32Weight(d.DTBias), a: f32Weight(d.A), norm: f32Weight(d.Norm), seqs: seqs, scratch: b.scratch}
	b.pool.run(len(seqs)*nh, &b.scan)
	b.scan = scanJob{}
}

type scanJob struct {
	y, x, z, beta, alpha []float32
	d                    *backend.DeltaNet
	dtBias, a, norm      []float32
	seqs                 []backend.DeltaSeq
	scratch              [][]float32
}

func (j *scanJob) do(w, t int) {
	d := j.d
	kh, nh, S := d.KeyHeads, d.Heads, d.HeadDim
	s, h := &j.seqs[t/nh], t%nh
	ch, inner := (2*kh+nh)*S, nh*S
	sc := j.scratch[w]
	q, k := sc[:S], sc[S:2*S]
	M := data(s.Next.SSM)[h*S*S : (h+1)*S*S]
	// The first row decays Prev into Next (the same tensors in place),
	// later rows Next in place: no copy of the state.
	src := data(s.Prev.SSM)[h*S*S : (h+1)*S*S]
	g0 := h % kh
	for _, sp := range s.Spans {
		for r := sp.Row; r < sp.Row+sp.N; r++ {
			row := j.x[r*ch : (r+1)*ch]
			copy(q, row[g0*S:(g0+1)*S])
			copy(k, row[kh*S+g0*S:kh*S+(g0+1)*S])
			deltanet.L2Norm(q, d.Eps)
			deltanet.L2Norm(k, d.Eps)
			v := row[2*kh*S+h*S : 2*kh*S+(h+1)*S]
			g := deltanet.Softplus(j.alpha[r*nh+h]+j.dtBias[h]) * j.a[h]
			beta := deltanet.Sigmoid(j.beta[r*nh+h])
			out := j.y[r*inner+h*S : r*inner+(h+1)*S]
			zh := j.z[r*inner+h*S : r*inner+(h+1)*S]
			deltanet.HeadRow(M, src, q, k, v, zh, j.norm, out, g, beta, d.Eps)
			src = M
		}
	}
}

// SigmoidMul implements backend.DeltaNetter.
func (b *Backend) SigmoidMul(x, g backend.Tensor) {
	if g.Rows != x.Rows || g.Cols != x.Cols && g.Cols != 1 {
		panic(fmt.Sprintf("cpu: SigmoidMul of %d × %d by %d × %d", x.Rows, x.Cols, g.Rows, g.Cols))
	}
	xs, gs := data(x), data(g)
	for r := range x.Rows {
		row := xs[r*x.Cols : (r+1)*x.Cols]
		if g.Cols == 1 {
			s := deltanet.Sigmoid(gs[r])
			for i := range row {
				row[i] *= s
			}
			continue
		}
		for i, v := range gs[r*g.Cols : (r+1)*g.Cols] {
			row[i] *= deltanet.Sigmoid(v)
		}
	}
}
