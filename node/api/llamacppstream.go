package api

import (
	"encoding/json"
	"strings"
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
	content  strings.Builder
	probs    []llamaTokenProb // n_probs's, for the whole answer
	tokens   []uint32         // return_tokens's, for the whole answer
	whole    llamaCompletion
	// fields are response_fields: the answer holds only these (nil: all).
	fields []string
	index  int // the answer's, among n_cmpl's
	// postSampling: the probabilities are post_sampling_probs's.
	postSampling bool
	// The request's times (now, received, first), and what the stream
	// reports beside the text, where asked.
	extras
}

// promptProgress sends an event of the prompt's progress, as
// llama-server's: no text, and prompt_progress.
func (l *llamaStream) promptProgress(p PromptProgress) error {
	return l.sse.event("", llamaPartial{Index: l.index, Tokens: []uint32{}, PromptProgress: l.progressOut(p)})
}

func (l *llamaStream) delta(d Delta) error {
	if d.Text == "" && len(d.Logprobs) == 0 && len(d.Tokens) == 0 {
		return nil
	}
	l.output()
	l.content.WriteString(d.Text)
	var probs []llamaTokenProb
	if len(d.Logprobs) > 0 {
		probs = llamaProbs(d.Logprobs, l.postSampling)
	}
	if l.sse == nil {
		l.probs = append(l.probs, probs...)
		l.tokens = append(l.tokens, d.Tokens...)
		return nil
	}
	tokens := d.Tokens
	if tokens == nil {
		tokens = []uint32{}
	}
	return l.sse.event("", llamaPartial{Index: l.index, Content: d.Text, Tokens: tokens, Probs: probs, Timings: l.timingsNow()})
}

// end fills in the answer's last event (the whole answer, unstreamed).
func (l *llamaStream) end(res *Result) error {
	end := l.now()
	first := res.firstText // a whole answer's text is handed over after it was made
	if first.IsZero() {
		first = l.first
	}
	if first.IsZero() {
		first = end
	}
	t := timingsOf(l.received, first, end, res.PromptTokens, res.CompletionTokens)
	content := l.content.String()
	l.whole = llamaCompletion{
		Index: l.index, Tokens: []uint32{}, Stop: true, Model: l.model,
		TokensPredicted: res.CompletionTokens, TokensEvaluated: res.PromptTokens,
		TokensCached:       res.PromptTokens + res.CompletionTokens,
		GenerationSettings: l.settings, Prompt: l.prompt,
		HasNewLine: strings.Contains(content, "\n"),
		StopType:   llamaStopType(res), StoppingWord: res.StopSequence,
		Timings: t, Energy: res.Energy, Placement: res.Placement,
	}
	if l.sse == nil {
		// Streamed, the text and its probabilities went in the events
		// before.
		l.whole.Content, l.whole.Probs = content, l.probs
		if l.tokens != nil {
			l.whole.Tokens = l.tokens
		}
	}
	return nil
}

func (l *llamaStream) finish(res *Result) error {
	if err := l.end(res); err != nil {
		return err
	}
	return l.sse.event("", l.answer())
}

// finishChoice ends one of n_cmpl's streamed answers with its last event
// (stop, its index, its timings).
func (l *llamaStream) finishChoice(res *Result) error { return l.finish(res) }

// closing follows the last answer's event: llama-server's /completion
// stream has nothing after it (no [DONE]).
func (l *llamaStream) closing([]*Result, []*Generation) error { return nil }

// llamaCopies streams one greedy serve as n_cmpl's answers: each piece
// goes out once for each index, and each answer ends with its own last
// event; a failure is one error event.
type llamaCopies []*llamaStream

func (c llamaCopies) delta(d Delta) error {
	for _, l := range c {
		if err := l.delta(d); err != nil {
			return err
		}
	}
	return nil
}

func (c llamaCopies) finish(res *Result) error {
	for _, l := range c {
		if err := l.finish(res); err != nil {
			return err
		}
	}
	return nil
}

func (c llamaCopies) fail(e *Error) error { return c[0].fail(e) }

// answer is the whole answer, or the fields of it response_fields names.
func (l *llamaStream) answer() any {
	if l.fields == nil {
		return l.whole
	}
	return responseFields(l.whole, l.fields)
}

// responseFields is llama-server's response_fields: an object holding,
// under each path asked ("timings/prompt_n" names prompt_n inside
// timings), the value found there; a path that leads nowhere is left out.
func responseFields(answer any, paths []string) map[string]any {
	var whole map[string]any
	b, err := json.Marshal(answer)
	if err != nil || json.Unmarshal(b, &whole) != nil {
		return map[string]any{}
	}
	out := make(map[string]any, len(paths))
	for _, path := range paths {
		var at any = whole
		found := true
		for _, k := range strings.Split(path, "/") {
			obj, _ := at.(map[string]any) // nil past a leaf: found no more
			if at, found = obj[k]; !found {
				break
			}
		}
		if found {
			out[path] = at
		}
	}
	return out
}

// fail ends a started stream as llama-server does: an event holding the
// error.
func (l *llamaStream) fail(e *Error) error { return l.sse.event("", e.body()) }
