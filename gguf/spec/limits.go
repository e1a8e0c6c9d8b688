package spec

import (
	"fmt"
	"strconv"
	"strings"
)

// Limits are a request's own bounds on its speculative rounds:
// llama-server's speculative.n_max, n_min and p_min. The zero Limits
// bounds nothing.
type Limits struct {
	// Max is the most drafts a round verifies (0: the window's own most).
	Max int
	// Min is the fewest: a round that drafts fewer verifies none, and
	// decodes its token plainly (0 or 1: any). Not for drafts sampled at
	// random (Apply).
	Min int
	// PMin stops a draft model's drafting where its confidence in a
	// draft (its top probability) falls below it, whatever the window
	// would judge (0: the window judges). Prompt lookup's drafts have no
	// probability, so it takes none.
	PMin float64
}

// MaxLimit bounds Limits.Max and Limits.Min: no window drafts more
// (DefaultMaxWindow is 8; llama-server's default most is 16).
const MaxLimit = 256

// LimitError is limits a serve cannot keep, and the request field that
// asks for them.
type LimitError struct {
	Field string // as the request names it: "speculative.n_max", …
	Why   string // what is wrong, beginning with the field
}

func (e *LimitError) Error() string { return "spec: " + e.Why }

func limitError(field, format string, args ...any) *LimitError {
	return &LimitError{Field: field, Why: fmt.Sprintf(format, args...)}
}

// Check reports limits out of their ranges (a *LimitError).
func (l Limits) Check() error {
	switch {
	case l.Max < 0 || l.Max > MaxLimit:
		return limitError("speculative.n_max", "speculative.n_max must be 0 (no speculation) … %d, got %d", MaxLimit, l.Max)
	case l.Min < 0 || l.Min > MaxLimit:
		return limitError("speculative.n_min", "speculative.n_min must be 0 … %d, got %d", MaxLimit, l.Min)
	case l.Max > 0 && l.Min > l.Max:
		return limitError("speculative.n_min", "speculative.n_min %d is above speculative.n_max %d: no round could verify its drafts", l.Min, l.Max)
	case !(l.PMin >= 0 && l.PMin <= 1):
		return limitError("speculative.p_min", "speculative.p_min must be between 0 (the window judges each draft) and 1, got %v", l.PMin)
	}
	return nil
}

// CheckFor is Check for a serve whose drafts are found in text, prompt
// lookup's or a prediction's (lookup), or drawn at random (sampled: a
// sampled request's draft model), which cannot keep every limit (a
// *LimitError): drafts found in text have no probability for a p_min,
// and an n_min would drop a round of sampled drafts for what it drew
// (Apply).
func (l Limits) CheckFor(lookup, sampled bool) error {
	if err := l.Check(); err != nil {
		return err
	}
	switch {
	case l.Min > 1 && sampled:
		return limitError("speculative.n_min", "speculative.n_min %d: a sampled request's draft model draws its drafts at random, and a round dropped for drawing too few would skew its output (greedy requests and prompt lookup take it)", l.Min)
	case l.PMin > 0 && lookup:
		return limitError("speculative.p_min", "speculative.p_min %v: drafts found in text (prompt lookup's, a prediction's) have no probability (0 is accepted)", l.PMin)
	}
	return nil
}

// IsZero reports limits that bound nothing.
func (l Limits) IsZero() bool { return l.Max == 0 && l.Min <= 1 && l.PMin == 0 }

// LimitedDraft is the draft name of a sampled request that speculates
// with draft under l: a sampled request's tokens depend on its rounds, so
// its identity carries what bounds them. It is draft (PricedDraft's form,
// or an id alone), then, where l bounds anything, "/" and "n<max>" (where
// Max is set), "m<min>" (where Min is above 1), "p<p_min>" (where PMin is
// set, in the shortest decimal that reads back the same), as in
// "lookup@c0.00v0.25/n4m2" or "0123…/p0.8".
func LimitedDraft(draft string, l Limits) string {
	if l.IsZero() {
		return draft
	}
	var b strings.Builder
	b.WriteString(draft)
	b.WriteByte('/')
	if l.Max > 0 {
		fmt.Fprintf(&b, "n%d", l.Max)
	}
	if l.Min > 1 {
		fmt.Fprintf(&b, "m%d", l.Min)
	}
	if l.PMin > 0 {
		b.WriteByte('p')
		b.WriteString(strconv.FormatFloat(l.PMin, 'g', -1, 64))
	}
	return b.String()
}

// DraftLimits are the limits a draft name carries (LimitedDraft's form;
// none for a name without "/"). Limits out of order or range, or written
// otherwise than LimitedDraft writes them, are an error.
func DraftLimits(name string) (Limits, error) {
	_, rest, ok := strings.Cut(name, "/")
	if !ok {
		return Limits{}, nil
	}
	bad := func() (Limits, error) {
		return Limits{}, fmt.Errorf("spec: draft %q: the limits after / must be n<max>, then m<min>, then p<p_min>, each where it bounds anything", name)
	}
	var l Limits
	num := func(prefix byte) (string, bool) {
		if rest == "" || rest[0] != prefix {
			return "", false
		}
		end := 1
		for end < len(rest) && rest[end] != 'n' && rest[end] != 'm' && rest[end] != 'p' {
			end++
		}
		v := rest[1:end]
		rest = rest[end:]
		return v, true
	}
	var err error
	if v, ok := num('n'); ok {
		if l.Max, err = strconv.Atoi(v); err != nil || l.Max < 1 {
			return bad()
		}
	}
	if v, ok := num('m'); ok {
		if l.Min, err = strconv.Atoi(v); err != nil || l.Min < 2 {
			return bad()
		}
	}
	if v, ok := num('p'); ok {
		if l.PMin, err = strconv.ParseFloat(v, 64); err != nil || !(l.PMin > 0) {
			return bad()
		}
	}
	if rest != "" || l.IsZero() || LimitedDraft("", l) != "/"+name[strings.Index(name, "/")+1:] {
		return bad()
	}
	if err := l.Check(); err != nil {
		return Limits{}, fmt.Errorf("spec: draft %q: %w", name, err)
	}
	return l, nil
}

// Bound has w keep to l: at most l.Max drafts a round, and none where
// fewer than l.Min are drafted (Draft). It returns w.
func (w *Window) Bound(l Limits) *Window {
	if l.Max > 0 {
		w.max = min(w.max, l.Max)
		if w.fixed > 0 {
			w.fixed = min(w.fixed, l.Max)
		}
	}
	w.min = l.Min
	return w
}

// Apply has a serve's proposer and window keep to l (Bound; p_min is a
// draft model's threshold, ModelProposer.SetThreshold). Limits out of
// range, a p_min for a proposer without probabilities (prompt lookup),
// and an n_min for drafts sampled at random are an error (CheckFor): a round
// dropped because its drafts, as drawn, ended it short would change
// which draws the output keeps (the rejection rule is exact for each
// draft drawn, and for a round cut before a draw, never for drafts
// thrown away for what they turned out to be). Lookup's drafts, and a
// greedy draft's, are what the text makes them, so dropping their
// rounds changes nothing but the speed.
func (l Limits) Apply(prop Proposer, w *Window) error {
	mp, model := prop.(*ModelProposer)
	if err := l.CheckFor(!model, model && !mp.smp.Params().Greedy()); err != nil {
		return err
	}
	if l.PMin > 0 {
		mp.SetThreshold(l.PMin)
	}
	w.Bound(l)
	return nil
}
