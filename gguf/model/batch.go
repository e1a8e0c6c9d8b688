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
	Logits  int
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
	buf    []float32
	// On a RowArgMaxer, the argmax of every logits row of the last Step,
	// found at the first ArgMax after it.
	argmax []int
	found  bool
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
	return &Batch{
		m: m, tokens: tokens, seqs: seqs,
		sc:  m.newScratch(tokens, seqs),
		buf: make([]float32, m.cfg.VocabSize),
	}, nil
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
// leaves every session as it was.
func (b *Batch) Step(ctx context.Context, seqs []Seq) error {
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
		if err := s.check(sq.Tokens); err != nil {
			return fmt.Errorf("model: batch step: sequence %d: %w", i, err)
		}
		if sq.Logits < 0 || sq.Logits > len(sq.Tokens) {
			return fmt.Errorf("model: batch step: sequence %d asks for the logits after %d of its %d tokens", i, sq.Logits, len(sq.Tokens))
		}
		total += len(sq.Tokens)
		want += sq.Logits
	}
	if total == 0 || total > b.tokens || want > b.seqs {
		return fmt.Errorf("model: batch step of %d tokens and %d logits rows (the batch holds %d and %d)", total, want, b.tokens, b.seqs)
	}

	b.p.reset()
	for _, sq := range seqs {
		b.p.addBody(sq.Session, sq.Tokens[:len(sq.Tokens)-sq.Logits])
	}
	b.p.tail = len(b.p.ids)
	b.row, b.nrow = b.row[:0], b.nrow[:0]
	for _, sq := range seqs {
		n, k := len(sq.Tokens), sq.Logits
		b.row = append(b.row, len(b.p.ids)-b.p.tail)
		b.nrow = append(b.nrow, k)
		if k > 0 {
			b.p.addTail(sq.Session, sq.Tokens[n-k:], len(sq.Session.tokens)+n-k)
		}
	}
	b.rows, b.found = want, false
	if err := b.m.forward(ctx, b.sc, &b.p); err != nil {
		return err
	}
	for _, sq := range seqs {
		sq.Session.tokens = append(sq.Session.tokens, sq.Tokens...)
	}
	return nil
}

// logitsRow is the logits row of row j of seqs[i] of the last Step.
func (b *Batch) logitsRow(i, j int) int {
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
			ra.ArgMaxRows(b.sc.logitsT.Slice(0, b.rows), b.argmax)
			b.found = true
		}
		return uint32(b.argmax[r])
	}
	return argMaxRow(b.m.be, b.sc.logitsT.Slice(r, r+1), b.buf)
}
