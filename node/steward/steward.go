package steward

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward/change"
	"github.com/meshnode/meshnode/node/steward/grant"
	"github.com/meshnode/meshnode/node/steward/journal"
)

// Config assembles a steward.
type Config struct {
	// Key is the node key; the steward seals under its did:key.
	Key *identity.Key
	// Meter meters every engine span. Any hw.Meter: a live counter or the
	// estimator. A hw.DeviceMeter is told which devices each serve's
	// engine runs on (engine.DevicesOf).
	Meter hw.Meter
	// Backends in registration order, the router's tie-break. There may
	// be none: a node that serves no model yet adds them as it loads them
	// (AddBackend).
	Backends []Backend
	// Durable is the steward's decision journal (§2.2), opened (and so
	// locked) by journal.Open. With it the steward decides JCP grants
	// itself, records its change records, answers witnesses, and New
	// replays the journal before it returns: spend, spent presentations,
	// unresolved serves, change records and the receipt chain are
	// re-established from it, and a journal the replay refuses fails New
	// with a *journal.RecordError naming the record. Authorizer, Journal
	// and Head must then be unset: the journal is all three. The steward
	// does not close it.
	Durable *journal.Journal
	// Revocations (with Durable) are revocations the steward learns at
	// New, from the node's revocation file, say: each the journal does not
	// hold yet is journaled then, taking effect no earlier than that (see
	// Steward.Revoke). Decisions consult only the journaled revocations, so
	// a replay decides as the steward did. Nil adds none.
	Revocations *grant.Revocations
	// Authorizer decides grants; nil serves every request ungranted.
	Authorizer Authorizer
	// Journal records each receipt before it is handed out; nil keeps no
	// record (a steward that cannot restart its chain).
	Journal Journal
	// Archive, when set, keeps every receipt's envelope, before the
	// journal (Durable or Journal) records it.
	Archive ReceiptArchive
	// Observer, when set, hears of every receipt handed out.
	Observer SealObserver
	// Head is where the receipt chain continues; the zero Head is genesis.
	Head receipt.Head
	// Rand supplies receipt nonces; nil is crypto/rand.
	Rand io.Reader
	// Now stamps authorisations; nil is time.Now.
	Now func() time.Time
	// Logger; nil discards.
	Logger *slog.Logger
}

// Steward serves requests and seals their receipts. It is safe for
// concurrent use; receipts are sealed and chained one at a time.
type Steward struct {
	sealer  *receipt.Sealer
	meter   hw.Meter
	auth    Authorizer
	journal Journal
	archive ReceiptArchive
	observe SealObserver
	now     func() time.Time
	log     *slog.Logger
	durable *durable // nil without a decision journal

	// bmu guards backends, which the node changes as owner control loads
	// and unloads models.
	bmu      sync.RWMutex
	backends []Backend

	mu   sync.Mutex // guards rand and head, and orders seal → journal → advance
	rand io.Reader
	head receipt.Head

	// cmu guards changes, each backend's change record (§6.5). Recording
	// an entry holds mu too, so that its effective_from is the head.
	cmu     sync.RWMutex
	changes map[string]*change.Record
}

