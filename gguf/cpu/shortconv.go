package cpu

import (
	"fmt"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/detmath"
)

// LFM2's gated short convolution (backend.GatedConver): per channel,
// b·x convolved over the sequence's last K−1 such products, times c.
// Tasks are (sequence, channel chunk) pairs, each its sequence's rows in
// order, so threads change no bits.

var _ backend.GatedConver = (*Backend)(nil)

// GatedConv implements backend.GatedConver.
func (b *Backend) GatedConv(y, bcx backend.Tensor, w backend.Weight, seqs []backend.DeltaSeq) {
	ch, k := y.Cols, asWeight(w).cols
	if asWeight(w).rows != ch || k < 2 || k > backend.MaxConvKernel || bcx.Cols != 3*ch || bcx.Rows != y.Rows {
		panic(fmt.Sprintf("cpu: GatedConv of %d × %d rows into %d × %d with a %d × %d weight", bcx.Rows, bcx.Cols, y.Rows, ch, asWeight(w).rows, k))
	}
	checkSeqs("GatedConv", y.Rows, seqs, (k-1)*ch, 0)
	if len(seqs) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.growScratch(k)
	chunks := ceilDiv(ch, convChunk)
	b.gconv = gatedConvJob{y: data(y), bcx: data(bcx), w: f32Weight(w), seqs: seqs, ch: ch, k: k, chunks: chunks, scratch: b.scratch}
	b.pool.run(len(seqs)*chunks, &b.gconv)
	b.gconv = gatedConvJob{}
}

type gatedConvJob struct {
	y, bcx, w     []float32
	seqs          []backend.DeltaSeq
	ch, k, chunks int
	scratch       [][]float32
}

func (j *gatedConvJob) do(w, t int) {
	s := &j.seqs[t/j.chunks]
	c0 := t % j.chunks * convChunk
	ch, k := j.ch, j.k
	prev, next := data(s.Prev.Conv), data(s.Next.Conv)
	win := j.scratch[w][:k]
	for i := c0; i < min(c0+convChunk, ch); i++ {
		for r := range k - 1 {
			win[r] = prev[r*ch+i]
		}
		wt := j.w[i*k : (i+1)*k]
		for _, sp := range s.Spans {
			for r := sp.Row; r < sp.Row+sp.N; r++ {
				row := j.bcx[r*3*ch:]
				win[k-1] = row[i] * row[2*ch+i] // b·x
				var sum float32
				for t := range k {
					sum = detmath.FMA32(win[t], wt[t], sum)
				}
				j.y[r*ch+i] = row[ch+i] * sum // c·conv
				copy(win, win[1:])
			}
		}
		for r := range k - 1 {
			next[r*ch+i] = win[r]
		}
	}
}
