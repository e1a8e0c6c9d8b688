// Package splitengine serves a model split in layer stages across mesh
// nodes as a steward backend (engine.Engine): this node, the head, runs
// the first stage and drives the others through a stage.Pipeline, one
// token per step, greedy or sampled.
//
// With a proposer (Config.Draft: a draft model run here whole, or prompt
// lookup) the head speculates as a whole model's engine does
// (ggufengine, gguf/spec): each step sends the last token and the drafts
// down the chain as one window whose rows the last stage answers
// (stage.Seq.Rows), the head accepts by spec.Verify — greedy exactly,
// sampled by the rejection rule on the request's seeded stream — and
// trims the rejected drafts' positions on every stage (Pipeline.Trim,
// which follows the chain behind the step). A window costs one round
// trip through the stages however many of its drafts stand, so a split
// model, whose steps wait on the network, gains the most from it.
//
// A pipeline that fails (a stage dies, leaves, or does not answer within
// the step timeout) is dropped at once: the serves on it end with an
// error wrapping engine.ErrUnavailable, which the API answers with 503
// and Retry-After, and the engine calls Config.Lost so that its owner
// places the model again and hands it the new pipeline (Set). Until then
// every serve is refused the same way.
package splitengine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/gguf/grammar"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/sample"
	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/engine/ggufengine"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/stage"
	"github.com/meshnode/meshnode/node/wire/stagewire"
)

// Pipeline is what the engine drives: a *stage.Pipeline.
type Pipeline interface {
	Step(ctx context.Context, seqs []stage.Seq) ([]stage.Result, error)
	Trim(ctx context.Context, request uint64, n int) error
	// Finish ends a request on every stage and gathers their signed
	// reports for the serve's receipt.
	Finish(ctx context.Context, request uint64, serve receipt.ContentID) (*engine.Split, error)
	Close(ctx context.Context) error
	// Rows is the most output rows one step may ask for: a window of k
	// drafts takes k+1.
	Rows() int
	// Windows reports whether the stages answer windows (a sequence's
	// rows after each of its last tokens): not where a stage's node
	// predates them.
	Windows() bool
	// WeightBytes is the head's stage's weights: the work a token
	// evaluated on the head does (ReportsWork).
	WeightBytes() int64
}

// Tokens is what the engine needs of the model's vocabulary.
type Tokens interface {
	IsEOG(id uint32) bool
	Piece(id uint32, special bool) (string, error)
}

// Config describes the split model.
type Config struct {
	Recipe     string
	Fidelity   receipt.Fidelity
	UJPerToken uint64
	Weights    receipt.Weights
	// Vocab is the model's vocabulary size, Context the positions a
	// request may hold (the pipeline's context).
	Vocab, Context int
	// Batch is the most tokens one step carries (the pipeline's batch;
	// default model.DefaultBatch): a longer prompt goes in several.
	Batch int
	// Rows, if set, bounds the output rows one step asks of the last
	// stage below what the pipeline computes (Pipeline.Rows, which is
	// the bound otherwise): a window of k drafts takes k+1.
	Rows int
	// Draft, if set, is the proposer serves speculate with (on by
	// default: engine.Speculation; a sampled request only when it names
	// it, receipt.Sampling.Draft). The engine does not close it.
	Draft *spec.Drafter
	// Sessions bounds the serves on the pipeline at once (default 4): each
	// holds a KV session on every stage, and the stages were sized for so
	// many. More wait for a turn.
	Sessions int
	Tokens   Tokens
	// StepTimeout bounds one step through every stage (default
	// DefaultStepTimeout): a stage that does not answer is taken for
	// lost.
	StepTimeout time.Duration
	// Lost, if set, is called (on its own goroutine) once for each
	// pipeline that fails, with the pipeline and why.
	Lost func(p Pipeline, err error)
	// Now is the clock steps are timed by (default time.Now).
	Now func() time.Time
}

// DefaultStepTimeout bounds a step: a token through a few stages takes
// milliseconds, a prompt's prefill seconds on a slow CPU.
const DefaultStepTimeout = 60 * time.Second

