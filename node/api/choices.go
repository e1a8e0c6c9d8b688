package api

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"
)

// A request for several choices (n, and a completions request's batch of
// prompts) is served as that many generations, one per choice, each a
// serve of its own with its own receipt: a receipt seals one output.
// They run side by side on the model's slots, so that a batching engine
// decodes them together.

// maxChoices bounds the choices of one request (prompts × n).
const maxChoices = 64

// batchPrompt is one prompt of a completions request's batch.
type batchPrompt struct {
	text string
	ids  []uint32
}

// checkChoices refuses a request for more choices than maxChoices, and
// several on a grant (its binding derives one serve from the body).
func checkChoices(g *Generation) error {
	n := max(g.N, 1) * max(len(g.batch), 1)
	switch {
	case n > maxChoices:
		return badRequest("n", "the request asks for %d choices (%d prompts, n %d); at most %d are served at once", n, max(len(g.batch), 1), max(g.N, 1), maxChoices)
	case n > 1 && g.Presentation != nil:
		return badRequest("n", "a request that rides on a grant (jcp_presentation) is one serve: n must be 1, with one prompt")
	}
	return nil
}

// Choices are the generations g is served as, in the order of the
// answer's choices: for each prompt (a batch's, in order), n choices.
// Choice j of a prompt is g with that prompt and, where g has a seed,
// the seed plus j, so that a seeded request's choices differ and each
// is reproduced from the body alone. A request of one choice is g.
func (g *Generation) Choices() []*Generation {
	n := max(g.N, 1)
	prompts := g.batch
	if prompts == nil {
		if n == 1 {
			return []*Generation{g}
		}
		prompts = []batchPrompt{{text: g.Prompt, ids: g.PromptIDs}}
	}
	out := make([]*Generation, 0, len(prompts)*n)
	for _, p := range prompts {
		for j := range n {
			c := *g
			c.N, c.batch, c.first = 1, nil, j == 0
			if g.Messages == nil {
				c.Prompt, c.PromptIDs = p.text, p.ids
			}
			if g.Seed != nil {
				seed := *g.Seed + uint64(j)
				c.Seed = &seed
			}
			out = append(out, &c)
		}
	}
	return out
}

// choiceStream is an endpoint's stream that can carry several choices:
// each choice's stream ends with finishChoice, and closing ends the
// answer once every choice has.
type choiceStream interface {
	stream
	finishChoice(res *Result) error
	closing(ress []*Result, gs []*Generation) error
}

// generateChoices runs gs, the choices of one request, on m: each is
// prepared first (a choice that cannot be served refuses the request
// before any runs), then they run side by side, at most as many at once
// as the model has slots, each taking its place in the model's queue and
// a slot as a request does. With sts nil the outputs are collected for a
// whole answer; otherwise choice i streams to sts[i], the streams
// sharing sse, one event at a time. The first failure stops the others
// and is the request's answer (a stream that has started ends with it).
func (s *Server) generateChoices(w http.ResponseWriter, r *http.Request, m Model, gs []*Generation, sts []choiceStream, sse *sseWriter) (outs []Delta, ress []*Result, ok bool) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var st stream
	if sts != nil {
		st = sts[0] // any of them writes the error event
	}
	ps := make([]Prepared, len(gs))
	for i, g := range gs {
		p, err := s.prepare(ctx, m, g)
		if err != nil {
			s.fail(w, r, g, err, st, sse)
			return nil, nil, false
		}
		ps[i] = p
		if sts != nil && opensReasoning(p) {
			if o, ok := sts[i].(reasoningOpener); ok {
				o.openReasoning()
			}
		}
	}

	start := s.now()
	updateRecord(ctx, func(ev *RequestEvent) { ev.Route, ev.Stream = "local", sts != nil })
	outs, ress = make([]Delta, len(gs)), make([]*Result, len(gs))
	texts := make([]strings.Builder, len(gs))
	firsts := make([]time.Time, len(gs))
	var mu sync.Mutex // one event at a time on the shared stream
	var first time.Time
	var failed error
	next := 0
	worker := func() {
		for {
			mu.Lock()
			i := next
			next++
			stop := i >= len(gs) || failed != nil
			mu.Unlock()
			if stop {
				return
			}
			var st any
			if sts != nil {
				st = sts[i]
				if pt, ok := st.(interface{ setPromptTokens(int) }); ok {
					pt.setPromptTokens(ps[i].PromptTokens())
				}
			}
			res, err := s.runChoice(ctx, m, gs[i], ps[i], st, &mu, func(d Delta) error {
				mu.Lock()
				defer mu.Unlock()
				if first.IsZero() {
					first = s.now()
				}
				if firsts[i].IsZero() {
					firsts[i] = s.now()
				}
				if sts != nil {
					return sts[i].delta(d)
				}
				texts[i].WriteString(d.Text)
				outs[i].Logprobs = append(outs[i].Logprobs, d.Logprobs...)
				outs[i].Tokens = append(outs[i].Tokens, d.Tokens...)
				return nil
			})
			mu.Lock()
			if res != nil {
				res.reasoningOpen, res.firstText = opensReasoning(ps[i]), firsts[i]
			}
			if err == nil && sts != nil {
				err = sts[i].finishChoice(res)
			}
			if err != nil && failed == nil {
				failed = err
				cancel()
			}
			ress[i] = res
			mu.Unlock()
		}
	}
	var wg sync.WaitGroup
	for range min(len(gs), s.concurrency(m)) {
		wg.Go(worker)
	}
	wg.Wait()
	if failed != nil {
		s.fail(w, r, gs[0], failed, st, sse)
		return nil, nil, false
	}
	took := s.now().Sub(start)
	updateRecord(ctx, func(ev *RequestEvent) {
		for _, res := range ress {
			ev.PromptTokens += res.PromptTokens
			ev.CompletionTokens += res.CompletionTokens
			ev.EnergyUJ += res.EnergyUJ
		}
		ev.GenerationMS, ev.Receipt = ms(took), ress[0].Receipt
		if !first.IsZero() {
			ev.FirstTokenMS = ms(first.Sub(start))
		}
	})
	for i, res := range ress {
		placementOf(gs[i], res)
		outs[i].Text = texts[i].String()
	}
	s.log.Info("api: served", "model", gs[0].Model, "choices", len(gs), "took", took.Round(time.Millisecond),
		"relayed", r.Header.Get(ForwardedHeader) != "")
	if sts != nil {
		if err := sts[0].closing(ress, gs); err != nil {
			s.log.Debug("api: client left before the stream ended", "model", gs[0].Model, "err", err)
		}
	}
	return outs, ress, true
}

