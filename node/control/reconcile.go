package control

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// Model lifecycle states, as acks and status report them.
const (
	StateLoading   = "loading"
	StateLoaded    = "loaded"
	StateRetrying  = "retrying" // an ensured model failed to load and waits to try again
	StateUnloading = "unloading"
	StateUnloaded  = "unloaded"
	StateDraining  = "draining"
	StateFailed    = "failed"
)

// ErrUnknownModel is what a Runtime wraps for a model it neither holds on
// disk nor has loaded.
var ErrUnknownModel = errors.New("unknown model")

// Runtime is the node's side of a Reconciler: the models it can load and
// the work they admit.
type Runtime interface {
	// Resolve names the model ref refers to (by canonical ref or
	// instance id), with its instance id when loaded. A model the node
	// does not have fails with ErrUnknownModel.
	Resolve(ref *nodev1.OwnerControlModelRef) (Model, error)
	// Load loads a model and returns its instance id once it serves.
	// ctx ends if the intent is superseded.
	Load(ctx context.Context, canonicalRef, profile string) (instanceID string, err error)
	// Unload stops an instance and frees what it holds.
	Unload(ctx context.Context, instanceID string) error
	// Drain makes an instance refuse new work and returns a handle on
	// the work it has already admitted.
	Drain(instanceID string) (Drain, error)
}

// Model is a resolved model reference.
type Model struct {
	CanonicalRef string
	InstanceID   string // empty when not loaded
}

// Drain is an instance that refuses new work while its admitted work
// finishes.
type Drain interface {
	// Idle is closed once no admitted work remains.
	Idle() <-chan struct{}
	// Cancel force-cancels the admitted work.
	Cancel()
	// Resume admits work again: the drain was called off.
	Resume()
}

// ReconcilerConfig tunes a Reconciler. Zero fields take the defaults
// shown.
type ReconcilerConfig struct {
	DrainTimeout    time.Duration // a drain's deadline when the request names none (30s)
	DrainTimeoutMax time.Duration // the most a request may ask for (5m)
	CancelGrace     time.Duration // after a forced cancel, how long work gets to stop before the unload (5s)
	RetryMin        time.Duration // an ensured model's first retry delay (1s)
	RetryMax        time.Duration // ... doubling up to this (1m)
	EnsureCheck     time.Duration // how often an ensured model is checked to still be loaded (30s)
	MaxModels       int           // models with intents at once (256)
	// IntentIDs names intents (random "intent-…" ids by default).
	IntentIDs func() string
	Logger    *slog.Logger
}

// Reconciler turns lifecycle intents into Runtime calls, one model at a
// time in the order the intents arrive: a new intent for a model
// supersedes the one before, cancelling what it was doing. Intents last
// for the session; none is persisted. Run it with Serve.
type Reconciler struct {
	rt  Runtime
	cfg ReconcilerConfig
	log *slog.Logger

	mu     sync.Mutex
	base   context.Context // nil until Serve
	closed bool
	wg     sync.WaitGroup
	byRef  map[string]*slot
}

// slot is one model's intents and state; r.mu guards it.
type slot struct {
	ref      string
	intent   Intent
	intentID string
	gen      uint64 // bumped by each intent
	state    string
	lastErr  error
	cancelOp context.CancelFunc // cancels the operation in progress
	wake     chan struct{}
}

// NewReconciler builds a reconciler over rt.
func NewReconciler(rt Runtime, cfg ReconcilerConfig) *Reconciler {
	defaultDurations(
		durationDefault{&cfg.DrainTimeout, 30 * time.Second},
		durationDefault{&cfg.DrainTimeoutMax, 5 * time.Minute},
		durationDefault{&cfg.CancelGrace, 5 * time.Second},
		durationDefault{&cfg.RetryMin, time.Second},
		durationDefault{&cfg.RetryMax, time.Minute},
		durationDefault{&cfg.EnsureCheck, 30 * time.Second},
	)
	cfg.RetryMax = max(cfg.RetryMax, cfg.RetryMin)
	if cfg.MaxModels <= 0 {
		cfg.MaxModels = 256
	}
	if cfg.IntentIDs == nil {
		cfg.IntentIDs = randomIntentID
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Reconciler{rt: rt, cfg: cfg, log: cfg.Logger.With("component", "reconciler"), byRef: map[string]*slot{}}
}

func randomIntentID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "intent-" + hex.EncodeToString(b[:])
}