// Engine is a split model's engine. It is safe for concurrent use: the
// pipeline runs one step at a time, and concurrent serves share the
// steps (stepShared).
type Engine struct {
	cfg   Config
	con   *ggufengine.Constrainer // nil without Tokens
	dry   *ggufengine.DRYVocab    // nil without Tokens that encode: DRY refused
	next  atomic.Uint64           // request ids
	slots chan struct{}           // a token per serve running

	mu   sync.Mutex // one step at a time; guards p and pace
	p    Pipeline
	pace pace
	// turn is held by the serve leading the next step (stepShared), and
	// queue (guarded by qmu) holds the steps waiting for one; alone, set
	// by benchmarks, steps each serve alone.
	turn  chan struct{}
	qmu   sync.Mutex
	queue []*stepReq
	alone bool
	// drifted has a value when the serves' steps have drifted from the
	// ones the draft's prices were measured on (Drifted).
	drifted chan struct{}

	// window, if set, sizes each serve's windows instead of the draft's
	// adaptive Window: tests fix it to see full windows cross the stages.
	window func() *spec.Window
}

// New returns an engine serving on p (nil: none yet; serves are refused
// as unavailable until Set).
func New(cfg Config, p Pipeline) *Engine {
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = DefaultStepTimeout
	}
	if cfg.Batch <= 0 {
		cfg.Batch = model.DefaultBatch
	}
	if cfg.Sessions <= 0 {
		cfg.Sessions = 4
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	e := &Engine{cfg: cfg, p: p, slots: make(chan struct{}, cfg.Sessions), drifted: make(chan struct{}, 1), turn: make(chan struct{}, 1)}
	if cfg.Tokens != nil {
		e.con = ggufengine.NewConstrainer(cfg.Tokens, cfg.Vocab)
	}
	if t, ok := cfg.Tokens.(ggufengine.BreakerTokens); ok {
		e.dry = ggufengine.NewDRYVocab(t)
	}
	return e
}

// Set makes p the pipeline serves run on (nil: none), closing the one it
// replaces.
func (e *Engine) Set(p Pipeline) {
	e.mu.Lock()
	old := e.p
	e.p = p
	if old != p {
		e.pace.reset() // until the new pipeline is measured
	}
	e.mu.Unlock()
	if old != nil && old != p {
		closeQuietly(old)
	}
}

// closeTimeout bounds closing a pipeline whose stages may be gone.
const closeTimeout = 10 * time.Second

func closeQuietly(p Pipeline) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	p.Close(ctx)
}

// drop takes the failed pipeline out of service; e.mu held.
func (e *Engine) drop(err error) {
	lost := e.p
	e.p = nil
	if lost == nil {
		return
	}
	go func() {
		closeQuietly(lost)
		if e.cfg.Lost != nil {
			e.cfg.Lost(lost, err)
		}
	}()
}

// Rows is the most output rows a step asks now (a window of k drafts
// takes k+1): its pipeline's, within Config.Rows; 0 without one.
func (e *Engine) Rows() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.p == nil {
		return 0
	}
	n := e.p.Rows()
	if e.cfg.Rows > 0 {
		n = min(n, e.cfg.Rows)
	}
	return n
}

// Drifted has a value when the serves' decoding steps have drifted from
// the steps the draft's prices were last measured on (a third slower or
// faster, over some 32 steps): the owner should Measure again. It
// reports at most once a minute, and less often while measurements find
// the pipeline unchanged; nothing before a pipeline is measured.
func (e *Engine) Drifted() <-chan struct{} { return e.drifted }

// Serving reports whether the engine has a pipeline.
func (e *Engine) Serving() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.p != nil
}

// Close drops the pipeline.
func (e *Engine) Close() { e.Set(nil) }

func (e *Engine) Recipe() string                   { return e.cfg.Recipe }
func (e *Engine) Fidelity() receipt.Fidelity       { return e.cfg.Fidelity }
func (e *Engine) UJPerToken() uint64               { return e.cfg.UJPerToken }
func (e *Engine) UJPerOptionScored() uint64        { return 0 }
func (e *Engine) Weights() (receipt.Weights, bool) { return e.cfg.Weights, true }

// Draft is what a new sampled request names as its draft
// (receipt.Sampling.Draft; spec.Drafter.SampledID): the proposer's id,
// with the sampled prices where the pipeline has been measured
// (Measure), or "" where they say sampled speculation cannot pay, and
// without one. A request that names the proposer, with any prices or
// none, speculates with it whatever this says: a replay of a serve that
// did.
func (e *Engine) Draft() string {
	if e.cfg.Draft == nil {
		return ""
	}
	return e.cfg.Draft.SampledID()
}

