package model

import (
	"context"
	"fmt"
	"slices"
)

// DefaultBatchSeqs is the default of BatchOptions.Seqs.
const DefaultBatchSeqs = 8

// Seq is one sequence's part of a batched step: tokens evaluated at its
// session's next positions, and how many of them, counted from the last,
// the logits after each are wanted of: 0 none (a prompt chunk that is not
// the last), 1 the last token's (a decode step, or a prompt's last chunk),
// n the last n tokens' (a speculative window being verified).
type Seq struct {
	Session *Session
	Tokens  []uint32
	// Count is the number of positions the sequence advances by in a
	// StepHidden, whose input is hidden rows rather than Tokens (a stage
	// after the first never sees token ids).
	Count int
	// Logits is how many of the sequence's last positions want the
	// logits after them: 1 for a decode step or a prompt's last chunk,
	// k+1 to verify k drafted tokens, 0 for none.
	Logits int
}

// BatchOptions size a Batch.
type BatchOptions struct {
	// Tokens is the most tokens one step evaluates, over all its
	// sequences; 0 means DefaultBatch.
	Tokens int
	// Seqs is the most logits rows of one step (a sequence asking for
	// the logits after n tokens takes n); 0 means DefaultBatchSeqs.
	Seqs int
}

// Batch evaluates the tokens of several sessions in one forward step:
// the decode tokens of sequences being generated and chunks of prompts
// being prefilled, each at its own positions over its own KV cache, every
// weight matrix read once for all of them. A token's logits are the same
// bits as when its session evaluates it alone, whatever else shares the
// step and wherever in it (see forward). A Batch is not safe for
// concurrent use; its sessions must not be used elsewhere during a Step.
type Batch struct {
	m      *Model
	tokens int
	seqs   int
	sc     *scratch
	p      plan
	row    []int // the first logits row of each Seq of the last Step
	nrow   []int // its logits rows, 0 for none
	rows   int   // logits rows in the last Step
	total  int   // positions in the last Step
	zeros  []uint32
	buf    []float32
	// On a RowArgMaxer, the argmax of every logits row of the last Step,
	// found at the first ArgMax after it.
	argmax []int
	found  bool
	// On a TopProber, every row's pick and probability, found at the
	// first TopProbAt after the last Step.
	tops     []int
	probs    []float64
	topFound bool
}

// NewBatch makes a batch's scratch: opt.Tokens rows of activations and
// opt.Seqs rows of logits.
func (m *Model) NewBatch(opt BatchOptions) (*Batch, error) {
	tokens, seqs := opt.Tokens, opt.Seqs
	if tokens <= 0 {
		tokens = DefaultBatch
	}
	if seqs <= 0 {
		seqs = DefaultBatchSeqs
	}
	if tokens > maxDim || seqs > tokens {
		return nil, fmt.Errorf("model: a batch of %d tokens and %d sequences", tokens, seqs)
	}
	b := &Batch{m: m, tokens: tokens, seqs: seqs, sc: m.newScratch(tokens, seqs)}
	if m.Last() {
		b.buf = make([]float32, m.cfg.VocabSize)
	}
	return b, nil
}

// Tokens is the most tokens a step evaluates.
func (b *Batch) Tokens() int { return b.tokens }

// Seqs is the most logits rows of a step.
func (b *Batch) Seqs() int { return b.seqs }

// Step evaluates every sequence's tokens in one forward pass and appends
// them to their sessions. It checks everything first: a step that does
// not fit the batch, a session of another model or named twice, or tokens
// that do not fit a session (ErrContext, ErrToken) are refused with no
// session changed. A cancelled ctx stops the pass between layers and
// leaves every session as it was. On a stage of a model (LoadStage) Step
// is for the first stage; its output is then Hidden, not Logits.
func (b *Batch) Step(ctx context.Context, seqs []Seq) error {
	if !b.m.First() {
		return b.m.stageErr("token ids")
	}
	for i, sq := range seqs {
		if sq.Session != nil && sq.Session.m == b.m {
			if err := sq.Session.check(sq.Tokens); err != nil {
				return fmt.Errorf("model: batch step: sequence %d: %w", i, err)
			}
		}
	}
	return b.step(ctx, seqs, nil)
}

