package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// usage is OpenAI's usage object with meshnode's energy record added.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// CompletionTokensDetails counts a reasoning model's reasoning
	// tokens, as OpenAI reports them.
	CompletionTokensDetails *tokensDetails `json:"completion_tokens_details,omitempty"`
	Energy                  any            `json:"energy,omitempty"`
	// Placement is how the mesh placed the request (Placement.Detail on
	// the node that placed it; the route line on a host it was relayed to).
	Placement any `json:"placement,omitempty"`
}

func usageOf(res *Result) *usage {
	return &usage{
		PromptTokens:            res.PromptTokens,
		CompletionTokens:        res.CompletionTokens,
		TotalTokens:             res.PromptTokens + res.CompletionTokens,
		CompletionTokensDetails: detailsOf(res.ReasoningTokens, res.Prediction),
		Energy:                  res.Energy,
		Placement:               res.Placement,
	}
}

// tokensDetails is usage's completion_tokens_details (the Responses
// API's output_tokens_details).
type tokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
	// A predicted output's tokens, as OpenAI reports them: the predicted
	// tokens that stood in the answer, and those that did not.
	AcceptedPredictionTokens *int `json:"accepted_prediction_tokens,omitempty"`
	RejectedPredictionTokens *int `json:"rejected_prediction_tokens,omitempty"`
}

// detailsOf is the details of n reasoning tokens and of a predicted
// output's tokens, none where both are nil.
func detailsOf(n *int, pred *PredictionCounts) *tokensDetails {
	if n == nil && pred == nil {
		return nil
	}
	d := &tokensDetails{}
	if n != nil {
		d.ReasoningTokens = *n
	}
	d.addPrediction(pred)
	return d
}

// addPrediction adds a serve's predicted tokens to d.
func (d *tokensDetails) addPrediction(pred *PredictionCounts) {
	if pred == nil {
		return
	}
	if d.AcceptedPredictionTokens == nil {
		d.AcceptedPredictionTokens, d.RejectedPredictionTokens = new(int), new(int)
	}
	*d.AcceptedPredictionTokens += pred.Accepted
	*d.RejectedPredictionTokens += pred.Rejected
}

// stream is one endpoint's streaming shape.
type stream interface {
	// delta sends one piece of generated output.
	delta(d Delta) error
	// finish sends the closing events of a generation that ended.
	finish(res *Result) error
	// fail ends a started stream with the error that cut it short.
	fail(e *Error) error
}

// generate runs g on m under the model's concurrency limit. With st nil it
// collects the text for a non-streaming answer; otherwise each piece goes
// to st as it is produced.
//
// The request takes its place in the model's queue, is prepared (its
// prompt tokenized and checked) while it waits, and only then waits for
// a slot: a prompt that cannot be served is refused at once, without
// queueing behind running generations or holding a slot while it is
// tokenized.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, m Model, g *Generation, st stream, sse *sseWriter) (out Delta, res *Result, ok bool) {
	ctx := r.Context()
	t, err := s.admit(g.Model, m)
	if err != nil {
		if !s.spill(w, r, g, err, sse) {
			s.fail(w, r, g, err, st, sse)
		}
		return Delta{}, nil, false
	}
	defer t.release()
	p, err := s.prepare(ctx, m, g)
	if err == nil {
		err = s.run(ctx, g.Model, t)
	}
	if err != nil {
		s.fail(w, r, g, err, st, sse)
		return Delta{}, nil, false
	}
	if pt, ok := st.(interface{ setPromptTokens(int) }); ok {
		pt.setPromptTokens(p.PromptTokens())
	}
	opened := opensReasoning(p)
	if o, ok := st.(reasoningOpener); ok && opened {
		o.openReasoning()
	}

	start := s.now()
	updateRecord(ctx, func(ev *RequestEvent) { ev.Route, ev.Stream = "local", st != nil })
	var first time.Time // emit is called by one goroutine at a time, and not after Generate returns
	var b strings.Builder
	emit := func(d Delta) error {
		if first.IsZero() {
			first = s.now()
		}
		if st != nil {
			return st.delta(d)
		}
		b.WriteString(d.Text)
		out.Logprobs = append(out.Logprobs, d.Logprobs...)
		out.Tokens = append(out.Tokens, d.Tokens...)
		return nil
	}
	res, err = p.Generate(withExtras(t.describe(ctx, m, g, p, st != nil), st, nil), emit)
	if err != nil {
		s.fail(w, r, g, err, st, sse)
		return Delta{}, nil, false
	}
	res.reasoningOpen, res.firstText = opened, first
	took := s.now().Sub(start)
	updateRecord(ctx, func(ev *RequestEvent) {
		ev.PromptTokens, ev.CompletionTokens = res.PromptTokens, res.CompletionTokens
		ev.GenerationMS = ms(took)
		ev.EnergyUJ, ev.Receipt = res.EnergyUJ, res.Receipt
		if !first.IsZero() {
			ev.FirstTokenMS = ms(first.Sub(start))
		}
	})
	placementOf(g, res)
	s.log.Info("api: served", "model", g.Model, "prompt_tokens", res.PromptTokens,
		"completion_tokens", res.CompletionTokens, "finish", res.FinishReason,
		"took", took.Round(time.Millisecond), "relayed", r.Header.Get(ForwardedHeader) != "")
	if st != nil {
		if err := st.finish(res); err != nil {
			s.log.Debug("api: client left before the stream ended", "model", g.Model, "err", err)
		}
	}
	out.Text = b.String()
	return out, res, true
}

