package api

import (
	"strings"
	"time"
)

// llamaStream writes /completion's answer: a data: event for each piece
// of text (stop false), then the whole answer's fields with stop true
// and an empty content, and no [DONE] (llama-server's stream); with no
// writer it builds the whole answer.
type llamaStream struct {
	sse      *sseWriter
	model    string
	prompt   string
	settings llamaSettings
	now      func() time.Time
	received time.Time
	first    time.Time
	content  strings.Builder
	whole    llamaCompletion
}

func (l *llamaStream) delta(d Delta) error {
	if d.Text == "" {
		return nil
	}
	if l.first.IsZero() {
		l.first = l.now()
	}
	l.content.WriteString(d.Text)
	if l.sse == nil {
		return nil
	}
	return l.sse.event("", llamaPartial{Content: d.Text, Tokens: []uint32{}})
}

// end fills in the answer's last event (the whole answer, unstreamed).
func (l *llamaStream) end(res *Result) error {
	end := l.now()
	first := l.first
	if first.IsZero() {
		first = end
	}
	promptMS := float64(first.Sub(l.received).Microseconds()) / 1000
	predictedMS := float64(end.Sub(first).Microseconds()) / 1000
	t := &llamaTimings{PromptN: res.PromptTokens, PromptMS: roundMS(promptMS), PredictedN: res.CompletionTokens, PredictedMS: roundMS(predictedMS)}
	t.PromptPerTokenMS, t.PromptPerSecond = per(t.PromptN, promptMS)
	t.PredictedPerTokenMS, t.PredictedPerSecond = per(t.PredictedN, predictedMS)
	content := l.content.String()
	l.whole = llamaCompletion{
		Tokens: []uint32{}, Stop: true, Model: l.model,
		TokensPredicted: res.CompletionTokens, TokensEvaluated: res.PromptTokens,
		GenerationSettings: l.settings, Prompt: l.prompt,
		HasNewLine: strings.Contains(content, "\n"),
		StopType:   llamaStopType(res), StoppingWord: res.StopSequence,
		Timings: t, Energy: res.Energy, Placement: res.Placement,
	}
	if l.sse == nil {
		l.whole.Content = content // streamed, the text went in the events before
	}
	return nil
}

func (l *llamaStream) finish(res *Result) error {
	if err := l.end(res); err != nil {
		return err
	}
	return l.sse.event("", l.whole)
}

// fail ends a started stream as llama-server does: an event holding the
// error.
func (l *llamaStream) fail(e *Error) error { return l.sse.event("", e.body()) }
