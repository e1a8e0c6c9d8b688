package api

import (
	"context"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
)

// llama-server's GET /slots: each generation slot of a model and what
// runs in it, for the monitors and web UIs that poll it (which slot is
// busy, on which task, how far its answer has come). Unlike
// llama-server's, a slot shows no prompt or generated text: the node's
// other views of its requests (the live request log, the console) hold
// no text either, and a monitor needs none. Not served to mesh peers.
//
// POST /slots/{id} (llama-server's save, restore and erase of a slot's
// cache) and POST /props (its change of the server's settings, which it
// too refuses unless started with --props) are refused with 501: a
// node keeps no per-slot state to save, and its settings are its
// configuration file's.

// slotUse is a running generation as GET /slots shows it: its slot, the
// task it was numbered, what its request asked (set by describe before
// it starts) and its progress, counted as its tokens come (Progress).
type slotUse struct {
	id   int
	task int64 // -1 until the server numbers the task

	// Set under the limiter's lock: by describe, once, for a generation
	// (an embedding or a rerank holds a slot with none of them).
	params       *llamaSettings
	promptTokens int
	bound        int // the most tokens it may answer with; -1: not known
	speculative  bool

	decoded atomic.Int64
	newLine atomic.Bool
}

// progressKey carries a generation's progress report to its model's
// Generate.
type progressKey struct{}

// WithProgress returns ctx carrying f, which the Generate of a Prepared
// given ctx calls with each output token's text as the token is decoded
// (Progress).
func WithProgress(ctx context.Context, f func(text string)) context.Context {
	return context.WithValue(ctx, progressKey{}, f)
}

// Progress returns what a Prepared's Generate calls with each output
// token's text as the token is decoded, so that GET /slots can tell how
// far the answer has come: ctx's WithProgress, or a no-op.
func Progress(ctx context.Context) func(text string) {
	if f, _ := ctx.Value(progressKey{}).(func(string)); f != nil {
		return f
	}
	return func(string) {}
}

// progress counts a token of u's answer.
func (u *slotUse) progress(text string) {
	u.decoded.Add(1)
	if strings.Contains(text, "\n") {
		u.newLine.Store(true)
	}
}

// BoundedPrepared is a Prepared that knows the most tokens its answer
// may hold, its request's bound once the model's default and context
// have applied (GET /slots' n_remain).
type BoundedPrepared interface {
	Prepared
	MaxTokens() int
}

// SpeculatingModel is a Model that decodes with a speculative draft by
// default (GET /slots' "speculative").
type SpeculatingModel interface {
	Speculates() bool
}

// numberTask gives t's slot the next task id, as llama-server numbers
// the tasks its slots take.
func (s *Server) numberTask(t *ticket) {
	id := s.tasks.Add(1) - 1
	t.l.mu.Lock()
	defer t.l.mu.Unlock()
	if t.use != nil {
		t.use.task = id
	}
}

// describe records the request g (served as m, prepared as p, streamed
// or not) in t's slot, and returns ctx carrying the slot for Progress.
func (t *ticket) describe(ctx context.Context, m Model, g *Generation, p Prepared, stream bool) context.Context {
	if t.use == nil {
		return ctx
	}
	bound := -1
	if bp, ok := p.(BoundedPrepared); ok {
		bound = bp.MaxTokens()
	} else if g.MaxTokens > 0 && g.MaxTokens < math.MaxInt32 {
		bound = g.MaxTokens
	}
	st := llamaSettingsOf(g, &llamaCompletionRequest{Stream: stream})
	// The bounds the request set: a zero is one it did not (its n_max 0
	// turned speculation off, which speculative says).
	lim := g.SpecLimits
	if lim.Max > 0 {
		st.SpecNMax = &lim.Max
	}
	if lim.Min > 0 {
		st.SpecNMin = &lim.Min
	}
	if lim.PMin > 0 {
		st.SpecPMin = &lim.PMin
	}
	sm, ok := m.(SpeculatingModel)
	speculative := (ok && sm.Speculates() || g.Prediction != "") && (g.Speculative == nil || *g.Speculative)
	t.l.mu.Lock()
	defer t.l.mu.Unlock()
	t.use.params, t.use.promptTokens, t.use.bound, t.use.speculative = &st, p.PromptTokens(), bound, speculative
	return WithProgress(ctx, t.use.progress)
}