// Serve runs the reconciler until ctx ends, then cancels every operation
// and returns once all have stopped.
func (r *Reconciler) Serve(ctx context.Context) error {
	r.mu.Lock()
	if r.base != nil || r.closed {
		r.mu.Unlock()
		return errors.New("control: reconciler already served")
	}
	r.base = ctx
	r.mu.Unlock()
	<-ctx.Done()
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.wg.Wait()
	return nil
}

// Serving reports whether Serve is running, so intents are taken.
func (r *Reconciler) Serving() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.base != nil && !r.closed
}

// Submit implements Lifecycle.
func (r *Reconciler) Submit(ctx context.Context, in Intent) (Ack, error) {
	m, err := r.rt.Resolve(in.Model)
	if err != nil {
		if errors.Is(err, ErrUnknownModel) {
			return Ack{}, errorf(ErrBadRequest.Code, "%v", err)
		}
		return Ack{}, errorf(ErrUnavailable.Code, "resolving the model: %v", err)
	}
	if in.Kind == IntentDrain {
		// The default first, then the cap: a default above the cap is
		// capped too.
		if in.DrainTimeout <= 0 {
			in.DrainTimeout = r.cfg.DrainTimeout
		}
		in.DrainTimeout = min(in.DrainTimeout, r.cfg.DrainTimeoutMax)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.base == nil || r.closed:
		return Ack{}, errorf(ErrUnavailable.Code, "the reconciler is not running")
	case ctx.Err() != nil:
		return Ack{}, errorf(ErrUnavailable.Code, "%v", ctx.Err())
	}
	sl := r.byRef[m.CanonicalRef]
	if sl == nil {
		if len(r.byRef) >= r.cfg.MaxModels {
			return Ack{}, errorf(ErrUnavailable.Code, "intents for %d models are held, the limit", r.cfg.MaxModels)
		}
		sl = &slot{ref: m.CanonicalRef, state: StateUnloaded, wake: make(chan struct{}, 1)}
		if m.InstanceID != "" {
			sl.state = StateLoaded
		}
		r.byRef[m.CanonicalRef] = sl
		r.wg.Add(1)
		go r.work(sl)
	}
	sl.gen++
	sl.intent, sl.intentID = in, r.cfg.IntentIDs()
	if sl.cancelOp != nil {
		sl.cancelOp() // supersede what the slot is doing
	}
	select {
	case sl.wake <- struct{}{}:
	default:
	}
	loaded := m.InstanceID != ""
	state := acceptedState(in.Kind, loaded)
	r.log.Debug("intent accepted", "intent", sl.intentID, "kind", in.Kind.String(), "state", state)
	target := &nodev1.OwnerControlModelRef{CanonicalModelRef: m.CanonicalRef}
	if loaded {
		target.InstanceId = &m.InstanceID
	}
	return Ack{IntentID: sl.intentID, State: state, Target: target}, nil
}

// acceptedState is what an intent sets in motion.
func acceptedState(k IntentKind, loaded bool) string {
	switch {
	case (k == IntentLoad || k == IntentEnsure) && loaded:
		return StateLoaded
	case k == IntentLoad || k == IntentEnsure:
		return StateLoading
	case !loaded:
		return StateUnloaded
	case k == IntentDrain:
		return StateDraining
	}
	return StateUnloading
}

// ModelState is one model's lifecycle as the reconciler sees it.
type ModelState struct {
	CanonicalRef string
	State        string
	IntentID     string
	Intent       IntentKind
	Err          error // why the last operation failed, if it did
}

// States lists the models with intents, by canonical ref.
func (r *Reconciler) States() []ModelState {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ModelState, 0, len(r.byRef))
	for _, sl := range r.byRef {
		out = append(out, ModelState{CanonicalRef: sl.ref, State: sl.state, IntentID: sl.intentID, Intent: sl.intent.Kind, Err: sl.lastErr})
	}
	slices.SortFunc(out, func(a, b ModelState) int { return strings.Compare(a.CanonicalRef, b.CanonicalRef) })
	return out
}

// work carries out a slot's latest intent each time it changes, until the
// reconciler stops.
func (r *Reconciler) work(sl *slot) {
	defer r.wg.Done()
	var done uint64
	for {
		r.mu.Lock()
		base, gen, in, id := r.base, sl.gen, sl.intent, sl.intentID
		if gen == done {
			r.mu.Unlock()
			select {
			case <-sl.wake:
				continue
			case <-base.Done():
				return
			}
		}
		ctx, cancel := context.WithCancel(base)
		sl.cancelOp = cancel
		r.mu.Unlock()

		op := &operation{r: r, sl: sl, gen: gen, id: id, ctx: ctx}
		op.run(in)
		cancel()
		r.log.Debug("intent done", "intent", id, "kind", in.Kind.String(), "superseded", ctx.Err() != nil)
		done = gen
		if base.Err() != nil {
			return
		}
	}
}