// Devices is the head's: its first stage runs on the CPU backend; the
// other stages meter their own parts.
func (e *Engine) Devices() hw.Domain { return hw.DomainCPU }

// ReportsWork implements engine.WorkReporter: each step reports the
// tokens it carried for each serve, times the head's stage's weight bytes,
// and each draft round the draft model's tokens, times its file's, to the
// serve's hw.WorkRecorder, so that serves sharing the head's meter (split
// serves sharing steps, or whole models' serves beside them) share its
// energy by the work each did here.
func (e *Engine) ReportsWork() bool { return true }

// Deterministic: with f32 activations a split model's logits are the
// whole model's bit for bit, so a greedy or seeded serve repeats.
func (e *Engine) Deterministic() bool { return true }

// ReportsLogprobs implements engine.LogprobReporter: a serve that asks
// has the last stage send its logits (as a sampled serve does), and each
// token's log-probability is taken from the target's row it was picked
// from.
func (e *Engine) ReportsLogprobs() bool { return true }

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", engine.ErrRefused, fmt.Sprintf(format, args...))
}

// ErrLost wraps the cause of a pipeline's failure in a serve's error
// (with engine.ErrUnavailable).
var ErrLost = errors.New("splitengine: the split model lost a stage; it is being placed again")

// Serve implements engine.Engine.
func (e *Engine) Serve(ctx context.Context, req receipt.ServeRequest, prompt []uint32, emit func(uint32) error) (engine.Outcome, error) {
	if req.Decision != nil {
		return engine.Outcome{}, refuse("typed decisions are not served by a split model (it generates text)")
	}
	if len(prompt) == 0 {
		return engine.Outcome{}, refuse("empty prompt")
	}
	if len(prompt) >= e.cfg.Context {
		return engine.Outcome{}, refuse("a prompt of %d tokens does not fit the context of %d", len(prompt), e.cfg.Context)
	}
	for _, t := range prompt {
		if int64(t) >= int64(e.cfg.Vocab) {
			return engine.Outcome{}, refuse("prompt token %d is outside the vocabulary of %d", t, e.cfg.Vocab)
		}
	}
	var words sample.Vocab // the infill filter's; a vocabulary without an end of turn refuses it
	if t, ok := e.cfg.Tokens.(ggufengine.VocabTokens); ok {
		words = ggufengine.SamplerVocab(t)
	}
	params, stops, err := ggufengine.SamplingParams(req.Sampling, e.cfg.Vocab, words, e.dry, prompt)
	if err != nil {
		return engine.Outcome{}, refuse("%v", err)
	}
	serve, err := req.ID()
	if err != nil {
		return engine.Outcome{}, refuse("%v", err)
	}
	gr, err := engine.GrammarFor(ctx, req)
	if err != nil {
		return engine.Outcome{}, err
	}
	if gr != nil && e.con == nil {
		return engine.Outcome{}, refuse("the split model has no vocabulary to hold output to a grammar")
	}
	if err := ctx.Err(); err != nil {
		return engine.Outcome{}, err
	}
	// A sampled request speculates only with the proposer it names, its
	// windows priced as the name says: its tokens depend on both, and
	// its identity must say so.
	// A request given a predicted output drafts from it, draft or none
	// (where its pipeline answers windows).
	prediction := engine.Prediction(ctx)
	if len(prediction) > 0 && !e.TakesPrediction() {
		return engine.Outcome{}, refuse("the split model's pipeline has a stage on a node that predates windows, so it cannot draft from a prediction")
	}
	speculate := (e.cfg.Draft != nil || len(prediction) > 0) && engine.Speculation(ctx) && params.Order == "" && !params.Stateful() && !engine.PostSampling(ctx)
	// Its rounds' bounds are its draft name's (a greedy request's, its
	// context's).
	var draft string
	limits := engine.SpecLimits(ctx)
	if !params.Greedy() && req.Sampling != nil {
		draft = req.Sampling.Draft
		id, _, _, err := spec.SplitDraft(draft)
		if err != nil {
			return engine.Outcome{}, refuse("%v", err)
		}
		if err := spec.CheckPredictionNamed(id, prediction); err != nil {
			return engine.Outcome{}, refuse("%v", err)
		}
		speculate = speculate && draft != "" && (len(prediction) > 0 || id == e.cfg.Draft.ID())
		if limits, err = spec.DraftLimits(draft); err != nil {
			return engine.Outcome{}, refuse("%v", err)
		}
	}
	return e.generate(ctx, serve, prompt, gen{params: params, stops: stops, minIndent: ggufengine.MinIndent(req.Sampling), maxTokens: int(req.MaxTokens), speculate: speculate, draft: draft, limits: limits, grammar: gr, prediction: prediction}, emit)
}