// llamaSlot is one slot of GET /slots.
type llamaSlot struct {
	ID     int   `json:"id"`
	IDTask int64 `json:"id_task"` // -1 while idle
	NCtx   int   `json:"n_ctx"`
	// Speculative: an idle slot's serves speculate by default (the
	// model has a draft), a busy one's serve may speculate.
	Speculative   bool           `json:"speculative"`
	IsProcessing  bool           `json:"is_processing"`
	NPromptTokens int            `json:"n_prompt_tokens"`
	Params        *llamaSettings `json:"params"` // null while idle, and for a slot held by no generation
	NextToken     []slotNext     `json:"next_token"`
}

// slotNext is a slot's progress through its answer.
type slotNext struct {
	HasNextToken bool   `json:"has_next_token"`
	HasNewLine   bool   `json:"has_new_line"`
	NRemain      int    `json:"n_remain"` // -1: no bound but the context
	NDecoded     int    `json:"n_decoded"`
	StoppingWord string `json:"stopping_word"`
}

// handleSlots is GET /slots: the slots of ?model= (else the node's one
// model), busy or idle; with ?fail_on_no_slot set, 503 where none is
// idle.
func (s *Server) handleSlots(w http.ResponseWriter, r *http.Request) {
	name, err := s.queryModel(r)
	if err != nil {
		writeError(w, err)
		return
	}
	m, ok := s.registry.Local(name)
	if !ok {
		writeError(w, Errorf(http.StatusNotFound, "invalid_request_error", "model_not_found",
			"model %q is not served on this node: GET /slots shows this node's own slots", name))
		return
	}
	nCtx := 0
	if d, ok := m.(DescribedModel); ok {
		nCtx = d.Describe().Context
	}
	sm, speculates := m.(SpeculatingModel)
	speculates = speculates && sm.Speculates()
	s.mu.Lock()
	l := s.limits[name]
	s.mu.Unlock()
	n := s.concurrency(m)
	var held []slotView
	if l != nil {
		held = l.view()
		n = len(held)
	}
	slots := make([]llamaSlot, n)
	idle := 0
	for id := range slots {
		sl := llamaSlot{ID: id, IDTask: -1, NCtx: nCtx, Speculative: speculates, NextToken: []slotNext{{NRemain: -1}}}
		if id < len(held) && held[id].busy {
			v := held[id]
			sl.IDTask, sl.IsProcessing, sl.Speculative, sl.NPromptTokens, sl.Params = v.task, true, v.speculative, v.promptTokens, v.params
			next := &sl.NextToken[0]
			next.HasNextToken, next.HasNewLine, next.NDecoded = true, v.newLine, v.decoded
			if v.bound >= 0 {
				next.NRemain = max(0, v.bound-v.decoded)
			}
		} else {
			idle++
		}
		slots[id] = sl
	}
	if idle == 0 && r.URL.Query().Has("fail_on_no_slot") {
		e := Errorf(http.StatusServiceUnavailable, "unavailable_error", "no_slot_available",
			"no slot available: all %d of model %q's slots are processing", n, name)
		e.RetryAfter = s.cfg.RetryAfter
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, slots)
}

// slotView is a slot as read at one moment.
type slotView struct {
	busy         bool
	task         int64
	params       *llamaSettings
	promptTokens int
	bound        int
	speculative  bool
	decoded      int
	newLine      bool
}

// view reads every slot of l.
func (l *limiter) view() []slotView {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]slotView, len(l.held))
	for id, u := range l.held {
		if u == nil {
			continue
		}
		out[id] = slotView{busy: true, task: u.task, params: u.params, promptTokens: u.promptTokens, bound: u.bound, speculative: u.speculative,
			decoded: int(min(u.decoded.Load(), math.MaxInt32)), newLine: u.newLine.Load()}
	}
	return out
}

// handleSlotAction is POST /slots/{id}: refused, as a node keeps no
// per-slot state (see above).
func (s *Server) handleSlotAction(w http.ResponseWriter, r *http.Request) {
	action := r.URL.Query().Get("action")
	writeError(w, Errorf(http.StatusNotImplemented, "not_supported_error", "not_supported",
		"POST /slots/%s?action=%s is not supported: a node keeps no per-slot cache to save, restore or erase (GET /slots shows the slots)",
		r.PathValue("id"), action))
}

// handleSetProps is POST /props: refused, as llama-server refuses it
// unless started with --props; a node's settings are its configuration
// file's.
func (s *Server) handleSetProps(w http.ResponseWriter, r *http.Request) {
	writeError(w, Errorf(http.StatusNotImplemented, "not_supported_error", "not_supported",
		"POST /props is not supported: a node's settings come from its config.toml and environment (meshnode config example prints them), read at start; GET /props reads what they make"))
}