// StepHidden is Step on a stage after the first: each sequence advances
// by Count positions, whose input is hidden: the hidden state of every
// position of every sequence, Embd floats each, in the order of seqs (the
// previous stage's Hidden). On the last stage the logits follow, as after
// Step; on an earlier one, Hidden.
func (b *Batch) StepHidden(ctx context.Context, seqs []Seq, hidden []float32) error {
	if b.m.First() {
		return b.m.stageErr("hidden rows as input")
	}
	total := 0
	for i, sq := range seqs {
		if sq.Tokens != nil {
			return fmt.Errorf("model: batch step: sequence %d has token ids; a later stage counts positions", i)
		}
		if sq.Session != nil && sq.Session.m == b.m {
			if err := sq.Session.checkLen(sq.Count); err != nil {
				return fmt.Errorf("model: batch step: sequence %d: %w", i, err)
			}
		}
		total += sq.Count
	}
	if want := total * b.m.cfg.Embd; len(hidden) != want {
		return fmt.Errorf("model: batch step: %d hidden floats for %d positions of %d", len(hidden), total, b.m.cfg.Embd)
	}
	return b.step(ctx, seqs, hidden)
}

// step runs Step (hidden nil) or StepHidden, once each sequence's own
// tokens or count are checked.
func (b *Batch) step(ctx context.Context, seqs []Seq, hidden []float32) error {
	ids := hidden == nil
	count := func(sq Seq) int {
		if ids {
			return len(sq.Tokens)
		}
		return sq.Count
	}
	total, want := 0, 0
	for i, sq := range seqs {
		s := sq.Session
		if s == nil || s.m != b.m {
			return fmt.Errorf("model: batch step: sequence %d is not a session of this model", i)
		}
		for _, o := range seqs[:i] {
			if o.Session == s {
				return fmt.Errorf("model: batch step: a session is named twice")
			}
		}
		n := count(sq)
		if sq.Logits < 0 || sq.Logits > n {
			return fmt.Errorf("model: batch step: sequence %d asks for the logits after %d of its %d positions", i, sq.Logits, n)
		}
		total += n
		want += sq.Logits
	}
	// An earlier stage computes no logits; the last one holds the budget.
	if total == 0 || total > b.tokens || b.m.Last() && want > b.seqs {
		return fmt.Errorf("model: batch step of %d tokens and %d logits rows (the batch holds %d and %d)", total, want, b.tokens, b.seqs)
	}
	if !ids && len(b.zeros) < total {
		b.zeros = make([]uint32, b.tokens)
	}
	tokens := func(sq Seq) []uint32 {
		if ids {
			return sq.Tokens
		}
		return b.zeros[:sq.Count]
	}

	b.p.reset()
	at := 0
	for _, sq := range seqs {
		body := tokens(sq)
		b.p.addBody(sq.Session, body[:len(body)-sq.Logits], at)
		at += count(sq)
	}
	b.p.tail = len(b.p.ids)
	b.row, b.nrow = b.row[:0], b.nrow[:0]
	at = 0
	for _, sq := range seqs {
		n, k := count(sq), sq.Logits
		at += n
		b.row = append(b.row, len(b.p.ids)-b.p.tail)
		b.nrow = append(b.nrow, k)
		if k > 0 {
			b.p.addTail(sq.Session, tokens(sq)[n-k:], len(sq.Session.tokens)+n-k, at-k)
		}
	}
	b.rows, b.found, b.topFound, b.total = want, false, false, total
	if !ids {
		x, e := b.sc.x, b.m.cfg.Embd
		for _, pc := range b.p.pieces {
			b.m.be.Write(x.Slice(pc.row, pc.row+pc.n), hidden[pc.at*e:(pc.at+pc.n)*e])
		}
	}
	if err := b.m.forward(ctx, b.sc, &b.p); err != nil {
		return err
	}
	for _, sq := range seqs {
		sq.Session.tokens = append(sq.Session.tokens, tokens(sq)...)
	}
	return nil
}