// TakesPrediction implements engine.PredictionTaker: a serve drafts
// from the predicted output in its context, through the stages as any
// window, where its pipeline answers windows (Pipeline.Windows). Without
// a pipeline it says yes: the serve fails as unavailable, as any does.
func (e *Engine) TakesPrediction() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.p == nil || e.p.Windows()
}

// gen is how a serve generates.
type gen struct {
	params    sample.Params
	stops     []string
	minIndent int // receipt.Sampling.MinIndent
	maxTokens int
	speculate bool
	draft     string           // a sampled request's draft name, which prices its windows
	limits    spec.Limits      // the rounds' bounds
	grammar   *grammar.Grammar // nil: unconstrained
	// prediction is a predicted output its rounds draft from in place
	// of the model's draft (spec.Predicted); a sampled serve's draft
	// names it (spec.PredictionID).
	prediction []uint32
}

// generate runs a serve; one that ends well ends with its stages'
// reports (Outcome.Split), which the steward seals into its receipt.
func (e *Engine) generate(ctx context.Context, serve receipt.ContentID, prompt []uint32, g gen, emit func(uint32) error) (out engine.Outcome, err error) {
	select {
	case e.slots <- struct{}{}:
		defer func() { <-e.slots }()
	case <-ctx.Done():
		return engine.Outcome{}, ctx.Err()
	}
	r := &run{e: e, id: e.next.Add(1), want: stagewire.OutToken, work: hw.WorkFrom(ctx)}
	defer func() {
		if err != nil {
			r.forget()
			return
		}
		out.Split, err = r.finish(serve)
	}()
	return e.decode(ctx, r, prompt, g, emit)
}