// placementOf sets res.Placement, usage.placement: how the mesh placed
// g (the placement's detail on the node that placed it, the route line
// on a host it was relayed to).
func placementOf(g *Generation, res *Result) {
	switch {
	case g.placed != nil:
		res.Placement = g.placed.Detail
	case g.Placement != "":
		res.Placement = map[string]string{"route": g.Placement}
	}
}

// builder is an endpoint's stream that also builds a whole answer: fed
// the output and ended, it writes no events when it has no sseWriter.
type builder interface {
	delta(d Delta) error
	end(res *Result) error
}

// answerWhole serves g unstreamed: the output goes through b as one
// delta, the same steps as a stream's, and answer (b's result) is
// written once b has ended.
func (s *Server) answerWhole(w http.ResponseWriter, r *http.Request, m Model, g *Generation, b builder, answer func() any) {
	out, res, ok := s.generate(w, r, m, g, nil, nil)
	if !ok {
		return
	}
	if o, ok := b.(reasoningOpener); ok && res.reasoningOpen {
		o.openReasoning()
	}
	err := b.delta(out)
	if err == nil {
		err = b.end(res)
	}
	if err != nil {
		writeError(w, Errorf(http.StatusInternalServerError, "server_error", "", "%v", err))
		return
	}
	writeJSON(w, http.StatusOK, answer())
}

// spill relays a request placed on this node to the peers placed after
// it when this node's queue turned out full (err is admit's 429), before
// anything was sent: a full queue here spills to a peer rather than
// answering 429. It reports whether it took the request.
func (s *Server) spill(w http.ResponseWriter, r *http.Request, g *Generation, err error, sse *sseWriter) bool {
	if g.placed == nil || s.proxy == nil || asError(err).Status != http.StatusTooManyRequests || sse != nil && sse.started {
		return false
	}
	peers := g.placed.peersBut(s.self)
	if len(peers) == 0 {
		return false
	}
	s.log.Debug("api: queue full, spilling to a peer", "model", g.Model, "peer", peers[0].Short())
	updateRecord(r.Context(), func(ev *RequestEvent) { ev.Route = "peer" })
	s.proxy.relay(s.guard(w), r, g.Body, peers, g.placed, "spilled, the queue here being full: "+g.placed.Route)
	return true
}

// fail reports a failed generation: as an HTTP error when nothing has been
// sent yet, as an error event inside a stream that has started, and not at
// all when the client has gone.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, g *Generation, err error, st stream, sse *sseWriter) {
	if r.Context().Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		s.log.Info("api: client cancelled", "model", g.Model)
		updateRecord(r.Context(), func(ev *RequestEvent) { ev.Status, ev.Error = StatusClientClosed, "the client went away" })
		return
	}
	updateRecord(r.Context(), func(ev *RequestEvent) { ev.Error = asError(err).Message })
	level := slog.LevelInfo // the client's request was at fault
	switch status := asError(err).Status; {
	case status >= 500:
		level = slog.LevelWarn
	case status == http.StatusTooManyRequests:
		level = slog.LevelDebug // overload is reported to the client, not worth a line each
	}
	s.log.Log(r.Context(), level, "api: generation failed", "model", g.Model, "err", errString(err))
	if sse != nil && sse.started {
		_ = st.fail(asError(err))
		return
	}
	writeError(w, err)
}
