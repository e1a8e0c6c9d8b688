package ggufengine

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"

	"github.com/meshnode/meshnode/gguf/grammar"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/sample"
	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

// Engine serves one Model (engine.Engine). Serves run concurrently, each
// on its own session (a slot), up to Config.Sessions at once; further
// serves wait for a slot. Their forward steps are batched: the scheduler
// (sched) evaluates the decode tokens and prompt chunks of every running
// serve in one step, each weight matrix read once for all of them.
type Engine struct {
	m        *Model
	recipe   string
	fidelity receipt.Fidelity
	ujTok    uint64
	opt      model.SessionOptions
	pool     pool
	sched    *sched
	// draftSched steps the serves' draft model together (nil: no draft
	// model; each serve's draft then evaluates on its own).
	draftSched *sched
}

var (
	_ engine.Engine          = (*Engine)(nil)
	_ engine.DeviceUser      = (*Engine)(nil)
	_ engine.WorkReporter    = (*Engine)(nil)
	_ engine.LogprobReporter = (*Engine)(nil)
)

// fullWindows is how many speculating slots' full windows a step's
// logits rows are sized for.
const fullWindows = 4

func newEngine(m *Model, cfg Config, opt model.SessionOptions, sessions int) (*Engine, error) {
	e := &Engine{m: m, recipe: m.name, fidelity: cfg.Fidelity, ujTok: cfg.UJPerToken, opt: opt}
	e.pool = pool{max: sessions, wake: make(chan struct{}), open: func() (*model.Session, error) {
		return m.model.NewSession(opt)
	}}
	chunk := cfg.PrefillChunk
	if chunk <= 0 {
		chunk = DefaultPrefillChunk
	}
	budget := cfg.Batch
	if budget <= 0 {
		budget = model.DefaultBatch
	}
	// Every slot's decode token and a prompt chunk fit one step, so that
	// no prompt waits for decoding to end; so do the full windows of up
	// to fullWindows speculating slots (the logits rows are the step's
	// biggest scratch: a vocabulary each), and a window that does not fit
	// goes first in the next step. Every model may speculate: a serve
	// given a predicted output drafts from it (spec.Predicted), in
	// windows of the draft's most, or spec.DefaultMaxWindow without one.
	rows := sessions + m.draft.Max()*min(sessions, fullWindows)
	budget = max(budget, rows+chunk)
	b, err := m.model.NewBatch(model.BatchOptions{Tokens: budget, Seqs: rows})
	if err != nil {
		return nil, fmt.Errorf("ggufengine: %w", err)
	}
	// A token's work is the model's weight bytes it is multiplied
	// through: across models sharing a meter, a bigger model's token
	// counts for more (hw.SharedMeter splits energy by it).
	e.sched = newSched(b, chunk, uint64(max(1, m.file.Size())))
	if dm := m.draftModel(); dm != nil {
		// The serves' draft steps share steps of the draft model as
		// their windows share the target's: a token each, and prompt
		// chunks.
		db, err := dm.NewBatch(model.BatchOptions{Tokens: max(budget, sessions+chunk), Seqs: sessions})
		if err != nil {
			e.sched.close()
			return nil, fmt.Errorf("ggufengine: draft: %w", err)
		}
		e.draftSched = newSched(db, chunk, m.draft.Unit())
	}
	return e, nil
}

// DraftSchedStats returns the draft model's scheduler's counters (zero
// without a draft model).
func (e *Engine) DraftSchedStats() SchedStats {
	if e.draftSched == nil {
		return SchedStats{}
	}
	return e.draftSched.Stats()
}

// Slots is how many serves run at once; further serves wait for one.
func (e *Engine) Slots() int { return e.pool.max }

// SchedStats returns the scheduler's counters.
func (e *Engine) SchedStats() SchedStats { return e.sched.Stats() }

// Recipe implements engine.Engine: the model's name.
func (e *Engine) Recipe() string { return e.recipe }

// Fidelity implements engine.Engine.
func (e *Engine) Fidelity() receipt.Fidelity { return e.fidelity }

// UJPerToken implements engine.Engine.
func (e *Engine) UJPerToken() uint64 { return e.ujTok }

// UJPerOptionScored implements engine.Engine: 0, since the engine refuses
// typed decisions.
func (e *Engine) UJPerOptionScored() uint64 { return 0 }

// Deterministic implements engine.Engine: true. A greedy serve, and a
// sampled one with a seed, yields the same tokens from the same request and
// prompt: the forward pass's arithmetic does not depend on thread count,
// batch split, KV reuse or the other serves batched with it (model.Batch),
// and the sampler's draws come from the request's seed. A request that samples without a seed is flagged as unreplayable
// by the request itself (receipt.Sampling.Unseeded).
func (e *Engine) Deterministic() bool { return true }

