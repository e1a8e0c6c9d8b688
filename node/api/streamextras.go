package api

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// What llama-server's streams carry beside the text when asked, which
// its web UI and other clients ask for: the prompt's progress
// (return_progress) and the timings so far in every event
// (timings_per_token).

// PromptProgress is how far a generation's prompt has been evaluated:
// Total tokens, Cached of them reused from a KV cache, Processed of
// them held now (Cached included; Total once the prompt is in), as
// llama-server's prompt_progress counts them.
type PromptProgress struct{ Total, Cached, Processed int }

type promptProgressKey struct{}

// WithPromptProgress returns ctx carrying f, which the Generate of a
// Prepared given ctx calls as the prompt is evaluated (where its engine
// reports it) and once it is all in, before the first output, on the
// goroutine that calls emit.
func WithPromptProgress(ctx context.Context, f func(PromptProgress)) context.Context {
	return context.WithValue(ctx, promptProgressKey{}, f)
}

// PromptProgressOf is ctx's WithPromptProgress, or nil.
func PromptProgressOf(ctx context.Context) func(PromptProgress) {
	f, _ := ctx.Value(promptProgressKey{}).(func(PromptProgress))
	return f
}

// promptProgressOut is prompt_progress, as llama-server writes it.
type promptProgressOut struct {
	Total     int     `json:"total"`
	Cache     int     `json:"cache"`
	Processed int     `json:"processed"`
	TimeMS    float64 `json:"time_ms"`
}

// extras is what a stream reports beside the text, and the counts it
// keeps for it; the streams that report them embed it.
type extras struct {
	progress, timings bool // return_progress, timings_per_token
	now               func() time.Time
	received          time.Time // when the request came
	promptTokens      int
	first             time.Time    // the first output's, read on emit's goroutine
	decoded           atomic.Int64 // tokens decoded so far
}

func (x *extras) streamExtras() *extras { return x }
func (x *extras) setPromptTokens(n int) { x.promptTokens = n }

// output notes an output's time: the first one's ends the prompt's
// timings.
func (x *extras) output() {
	if x.first.IsZero() {
		x.first = x.now()
	}
}

// progressOut is p as an event carries it.
func (x *extras) progressOut(p PromptProgress) *promptProgressOut {
	return &promptProgressOut{Total: p.Total, Cache: p.Cached, Processed: p.Processed, TimeMS: roundMS(float64(x.now().Sub(x.received).Microseconds()) / 1000)}
}

// timingsNow is the timings so far (nil unless timings_per_token), over
// the tokens decoded: after the first output, its time splits the
// prompt's from the answer's.
func (x *extras) timingsNow() *llamaTimings {
	if !x.timings {
		return nil
	}
	now := x.now()
	first := x.first
	if first.IsZero() {
		first = now
	}
	return timingsOf(x.received, first, now, x.promptTokens, int(x.decoded.Load()))
}

// timingsOf is llama-server's timings of a generation received at
// received whose first output came at first, at end.
func timingsOf(received, first, end time.Time, promptN, predictedN int) *llamaTimings {
	promptMS := float64(first.Sub(received).Microseconds()) / 1000
	predictedMS := float64(end.Sub(first).Microseconds()) / 1000
	t := &llamaTimings{PromptN: promptN, PromptMS: roundMS(promptMS), PredictedN: predictedN, PredictedMS: roundMS(predictedMS)}
	t.PromptPerTokenMS, t.PromptPerSecond = per(t.PromptN, promptMS)
	t.PredictedPerTokenMS, t.PredictedPerSecond = per(t.PredictedN, predictedMS)
	return t
}

// extrasStream is a stream that reports what extras counts.
type extrasStream interface {
	streamExtras() *extras
	// promptProgress writes an event of the prompt's progress.
	promptProgress(PromptProgress) error
}

// withExtras readies ctx for what st reports beside the text: the
// prompt's progress and the tokens decoded so far. lock, if set, is
// held around each progress event (the choices of one stream write one
// at a time). A progress event that cannot be written is dropped: the
// next output's write fails the same way and ends the generation.
func withExtras(ctx context.Context, st any, lock sync.Locker) context.Context {
	xs, ok := st.(extrasStream)
	if !ok {
		return ctx
	}
	x := xs.streamExtras()
	if x.progress {
		ctx = WithPromptProgress(ctx, func(p PromptProgress) {
			if lock != nil {
				lock.Lock()
				defer lock.Unlock()
			}
			_ = xs.promptProgress(p)
		})
	}
	if x.timings {
		prev := Progress(ctx)
		ctx = WithProgress(ctx, func(text string) {
			prev(text)
			x.decoded.Add(1)
		})
	}
	return ctx
}