// runChoice runs one choice: a place in the model's queue, a slot, the
// generation, streamed to st (nil: a whole answer), whose writes lock
// holds.
func (s *Server) runChoice(ctx context.Context, m Model, g *Generation, p Prepared, st any, lock sync.Locker, emit func(Delta) error) (*Result, error) {
	t, err := s.admit(g.Model, m)
	if err != nil {
		return nil, err
	}
	defer t.release()
	if err := s.run(ctx, g.Model, t); err != nil {
		return nil, err
	}
	return p.Generate(withExtras(t.describe(ctx, m, g, p, st != nil), st, lock), emit)
}

// generateAll runs a request's choices for a whole answer: one through
// generate, several through generateChoices.
func (s *Server) generateAll(w http.ResponseWriter, r *http.Request, m Model, gs []*Generation) ([]Delta, []*Result, bool) {
	if len(gs) > 1 {
		return s.generateChoices(w, r, m, gs, nil, nil)
	}
	out, res, ok := s.generate(w, r, m, gs[0], nil, nil)
	return []Delta{out}, []*Result{res}, ok
}

// streamAll streams a request's choices, each to its stream: one through
// generate, several through generateChoices.
func (s *Server) streamAll(w http.ResponseWriter, r *http.Request, m Model, gs []*Generation, sts []choiceStream, sse *sseWriter) {
	if len(gs) > 1 {
		s.generateChoices(w, r, m, gs, sts, sse)
		return
	}
	s.generate(w, r, m, gs[0], sts[0], sse)
}

// usageOfAll is the usage of an answer: usageOf its one choice's result,
// or usageOfChoices, with each choice's receipt handed to energy (when
// not nil) instead of usage.energy.
func usageOfAll(gs []*Generation, ress []*Result, energy func(i int, energy any)) *usage {
	if len(ress) == 1 {
		return usageOf(ress[0])
	}
	if energy != nil {
		for i, res := range ress {
			energy(i, res.Energy)
		}
	}
	return usageOfChoices(gs, ress)
}

// usageOfChoices is the usage of a request's choices: each prompt's
// tokens once (its first choice's), every choice's completion tokens.
// The energy is each choice's own (choices[i].energy).
func usageOfChoices(gs []*Generation, ress []*Result) *usage {
	u := &usage{}
	for i, res := range ress {
		if gs[i].first {
			u.PromptTokens += res.PromptTokens
		}
		u.CompletionTokens += res.CompletionTokens
		if n := res.ReasoningTokens; n != nil || res.Prediction != nil {
			if u.CompletionTokensDetails == nil {
				u.CompletionTokensDetails = &tokensDetails{}
			}
			if n != nil {
				u.CompletionTokensDetails.ReasoningTokens += *n
			}
			u.CompletionTokensDetails.addPrediction(res.Prediction)
		}
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	u.Placement = ress[0].Placement
	return u
}