// Devices implements engine.DeviceUser: where the model's backend runs
// the forward pass, so that the meter grades each serve by the counters
// covering it (the CPU's alone do not cover a serve on CUDA).
func (e *Engine) Devices() hw.Domain { return devicesOf(e.m.Backend()) }

// ReportsWork implements engine.WorkReporter: each step reports the
// tokens it evaluated for each serve, times the model's weight bytes, to
// the serve's hw.WorkRecorder, so that batched serves share the metered
// energy by it.
func (e *Engine) ReportsWork() bool { return true }

// ReportsLogprobs implements engine.LogprobReporter: a serve whose
// context asks (engine.WithLogprobs) gets each token's log-probability
// under the target model's distribution, a speculative window's accepted
// drafts included (each from its row of the target's logits).
func (e *Engine) ReportsLogprobs() bool { return true }

// ReportsPromptLogprobs implements engine.PromptLogprobReporter: a serve
// that asks evaluates its whole prompt a window of rows at a time, every
// row's logits scoring the token after it (decoder.prefillScored).
func (e *Engine) ReportsPromptLogprobs() bool { return true }

// Weights implements engine.Engine: the file's digest and precision.
func (e *Engine) Weights() (receipt.Weights, bool) { return e.m.weights, true }

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", engine.ErrRefused, fmt.Sprintf(format, args...))
}

// Serve implements engine.Engine.
func (e *Engine) Serve(ctx context.Context, req receipt.ServeRequest, prompt []uint32, emit func(uint32) error) (engine.Outcome, error) {
	params, stops, err := e.check(req, prompt)
	if err != nil {
		return engine.Outcome{}, err
	}
	gr, err := engine.GrammarFor(ctx, req)
	if err != nil {
		return engine.Outcome{}, err
	}
	// A sampled request speculates only with the proposer it names, its
	// windows priced as the name says: its tokens depend on both, and its
	// identity must say so.
	// Filters in another order than the chain's default may pick other
	// tokens than the drafts are verified against: no speculation (nor,
	// as generate decides for every caller, with a stateful sampler or
	// the sampler's distributions reported).
	// Its rounds' bounds are its draft name's (a greedy request's, its
	// context's).
	var draft string
	noSpec := !engine.Speculation(ctx) || params.Order != ""
	limits := engine.SpecLimits(ctx)
	prediction := engine.Prediction(ctx)
	if !params.Greedy() && req.Sampling != nil {
		draft = req.Sampling.Draft
		id, _, _, err := spec.SplitDraft(draft)
		if err != nil {
			return engine.Outcome{}, refuse("%v", err)
		}
		if err := spec.CheckPredictionNamed(id, prediction); err != nil {
			return engine.Outcome{}, refuse("%v", err)
		}
		noSpec = noSpec || draft == "" || len(prediction) == 0 && id != e.m.Draft()
		if limits, err = spec.DraftLimits(draft); err != nil {
			return engine.Outcome{}, refuse("%v", err)
		}
	}
	return e.generate(ctx, prompt, Generation{Sampling: params, Stop: stops, MinIndent: MinIndent(req.Sampling), MaxTokens: int(req.MaxTokens), NoSpeculation: noSpec, Draft: draft, Limits: limits, Grammar: gr, Prediction: prediction}, emit)
}

// Generation is how Generate generates: the sampler's parameters, the stop
// strings and the most tokens.
type Generation struct {
	Sampling sample.Params
	Stop     []string
	// MinIndent ends the output at a line, after the first, whose text
	// begins under this many spaces or tabs (sample.Stopper.MinIndent).
	MinIndent int
	MaxTokens int
	// NoSpeculation decodes without the model's proposer (Config.Draft).
	NoSpeculation bool
	// Limits bound the speculative rounds (llama-server's
	// speculative.n_max, n_min and p_min); p_min needs a draft model.
	Limits spec.Limits
	// Draft is a sampled generation's draft name (Model.SampledDraft's
	// form): the prices in it price its windows; none, the files'.
	Draft string
	// Grammar, when set, holds the output to it: each token is picked
	// among those the grammar allows next (the end of generation only
	// where it may end), and the generation ends where the grammar must.
	// A window's drafts are verified under the grammar too.
	Grammar *grammar.Grammar
	// Prediction is a predicted output its rounds draft from
	// (spec.Predicted) in place of the model's own proposer: a greedy
	// generation's tokens are the same; a sampled one's Draft names it
	// (spec.PredictionID).
	Prediction []uint32
}

