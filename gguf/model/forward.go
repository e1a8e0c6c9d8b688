package model

import (
	"context"

	"github.com/meshnode/meshnode/gguf/backend"
)

// scratch is the activations of one forward step: rows token rows, and
// logits rows of logits.
type scratch struct {
	rows                            int
	x, h, q, k, v, att, o, gate, up backend.Tensor
	// The operands of a joint product (projectAll), kept here so that
	// passing them allocates nothing.
	jointDst [3]backend.Tensor
	jointW   [3]backend.Weight
	logitsT  backend.Tensor // logits × vocab
	moe      *moeScratch    // mixture-of-experts models only
	hy       *hybridScratch // hybrid (qwen35, lfm2) models only
	// Gemma 4's per-layer inputs (Layers blocks of rows × PerLayerEmbd),
	// a rows × PerLayerEmbd temporary, and the per-layer table's row ids.
	ple, pleTmp backend.Tensor
	pleIDs      []uint32
	// Gemma 4's routed experts' input and output rows.
	moeIn, moeOut backend.Tensor
	// pendingHead: the last step's first rows whose logits were left to
	// the output head's shadow (Model.greedy) until they are wanted.
	pendingHead int
	greedy      *greedyScratch
}

func (m *Model) newScratch(rows, logits int) *scratch {
	be, c := m.be, &m.cfg
	if !m.Last() {
		logits = 0 // an earlier stage's output is x
	}
	// Blocks' heads may differ in size (gemma4): the head activations
	// are sized for the widest, and each block views them at its own.
	hdK, hdV := c.maxHeadDims()
	sc := &scratch{
		rows: rows,
		x:    be.NewTensor(rows, c.Embd),
		h:    be.NewTensor(rows, c.Embd),
		q:    be.NewTensor(rows, c.Heads*hdK),
		k:    be.NewTensor(rows, c.KVHeads*hdK),
		v:    be.NewTensor(rows, c.KVHeads*hdV),
		att:  be.NewTensor(rows, c.Heads*hdV),
		o:    be.NewTensor(rows, c.Embd),
	}
	if m.perLayer != nil {
		sc.ple = be.NewTensor(c.Layers*rows, c.PerLayerEmbd)
		sc.pleTmp = be.NewTensor(rows, c.PerLayerEmbd)
	}
	if c.Experts == 0 || c.spec.gemma4 || c.DenseLead > 0 {
		// A mixture of experts has its own, expert-wide, activations
		// (gemma4's shared expert and lfm2moe's dense first blocks are
		// FF wide).
		sc.gate, sc.up = be.NewTensor(rows, c.FF), be.NewTensor(rows, c.FF)
	}
	if logits > 0 {
		sc.logitsT = be.NewTensor(logits, c.VocabSize)
	}
	if c.Experts > 0 {
		sc.moe = newMoEScratch(be, c, rows)
		if c.spec.gemma4 {
			sc.moeIn, sc.moeOut = be.NewTensor(rows, c.Embd), be.NewTensor(rows, c.Embd)
		}
	}
	if c.Recurrent != nil {
		sc.hy = newHybridScratch(be, c, rows)
	}
	return sc
}

// piece is a run of consecutive positions of one sequence among a step's
// rows: rows [row, row+n) hold its tokens at positions pos … pos+n-1.
// at is where the run's first token is in the step's input order, every
// sequence's tokens one after another: a stage's hidden rows travel in
// that order, and the plan's rows are those rows rearranged.
type piece struct {
	s               *Session
	row, n, pos, at int
}

// plan lays out a step's rows. The tokens of every sequence come first,
// in the order given, except the last tokens of each sequence whose logits
// are wanted: those rows form the tail, rows [tail, len(ids)), a piece per
// such sequence in order. So the rows that reach the output layer are
// contiguous, and a sequence's rows are at most two pieces. Attention in a
// piece is causal, as for a prompt chunk, so a tail of n rows (a
// speculative window) gives each row the logits it gets alone.
type plan struct {
	ids    []uint32
	pieces []piece
	tail   int
	// hidden: every row goes through the last block and the output norm,
	// and stops there (Session.EvalHidden); tail is unused.
	hidden bool
}