func (e *Engine) decode(ctx context.Context, r *run, prompt []uint32, g gen, emit func(uint32) error) (engine.Outcome, error) {
	delivered := e.cfg.Fidelity
	out := engine.Outcome{TokensIn: uint32(len(prompt)), Delivered: &delivered}
	// Log-probabilities need the last stage's logits: a greedy pick is
	// then the sampler's, from them (the same token as the argmax).
	lq := engine.NewLogprobQueue(engine.LogprobsFrom(ctx))
	d := &decoder{r: r, sampler: sample.New(g.params), argMax: g.params.ArgMax() && lq == nil, lq: lq}
	if g.grammar != nil {
		var err error
		if d.con, d.mask, err = e.con.Start(g.grammar); err != nil {
			return out, err
		}
		d.argMax = false // the mask applies to the logits
	}
	if !d.argMax {
		r.want = stagewire.OutLogits
	}
	if g.speculate && len(g.prediction) > 0 {
		prop, win, err := e.cfg.Draft.PredictionRounds(g.prediction, g.params.Greedy(), g.draft)
		if err != nil {
			return out, refuse("%v", err)
		}
		d.prop, d.win = prop, win
		if e.window != nil {
			d.win = e.window()
		}
		if err := g.limits.Apply(prop, d.win); err != nil {
			return out, refuse("%v", err)
		}
		d.win.Limit(g.maxTokens)
	} else if g.speculate {
		prop, release, err := e.cfg.Draft.Proposer(g.params)
		if err != nil {
			return out, err
		}
		defer release()
		if h, ok := prop.(spec.Holder); ok && d.con != nil {
			h.Hold(d.con) // the live constraint: each proposal clones it
		}
		d.prop, d.win = prop, e.cfg.Draft.Window(true)
		if !g.params.Greedy() {
			if d.win, err = e.cfg.Draft.SampledWindow(g.draft); err != nil {
				return out, err
			}
		}
		if e.window != nil {
			d.win = e.window()
		}
		if err := g.limits.Apply(prop, d.win); err != nil {
			return out, refuse("%v", err)
		}
		d.win.Limit(g.maxTokens)
	}
	// A draft model takes in the prompt while the prompt travels the
	// stages, so that its first round drafts at once.
	drafted := make(chan error, 1)
	go func() { drafted <- spec.Prefill(ctx, d.prop, d.win, prompt) }()
	// The prompt goes in steps of at most a batch; only the last asks
	// for an answer.
	progress := engine.PromptProgressFrom(ctx)
	res, err := func() (stage.Result, error) {
		rest := prompt
		for len(rest) > e.cfg.Batch {
			if _, err := r.step(ctx, rest[:e.cfg.Batch], stagewire.OutNone, 1); err != nil {
				return stage.Result{}, err
			}
			rest = rest[e.cfg.Batch:]
			if progress != nil {
				progress(engine.PromptProgress{Total: len(prompt), Processed: len(prompt) - len(rest)})
			}
		}
		return r.step(ctx, rest, r.want, 1)
	}()
	if derr := <-drafted; err == nil {
		err = derr
	}
	d.draftWork()
	if err != nil {
		return out, err
	}
	if progress != nil {
		progress(engine.PromptProgress{Total: len(prompt), Processed: len(prompt)})
	}
	d.held = len(prompt)
	stopper := sample.NewStopper(g.stops, func(id uint32) ([]byte, error) {
		p, err := e.cfg.Tokens.Piece(id, false)
		return []byte(p), err
	})
	stopper.MinIndent(g.minIndent)
	send := func(ids []uint32) error {
		for _, id := range ids {
			if err := lq.Emit(id); err != nil {
				return err
			}
			if err := emit(id); err != nil {
				return fmt.Errorf("splitengine: emit: %w", err)
			}
			out.TokensOut++
			// Every token out is one the target accepted: its own, or a
			// draft it verified (SpecAccepted counts those).
			out.TokensAccepted++
		}
		return nil
	}
	var generated []uint32
	// Picked, not yet handed out: a window's accepted drafts and the
	// target's token after them, all but the last evaluated.
	pending := []uint32{d.pick(res, nil)}
	for len(generated) < g.maxTokens {
		if len(pending) == 0 {
			if pending, err = d.eval(ctx, prompt, generated, g.maxTokens-len(generated), &out); err != nil {
				return out, err
			}
		}
		var next uint32
		next, pending = pending[0], pending[1:]
		if e.cfg.Tokens.IsEOG(next) {
			break
		}
		generated = append(generated, next)
		if d.con != nil {
			if err := d.con.Accept(next); err != nil {
				return out, fmt.Errorf("splitengine: %w", err)
			}
		}
		ready, stop, err := stopper.Push(next)
		if err != nil {
			return out, fmt.Errorf("splitengine: %w", err)
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
		if len(generated) == g.maxTokens || len(pending) == 0 && d.held == e.cfg.Context {
			break // no need to evaluate a token nothing follows
		}
	}
	return out, send(stopper.Flush())
}

// decoder evaluates a serve's tokens on the pipeline and picks each next
// one, speculating where it has a proposer.
type decoder struct {
	r       *run
	sampler *sample.Sampler
	// argMax: the pick is the last stage's greedy token (greedy, no
	// penalty), so no logits cross the network.
	argMax bool
	held   int // positions the request holds on every stage
	// lq records each pick's log-probabilities (nil: not asked for).
	lq *engine.LogprobQueue

	// Speculation (nil prop: none): the proposer and the window sizing
	// its rounds.
	prop spec.Proposer
	win  *spec.Window
	// drafted is the draft model's tokens evaluated whose work the
	// serve's meter has been told (draftWork).
	drafted int

	// Grammar-constrained decoding (nil con: none): the constraint and
	// the mask of the token to pick next.
	con  *grammar.Constraint
	mask []uint64
	// masks are the last window's rows' masks, their room reused.
	masks [][]uint64
}

// pick is the token after a one-row result: the last stage's greedy
// token, or the sampler's pick from its logits with generated as the
// penalties' history.
func (d *decoder) pick(res stage.Result, generated []uint32) uint32 {
	if d.argMax {
		return res.Token
	}
	return d.lq.SampleAllowed(d.sampler, res.Logits, generated, d.mask)
}

// eval evaluates the token generated last and returns the tokens that
// follow: the next one picked; or, speculating, the drafts accepted and
// the target's pick after them (at most left tokens in all), the
// rejected drafts trimmed from every stage.
func (d *decoder) eval(ctx context.Context, prompt, generated []uint32, left int, out *engine.Outcome) ([]uint32, error) {
	e := d.r.e
	last := generated[len(generated)-1:]
	k := 0
	if d.prop != nil {
		// The last token generated is never evaluated; the window fits
		// the context, a step and the last stage's logits rows.
		k = min(d.win.Size(), left-1, e.cfg.Context-d.held-1, d.r.rows()-1, e.cfg.Batch-1)
	}
	var drafts []spec.Draft
	if k > 0 {
		seq := append(append(make([]uint32, 0, len(prompt)+len(generated)), prompt...), generated...)
		var err error
		drafts, err = d.win.Draft(ctx, d.prop, seq, len(prompt), k)
		d.draftWork()
		if err != nil {
			return nil, fmt.Errorf("splitengine: %w", err)
		}
	}
	if d.con != nil && len(drafts) > 0 {
		// Drafts the grammar refuses fall: those that may go take no row
		// (spec.Allowed).
		drafts = spec.Allowed(d.con, drafts)
	}
	if len(drafts) == 0 {
		var ready chan error
		if d.con != nil {
			// The next token's mask is found while the step crosses the
			// stages: it needs the grammar's state, not the logits.
			ready = make(chan error, 1)
			go func() {
				var err error
				d.mask, err = d.con.Mask()
				ready <- err
			}()
		}
		res, err := d.r.step(ctx, last, d.r.want, 1)
		if ready != nil {
			if merr := <-ready; err == nil && merr != nil {
				err = fmt.Errorf("splitengine: %w", merr)
			}
		}
		if err != nil {
			return nil, err
		}
		d.held++
		return []uint32{d.pick(res, generated)}, nil
	}
	// Under a grammar each row's mask is found while the window crosses
	// the stages.
	var ready <-chan spec.Found
	if d.con != nil {
		ready = spec.MasksAhead(d.con, drafts, d.masks)
	}
	window := spec.Tokens(last[0], drafts)
	res, err := d.r.step(ctx, window, d.r.want, len(window))
	var accepted int
	var next uint32
	if ready != nil {
		f := <-ready
		if err == nil && f.Err != nil {
			err = fmt.Errorf("splitengine: %w", f.Err)
		}
		if err == nil {
			// Only drafts with a mask after them are verified (spec.Masks).
			d.masks, drafts = f.Masks, drafts[:len(f.Masks)-1]
			accepted, next = spec.VerifyAllowed(d.sampler, resultRows{res}, drafts, generated, f.Masks)
		}
	} else if err == nil {
		accepted, next = spec.Verify(d.sampler, d.argMax, resultRows{res}, drafts, generated)
	}
	if err != nil {
		return nil, err
	}
	if d.lq != nil {
		spec.RecordLogprobs(d.lq, resultRows{res}, drafts, accepted, next)
	}
	d.held += 1 + accepted
	if accepted < len(window)-1 {
		// The rejected drafts' keys and values go, on every stage.
		if err := d.r.trim(ctx, d.held); err != nil {
			return nil, err
		}
	}
	out.SpecProposed += uint32(len(drafts))
	out.SpecAccepted += uint32(accepted)
	return d.win.Keep(drafts, accepted, next), nil
}

// draftWork reports a draft model's tokens evaluated since the last
// report (its prompt's, its catch-ups and its drafts) to the serve's
// meter: they run on the head, inside the serve's span.
func (d *decoder) draftWork() {
	if d.r.work == nil {
		return
	}
	if n := spec.EvaluatedSince(d.prop, &d.drafted); n > 0 {
		d.r.work.AddWork(uint64(n) * d.r.e.cfg.Draft.Unit())
	}
}

// resultRows are a window's rows as the last stage answered them.
type resultRows struct{ res stage.Result }

// Logits implements spec.Rows.
func (r resultRows) Logits(j int) []float32 { return r.res.Rows[j] }

// ArgMax implements spec.Rows.
func (r resultRows) ArgMax(j int) uint32 { return r.res.Tokens[j] }

// run is one serve's request on the pipeline it started on.
type run struct {
	e    *Engine
	id   uint64
	want stagewire.Output
	p    Pipeline // the pipeline its positions are on; nil before the first step
	// took is the last step's time through the stages; a measuring
	// request's steps go alone and are not watched for drift (pace).
	took      time.Duration
	measuring bool
	// work, if set, is told the work each step did for the serve.
	work hw.WorkRecorder
}

// step evaluates tokens after the request's positions and returns the
// last stage's answer, after each of the last rows tokens; the step may
// carry other serves' tokens too (stepShared). Cancellation is honoured
// between steps, not within one: a step cut off half-sent would leave the
// chain's streams in an unknown state, and a step is short.
func (r *run) step(ctx context.Context, tokens []uint32, want stagewire.Output, rows int) (stage.Result, error) {
	if err := ctx.Err(); err != nil {
		return stage.Result{}, err
	}
	return r.e.stepShared(r, stage.Seq{Request: r.id, Tokens: tokens, Out: want, Rows: rows})
}

// rows is the most output rows a step of the request may ask: what its
// pipeline computes (which its last stage's node decides:
// stage.Placement.LoadRows), within Config.Rows. r.p is set by the step
// that carried the prompt's first tokens, before its serve had the
// answer.
func (r *run) rows() int {
	n := 1
	if r.p != nil && r.p.Windows() {
		n = r.p.Rows()
	}
	if r.e.cfg.Rows > 0 {
		n = min(n, r.e.cfg.Rows)
	}
	return n
}

// trim rewinds the request to its first n positions on every stage.
func (r *run) trim(ctx context.Context, n int) error {
	e := r.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.p == nil || r.p != e.p {
		return fmt.Errorf("%w: %w", engine.ErrUnavailable, ErrLost)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.StepTimeout)
	defer cancel()
	if err := r.p.Trim(sctx, r.id, n); err != nil {
		e.drop(err)
		return fmt.Errorf("%w: %w: %w", engine.ErrUnavailable, ErrLost, err)
	}
	return nil
}

// checkResult refuses an answer that is not one result of rows rows of
// the asked kind, logits vocabulary-wide.
func (e *Engine) checkResult(res []stage.Result, want stagewire.Output, rows int) error {
	if len(res) != 1 {
		return fmt.Errorf("splitengine: the last stage answered %d results", len(res))
	}
	r := res[0]
	if want == stagewire.OutToken {
		if rows > 1 && len(r.Tokens) != rows {
			return fmt.Errorf("splitengine: the last stage answered %d token rows of %d", len(r.Tokens), rows)
		}
		return nil
	}
	all := [][]float32{r.Logits}
	if rows > 1 {
		if len(r.Rows) != rows {
			return fmt.Errorf("splitengine: the last stage answered %d logits rows of %d", len(r.Rows), rows)
		}
		all = r.Rows
	}
	for _, l := range all {
		if len(l) != e.cfg.Vocab {
			return fmt.Errorf("splitengine: the last stage answered %d logits, the vocabulary has %d", len(l), e.cfg.Vocab)
		}
	}
	return nil
}

// finish ends the request on every stage and returns their reports. A
// stage that does not report leaves the serve's energy unknown: the
// serve fails as unavailable, and the pipeline, whose state is then
// unknown, is dropped.
func (r *run) finish(serve receipt.ContentID) (*engine.Split, error) {
	e := r.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if r.p == nil {
		return nil, nil // nothing ran
	}
	if r.p != e.p {
		return nil, fmt.Errorf("%w: %w", engine.ErrUnavailable, ErrLost)
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.StepTimeout)
	defer cancel()
	split, err := r.p.Finish(ctx, r.id, serve)
	if err != nil {
		e.drop(err)
		return nil, fmt.Errorf("%w: the stages' reports: %w", engine.ErrUnavailable, err)
	}
	return split, nil
}

// forget releases the request's positions on its pipeline, if that is
// still the one serving.
func (r *run) forget() {
	e := r.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if r.p == nil || r.p != e.p {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.StepTimeout)
	defer cancel()
	if err := r.p.Trim(ctx, r.id, 0); err != nil {
		e.drop(err)
	}
}
