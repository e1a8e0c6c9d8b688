package sample

import (
	"math"
	"slices"
	"strings"
)

// infillThreshold is the probability a text token needs to stay, before
// the second, relative cut (llama.cpp's 0.2f).
const infillThreshold float32 = 0.2

// infill is llama.cpp's infill filter, for fill-in-the-middle: over the
// candidates c (sorted, at most MaxInfillCandidates of them by
// Validate), it keeps only the ends of generation if they are likely
// enough; else it merges each token whose text is a prefix of another's
// with it (the likelier keeps its id and logit and takes both
// probabilities), drops the text tokens under 0.2, then those under
// 1/(n+1) of what is left, n being the text tokens left; if none was
// left, the candidates become the single EOT. The ends of generation stay
// whatever their probability. It returns the candidates kept, in their
// order, with their logits: the pick's softmax is taken from those
// afresh, as llama.cpp's dist does, not from the probabilities moved
// here.
//
// The probabilities and their sums are float32, as llama.cpp's are: the
// thresholds decide which tokens stay, so they are compared at the
// precision llama.cpp compares them. The exponentials are detmath's,
// rounded to float32 (llama.cpp's expf differs by an ulp at most), so
// that the same tokens stay on every platform.
func (s *Sampler) infill(c []candidate) []candidate {
	n, voc := len(c), s.p.Vocab
	s.exps = slices.Grow(s.exps[:0], n)[:n]
	softmaxWeights(s.exps, c)
	p := slices.Grow(s.probs[:0], n)[:n]
	eog := slices.Grow(s.eog[:0], n)[:n]
	s.probs, s.eog = p, eog
	var sum, pTxt, pEOG float32
	for i, x := range c {
		p[i] = float32(s.exps[i].v)
		sum += p[i]
		eog[i] = voc.IsEOG(x.id)
	}
	for i := range p {
		p[i] /= sum
		if eog[i] {
			pEOG += p[i]
		} else {
			pTxt += p[i]
		}
	}

	if 3*pEOG*float32(n) > pTxt {
		// Ending is likely enough: keep only the ends of generation.
		// (llama.cpp renormalises their probabilities too; nothing
		// after reads them.)
		k := 0
		for i := range c {
			if eog[i] {
				c[k] = c[i]
				k++
			}
		}
		return c[:k]
	}

	// Merge the tokens whose text is a prefix of another's into the
	// likelier of the two. Each token's text is asked for once.
	pieces := s.pieces[:0]
	for _, x := range c {
		pieces = append(pieces, voc.Piece(x.id))
	}
	s.pieces = pieces
	negInf := math.Inf(-1)
	for i0 := range n {
		for i1 := range n {
			if c[i0].v == negInf {
				break // merged away, or never had mass
			}
			if i0 == i1 || c[i1].v == negInf {
				continue
			}
			if a := pieces[i0]; len(a) > 0 && strings.HasPrefix(pieces[i1], a) {
				dst, src := i0, i1
				if p[i1] > p[i0] {
					dst, src = i1, i0
				}
				p[dst] += p[src]
				c[src].v, p[src] = negInf, 0
			}
		}
	}
	clear(pieces) // let the strings go

	// Drop the unlikely text tokens; if none is left, end with EOT.
	k, nTxt := 0, 0
	sum = 0
	for i := range c {
		if p[i] < infillThreshold && !eog[i] {
			continue
		}
		if !eog[i] {
			nTxt++
		}
		sum += p[i]
		c[k], p[k], eog[k] = c[i], p[i], eog[i]
		k++
	}
	if nTxt == 0 {
		c[0] = candidate{voc.EOT(), 1}
		return c[:1]
	}
	c = c[:k]
	for i := range c {
		p[i] /= sum
	}

	// Then the text tokens under 1/(n+1) of what is left, n text tokens
	// being left (again llama.cpp's renormalisation after it is unread).
	thold := float32(1 / float64(nTxt+1))
	k = 0
	for i := range c {
		if p[i] < thold && !eog[i] {
			continue
		}
		c[k] = c[i]
		k++
	}
	return c[:k]
}