// reset empties p for reuse.
func (p *plan) reset() {
	p.ids, p.pieces, p.tail, p.hidden = p.ids[:0], p.pieces[:0], 0, false
}

// add lays out the tokens of s at its next positions (the body; the caller
// then adds the tails).
func (p *plan) addBody(s *Session, tokens []uint32, at int) {
	if len(tokens) == 0 {
		return
	}
	p.pieces = append(p.pieces, piece{s: s, row: len(p.ids), n: len(tokens), pos: len(s.tokens), at: at})
	p.ids = append(p.ids, tokens...)
}

// addTail lays out tokens of s from pos on as logits rows; at is where the
// first of them is in the step's input order.
func (p *plan) addTail(s *Session, tokens []uint32, pos, at int) {
	p.pieces = append(p.pieces, piece{s: s, row: len(p.ids), n: len(tokens), pos: pos, at: at})
	p.ids = append(p.ids, tokens...)
}

// forward evaluates the plan's tokens through the model's blocks,
// storing their keys and values in their sessions' caches. The first
// stage (or a whole model) starts from the plan's token ids; a later one
// from the hidden rows its caller wrote into sc.x, in the plan's row
// order. The last stage computes the logits of the tail rows into
// sc.logitsT's first rows; an earlier one leaves every row's hidden state
// in sc.x, for the next stage, which runs the same plan. It is the graph
// of llama.cpp's llm_build_llama, qwen2, phi3 and gemma3, whose
// differences the architecture spec switches on, cut between blocks: the
// residual stream x is all that crosses a block boundary, so a split
// model computes the same bits as the whole one.
//
// Every operation but attention and RoPE is row by row over all the step's
// rows, so each weight matrix is read once per step however many
// sequences share it; RoPE, the cache writes and attention run per piece,
// at its sequence's positions, over its own cache. No kernel mixes rows,
// and a row's arithmetic does not depend on the others in the call (the
// backends' contract), so a token's logits are the same bits whatever it
// is batched with.
func (m *Model) forward(ctx context.Context, sc *scratch, p *plan) (err error) {
	be := m.be
	sc.pendingHead = 0
	c := &m.cfg
	n := len(p.ids)
	eps := c.NormEps
	if c.Recurrent != nil {
		// A step that fails part-way leaves no delta-net state advanced.
		checkpoint(p)
		defer func() {
			if err != nil {
				rollback(p)
			} else {
				commit(p)
			}
		}()
	}

	x := sc.x.Slice(0, n)
	if m.First() {
		be.Embed(x, m.embd, p.ids)
		if c.EmbedScale != 1 {
			be.Scale(x, c.EmbedScale)
		}
		if m.perLayer != nil {
			m.perLayerInputs(sc, x, p.ids)
		}
	}
	// l indexes the model's own blocks, its sessions' caches and RoPEs:
	// block m.lo+l of the whole model.
	for l := range m.layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		ly := &m.layers[l]
		// Only the model's last block drops the rows that want no
		// logits: the next stage needs every row.
		last := m.Last() && l == len(m.layers)-1 && !p.hidden

		hdK, hdV := ly.attn.HeadDimK, ly.attn.HeadDimV
		// A block that shares another block's KV (gemma4) computes no
		// keys or values: its cache layer was filled by that block.
		ownKV := ly.wk != nil && c.KVSource(m.lo+l) == m.lo+l
		kvl := m.kvIdx[l]

		h := sc.h.Slice(0, n)
		if ly.attnNorm != nil {
			be.RMSNorm(h, x, ly.attnNorm, eps)
		} else {
			h = x // olmo2, exaone4: the block's input as it is
		}
		if ly.delta != nil || ly.conv != nil {
			// Qwen3.5's gated delta net (hybrid.go) or LFM2's gated
			// convolution (shortconv.go) in place of attention.
			var done bool
			if x, done = m.recurrentBlock(sc, ly, l, p, x, h, last); done {
				return nil
			}
			continue
		}
		q := view(sc.q, n, c.Heads*hdK)
		kvh := ly.attn.KVHeads
		k, v := view(sc.k, n, kvh*hdK), view(sc.v, n, kvh*hdV)
		if ly.qGate != nil || ly.attnGate != nil {
			m.projectQGate(sc.hy, ly, q, h) // Qwen3.5's joint query and gate
			if ownKV {
				m.projectAll(sc, h, proj{k, ly.wk, ly.bk}, proj{v, ly.wv, ly.bv})
			}
		} else if ownKV {
			m.projectAll(sc, h, proj{q, ly.wq, ly.bq}, proj{k, ly.wk, ly.bk}, proj{v, ly.wv, ly.bv})
		} else {
			project(be, q, ly.wq, ly.bq, h)
		}
		if ly.qNorm != nil {
			be.RMSNorm(q, q, ly.qNorm, eps)
			if ownKV {
				be.RMSNorm(k, k, ly.kNorm, eps)
			}
		}
		if ly.vNorm != nil && ownKV {
			be.RMSNorm(v, v, ly.vNorm, eps)
		}
		for _, pc := range p.pieces {
			if c.NoRoPE[m.lo+l] {
				break // a NoPE block (smollm3): positions only through the mask
			}
			r := &pc.s.ropes[l]
			be.RoPE(q.Slice(pc.row, pc.row+pc.n), hdK, pc.pos, r)
			if ownKV {
				be.RoPE(k.Slice(pc.row, pc.row+pc.n), hdK, pc.pos, r)
			}
		}
		if c.spec.scaleQ {
			be.Scale(q, c.AttnScale)
		}
		if c.AttnTemp != 0 {
			for _, pc := range p.pieces {
				m.temperQueries(q.Slice(pc.row, pc.row+pc.n), pc.pos)
			}
		}
		// Every piece's keys are stored before any attends: a sequence's
		// tail row attends to its body's keys.
		if ownKV {
			for _, pc := range p.pieces {
				be.StoreKV(pc.s.kv, kvl, pc.pos, k.Slice(pc.row, pc.row+pc.n), v.Slice(pc.row, pc.row+pc.n))
			}
		}
		if last && p.tail == n {
			// The last layer's output feeds only the logits: with its
			// keys and values stored, this step is done.
			return nil
		}
		att := view(sc.att, n, c.Heads*hdV)
		for _, pc := range p.pieces {
			if last && pc.row < p.tail {
				continue // only the logits rows go on (llama.cpp's inp_out_ids)
			}
			be.Attend(att.Slice(pc.row, pc.row+pc.n), q.Slice(pc.row, pc.row+pc.n), pc.s.kv, kvl, pc.pos, &ly.attn)
		}
		// This block's per-layer inputs (gemma4), row for row with x.
		var ple backend.Tensor
		if m.perLayer != nil {
			ple = sc.ple.Slice((m.lo+l)*sc.rows, (m.lo+l)*sc.rows+n)
		}
		if last {
			att, x = att.Slice(p.tail, n), x.Slice(p.tail, n)
			if m.perLayer != nil {
				ple = ple.Slice(p.tail, n)
			}
		}
		if ly.qGate != nil || ly.attnGate != nil {
			// Qwen3.5's output gate, of the rows that go on (the last).
			m.gateAttention(sc.hy, att, n-att.Rows)
		}
		rows := x.Rows

		o := sc.o.Slice(0, rows)
		project(be, o, ly.wo, ly.bo, att)
		if ly.postAttnNorm != nil {
			be.RMSNorm(o, o, ly.postAttnNorm, eps)
		}
		m.residual(x, o)

		h = sc.h.Slice(0, rows)
		if ly.ffnNorm != nil {
			be.RMSNorm(h, x, ly.ffnNorm, eps)
		} else {
			h = x
		}
		if ly.preFFN2 != nil {
			m.gemma4MoE(sc, ly, x, h) // a shared and a routed FFN
		} else if ly.router != nil {
			m.moeFFN(sc.moe, ly, o, h, h)
			if ly.shared != nil {
				m.sharedFFN(sc.hy, ly.shared, o, h)
			}
			m.residual(x, o)
			continue
		} else {
			ff := ly.gate.Rows() // gemma4's may vary by layer
			gate, up := view(sc.gate, rows, ff), view(sc.up, rows, ff)
			m.projectAll(sc, h, proj{gate, ly.gate, ly.bgate}, proj{up, ly.up, ly.bup})
			be.GLU(gate, gate, up, c.spec.glu)
			project(be, o, ly.down, ly.bdown, gate)
			if ly.postFFNNorm != nil {
				be.RMSNorm(o, o, ly.postFFNNorm, eps)
			}
			m.residual(x, o)
		}
		if ly.pleGate != nil {
			m.perLayerBlock(sc, ly, x, ple)
		}
		if ly.outScale != 0 {
			be.Scale(x, ly.outScale)
		}
	}
	if !m.Last() {
		return nil
	}

	rows := x.Rows
	h := sc.h.Slice(0, rows)
	be.RMSNorm(h, x, m.outNorm, eps)
	if p.hidden {
		return nil // every row's normalised hidden state is in sc.h
	}
	if m.greedy != nil {
		// Greedy tokens come from the shadow; the logits only if read.
		sc.pendingHead = rows
		return nil
	}
	m.head(sc.logitsT.Slice(0, rows), h)
	return nil
}