// TakesPrediction implements engine.PredictionTaker: a serve drafts
// from the predicted output in its context.
func (e *Engine) TakesPrediction() bool { return true }

// Generate is Serve for a caller outside the steward (meshnode run): no
// signed request, so it takes sampler parameters no request carries (the
// penalties' window). Prompts and parameters are checked as
// Serve checks them, and refused with engine.ErrRefused.
func (e *Engine) Generate(ctx context.Context, prompt []uint32, g Generation, emit func(uint32) error) (engine.Outcome, error) {
	if err := e.checkPrompt(prompt); err != nil {
		return engine.Outcome{}, err
	}
	if err := e.m.CheckSampling(g.Sampling); err != nil {
		return engine.Outcome{}, refuse("%v", err)
	}
	if g.MaxTokens < 0 {
		return engine.Outcome{}, refuse("max tokens %d", g.MaxTokens)
	}
	return e.generate(ctx, prompt, g, emit)
}

// generate runs a checked generation on a pooled session.
func (e *Engine) generate(ctx context.Context, prompt []uint32, g Generation, emit func(uint32) error) (engine.Outcome, error) {
	if err := ctx.Err(); err != nil {
		return engine.Outcome{}, err
	}
	s, err := e.pool.acquire(ctx, prompt)
	if err != nil {
		return engine.Outcome{}, err
	}
	defer e.pool.release(s)
	seq := e.sched.open()
	defer seq.close()

	delivered := e.fidelity
	out := engine.Outcome{TokensIn: uint32(len(prompt)), Delivered: &delivered}
	// Log-probabilities need the logits on the host: a greedy pick is
	// then the sampler's (the same token as the argmax, found there).
	lq := engine.NewLogprobQueue(engine.LogprobsFrom(ctx))
	d := decoder{seq: seq, s: s, sampler: sample.New(g.Sampling), argMax: g.Sampling.ArgMax() && lq == nil, work: hw.WorkFrom(ctx), lq: lq}
	if g.Grammar != nil {
		// The mask is applied by the sampler, on the logits (a window's
		// rows each under its own: spec.VerifyAllowed).
		if d.con, d.mask, err = e.m.con.Start(g.Grammar); err != nil {
			return out, err
		}
		d.argMax = false
	}
	// Mirostat's μ and adaptive-p's average move a token at a time, in
	// order: a window's rows would move them out of turn; and the
	// sampler's distributions are recorded pick by pick (Serve does not
	// name a draft for any of them).
	noSpec := g.NoSpeculation || g.Sampling.Stateful() || lq.PostSampling()
	if len(g.Prediction) > 0 && !noSpec {
		prop, win, err := e.m.draft.PredictionRounds(g.Prediction, g.Sampling.Greedy(), g.Draft)
		if err != nil {
			return out, refuse("%v", err)
		}
		if err := g.Limits.Apply(prop, win); err != nil {
			return out, refuse("%v", err)
		}
		d.prop, d.win = prop, win.Limit(g.MaxTokens)
	} else if dr := e.m.draft; dr != nil && !noSpec {
		prop, release, err := dr.Proposer(g.Sampling)
		if err != nil {
			return out, err
		}
		defer release()
		win := dr.Window(true)
		if !g.Sampling.Greedy() {
			if win, err = dr.SampledWindow(cmp.Or(g.Draft, dr.ID())); err != nil {
				return out, err
			}
		}
		if h, ok := prop.(spec.Holder); ok && d.con != nil {
			h.Hold(d.con) // the live constraint: each proposal clones it
		}
		if err := g.Limits.Apply(prop, win); err != nil {
			return out, refuse("%v", err)
		}
		d.prop, d.win, d.draftUnit = prop, win.Limit(g.MaxTokens), dr.Unit()
		if mp, ok := prop.(*spec.ModelProposer); ok && e.draftSched != nil {
			// The draft's steps go through the draft model's
			// scheduler, batched with the other serves' (which counts
			// their work, as the target's scheduler does).
			dseq := e.draftSched.open()
			defer dseq.close()
			mp.StepWith(func(ctx context.Context, s *model.Session, tokens []uint32, judge func(spec.Logits)) error {
				_, err := dseq.run(ctx, s, tokens, func(b *model.Batch, i int) uint32 {
					judge(spec.BatchLogits{B: b, I: i, J: b.Rows(i) - 1})
					return 0
				})
				return err
			})
			d.draftSeq, d.draftUnit = dseq, 0
		}
	}
	var reused int
	var next uint32
	if lp := engine.LogprobsFrom(ctx); lp != nil && lp.Prompt != nil {
		next, err = d.prefillScored(ctx, prompt, lp)
	} else {
		reused, next, err = d.prefill(ctx, prompt)
	}
	if err != nil {
		return out, err
	}
	if f := engine.PromptProgressFrom(ctx); f != nil {
		f(engine.PromptProgress{Total: len(prompt), Cached: reused, Processed: len(prompt)})
	}
	e.m.log.Debug("prefill", "model", e.recipe, "prompt", len(prompt), "reused", reused)

	tok := e.m.tok
	stopper := sample.NewStopper(g.Stop, func(id uint32) ([]byte, error) {
		p, err := tok.Piece(id, false)
		return []byte(p), err
	})
	stopper.MinIndent(g.MinIndent)
	send := func(ids []uint32) error {
		for _, id := range ids {
			if err := lq.Emit(id); err != nil {
				return err
			}
			if err := emit(id); err != nil {
				return fmt.Errorf("ggufengine: emit: %w", err)
			}
			out.TokensOut++
			// Every token out is one the target accepted: its own, or a
			// draft it verified (SpecAccepted counts those).
			out.TokensAccepted++
		}
		return nil
	}
	var generated []uint32
	// The session never keeps a token beyond those handed out (a
	// window's accepted drafts past a stop, an end or the ceiling): as
	// after plain decoding, it holds the prompt and the output.
	defer func() { s.Truncate(len(prompt) + len(generated)) }()
	pending := []uint32{next} // picked, not yet handed out; all but the last evaluated
	for len(generated) < g.MaxTokens {
		if len(pending) == 0 {
			if pending, err = d.eval(ctx, prompt, generated, g.MaxTokens-len(generated), &out); err != nil {
				return out, err
			}
		}
		next, pending = pending[0], pending[1:]
		if tok.IsEOG(next) {
			break
		}
		generated = append(generated, next)
		if err := d.accept(next); err != nil {
			return out, err
		}
		ready, stop, err := stopper.Push(next)
		if err != nil {
			return out, fmt.Errorf("ggufengine: %w", err)
		}
		if err := send(ready); err != nil {
			return out, err
		}
		if stop {
			out.StopString, out.Indented = stopper.Matched(), stopper.Indented()
			return out, nil
		}
		if d.con != nil && d.con.Done() {
			break // the grammar ends here: nothing may follow
		}
		if len(generated) == g.MaxTokens || len(pending) == 0 && s.Len() == s.Context() {
			break // no need to evaluate a token nothing follows
		}
	}
	return out, send(stopper.Flush())
}