// New checks cfg and returns a steward.
func New(cfg Config) (*Steward, error) {
	if cfg.Key == nil {
		return nil, errors.New("steward: no key")
	}
	if cfg.Meter == nil {
		return nil, errors.New("steward: no meter")
	}
	for i, b := range cfg.Backends {
		if err := checkBackend(b, cfg.Backends[:i]); err != nil {
			return nil, err
		}
	}
	if cfg.Durable != nil && (cfg.Authorizer != nil || cfg.Journal != nil || cfg.Head != (receipt.Head{})) {
		return nil, errors.New("steward: a steward with a decision journal takes no Authorizer, Journal or Head: the journal is all three")
	}
	sealer, err := receipt.NewSealer(cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("steward: %w", err)
	}
	s := &Steward{
		sealer:   sealer,
		meter:    cfg.Meter,
		backends: append([]Backend(nil), cfg.Backends...),
		auth:     cfg.Authorizer,
		journal:  cfg.Journal,
		archive:  cfg.Archive,
		observe:  cfg.Observer,
		now:      cfg.Now,
		log:      cfg.Logger,
		rand:     cfg.Rand,
		head:     cfg.Head,
		changes:  map[string]*change.Record{},
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.rand == nil {
		s.rand = rand.Reader
	}
	if cfg.Durable != nil {
		s.durable = newDurable(cfg.Durable, s.DID())
		if err := s.durable.replay(s); err != nil {
			return nil, err
		}
		if cfg.Revocations != nil {
			var err error
			cfg.Revocations.Each(func(id receipt.ContentID, at time.Time) {
				if err == nil {
					_, _, err = s.Revoke(id, at)
				}
			})
			if err != nil {
				return nil, err
			}
		}
		s.journal = s.durable
		s.log.Info("steward: journal replayed", "journal", cfg.Durable.Path(), "records", cfg.Durable.Len(),
			"next_receipt", s.head.Next, "unresolved", len(s.durable.unresolvedList()))
	}
	return s, nil
}

// DID is the steward's did:key, the kid of its receipts and the subject
// its grants name.
func (s *Steward) DID() string { return s.sealer.DID() }

// Head is the chain position the next receipt takes.
func (s *Steward) Head() receipt.Head {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.head
}

// Backends returns the registered backends in registration order.
func (s *Steward) Backends() []Backend {
	s.bmu.RLock()
	defer s.bmu.RUnlock()
	return append([]Backend(nil), s.backends...)
}

// backend is the registered backend called name.
func (s *Steward) backend(name string) (Backend, bool) {
	s.bmu.RLock()
	defer s.bmu.RUnlock()
	for _, b := range s.backends {
		if b.Name == name {
			return b, true
		}
	}
	return Backend{}, false
}

// checkBackend refuses a backend that could not be routed to or named on
// a receipt, or whose name is taken.
func checkBackend(b Backend, registered []Backend) error {
	switch {
	case b.Name == "":
		return errors.New("steward: a backend has no name")
	case b.Engine == nil:
		return fmt.Errorf("steward: backend %q has no engine", b.Name)
	case !b.Engine.Fidelity().Valid():
		return fmt.Errorf("steward: backend %q advertises fidelity %d, not F0 … F4", b.Name, b.Engine.Fidelity())
	case b.Engine.Recipe() == "":
		return fmt.Errorf("steward: backend %q names no recipe", b.Name)
	case !utf8.ValidString(b.Name) || !utf8.ValidString(b.Engine.Recipe()):
		// Both go on every receipt, which must hold UTF-8 text only.
		return fmt.Errorf("steward: backend %q or its recipe %q is not valid UTF-8", b.Name, b.Engine.Recipe())
	case strings.ContainsFunc(b.Name, unicode.IsControl):
		// The name opens the route, §4's one-line justification.
		return fmt.Errorf("steward: backend %q has a control character in its name", b.Name)
	}
	for _, r := range registered {
		if r.Name == b.Name {
			return fmt.Errorf("steward: backend %q registered twice", b.Name)
		}
	}
	return nil
}

// AddBackend registers one more backend, last in the routing order (a
// model loaded while the node runs). Serves already routed are not
// affected.
func (s *Steward) AddBackend(b Backend) error {
	s.bmu.Lock()
	defer s.bmu.Unlock()
	if err := checkBackend(b, s.backends); err != nil {
		return err
	}
	s.backends = append(s.backends[:len(s.backends):len(s.backends)], b)
	return nil
}

// RemoveBackend takes a backend out of routing (a model unloaded). Serves
// already routed to it finish on it; it reports whether it was registered.
func (s *Steward) RemoveBackend(name string) bool {
	s.bmu.Lock()
	defer s.bmu.Unlock()
	for i, b := range s.backends {
		if b.Name == name {
			s.backends = append(s.backends[:i:i], s.backends[i+1:]...)
			return true
		}
	}
	return false
}

// ServeOption narrows or extends one serve.
type ServeOption func(*serveOptions)

type serveOptions struct {
	recipe       string
	presentation *grant.Presentation
	promptTokens uint32
	placement    string
}

// ForRecipe restricts routing to the backends running recipe: a request
// that names its model (as the OpenAI binding's "model" does) is weighed
// only against the backends that serve it.
func ForRecipe(recipe string) ServeOption {
	return func(o *serveOptions) { o.recipe = recipe }
}

// WithPresentation rides the serve on a JCP grant (§2.1): the steward
// verifies the presentation for this request, routes only to backends
// whose weights the grant permits, decides and journals the grant before
// the engine runs, and debits the metered joules after.
func WithPresentation(p *grant.Presentation) ServeOption {
	return func(o *serveOptions) { o.presentation = p }
}

// WithPromptTokens gives the prompt payload's length as the caller
// tokenized it. The router prices the larger of it and the request's
// declared prompt_tokens, which a granted request keeps in its identity
// as its body declared it (mesh/1 §2.3) and which must not lower the
// estimate its ceiling is checked against. The candidates record the
// figure priced.
func WithPromptTokens(n uint32) ServeOption {
	return func(o *serveOptions) { o.promptTokens = n }
}

// WithPlacement records how the mesh placed the request on this node
// (node/placement: every host weighed and why each lost, or which peer
// placed it here) after the router's justification in the receipt's
// route: "<justification>; mesh: <placement>". It must be one line of
// UTF-8; a serve whose placement is not is refused as an invalid request.
func WithPlacement(line string) ServeOption {
	return func(o *serveOptions) { o.placement = line }
}

func options(opts []ServeOption) serveOptions {
	var o serveOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// candidates returns the backends a serve with options o may route to, in
// registration order.
func (s *Steward) candidates(o serveOptions) []Backend {
	s.bmu.RLock()
	defer s.bmu.RUnlock()
	if o.recipe == "" {
		return s.backends // never modified in place: Add and Remove copy
	}
	var out []Backend
	for _, b := range s.backends {
		if b.Engine.Recipe() == o.recipe {
			out = append(out, b)
		}
	}
	return out
}

// Route weighs every backend for req without serving it.
func (s *Steward) Route(req receipt.ServeRequest, opts ...ServeOption) (Route, error) {
	if err := req.Validate(); err != nil {
		return Route{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	o := options(opts)
	rt := route(s.candidates(o), &req, o.promptTokens, s.admit(nil))
	if rt.Chosen < 0 {
		return rt, ErrNoAdmissibleBackend
	}
	return rt, nil
}

// Disclose builds the disclosure of one of this steward's receipts (§6.4)
// from the prompt it was served on and the output it produced.
func (s *Steward) Disclose(r *receipt.Receipt, prompt, output []uint32) (receipt.Disclosure, error) {
	return s.sealer.Disclose(r, prompt, output)
}

// Served is a sealed serve.
type Served struct {
	// Receipt is the sealed receipt: struct, core, envelope, content id.
	Receipt *receipt.Sealed
	// Outcome is what the engine reported.
	Outcome engine.Outcome
	// Route is the router's full decision.
	Route Route
	// Output is every token handed to emit, in order; the output
	// commitment is over exactly these.
	Output []uint32
}

// Serve serves req on the prompt payload, streaming tokens to emit (which
// may be nil) as the engine produces them, and returns the sealed receipt.
//
// Any error is a *ServeError. A refusal — invalid request, no admissible
// backend, the authoriser, a meter failure, an engine that refused before
// working, or a failed check after the work (delivered fidelity above
// advertised, weights changed, tokens past max_tokens, an outcome that
// contradicts the output) — returns no Served: nothing is sealed.
//
// A generation that stops early (ctx cancelled, emit failing, the engine
// failing) did real work and spent metered energy, so it is sealed as
// served: tokens_out and tokens_accepted count the tokens emit accepted,
// and the output commitment covers exactly those. Serve then returns the
// Served together with a ServeError wrapping ErrIncomplete and the cause.
// An incomplete decision answered nothing and is not sealed.
//
// A generation the steward stops because one more step would pass the
// request's joule ceiling (see meterServe) is sealed the same way, and a
// grant debited what was metered; it is not a failure, and Serve returns
// the Served with a ServeError wrapping ErrCeilingReached (and not
// ErrIncomplete), so that a caller can answer it as a normal ending.
func (s *Steward) Serve(ctx context.Context, req receipt.ServeRequest, prompt []uint32, emit func(tok uint32) error, opts ...ServeOption) (*Served, error) {
	id, err := req.ID()
	if err != nil {
		return nil, &ServeError{Stage: StageRequest, Err: fmt.Errorf("%w: %w", ErrInvalidRequest, err)}
	}
	o := options(opts)
	// A presentation's proofs are checked before routing: a ModelIn
	// caveat decides which backends are admissible.
	var verified *grant.Verified
	if o.presentation != nil {
		if verified, err = s.verify(o.presentation, id); err != nil {
			s.log.Info("serve refused", "request", id, "stage", StageAuthorise, "err", err)
			return nil, &ServeError{Stage: StageAuthorise, RequestID: id, Err: err}
		}
	}
	if p := o.placement; p != "" && (!utf8.ValidString(p) || strings.ContainsAny(p, "\r\n")) {
		return nil, &ServeError{Stage: StageRequest, RequestID: id, Err: fmt.Errorf("%w: the mesh placement is not one line of UTF-8", ErrInvalidRequest)}
	}
	backends := s.candidates(o)
	rt := route(backends, &req, o.promptTokens, s.admit(verified))
	if rt.Chosen >= 0 && o.placement != "" {
		rt.Justification += "; mesh: " + o.placement
	}
	fail := func(stage Stage, err error) error {
		level := slog.LevelInfo
		if stage == StageCheck || stage == StageMeter || stage == StageJournal {
			level = slog.LevelWarn // an engine, meter or journal misbehaving
		}
		s.log.Log(ctx, level, "serve refused", "request", id, "stage", stage, "err", err)
		return &ServeError{Stage: stage, RequestID: id, Route: &rt, Err: err}
	}
	if rt.Chosen < 0 {
		return nil, fail(StageRoute, ErrNoAdmissibleBackend)
	}
	b, cand := backends[rt.Chosen], rt.Candidates[rt.Chosen]
	weights := namedWeights(b.Engine)
	if err := s.gate(b.Name, weights); err != nil {
		return nil, fail(StageCheck, err) // refused before any grant is decided or work runs (§6.5)
	}

	var debit Debit
	az := Authorization{RequestID: id, Request: req, Backend: b.Name, Recipe: cand.Recipe, Weights: weights, Presentation: o.presentation}
	switch {
	case verified != nil: // verified only with a decision journal
		az.At = s.now()
		if debit, err = s.durable.authorize(verified, az); err != nil {
			return nil, fail(StageAuthorise, err)
		}
	case s.auth != nil:
		az.At = s.now()
		if debit, err = s.auth.Authorize(ctx, az); err != nil {
			return nil, fail(StageAuthorise, err)
		}
	}

	run, err := s.meterServe(ctx, b.Engine, req, prompt, emit, debit)
	if err == nil && run.out.Split != nil {
		// A split serve's energy is every stage's: the grant is debited,
		// and the receipt sealed with, the total.
		err = s.addStages(&run, id, weights)
	}
	if err != nil {
		if debit != nil {
			// No work ran when the meter would not open. When it would not
			// close, the engine ran and its energy is unknown: the grant is
			// debited the ceiling its decision admitted, never less.
			e := hw.Estimated(0)
			if run.ran {
				e = hw.Estimated(req.JouleCeilingUJ)
			}
			if _, derr := debit.Settle(e); derr != nil {
				err = errors.Join(err, fmt.Errorf("steward: debit: %w", derr))
			}
		}
		return nil, fail(StageMeter, err)
	}
	var breach string
	if debit != nil {
		// The work has run (or been attempted under the meter), so the
		// grant is debited whatever the checks below decide.
		if breach, err = debit.Settle(run.energy); err != nil {
			return nil, fail(StageDebit, err)
		}
	}
	if errors.Is(run.err, engine.ErrRefused) && len(run.tokens) == 0 {
		return nil, fail(StageEngine, run.err)
	}
	if run.overran {
		return nil, fail(StageCheck, fmt.Errorf("%w (%d)", ErrMaxTokens, len(run.tokens)))
	}
	if d := run.out.Delivered; d != nil && *d > cand.Fidelity {
		return nil, fail(StageCheck, fmt.Errorf("%w: %s delivered %v, advertised %v", ErrFidelityOverclaim, b.Name, *d, cand.Fidelity))
	}
	if after := namedWeights(b.Engine); !sameWeights(weights, after) {
		return nil, fail(StageCheck, fmt.Errorf("%w: %s named %s before and %s after", ErrWeightsChanged, b.Name, describe(weights), describe(after)))
	}
	complete := run.err == nil
	if !complete && req.IsDecision() {
		return nil, fail(StageEngine, fmt.Errorf("%w: %w", ErrIncomplete, run.err))
	}
	rec, err := buildReceipt(id, &req, b, cand, rt.Justification, weights, &run)
	if err != nil {
		return nil, fail(StageCheck, err)
	}
	rec.CutShort = run.cutShort(ctx)
	if debit != nil {
		gid := debit.GrantID()
		rec.GrantID, rec.GrantBreach = &gid, breach
	}
	var payload receipt.ContentID
	if !req.IsDecision() {
		payload = receipt.PayloadDigest(prompt)
	}
	sealed, stage, err := s.sealAndRecord(rec, payload, run.tokens)
	if err != nil {
		return nil, fail(stage, err)
	}
	served := &Served{Receipt: sealed, Outcome: run.out, Route: rt, Output: run.tokens}
	s.log.Debug("served", "request", id, "backend", b.Name, "sequence", sealed.Receipt.Sequence,
		"tokens", len(run.tokens), "energy", run.energy.String())
	if run.ceiling != nil {
		s.log.Info("serve stopped at its joule ceiling", "request", id, "backend", b.Name, "tokens", len(run.tokens),
			"energy", run.energy.String(), "ceiling_uj", req.JouleCeilingUJ)
		return served, &ServeError{Stage: StageMeter, RequestID: id, Route: &rt, Err: run.ceiling}
	}
	if run.limited {
		s.log.Debug("serve stopped at its client's time limit", "request", id, "tokens", len(run.tokens))
		return served, &ServeError{Stage: StageEngine, RequestID: id, Route: &rt, Err: ErrLimit}
	}
	if !complete {
		return served, &ServeError{Stage: StageEngine, RequestID: id, Route: &rt, Err: fmt.Errorf("%w: %w", ErrIncomplete, run.err)}
	}
	return served, nil
}

// engineRun is one metered engine call.
type engineRun struct {
	ran     bool // the meter opened and the engine was called
	out     engine.Outcome
	err     error    // the engine's, or the ceiling's stop
	tokens  []uint32 // every token emit accepted
	overran bool     // the engine tried to emit past its limit
	ceiling error    // set when the steward stopped the engine at the joule ceiling
	emitErr bool     // emit refused a token: the client stopped taking them
	limited bool     // emit refused a token with ErrLimit: the client's time limit
	energy  hw.Energy
	stages  []receipt.SignedStageReport // a split serve's reports, the head's first; energy is then their total
}

// addStages makes a split serve's run whole: the head's own part, the
// span just metered, is signed as stage 0's report under the steward key,
// the other stages' reports follow it, and the run's energy becomes their
// total (receipt.SumEnergy: graded as the weakest part), once the set
// verifies as a receipt's must (receipt.VerifyStages).
func (s *Steward) addStages(run *engineRun, id receipt.ContentID, weights *receipt.Weights) error {
	sp := run.out.Split
	if weights == nil {
		return fmt.Errorf("%w: a split serve's engine names no weights, which its stage reports must", ErrMeter)
	}
	head, err := s.sealer.SignStageReport(receipt.StageReport{RequestID: id, Weights: weights.Digest,
		Lo: sp.Lo, Hi: sp.Hi, Tokens: sp.Tokens, Energy: run.energy})
	if err != nil {
		return fmt.Errorf("%w: stage 0's report: %w", ErrMeter, err)
	}
	stages := append([]receipt.SignedStageReport{head}, sp.Reports...)
	parts := make([]hw.Energy, len(stages))
	for i, st := range stages {
		parts[i] = st.Energy
	}
	total, err := receipt.SumEnergy(parts...)
	if err == nil {
		// Checked before the grant is debited: a report missing or not
		// holding leaves the serve's energy unknown.
		err = receipt.VerifyStages(id, weights, s.sealer.DID(), stages, total)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMeter, err)
	}
	run.stages, run.energy = stages, total
	return nil
}

// cutShort is why a run that did not end by itself ended, as its receipt
// says it (receipt.CutShort); "" for one that did.
func (run *engineRun) cutShort(ctx context.Context) string {
	switch {
	case run.err == nil:
		return ""
	case run.ceiling != nil:
		return receipt.CutCeiling
	case run.limited:
		return receipt.CutLimit
	case run.emitErr || ctx.Err() != nil:
		return receipt.CutClient
	}
	return receipt.CutEngine
}

// ceilingWatch decides, token by token, whether one more decode step
// could take a serve's metered energy past its joule ceiling.
type ceilingWatch struct {
	ceiling uint64
	step    uint64 // the dearest step seen; before one is, the engine's modelled µJ/token
	last    uint64 // the energy when the previous token came
	seen    int
}

// passes takes the span's energy as a token comes and reports whether that
// energy and one more step would pass the ceiling. A step is the energy
// between two tokens, the largest seen so far (an engine holding tokens
// back emits several at once, so an average would understate it); the
// first token's energy includes the prompt's evaluation and is no guide
// to a step.
func (w *ceilingWatch) passes(soFar uint64) bool {
	soFar = max(soFar, w.last) // energy spent is not given back by a noisy reading
	if w.seen > 0 {
		w.step = max(w.step, soFar-w.last)
	}
	w.last = soFar
	w.seen++
	next, carry := bits.Add64(soFar, w.step, 0)
	return carry != 0 || next > w.ceiling
}

// meterServe opens the meter immediately before the engine runs and
// closes it as soon as it returns (§3.3: the figure covers the served
// span only). Only meter failures are returned as errors; the engine's
// outcome is in the run. An engine that panics has still done metered
// work: debit, when set, is settled with it before the panic goes on.
//
// The request's joule ceiling is a hard budget (§3.1), and the router's
// estimate that admitted it is a model. So where the span can be read
// while open (hw.LiveSpan), every token emitted is followed by a reading,
// and the engine is stopped, with the token just emitted kept, as soon as
// the energy so far and one more step would pass the ceiling: a serve
// overspends its ceiling by at most one step misjudged. (The first reading
// comes with the first token, after the prompt's evaluation, which only
// the router's estimate bounds.) The stop is recorded in run.ceiling.
func (s *Steward) meterServe(ctx context.Context, e engine.Engine, req receipt.ServeRequest, prompt []uint32, emit func(uint32) error, debit Debit) (run engineRun, err error) {
	limit := req.MaxTokens
	if req.IsDecision() {
		limit = 0 // a decision emits no tokens (§3.6)
	}
	var live hw.LiveSpan // set once the span opens, before the engine runs
	watch := ceilingWatch{ceiling: req.JouleCeilingUJ, step: e.UJPerToken()}
	run.tokens = make([]uint32, 0, min(limit, 4096))
	count := func(tok uint32) error {
		if run.ceiling != nil {
			return run.ceiling // the engine went on after being stopped
		}
		if uint32(len(run.tokens)) >= limit {
			run.overran = true
			return ErrMaxTokens
		}
		if emit != nil {
			if err := emit(tok); err != nil {
				run.limited = errors.Is(err, ErrLimit)
				run.emitErr = !run.limited
				return err
			}
		}
		run.tokens = append(run.tokens, tok)
		// The last token the request allows is followed by no step.
		if live != nil && uint32(len(run.tokens)) < limit {
			if soFar := live.SoFarUJ(); watch.passes(soFar) {
				run.ceiling = fmt.Errorf("%w: %d uJ metered after %d tokens, and a step costs up to %d uJ; the ceiling is %d uJ",
					ErrCeilingReached, soFar, len(run.tokens), watch.step, req.JouleCeilingUJ)
				return run.ceiling
			}
		}
		return nil
	}

	span, work, err := s.openSpan(e)
	if err != nil {
		return run, fmt.Errorf("%w: open %s: %w", ErrMeter, s.meter.Name(), err)
	}
	if work != nil {
		ctx = hw.WithWork(ctx, work)
	}
	live, _ = span.(hw.LiveSpan)
	run.ran = true
	func() {
		defer func() {
			if p := recover(); p != nil {
				// The span ends with the engine, even a panicking one, and
				// the grant is debited what it spent (the ceiling if the
				// meter cannot say), rather than held until a restart
				// finds the serve unresolved.
				energy, cerr := span.Close()
				if debit != nil {
					if cerr != nil {
						energy = hw.Estimated(req.JouleCeilingUJ)
					}
					if _, derr := debit.Settle(energy); derr != nil {
						s.log.Warn("the debit of a serve whose engine panicked could not be recorded", "err", derr)
					}
				}
				panic(p)
			}
		}()
		run.out, run.err = e.Serve(ctx, req, prompt, count)
	}()
	if run.ceiling != nil {
		run.err = run.ceiling // whatever the engine made of the stop
	}
	if run.energy, err = span.Close(); err != nil {
		return run, fmt.Errorf("%w: close %s: %w", ErrMeter, s.meter.Name(), err)
	}
	return run, nil
}

// openSpan opens the meter for a serve on e, telling a meter that can use
// it which devices e runs on: the counters chosen at start-up may not
// cover a device the meter did not see (CUDA with NVML missing), and a
// part a serve does not use need not be live for its figure (§3.3). For
// an engine that reports its serves' work, a meter that can split the
// energy of overlapping serves by it opens a span the engine reports to
// (the returned recorder; nil otherwise).
func (s *Steward) openSpan(e engine.Engine) (hw.Span, hw.WorkRecorder, error) {
	if m, ok := s.meter.(hw.WorkMeter); ok && engine.ReportsWork(e) {
		span, err := m.OpenWork(engine.DevicesOf(e))
		if err != nil {
			return nil, nil, err
		}
		return span, span, nil
	}
	if m, ok := s.meter.(hw.DeviceMeter); ok {
		span, err := m.OpenFor(engine.DevicesOf(e))
		return span, nil, err
	}
	span, err := s.meter.Open()
	return span, nil, err
}

// buildReceipt assembles the unsealed receipt, checking the engine's
// outcome against what it emitted.
func buildReceipt(id receipt.ContentID, req *receipt.ServeRequest, b Backend, cand RouteCandidate, justification string, weights *receipt.Weights, run *engineRun) (receipt.Receipt, error) {
	out, n := run.out, uint32(len(run.tokens))
	rec := receipt.Receipt{
		RequestID:      id,
		Backend:        b.Name,
		Recipe:         cand.Recipe,
		Weights:        weights,
		Route:          justification,
		TokensIn:       out.TokensIn,
		TokensOut:      out.TokensOut,
		TokensAccepted: out.TokensAccepted,
		CacheHitTokens: out.CacheHitTokens,
		SpecProposed:   out.SpecProposed,
		SpecAccepted:   out.SpecAccepted,
		FidelityFloor:  req.FidelityFloor,
		Energy:         run.energy,
		Stages:         run.stages,
	}
	if run.err == nil {
		switch {
		case out.TokensOut != n:
			return rec, fmt.Errorf("%w: tokens_out %d, emitted %d", ErrBadOutcome, out.TokensOut, n)
		case out.TokensAccepted > out.TokensOut:
			return rec, fmt.Errorf("%w: tokens_accepted %d above tokens_out %d", ErrBadOutcome, out.TokensAccepted, out.TokensOut)
		case out.CacheHitTokens > out.TokensOut:
			return rec, fmt.Errorf("%w: cache_hit_tokens %d above tokens_out %d", ErrBadOutcome, out.CacheHitTokens, out.TokensOut)
		case out.SpecAccepted > out.SpecProposed:
			return rec, fmt.Errorf("%w: spec_accepted %d above spec_proposed %d", ErrBadOutcome, out.SpecAccepted, out.SpecProposed)
		}
	} else {
		// Served as far as it went: every token the client was handed
		// counts as emitted and accepted, and the engine's partial
		// counters are held to that.
		rec.TokensOut, rec.TokensAccepted = n, n
		rec.CacheHitTokens = min(out.CacheHitTokens, n)
		rec.SpecAccepted = min(out.SpecAccepted, out.SpecProposed)
	}
	if d := out.Delivered; d != nil {
		// §3.2.1: fidelity_met from the delivered level, both levels on
		// the receipt.
		rec.Fidelity = &receipt.FidelityReport{Advertised: cand.Fidelity, Delivered: *d}
		rec.FidelityMet = *d >= req.FidelityFloor
	} else {
		rec.FidelityMet = cand.Fidelity >= req.FidelityFloor
	}
	if ts, ok := b.Engine.(engine.TrainingSource); ok {
		if t, ok := ts.Training(); ok {
			rec.Training = &t
		}
	}
	if d := req.Decision; d != nil {
		rec.Decision = &receipt.DecisionFigures{QuestionsAnswered: d.Questions, OptionsScored: d.OptionsScored, SchemaTokens: d.SchemaTokens}
	}
	return rec, nil
}

// sealAndRecord draws the nonce, commits to the output (a generation's,
// when payload is set), stamps the chain position, seals, journals and
// advances the chain, all under one lock so that sequence numbers follow
// the journal's order. On failure the chain stays where it was.
func (s *Steward) sealAndRecord(rec receipt.Receipt, payload receipt.ContentID, output []uint32) (*receipt.Sealed, Stage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := io.ReadFull(s.rand, rec.Nonce[:]); err != nil {
		return nil, StageSeal, fmt.Errorf("steward: nonce: %w", err)
	}
	if rec.Decision == nil {
		c := receipt.Commit(s.sealer.Opening(rec.RequestID, rec.Nonce), rec.RequestID, payload, output)
		rec.OutputCommitment = &c
	}
	if err := s.gate(rec.Backend, rec.Weights); err != nil {
		return nil, StageCheck, err
	}
	s.head.Stamp(&rec)
	sealed, err := s.sealer.Seal(rec)
	if err != nil {
		return nil, StageSeal, err
	}
	if s.archive != nil {
		if err := s.archive.Archive(sealed); err != nil {
			return nil, StageJournal, fmt.Errorf("%w: the receipt log could not keep it, so the receipt is withheld: %w", ErrJournal, err)
		}
	}
	if s.journal != nil {
		if err := s.journal.Sealed(sealed); err != nil {
			return nil, StageJournal, fmt.Errorf("%w: the receipt is withheld: %w", ErrJournal, err)
		}
	}
	s.head = s.head.Advance(sealed)
	if s.observe != nil {
		s.observe.ObserveSealed(sealed)
	}
	return sealed, "", nil
}

func namedWeights(e engine.Engine) *receipt.Weights {
	if w, ok := e.Weights(); ok {
		return &w
	}
	return nil
}

func sameWeights(a, b *receipt.Weights) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

func describe(w *receipt.Weights) string {
	if w == nil {
		return "no weights"
	}
	return fmt.Sprintf("%s (%s)", w.Digest, w.Precision)
}