// Hidden appends to dst[:0] the output of the last Step or StepHidden on
// a stage before the last: the hidden state of every position of every
// sequence, Embd floats each, in the order of the step's seqs and their
// tokens — the next stage's StepHidden input.
func (b *Batch) Hidden(dst []float32) []float32 {
	if b.m.Last() {
		panic("model: batch: the last stage's output is logits, not hidden rows")
	}
	e := b.m.cfg.Embd
	dst = slices.Grow(dst[:0], b.total*e)[:b.total*e]
	for _, pc := range b.p.pieces {
		b.m.be.Read(dst[pc.at*e:(pc.at+pc.n)*e], b.sc.x.Slice(pc.row, pc.row+pc.n))
	}
	return dst
}

// logitsRow is the logits row of row j of seqs[i] of the last Step.
func (b *Batch) logitsRow(i, j int) int {
	if !b.m.Last() {
		panic("model: batch: a stage before the last has no logits")
	}
	if i < 0 || i >= len(b.row) || j < 0 || j >= b.nrow[i] {
		panic(fmt.Sprintf("model: batch: sequence %d of the last step has no logits row %d", i, j))
	}
	return b.row[i] + j
}

// Rows is how many logits rows seqs[i] of the last Step has (its Logits).
func (b *Batch) Rows(i int) int { return b.nrow[i] }

// Logits returns the logits that follow seqs[i] of the last Step, which
// must have asked for them: those after its last token. The slice is the
// batch's, valid until its next call.
func (b *Batch) Logits(i int) []float32 { return b.LogitsAt(i, b.Rows(i)-1) }

// LogitsAt returns row j of seqs[i]'s logits rows of the last Step: the
// logits after its token len(Tokens)−Logits+j. The slice is the batch's,
// valid until its next call.
func (b *Batch) LogitsAt(i, j int) []float32 {
	r := b.logitsRow(i, j)
	b.m.headLogits(b.sc)
	b.m.be.Read(b.buf, b.sc.logitsT.Slice(r, r+1))
	return b.buf
}

// ArgMax is the likeliest token after seqs[i] of the last Step, as
// Session.EvalArgMax picks it (on the device where the backend can; on a
// RowArgMaxer, every row's at the first call, so call ArgMax before
// Logits for the sequences of a step that want both kinds).
func (b *Batch) ArgMax(i int) uint32 { return b.ArgMaxAt(i, b.Rows(i)-1) }

// ArgMaxAt is ArgMax of row j of seqs[i]'s logits rows (see LogitsAt).
func (b *Batch) ArgMaxAt(i, j int) uint32 {
	r := b.logitsRow(i, j)
	if ra, ok := b.m.be.(RowArgMaxer); ok {
		if !b.found {
			b.argmax = slices.Grow(b.argmax[:0], b.rows)[:b.rows]
			if !b.m.greedyArgMax(b.sc, b.argmax) {
				b.m.headLogits(b.sc)
				ra.ArgMaxRows(b.sc.logitsT.Slice(0, b.rows), b.argmax)
			}
			b.found = true
		}
		return uint32(b.argmax[r])
	}
	b.m.headLogits(b.sc)
	return argMaxRow(b.m.be, b.sc.logitsT.Slice(r, r+1), b.buf)
}

// TopProbAt is row j of seqs[i]'s likeliest token, as ArgMaxAt picks it,
// and its softmax probability, found on the device for every row of the
// last Step at the first call, where the backend is a TopProber; ok is
// false elsewhere, and the caller reads LogitsAt instead.
func (b *Batch) TopProbAt(i, j int) (id uint32, p float64, ok bool) {
	tp, ok := b.m.be.(TopProber)
	if !ok {
		return 0, 0, false
	}
	r := b.logitsRow(i, j)
	if !b.topFound {
		b.tops = slices.Grow(b.tops[:0], b.rows)[:b.rows]
		b.probs = slices.Grow(b.probs[:0], b.rows)[:b.rows]
		b.m.headLogits(b.sc)
		tp.TopProbRows(b.sc.logitsT.Slice(0, b.rows), b.tops, b.probs)
		b.topFound = true
	}
	return uint32(b.tops[r]), b.probs[r], true
}