// decoder evaluates a generation's tokens on its session, in the
// scheduler's batched steps, and picks each next one.
type decoder struct {
	seq     *seqHandle
	s       *model.Session
	sampler *sample.Sampler
	// argMax: the pick is the logits' argmax (greedy, no penalty), which
	// the batch finds where the logits are: on the GPU, one int copied
	// back per token rather than the vocabulary's logits.
	argMax bool
	work   hw.WorkRecorder // the serve's, for the draft's work; may be nil
	// lq records each pick's log-probabilities (nil: not asked for).
	lq *engine.LogprobQueue

	// Speculation (nil prop: none): the proposer, the window sizing its
	// rounds, and the work units of a drafted token.
	prop      spec.Proposer
	win       *spec.Window
	draftUnit uint64 // 0: the draft's work is counted where it runs (draftSeq)
	drafted   int    // tokens the draft model has evaluated, reported
	// draftSeq is the serve's place in the draft model's scheduler (nil:
	// none), handed back whenever the serve stops drafting for a while,
	// so that the draft's steps do not wait for it meanwhile.
	draftSeq *seqHandle

	// Grammar-constrained decoding (nil con: none): the constraint and
	// the mask of the token to pick next.
	con  *grammar.Constraint
	mask []uint64
	// masks are the last window's rows' masks, their room reused.
	masks [][]uint64
}

// accept advances the constraint over the token picked.
func (d *decoder) accept(tok uint32) error {
	if d.con == nil {
		return nil
	}
	if err := d.con.Accept(tok); err != nil {
		return fmt.Errorf("ggufengine: %w", err)
	}
	return nil
}

// pick returns how the next token is chosen from a step's logits: the
// sampler with generated as the penalties' history, or nil for their
// argmax. It runs on the scheduler's goroutine while this serve waits for
// it.
func (d *decoder) pick(generated []uint32) func(*model.Batch, int) uint32 {
	if d.argMax {
		return nil
	}
	mask := d.mask // nil unless constrained: every token
	return func(b *model.Batch, i int) uint32 {
		return d.lq.SampleAllowed(d.sampler, b.Logits(i), generated, mask)
	}
}