// residual adds a block's attention or FFN output o to the residual
// stream x, scaled first where the architecture does (Granite).
func (m *Model) residual(x, o backend.Tensor) {
	if s := m.cfg.ResidualScale; s != 0 {
		m.be.Scale(o, s)
	}
	m.be.Add(x, o)
}

// head computes the logits of the normalised hidden rows h: the output
// head's product, then the architecture's scaling (Granite) and final
// softcap (gemma).
func (m *Model) head(logits, h backend.Tensor) {
	c := &m.cfg
	project(m.be, logits, m.out, m.outBias, h)
	if c.LogitScale != 1 {
		m.be.Scale(logits, 1/c.LogitScale)
	}
	if c.FinalSoftcap > 0 {
		m.be.Softcap(logits, c.FinalSoftcap)
	}
}

// project sets dst = x · wᵀ + bias (bias optional).
func project(be backend.Backend, dst backend.Tensor, w, bias backend.Weight, x backend.Tensor) {
	be.MatMul(dst, w, x)
	if bias != nil {
		be.AddBias(dst, bias)
	}
}

// proj is one product of projectAll: dst = x · wᵀ + bias (optional).
type proj struct {
	dst     backend.Tensor
	w, bias backend.Weight
}

// projectAll is project for two or three products of one input x: one
// joint product where the backend has it (backend.Joint: x converted
// once, the products' rows handed out together), the same bits as one
// project each.
func (m *Model) projectAll(sc *scratch, x backend.Tensor, ps ...proj) {
	if m.jm == nil {
		for _, p := range ps {
			project(m.be, p.dst, p.w, p.bias, x)
		}
		return
	}
	for i, p := range ps {
		sc.jointDst[i], sc.jointW[i] = p.dst, p.w
	}
	m.jm.MatMuls(sc.jointDst[:len(ps)], sc.jointW[:len(ps)], x)
	for _, p := range ps {
		if p.bias != nil {
			m.be.AddBias(p.dst, p.bias)
		}
	}
	clear(sc.jointW[:len(ps)]) // hold no weight past the call
}

// temperQueries scales the queries q of positions pos… by mistral3's
// attention temperature (Config.AttnTempAt), as llama.cpp multiplies
// each token's rotated query by its factor: a run of rows with one factor
// at a time (it changes once every AttnTempFloor positions), none where
// it is 1 (below the first floor).
func (m *Model) temperQueries(q backend.Tensor, pos int) {
	c := &m.cfg
	for r := 0; r < q.Rows; {
		f, end := c.AttnTempAt(pos+r), r+1
		for end < q.Rows && c.AttnTempAt(pos+end) == f {
			end++
		}
		if f != 1 {
			m.be.Scale(q.Slice(r, end), f)
		}
		r = end
	}
}
