package model

import (
	"context"
	"fmt"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/quant"
)

// Defaults for SessionOptions.
const (
	// DefaultContext bounds a session's context when the options do not:
	// the KV cache of a model's full trained context can be gigabytes.
	DefaultContext = 4096
	// DefaultBatch is the most tokens one forward step evaluates.
	DefaultBatch = 128
)

// KVType is the element type of a session's KV cache.
type KVType uint8

// KV cache types. F16 is llama.cpp's default and what the parity goldens
// were made with.
const (
	KVF16 KVType = iota
	KVF32
)

func (t KVType) quant() quant.Type {
	if t == KVF32 {
		return quant.F32
	}
	return quant.F16
}

// String is "f16" or "f32".
func (t KVType) String() string {
	if t == KVF32 {
		return "f32"
	}
	return "f16"
}

// ParseKVType parses "f16" or "f32".
func ParseKVType(s string) (KVType, error) {
	switch s {
	case "f16", "F16", "":
		return KVF16, nil
	case "f32", "F32":
		return KVF32, nil
	}
	return 0, fmt.Errorf("model: KV cache type %q (want f16 or f32)", s)
}

// SessionOptions configure a Session.
type SessionOptions struct {
	// Context is the most positions the session holds; 0 means the
	// model's trained context, at most DefaultContext. It may not exceed
	// the trained context.
	Context int
	// Batch is the most tokens a forward step evaluates at once; 0 means
	// DefaultBatch. Longer prompts are evaluated in several steps.
	Batch int
	// KV is the cache's element type.
	KV KVType
}

// Session is one sequence being evaluated: its KV cache, the tokens whose
// keys and values it holds, and the scratch activations of the forward
// pass. A Session is not safe for concurrent use; a Model serves many
// Sessions at once.
type Session struct {
	m      *Model
	ctx    int
	batch  int
	kvType KVType
	kv     backend.KVCache
	tokens []uint32 // the token at each cached position

	ropes []backend.RoPE // per layer

	// A hybrid model's recurrent memory (hybrid.go); nil for others.
	rec *recurrent

	// The scratch of steps the session evaluates alone (batch rows, one
	// logits row), made at its first such step: a session only ever
	// evaluated in a Batch needs none.
	sc     *scratch
	p      plan
	logits []float32
}

// NewSession starts an empty sequence.
func (m *Model) NewSession(opt SessionOptions) (*Session, error) {
	c := &m.cfg
	n := opt.Context
	if n == 0 {
		n = min(c.TrainContext, DefaultContext)
	}
	if n < 1 || n > c.TrainContext {
		return nil, fmt.Errorf("%w: a context of %d positions (the model was trained on %d)", ErrContext, n, c.TrainContext)
	}
	batch := opt.Batch
	if batch <= 0 {
		batch = DefaultBatch
	}
	batch = min(batch, n)
	// A stage's cache holds its own blocks only, and of those only the
	// ones with KV of their own (m.kvShape).
	kv, err := m.be.NewKVCache(opt.KV.quant(), n, m.kvShape)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	s := &Session{m: m, ctx: n, batch: batch, kvType: opt.KV, kv: kv, rec: m.newRecurrent()}
	// LongRoPE uses its long factors when the session's context exceeds
	// the one the short factors were fitted to (llama_model::get_rope_factors).
	factors := m.ropeFreqs
	if factors == nil {
		factors = m.ropeShort
		if m.ropeLong != nil && n > c.RoPEOrigContext {
			factors = m.ropeLong
		}
	}
	s.ropes = make([]backend.RoPE, len(m.layers))
	for l := range s.ropes {
		s.ropes[l] = c.layerRoPE(m.lo+l, factors)
	}
	return s, nil
}

// Context is the most positions the session holds.
func (s *Session) Context() int { return s.ctx }

// KV is the session's cache type.
func (s *Session) KV() KVType { return s.kvType }

// Len is the number of tokens in the cache.
func (s *Session) Len() int { return len(s.tokens) }

// Tokens returns the cached tokens, by position. The slice is the
// session's; it is valid until the next call that changes the session. A
// session of a stage after the first never sees token ids: its tokens
// are all 0, and only their number means anything.
func (s *Session) Tokens() []uint32 { return s.tokens }

// CommonPrefix is how many leading tokens of seq the cache already holds.
func (s *Session) CommonPrefix(seq []uint32) int {
	n := 0
	for n < len(seq) && n < len(s.tokens) && seq[n] == s.tokens[n] {
		n++
	}
	return n
}

// Truncate forgets every position from n on (on a stage, the rewind
// that speculative decoding needs when a draft is rejected).
//
// A hybrid model's (qwen35) recurrent state cannot drop positions: it is
// restored from the checkpoint taken before the session's last step, or
// from empty when n is before that step, and the tokens from there to n
// are evaluated again, so Truncate then costs a forward pass over them.
func (s *Session) Truncate(n int) {
	if n < len(s.tokens) {
		n = max(n, 0)
		if s.rec != nil {
			s.rewind(n)
			return
		}
		s.tokens = s.tokens[:n]
	}
}