// prefill evaluates the prompt, reusing the cached prefix (at least the
// last token is evaluated, since its logits are not cached), and picks
// the first token.
func (d *decoder) prefill(ctx context.Context, prompt []uint32) (reused int, next uint32, err error) {
	reused = min(d.s.CommonPrefix(prompt), len(prompt)-1)
	if !engine.PromptCache(ctx) {
		reused = 0
	}
	d.s.Truncate(reused)
	var moved func(fed int) // reports a long prompt's steps
	if f := engine.PromptProgressFrom(ctx); f != nil {
		moved = func(fed int) { f(engine.PromptProgress{Total: len(prompt), Cached: reused, Processed: reused + fed}) }
	}
	err = d.alongsideDraft(ctx, prompt, func() (err error) {
		next, err = d.seq.runFed(ctx, d.s, prompt[reused:], d.pick(nil), moved)
		return err
	})
	return reused, next, err
}

// alongsideDraft runs target, the prompt's evaluation on the target, while
// a draft model takes in the prompt (on a backend that runs both at once,
// in the target's time), so that the first round drafts at once.
func (d *decoder) alongsideDraft(ctx context.Context, prompt []uint32, target func() error) error {
	drafted := make(chan error, 1)
	if f, ok := d.prop.(interface{ Forget() }); ok && !engine.PromptCache(ctx) {
		f.Forget() // the draft evaluates the whole prompt too
	}
	go func() { drafted <- spec.Prefill(ctx, d.prop, d.win, prompt) }()
	err := target()
	if derr := <-drafted; err == nil {
		err = derr
	}
	d.draftDone()
	return err
}

// scoreWindow is the most prompt tokens a scored prefill evaluates in one
// step: each is a row of logits over the vocabulary, and a step has as
// many rows as the engine's slots (and speculative windows) need, no more.
const scoreWindow = 32