// operation is one intent being carried out. Its state changes count only
// while it is the slot's latest intent.
type operation struct {
	r   *Reconciler
	sl  *slot
	gen uint64
	id  string
	ctx context.Context
}

func (op *operation) set(state string, err error) {
	op.r.mu.Lock()
	defer op.r.mu.Unlock()
	if op.sl.gen == op.gen {
		op.sl.state, op.sl.lastErr = state, err
	}
}

// instance is the model's loaded instance, or "".
func (op *operation) instance() (string, error) {
	m, err := op.r.rt.Resolve(&nodev1.OwnerControlModelRef{CanonicalModelRef: op.sl.ref})
	return m.InstanceID, err
}

// sleep waits d, reporting false if the operation was superseded first.
func (op *operation) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-op.ctx.Done():
		return false
	}
}

func (op *operation) run(in Intent) {
	switch in.Kind {
	case IntentLoad:
		op.load(in.Profile)
	case IntentEnsure:
		op.ensure(in.Profile)
	case IntentUnload:
		if inst, err := op.instance(); err != nil || inst != "" {
			op.unload(inst, err)
		} else {
			op.set(StateUnloaded, nil)
		}
	case IntentDrain:
		op.drain(in.DrainTimeout)
	}
}

// load loads the model once; a failure is final.
func (op *operation) load(profile string) bool {
	inst, err := op.instance()
	if err == nil && inst != "" {
		op.set(StateLoaded, nil)
		return true
	}
	op.set(StateLoading, nil)
	if err == nil {
		_, err = op.r.rt.Load(op.ctx, op.sl.ref, profile)
	}
	if op.ctx.Err() != nil {
		return false // superseded: the next intent sets the state
	}
	if err != nil {
		op.set(StateFailed, err)
		return false
	}
	op.set(StateLoaded, nil)
	return true
}

// ensure keeps the model loaded for the session: failed loads are retried
// with a doubling delay, and a loaded model is checked now and then in
// case it went away.
func (op *operation) ensure(profile string) {
	delay := op.r.cfg.RetryMin
	for op.ctx.Err() == nil {
		if op.load(profile) {
			delay = op.r.cfg.RetryMin
			if !op.sleep(op.r.cfg.EnsureCheck) {
				return
			}
			continue
		}
		if op.ctx.Err() != nil {
			return
		}
		op.r.mu.Lock()
		err := op.sl.lastErr
		op.r.mu.Unlock()
		op.set(StateRetrying, err)
		if !op.sleep(delay) {
			return
		}
		delay = min(2*delay, op.r.cfg.RetryMax)
	}
}

func (op *operation) unload(inst string, err error) {
	op.set(StateUnloading, nil)
	if err == nil {
		err = op.r.rt.Unload(op.ctx, inst)
	}
	switch {
	case op.ctx.Err() != nil:
	case err != nil:
		op.set(StateFailed, err)
	default:
		op.set(StateUnloaded, nil)
	}
}

// drain stops new work, lets admitted work finish until the deadline,
// force-cancels what remains, and unloads.
func (op *operation) drain(deadline time.Duration) {
	inst, err := op.instance()
	if err == nil && inst == "" {
		op.set(StateUnloaded, nil)
		return
	}
	var d Drain
	if err == nil {
		d, err = op.r.rt.Drain(inst)
	}
	if err != nil {
		op.set(StateFailed, fmt.Errorf("drain: %w", err))
		return
	}
	op.set(StateDraining, nil)
	t := time.NewTimer(deadline)
	defer t.Stop()
	select {
	case <-d.Idle():
	case <-op.ctx.Done():
		d.Resume() // called off: the next intent decides
		return
	case <-t.C:
		d.Cancel()
		grace := time.NewTimer(op.r.cfg.CancelGrace)
		defer grace.Stop()
		select {
		case <-d.Idle():
		case <-grace.C:
			op.r.log.Warn("drained work did not stop after cancellation; unloading anyway", "intent", op.id)
		case <-op.ctx.Done():
			d.Resume() // called off, as above
			return
		}
	}
	op.unload(inst, nil)
}