// Prefill makes the cache hold exactly prompt and returns the logits that
// follow it. The leading tokens the cache already holds are kept (the KV
// reuse of a conversation's earlier turns); at least the last prompt token
// is evaluated, since its logits are not cached. It returns how many
// tokens were reused. The logits are the session's and valid until the
// next call.
func (s *Session) Prefill(ctx context.Context, prompt []uint32) (reused int, logits []float32, err error) {
	if reused, err = s.prefill(ctx, prompt); err != nil {
		return reused, nil, err
	}
	return reused, s.readLogits(), nil
}

// PrefillArgMax is Prefill returning the likeliest next token instead of
// the logits, as EvalArgMax does.
func (s *Session) PrefillArgMax(ctx context.Context, prompt []uint32) (reused int, next uint32, err error) {
	if reused, err = s.prefill(ctx, prompt); err != nil {
		return reused, 0, err
	}
	return reused, s.argMax(), nil
}

func (s *Session) prefill(ctx context.Context, prompt []uint32) (reused int, err error) {
	if !s.m.Whole() {
		return 0, s.m.stageErr("a prompt")
	}
	if len(prompt) == 0 {
		return 0, fmt.Errorf("model: empty prompt")
	}
	reused = min(s.CommonPrefix(prompt), len(prompt)-1)
	s.Truncate(reused)
	return reused, s.eval(ctx, prompt[reused:])
}

// Eval appends tokens to the sequence, evaluating them in steps of at most
// the session's batch, and returns the logits that follow the last of
// them. On error (ctx cancelled, context full, a bad token) the cache
// keeps the tokens evaluated before it.
func (s *Session) Eval(ctx context.Context, tokens []uint32) ([]float32, error) {
	if err := s.eval(ctx, tokens); err != nil {
		return nil, err
	}
	return s.readLogits(), nil
}

// EvalArgMax is Eval returning the likeliest next token instead of the
// logits: the index of the largest logit, the lowest on a tie, 0 when
// none exceeds -Inf (NaN never wins), which is sample's greedy pick
// without penalties. On a backend that implements ArgMaxer it is found
// where the logits are, and only the token is copied back.
func (s *Session) EvalArgMax(ctx context.Context, tokens []uint32) (uint32, error) {
	if err := s.eval(ctx, tokens); err != nil {
		return 0, err
	}
	return s.argMax(), nil
}

// EvalDeferred is Eval leaving the logits after tokens on the backend,
// for LastLogits to read or LastTopProb to judge, until this session or
// another of the model evaluates again: a greedy draft's judge wants no
// more than the likeliest token and its probability.
func (s *Session) EvalDeferred(ctx context.Context, tokens []uint32) error {
	return s.eval(ctx, tokens)
}

// LastLogits reads the logits after EvalDeferred's tokens.
func (s *Session) LastLogits() []float32 { return s.readLogits() }

// LastTopProb is the likeliest token after EvalDeferred's tokens, as
// EvalArgMax picks it, and its softmax probability, found on the device
// where the backend is a TopProber; ok is false elsewhere, and the caller
// reads LastLogits instead.
func (s *Session) LastTopProb() (id uint32, p float64, ok bool) {
	tp, ok := s.m.be.(TopProber)
	if !ok {
		return 0, 0, false
	}
	var ids [1]int
	var probs [1]float64
	s.m.headLogits(s.sc)
	tp.TopProbRows(s.sc.logitsT.Slice(0, 1), ids[:], probs[:])
	return uint32(ids[0]), probs[0], true
}

// ArgMaxer is a backend that finds the largest element of a tensor in its
// own memory (the CUDA backend), so that greedy decoding copies one token
// id back per step rather than the vocabulary's logits.
type ArgMaxer interface {
	// ArgMax returns the index of t's largest element, the lowest on a
	// tie, 0 when none exceeds -Inf (NaN never wins).
	ArgMax(t backend.Tensor) int
}

// check refuses tokens that would not fit the session's context or lie
// outside the vocabulary.
func (s *Session) check(tokens []uint32) error {
	if err := s.checkLen(len(tokens)); err != nil {
		return err
	}
	for _, t := range tokens {
		if int(t) >= s.m.cfg.VocabSize {
			return fmt.Errorf("%w: %d (vocabulary %d)", ErrToken, t, s.m.cfg.VocabSize)
		}
	}
	return nil
}

// checkLen refuses n positions that would not fit the session's context.
func (s *Session) checkLen(n int) error {
	if s.kv == nil {
		return fmt.Errorf("model: session used after Close")
	}
	if n <= 0 {
		return fmt.Errorf("model: no tokens to evaluate")
	}
	if len(s.tokens)+n > s.ctx {
		return fmt.Errorf("%w: %d cached + %d new tokens > %d", ErrContext, len(s.tokens), n, s.ctx)
	}
	return nil
}