// prefillScored is prefill for a serve that asks for its prompt's
// log-probabilities (lp.Prompt): the whole prompt evaluated, none of it
// taken from the cache (whose logits are not kept), in windows of rows
// whose every logits row scores the token after it, and the first token
// picked from the last row, as prefill picks it.
func (d *decoder) prefillScored(ctx context.Context, prompt []uint32, lp *engine.Logprobs) (next uint32, err error) {
	d.s.Truncate(0)
	scored := make([]engine.TokenLogprob, 0, len(prompt)-1)
	// Never nil: a serve asking for log-probabilities picks on the host.
	pick := d.pick(nil)
	// A window takes every row it asks for in one step (as a speculative
	// window does, it goes first in the step after one it did not fit).
	w := max(1, min(scoreWindow, d.seq.sc.batch.Seqs(), d.seq.sc.budget))
	err = d.alongsideDraft(ctx, prompt, func() (err error) {
		for at := 0; at < len(prompt); at += w {
			window := prompt[at:min(at+w, len(prompt))]
			last := at+len(window) == len(prompt)
			next, err = d.seq.runRows(ctx, d.s, window, len(window), func(b *model.Batch, i int) uint32 {
				for j := range b.Rows(i) {
					if p := at + j + 1; p < len(prompt) {
						l, top := sample.LogProbs(nil, b.LogitsAt(i, j), prompt[p], lp.Top)
						scored = append(scored, engine.TokenLogprob{Token: prompt[p], Logprob: l, Top: top})
					}
				}
				if !last {
					return 0
				}
				return pick(b, i)
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	lp.Prompt(scored)
	return next, nil
}

// eval evaluates the token generated last and returns the tokens that
// follow: the next one picked; or, speculating, the drafts the target
// accepted and its own pick after them (at most left tokens in all).
// generated is the generation so far, the penalties' history.
func (d *decoder) eval(ctx context.Context, prompt, generated []uint32, left int, out *engine.Outcome) ([]uint32, error) {
	last := generated[len(generated)-1:]
	k := 0
	if d.prop != nil {
		// The last token generated is never evaluated, and the window
		// must fit the context.
		k = min(d.win.Size(), left-1, d.s.Context()-d.s.Len()-1)
	}
	var drafts []spec.Draft
	if k > 0 {
		seq := append(append(make([]uint32, 0, len(prompt)+len(generated)), prompt...), generated...)
		var err error
		if drafts, err = d.win.Draft(ctx, d.prop, seq, len(prompt), k); err != nil {
			return nil, err
		}
		d.draftDone()
	}
	if d.con != nil && len(drafts) > 0 {
		// Drafts the grammar refuses fall: those that may go take no row
		// (spec.Allowed).
		drafts = spec.Allowed(d.con, drafts)
	}
	if len(drafts) == 0 {
		if d.con != nil {
			return d.evalConstrained(ctx, last, generated)
		}
		next, err := d.seq.run(ctx, d.s, last, d.pick(generated))
		return []uint32{next}, err
	}
	// Under a grammar each row's mask is found while the window's step
	// runs, as evalConstrained finds its one.
	var ready <-chan spec.Found
	if d.con != nil {
		ready = spec.MasksAhead(d.con, drafts, d.masks)
	}
	window := spec.Tokens(last[0], drafts)
	base := d.s.Len()
	var accepted int
	var maskErr error
	taken := false // pick took the masks
	next, err := d.seq.runRows(ctx, d.s, window, len(window), func(b *model.Batch, i int) uint32 {
		var next uint32
		rows := spec.BatchRows{B: b, I: i}
		if ready != nil {
			f := <-ready
			taken = true
			if f.Err != nil {
				maskErr = f.Err
				return 0
			}
			// Only drafts with a mask after them are verified (spec.Masks).
			d.masks, drafts = f.Masks, drafts[:len(f.Masks)-1]
			accepted, next = spec.VerifyAllowed(d.sampler, rows, drafts, generated, f.Masks)
		} else {
			accepted, next = spec.Verify(d.sampler, d.argMax, rows, drafts, generated)
		}
		if d.lq != nil {
			spec.RecordLogprobs(d.lq, rows, drafts, accepted, next)
		}
		return next
	})
	if ready != nil && !taken {
		// The step failed before its pick: nothing is left running on
		// the constraint.
		<-ready
	}
	if err == nil && maskErr != nil {
		err = fmt.Errorf("ggufengine: %w", maskErr)
	}
	if err != nil {
		return nil, err
	}
	// The rejected drafts' keys and values go.
	d.s.Truncate(base + 1 + accepted)
	out.SpecProposed += uint32(len(drafts))
	out.SpecAccepted += uint32(accepted)
	return d.win.Keep(drafts, accepted, next), nil
}

// evalConstrained is eval's step under a grammar: the next token's mask
// is found while the step runs (it needs the grammar's state, not the
// logits), so that where the forward pass leaves the CPU free (a GPU
// backend) the mask costs no time; the pick waits for it.
func (d *decoder) evalConstrained(ctx context.Context, last, generated []uint32) ([]uint32, error) {
	type found struct {
		mask []uint64
		err  error
	}
	ready := make(chan found, 1) // the goroutine never blocks, whatever the step does
	con := d.con
	go func() {
		mask, err := con.Mask()
		ready <- found{mask, err}
	}()
	var maskErr error
	taken := false // pick took the mask; run returns after any pick ends
	next, err := d.seq.run(ctx, d.s, last, func(b *model.Batch, i int) uint32 {
		f := <-ready
		taken = true
		if f.err != nil {
			maskErr = f.err
			return 0
		}
		return d.lq.SampleAllowed(d.sampler, b.Logits(i), generated, f.mask)
	})
	if !taken {
		// The step failed or was cancelled before its pick: wait for the
		// mask, so that nothing is left running on the constraint.
		<-ready
	}
	if err == nil && maskErr != nil {
		err = fmt.Errorf("ggufengine: %w", maskErr)
	}
	return []uint32{next}, err
}

// draftDone follows a round's drafting (or the draft's prefill): the
// serve's place in the draft model's scheduler is handed back while the
// serve verifies, and a draft that evaluates on its own reports its new
// work to the serve's meter (its tokens run inside the serve's span, on
// the same machine).
func (d *decoder) draftDone() {
	if d.draftSeq != nil {
		d.draftSeq.close()
	}
	if d.work == nil || d.draftUnit == 0 {
		return
	}
	if n := spec.EvaluatedSince(d.prop, &d.drafted); n > 0 {
		d.work.AddWork(uint64(n) * d.draftUnit)
	}
}

// check validates a request before any work, returning the sampler's
// parameters and the stop strings.
func (e *Engine) check(req receipt.ServeRequest, prompt []uint32) (sample.Params, []string, error) {
	if req.Decision != nil {
		return sample.Params{}, nil, refuse("typed decisions are not served by the GGUF engine (it generates text)")
	}
	if err := e.checkPrompt(prompt); err != nil {
		return sample.Params{}, nil, err
	}
	params, stops, err := samplingParams(req.Sampling, e.m.model.Config().VocabSize, SamplerVocab(e.m.tok), e.m.dry, prompt)
	if err != nil {
		return sample.Params{}, nil, refuse("%v", err)
	}
	return params, stops, nil
}

// checkPrompt refuses a prompt the model cannot evaluate.
func (e *Engine) checkPrompt(prompt []uint32) error {
	if len(prompt) == 0 {
		return refuse("empty prompt")
	}
	if len(prompt) > e.m.ctx {
		return refuse("a prompt of %d tokens does not fit the context of %d: %v", len(prompt), e.m.ctx, model.ErrContext)
	}
	vocab := uint32(e.m.model.Config().VocabSize)
	for _, t := range prompt {
		if t >= vocab {
			return refuse("prompt token %d is outside the vocabulary of %d", t, vocab)
		}
	}
	return nil
}

// samplingParams maps the request's sampling block (millionths) to the
// sampler's parameters, for a model of vocab tokens. A sampled request
// without a seed gets a random one.
func samplingParams(s *receipt.Sampling, vocab int, words sample.Vocab, breakers *DRYVocab, prompt []uint32) (sample.Params, []string, error) {
	if s == nil {
		return sample.Params{}, nil, nil
	}
	const e6 = 1e6
	p := sample.Params{
		Temperature:      float64(s.TemperatureE6) / e6,
		TopK:             int(s.TopK),
		TopP:             float64(s.TopPE6) / e6,
		MinP:             float64(s.MinPE6) / e6,
		FrequencyPenalty: float64(s.FrequencyPenaltyE6) / e6,
		PresencePenalty:  float64(s.PresencePenaltyE6) / e6,
		RepeatPenalty:    float64(s.RepeatPenaltyE6) / e6,
		TypicalP:         float64(s.TypicalPE6) / e6,
		TopNSigma:        float64(s.TopNSigmaE6) / e6,
		XTCProbability:   float64(s.XTCProbabilityE6) / e6,
		XTCThreshold:     float64(s.XTCThresholdE6) / e6,
		DynaTempRange:    float64(s.DynaTempRangeE6) / e6,
		DynaTempExponent: float64(s.DynaTempExponentE6) / e6,
		MinKeep:          int(s.MinKeep),
		Order:            s.Samplers,
	}
	if n := s.PenaltyLastN; n != 0 {
		// The penalties count the last n tokens of prompt and answer
		// together (llama.cpp's penalty_last_n), every one for
		// PenaltyAll; by default the answer's alone.
		p.PenaltyContext = prompt
		if n != receipt.PenaltyAll {
			p.PenaltyWindow = int(n)
		}
	}
	if strings.IndexByte(s.Samplers, 'i') >= 0 {
		p.Vocab = words // only the infill filter reads it; nil refuses it
	}
	if s.DRYMultiplierE6 > 0 {
		d, err := dryParams(s, breakers, prompt)
		if err != nil {
			return p, nil, err
		}
		p.DRY = d
	}
	if s.Mirostat != 0 {
		p.Mirostat = &sample.Mirostat{Version: int(s.Mirostat), Tau: float64(s.MirostatTauE6) / e6, Eta: float64(s.MirostatEtaE6) / e6}
	}
	if s.MinTokens > 0 {
		eog, ok := words.(interface{ EOG() []uint32 })
		if !ok {
			return p, nil, fmt.Errorf("ggufengine: min_tokens %d, and the vocabulary names no end tokens to hold back", s.MinTokens)
		}
		p.MinTokens, p.EOG = int(s.MinTokens), eog.EOG()
	}
	if t := s.AdaptiveTargetE6; t != nil {
		p.AdaptiveP = &sample.AdaptiveP{Target: float64(*t) / e6, Decay: float64(s.AdaptiveDecayE6) / e6}
	}
	for _, b := range s.LogitBias {
		p.LogitBias = append(p.LogitBias, sample.Bias{Token: b.Token, Bias: float64(b.BiasE6) / e6})
	}
	if err := biasesInVocab(p.LogitBias, vocab); err != nil {
		return p, nil, err
	}
	switch {
	case s.Seed != nil:
		p.Seed = *s.Seed
	case s.TemperatureE6 > 0:
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return p, nil, err
		}
		p.Seed = binary.LittleEndian.Uint64(b[:])
	}
	if err := p.Validate(); err != nil {
		return p, nil, err
	}
	return p, s.Stop, nil
}

// pool keeps the sessions: idle ones hold the KV cache of their last
// sequence, and a serve takes the one whose cache shares the longest
// prefix with its prompt (a conversation's next turn finds its own).
type pool struct {
	mu    sync.Mutex
	idle  []*idleSession
	n     int // sessions made
	max   int
	clock uint64
	wake  chan struct{} // closed and replaced when a session comes back
	open  func() (*model.Session, error)
}

type idleSession struct {
	s    *model.Session
	used uint64
}

func (p *pool) acquire(ctx context.Context, prompt []uint32) (*model.Session, error) {
	for {
		p.mu.Lock()
		if i := p.best(prompt); i >= 0 {
			s := p.idle[i].s
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			p.mu.Unlock()
			return s, nil
		}
		if p.n < p.max {
			p.n++
			p.mu.Unlock()
			s, err := p.open()
			if err != nil {
				p.mu.Lock()
				p.n--
				p.mu.Unlock()
				return nil, fmt.Errorf("ggufengine: %w", err)
			}
			return s, nil
		}
		wake := p.wake
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wake:
		}
	}
}

// best picks the idle session sharing the longest prefix with prompt (the
// most recently used among equals); when none shares any, a fresh session
// if one may still be made, else the least recently used. -1: none.
func (p *pool) best(prompt []uint32) int {
	best, bestLen := -1, 0
	for i, is := range p.idle {
		n := is.s.CommonPrefix(prompt)
		if n > bestLen || (n == bestLen && n > 0 && is.used > p.idle[best].used) {
			best, bestLen = i, n
		}
	}
	if best >= 0 || p.n < p.max {
		return best
	}
	for i, is := range p.idle {
		if best < 0 || is.used < p.idle[best].used {
			best = i
		}
	}
	return best
}

func (p *pool) release(s *model.Session) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clock++
	p.idle = append(p.idle, &idleSession{s: s, used: p.clock})
	close(p.wake)
	p.wake = make(chan struct{})
}

// close drops the idle sessions' caches.
func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, is := range p.idle {
		is.s.Close()
	}
	p.idle = nil
}

func (e *Engine) close() {
	e.sched.close()
	if e.draftSched != nil {
		e.draftSched.close()
	}
	e.pool.close()
}

// biasesInVocab refuses a logit bias for a token a model of vocab tokens
// does not have: the sampler would pass it over.
func biasesInVocab(biases []sample.Bias, vocab int) error {
	for _, b := range biases {
		if int64(b.Token) >= int64(vocab) {
			return fmt.Errorf("logit_bias names token %d, outside the vocabulary of %d", b.Token, vocab)
		}
	}
	return nil
}

// CheckSampling refuses sampler parameters this model cannot honour, as
// Generate refuses them: out of range, or biasing a token it does not
// have.
func (m *Model) CheckSampling(p sample.Params) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return biasesInVocab(p.LogitBias, m.model.Config().VocabSize)
}

