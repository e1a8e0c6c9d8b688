package model

import (
	"context"

	"github.com/meshnode/meshnode/gguf/backend"
)

// forward evaluates ids at the next positions, storing their keys and
// values, and with logits set computes the logits after the last of them
// into s.logitsT, where the caller reads them or their argmax. It is the
// graph of llama.cpp's llm_build_llama, qwen2, phi3 and gemma3, whose
// differences the architecture spec switches on.
func (s *Session) forward(ctx context.Context, ids []uint32, logits bool) error {
	m, be := s.m, s.m.be
	c := &m.cfg
	n, pos := len(ids), len(s.tokens)
	eps := c.NormEps

	x := s.x.Slice(0, n)
	be.Embed(x, m.embd, ids)
	if c.EmbedScale != 1 {
		be.Scale(x, c.EmbedScale)
	}
	for l := range m.layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		ly := &m.layers[l]
		last := l == len(m.layers)-1

		h := s.h.Slice(0, n)
		be.RMSNorm(h, x, ly.attnNorm, eps)
		q, k, v := s.q.Slice(0, n), s.k.Slice(0, n), s.v.Slice(0, n)
		project(be, q, ly.wq, ly.bq, h)
		project(be, k, ly.wk, ly.bk, h)
		project(be, v, ly.wv, ly.bv, h)
		if ly.qNorm != nil {
			be.RMSNorm(q, q, ly.qNorm, eps)
			be.RMSNorm(k, k, ly.kNorm, eps)
		}
		be.RoPE(q, c.HeadDimK, pos, &s.ropes[l])
		be.RoPE(k, c.HeadDimK, pos, &s.ropes[l])
		if c.spec.scaleQ {
			be.Scale(q, c.AttnScale)
		}
		be.StoreKV(s.kv, l, pos, k, v)
		if last && !logits {
			// The last layer's output feeds only the logits: with its
			// keys and values stored, this step is done.
			return nil
		}
		att := s.att.Slice(0, n)
		be.Attend(att, q, s.kv, l, pos, &ly.attn)
		if last {
			// Only the last token's logits are wanted, and from here on
			// its row depends on no other (llama.cpp's inp_out_ids).
			att, x = att.Slice(n-1, n), x.Slice(n-1, n)
		}
		rows := x.Rows

		o := s.o.Slice(0, rows)
		project(be, o, ly.wo, ly.bo, att)
		if ly.postAttnNorm != nil {
			be.RMSNorm(o, o, ly.postAttnNorm, eps)
		}
		be.Add(x, o)

		h = s.h.Slice(0, rows)
		be.RMSNorm(h, x, ly.ffnNorm, eps)
		gate, up := s.gate.Slice(0, rows), s.up.Slice(0, rows)
		project(be, gate, ly.gate, ly.bgate, h)
		project(be, up, ly.up, ly.bup, h)
		be.GLU(gate, gate, up, c.spec.glu)
		project(be, o, ly.down, ly.bdown, gate)
		if ly.postFFNNorm != nil {
			be.RMSNorm(o, o, ly.postFFNNorm, eps)
		}
		be.Add(x, o)
	}

	h := s.h.Slice(0, 1)
	be.RMSNorm(h, x, m.outNorm, eps)
	project(be, s.logitsT, m.out, m.outBias, h)
	if c.FinalSoftcap > 0 {
		be.Softcap(s.logitsT, c.FinalSoftcap)
	}
	return nil
}

// project sets dst = x · wᵀ + bias (bias optional).
func project(be backend.Backend, dst backend.Tensor, w, bias backend.Weight, x backend.Tensor) {
	be.MatMul(dst, w, x)
	if bias != nil {
		be.AddBias(dst, bias)
	}
}