// RowArgMaxer is an ArgMaxer that finds the largest element of every row
// of a tensor at once (the CUDA backend): a batched step's greedy tokens
// then come back in one copy, and the step's recording does not depend on
// which of its sequences decode greedily.
type RowArgMaxer interface {
	ArgMaxer
	// ArgMaxRows sets dst[r] to ArgMax of row r of t, for every row.
	ArgMaxRows(t backend.Tensor, dst []int)
}

// TopProber is a backend that finds every row's ArgMax and its softmax
// probability on the device (the CUDA backend): a greedy draft's pick and
// confidence then come back in 8 bytes a row, not the row's logits.
type TopProber interface {
	// TopProbRows sets ids[r] to ArgMax of row r of t and probs[r] to
	// 1 / Σ e^(x−top) over the row (terms more than 16 below the top
	// left out), for every row.
	TopProbRows(t backend.Tensor, ids []int, probs []float64)
}

// eval is Eval leaving the logits in the first row of s.sc.logitsT: steps
// of at most the session's batch, each a plan of this session alone, run
// by the same forward pass a Batch runs.
func (s *Session) eval(ctx context.Context, tokens []uint32) error {
	if !s.m.Whole() {
		return s.m.stageErr("tokens to logits")
	}
	if err := s.check(tokens); err != nil {
		return err
	}
	s.ownScratch()
	for len(tokens) > 0 {
		n := min(len(tokens), s.batch)
		s.p.reset()
		if n < len(tokens) {
			s.p.addBody(s, tokens[:n], 0)
			s.p.tail = n
		} else {
			s.p.addBody(s, tokens[:n-1], 0)
			s.p.tail = n - 1
			s.p.addTail(s, tokens[n-1:n], len(s.tokens)+n-1, n-1)
		}
		if err := s.m.forward(ctx, s.sc, &s.p); err != nil {
			return err
		}
		s.tokens = append(s.tokens, tokens[:n]...)
		tokens = tokens[n:]
	}
	return nil
}

// EvalHidden appends tokens to the sequence, evaluating them in steps of
// at most the session's batch, and appends to dst[:0] the final hidden
// state of each: the output norm's output, the output head's input,
// Embd floats per token (what llama.cpp's embeddings pool). It computes
// no logits. Errors are Eval's.
func (s *Session) EvalHidden(ctx context.Context, tokens []uint32, dst []float32) ([]float32, error) {
	if !s.m.Whole() {
		return nil, s.m.stageErr("tokens to hidden states")
	}
	if err := s.check(tokens); err != nil {
		return nil, err
	}
	s.ownScratch()
	e := s.m.cfg.Embd
	dst = dst[:0]
	for len(tokens) > 0 {
		n := min(len(tokens), s.batch)
		s.p.reset()
		s.p.hidden = true
		s.p.addBody(s, tokens[:n], 0)
		s.p.tail = n
		if err := s.m.forward(ctx, s.sc, &s.p); err != nil {
			return nil, err
		}
		s.tokens = append(s.tokens, tokens[:n]...)
		at := len(dst)
		dst = append(dst, make([]float32, n*e)...)
		s.m.be.Read(dst[at:], s.sc.h.Slice(0, n))
		tokens = tokens[n:]
	}
	return dst, nil
}

func (s *Session) readLogits() []float32 {
	s.m.headLogits(s.sc)
	s.m.be.Read(s.logits, s.sc.logitsT.Slice(0, 1))
	return s.logits
}

// argMax picks the likeliest token of the logits in s.sc.logitsT.
func (s *Session) argMax() uint32 {
	var one [1]int
	if s.m.greedyArgMax(s.sc, one[:]) {
		return uint32(one[0])
	}
	s.m.headLogits(s.sc)
	return argMaxRow(s.m.be, s.sc.logitsT.Slice(0, 1), s.logits)
}

// argMaxRow is the likeliest token of a row of logits: found by the
// backend where it can (ArgMaxer), else read into buf and scanned.
func argMaxRow(be backend.Backend, row backend.Tensor, buf []float32) uint32 {
	if a, ok := be.(ArgMaxer); ok {
		return uint32(a.ArgMax(row))
	}
	be.Read(buf, row)
	return uint32(backend.ArgMax(buf[:row.Len()]))
}

// Close releases the session's cache and scratch.
func (s *Session) Close() {
	*s = Session{m: s.m}
}

// ownScratch gives the session its own one-sequence scratch and logits,
// made on first use (a session stepped only in batches never needs them).
func (s *Session) ownScratch() {
	if s.sc == nil {
		s.sc = s.m.newScratch(s.batch, 1)
		s.logits = make([]float32, s.m.cfg.VocabSize)
	}
}