// SamplingParams maps a request's sampling block to the sampler's
// parameters and its stop strings, as Serve does (a sampled request
// without a seed gets a random one): for engines that serve the same
// models another way (a model split across nodes), for a model of vocab
// tokens and the serve's prompt (which penalties may count:
// receipt.Sampling.PenaltyLastN, and DRY scans), DRY's breakers read
// with breakers (nil refuses DRY).
func SamplingParams(s *receipt.Sampling, vocab int, words sample.Vocab, breakers *DRYVocab, prompt []uint32) (sample.Params, []string, error) {
	return samplingParams(s, vocab, words, breakers, prompt)
}

// MinIndent is a request's n_indent (receipt.Sampling.MinIndent), 0 for
// none: for engines that serve the same models another way, as
// SamplingParams is.
func MinIndent(s *receipt.Sampling) int {
	if s == nil {
		return 0
	}
	return int(s.MinIndent)
}

// VocabTokens is what the infill filter (sample.Vocab) reads of a
// vocabulary: *tokenizer.Tokenizer has it.
type VocabTokens interface {
	IsEOG(id uint32) bool
	Piece(id uint32, special bool) (string, error)
	EOT() uint32
	EOS() uint32
	NumTokens() int
	EOG() []uint32
}

// SamplerVocab is t as the infill filter reads it: control tokens have
// no text, and the token it falls back to is the end of turn, or the
// end of sequence where the vocabulary has no end of turn (as
// llama.cpp's token_eot falls back for FIM models that name none).
func SamplerVocab(t VocabTokens) sample.Vocab { return samplerVocab{t} }

type samplerVocab struct{ t VocabTokens }

// IsEOG bounds the id: a model's logits may be padded past its
// vocabulary.
func (v samplerVocab) IsEOG(id uint32) bool {
	return int64(id) < int64(v.t.NumTokens()) && v.t.IsEOG(id)
}

// EOG is the end-of-generation tokens, ascending (those a request's
// min_tokens holds back).
func (v samplerVocab) EOG() []uint32 { return v.t.EOG() }

func (v samplerVocab) EOT() uint32 {
	if eot := v.t.EOT(); eot != tokenizer.NoToken {
		return eot
	}
	return v.t.EOS()
}

func (v samplerVocab) Piece(id uint32) string {
	p, err := v.t.Piece(id, false)
	if err != nil {
		return ""
	}
	return p
}
