package spec

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/sample"
)

// Prices are what speculation costs on this machine, measured: Cost is
// c, a drafted token's time over a target token's, and Row is v, what
// one more row of a verified window adds to a one-token step, over that
// step. The files' sizes stand in for them where a decision must replay
// anywhere (NewWindow); a greedy serve's tokens are the same whatever
// its windows, so its windows may be sized by what the machine measured:
// a draft whose kernels run slower per byte than the target's (a
// quantised copy of a small float model whose weights sit in cache) costs
// more than its size says, and the window turns off where it would not
// pay.
type Prices struct {
	Cost, Row float64
	// Steps are the target's step over a window of k drafts (k+1 rows)
	// in one-token steps, Steps[k], for windows up to measureRows rows:
	// kernels take rows in groups, so a row past a group costs a pass of
	// its own, more than Row says (nil: 1 + k·Row).
	Steps []float64
	// SampledCost and SampledRow are Cost and Row as a sampled serve pays
	// them: each row's logits computed whole and a distribution made over
	// them (the draft's, drawn from, and the target's, to judge the draft
	// by), where a greedy row takes its argmax, on a small model most of
	// a token's time. They decide whether a sampled serve speculates at
	// all (SampledPays) and price its windows, through the draft name its
	// request carries (PricedDraft), so that a replay decides alike
	// anywhere. Zero: not measured.
	SampledCost, SampledRow float64
	// SampledFirst is First as a sampled serve pays it: what a draft
	// model's first drawn draft of a round costs more than its later ones
	// (SampledCost), in target tokens. It travels in the draft name too.
	SampledFirst float64
	// SampledCatchUp is CatchUp as a sampled serve pays it: a draft
	// model's step over two tokens, the last drawn from, in target
	// tokens. What it costs over SampledCost travels in the draft name.
	SampledCatchUp float64
	// CatchUp is a draft model's step over two tokens, the last judged,
	// in target tokens: the first step of a round after one whose drafts
	// all stood (its last draft, never evaluated, and the target's token
	// after it), where a round after a rejection steps over one. Zero
	// for prompt lookup, or not measured.
	CatchUp float64
	// First is what a draft model's first step of a round costs more
	// than its later ones (Cost), in target tokens: the first follows the
	// target's pass, and on a machine whose caches that pass sweeps it
	// runs slower (a 1B model's Q4_0 copy, 2 cores: 36–50 ms, where the
	// next steps took 20–26). Zero for prompt lookup, or not measured.
	First float64
}

// minRowCost is the least v a measured window is priced at: a row is
// never free (its logits are read and picked), and a measurement that
// found it so is noise.
const minRowCost = 0.02

// measureWindow is the window Row is taken from: the average over its
// extra rows, as a window of a few drafts pays.
const measureWindow = 5

// measureRows is the largest window Measure times (Steps): a full
// window of DefaultMaxWindow drafts, where the context holds it.
const measureRows = DefaultMaxWindow + 1

// Measure times the target's one-token steps and its windows of 2 to
// measureRows rows, and the draft's one-token steps (none for a nil
// draft: prompt lookup drafts for nothing), on sessions of their own
// after a short prompt, and returns the prices they make (MeasureSteps).
func Measure(ctx context.Context, target, draft *model.Model, reps int, budget time.Duration) (Prices, error) {
	// A short prompt, so that the steps are decoding's; shorter where a
	// model's context is.
	positions := target.Config().TrainContext
	if draft != nil {
		positions = min(positions, draft.Config().TrainContext)
	}
	// The windows timed: up to measureRows rows, as many as the context
	// holds after a prompt of one, and at least measureWindow.
	most := min(measureRows, positions-1)
	if most < measureWindow {
		return Prices{}, fmt.Errorf("spec: measure: a context of %d positions holds no window of %d after a prompt", positions, measureWindow)
	}
	prompt := MeasureTokens(min(16, positions-most), target.Config().VocabSize)
	// The target's rows are picked as a greedy verify picks them, or
	// judged as a sampled verify judges them (SampledJudge).
	greedyPick := func(b *model.Batch, j int) { b.ArgMaxAt(0, j) }
	judge := SampledJudge()
	drawn := func(b *model.Batch, j int) { judge(b.LogitsAt(0, j)) }
	tstep, _, closeT, err := stepper(ctx, target, prompt, most)
	if err != nil {
		return Prices{}, err
	}
	defer closeT()
	step := func(ctx context.Context, rows int, sampled bool) (time.Duration, error) {
		if sampled {
			return tstep(rows, drawn)
		}
		return tstep(rows, greedyPick)
	}
	return MeasureSteps(ctx, step, most, draft, reps, budget)
}

// oneWarm and oneTimed are the one-token steps a measurement round takes
// before it times one, and the steps whose median it takes (oneStep),
// for a target whose steps are shorter than longStep.
const (
	oneWarm  = 2
	oneTimed = 3
	longStep = 5 * time.Millisecond
)

// chooseSteps is how many one-token steps MeasureSteps takes before it
// times any: the CPU backend decides a weight's one-row kernels on its
// first 1 + 3·3 one-row products (an untimed one, then three rounds of up
// to three candidates).
const chooseSteps = 10

// StepTimer times one step of a target for MeasureSteps: rows tokens
// after a short prompt the target holds, each row's token picked as a
// greedy serve picks it, or, sampled, judged as a sampled serve's verify
// judges it (the logits whole: SampledJudge), the target trimmed back to
// the prompt after.
type StepTimer func(ctx context.Context, rows int, sampled bool) (time.Duration, error)

// MeasureSteps makes the prices of a target timed by step, whose steps
// may take up to most rows (at least measureWindow), and of the draft's
// one-token steps, on a session of its own after a short prompt (none
// for a nil draft: prompt lookup drafts for nothing): the target a whole
// model (Measure), or a split model's pipeline, whose step is a trip
// through its stages. The prices are the medians over up to reps rounds,
// each round's steps back to back so that its ratios see one load (a
// busy machine stretches single steps by 2× and more). It stops once
// budget has passed (0: no budget), or, to have three rounds to take the
// median of, five times budget (a large model on a slow machine, whose
// one round can take seconds, is measured once).
func MeasureSteps(ctx context.Context, step StepTimer, most int, draft *model.Model, reps int, budget time.Duration) (Prices, error) {
	if most < measureWindow {
		return Prices{}, fmt.Errorf("spec: measure: a target whose steps take %d rows holds no window of %d", most, measureWindow)
	}
	// The draft steps one token, or catches up on two (a round after one
	// whose drafts all stood: its last draft and the target's token).
	var dstep, dcatch draftStep
	if draft != nil {
		dc := draft.Config()
		if dc.TrainContext < 3 {
			return Prices{}, fmt.Errorf("spec: measure: the draft's context of %d positions holds no catch-up after a prompt", dc.TrainContext)
		}
		var closeD func()
		var err error
		if dstep, dcatch, closeD, err = stepper(ctx, draft, MeasureTokens(min(16, dc.TrainContext-2), dc.VocabSize), 2); err != nil {
			return Prices{}, err
		}
		defer closeD()
	}
	return measureSteps(ctx, step, most, dstep, dcatch, reps, budget)
}

// draftStep times one step of a draft model over rows tokens, each
// picked by pick (stepper).
type draftStep func(rows int, pick func(*model.Batch, int)) (time.Duration, error)

// draftRound times a round's first draft step, right after the target's
// pass, and a later one, each picked by pick: the later one's cost and
// what the first costs more, in units of one (the target's one-token
// step).
func draftRound(dstep draftStep, pick func(*model.Batch, int), one time.Duration) (cost, first float64, err error) {
	d1, err := dstep(1, pick)
	if err != nil {
		return 0, 0, err
	}
	d, err := dstep(1, pick)
	if err != nil {
		return 0, 0, err
	}
	return d.Seconds() / one.Seconds(), (d1 - d).Seconds() / one.Seconds(), nil
}

// measureSteps is MeasureSteps with the draft's steps timed by dstep and
// dcatch (nil: no draft).
func measureSteps(ctx context.Context, step StepTimer, most int, dstep, dcatch draftStep, reps int, budget time.Duration) (Prices, error) {
	most = min(most, measureRows)
	// The draft's token with its confidence, as a greedy draft is judged
	// (topProb over the vocabulary, a good part of a small draft's step),
	// or drawn, as a sampled draft's is (its distribution kept for the
	// verify, and its top probability found).
	confidence := func(b *model.Batch, j int) { BatchLogits{b, 0, j}.Top() }
	mp := &ModelProposer{smp: sample.New(sample.Params{Temperature: 1, Seed: 1})}
	drawn := func(b *model.Batch, j int) {
		mp.nq = 0
		mp.pick(BatchLogits{b, 0, j})
	}
	// A warm-up: the first steps grow scratch and fault pages in.
	if _, err := step(ctx, most, false); err != nil {
		return Prices{}, err
	}
	if _, err := step(ctx, measureWindow, true); err != nil {
		return Prices{}, err
	}
	if dstep != nil {
		if _, err := dstep(1, drawn); err != nil {
			return Prices{}, err
		}
	}
	// One-token steps until the backends have chosen their kernels: the
	// CPU backend times its candidates for each weight's one-row products
	// on the weight's first ones (gguf/cpu/onerow.go), and a step among
	// those is a mix of the candidates, the slower ones too. On a 1B model
	// the rounds within the budget hold about as many one-token steps
	// (three rounds of four).
	for range chooseSteps {
		if _, err := step(ctx, 1, false); err != nil {
			return Prices{}, err
		}
		if dstep != nil {
			if _, err := dstep(1, confidence); err != nil {
				return Prices{}, err
			}
		}
	}
	start := time.Now()
	var costs, firsts, catchUps, sampledCosts, sampledFirsts, sampledCatchUps, sampledRows []float64
	steps := make([][]float64, most)
	more := func(r int) bool {
		if r == 0 || budget == 0 {
			return true
		}
		took := time.Since(start)
		return took < budget || r < 3 && took < 5*budget
	}
	// oneStep times a one-token step as plain decoding meets it: in a
	// run of its kind. One timed in the wake of a window, or of a
	// sampled step (which reads the whole head's logits), ran 10–15%
	// slower on the built-in F16 (2 cores): the caches held the other
	// step's data. And after a pause (a sampled verify's judging on one
	// core, or a sleep; not the helpers parking: spinning 1 ms, they
	// made no difference) the first step ran at about 1.5–2× and the
	// second still at 1.1–1.3× the steps after them.
	// A dearer step made every window look cheaper than a serve finds
	// it — 4 rows at 1.2–1.5 steps where back-to-back steps cost 1.6–1.8
	// — and the windows were sized too wide. So: oneWarm steps, then the
	// median of oneTimed; but where a step takes longStep or more (a 1B
	// model's), what a pause adds is lost in it, and the extra steps
	// would only leave the budget fewer rounds: one untimed, one timed.
	oneStep := func(sampled bool) (time.Duration, error) {
		var ds [oneWarm + oneTimed]time.Duration
		for i := range ds {
			d, err := step(ctx, 1, sampled)
			if err != nil {
				return 0, err
			}
			ds[i] = d
			if i == oneWarm-1 && slices.Min(ds[:oneWarm]) >= longStep {
				return d, nil // the warm steps all long: the last is not stretched
			}
		}
		timed := ds[oneWarm:]
		slices.Sort(timed)
		return timed[len(timed)/2], nil
	}
	for r := 0; r < max(1, reps) && more(r); r++ {
		one, err := oneStep(false)
		if err != nil {
			return Prices{}, err
		}
		for k := 1; k < most; k++ {
			win, err := step(ctx, k+1, false)
			if err != nil {
				return Prices{}, err
			}
			steps[k] = append(steps[k], win.Seconds()/one.Seconds())
		}
		if dstep != nil {
			cost, first, err := draftRound(dstep, confidence, one)
			if err != nil {
				return Prices{}, err
			}
			costs, firsts = append(costs, cost), append(firsts, first)
			d2, err := dcatch(2, confidence)
			if err != nil {
				return Prices{}, err
			}
			catchUps = append(catchUps, d2.Seconds()/one.Seconds())
		}
		// The same as a sampled serve pays them.
		sone, err := oneStep(true)
		if err != nil {
			return Prices{}, err
		}
		swin, err := step(ctx, measureWindow, true)
		if err != nil {
			return Prices{}, err
		}
		sampledRows = append(sampledRows, (swin.Seconds()/sone.Seconds()-1)/(measureWindow-1))
		if dstep != nil {
			// Drawn drafts, after the target's sampled window: priced at
			// the first alone, a sampled draft cost what the first step
			// does at every position of the window.
			cost, first, err := draftRound(dstep, drawn, sone)
			if err != nil {
				return Prices{}, err
			}
			sampledCosts, sampledFirsts = append(sampledCosts, cost), append(sampledFirsts, first)
			d2, err := dcatch(2, drawn)
			if err != nil {
				return Prices{}, err
			}
			sampledCatchUps = append(sampledCatchUps, d2.Seconds()/sone.Seconds())
		}
	}
	// Row is the measureWindow-row window's step spread over its extra
	// rows. A step is never cheaper than a smaller window's, nor a row
	// than minRowCost: a measurement that found otherwise is noise.
	p := Prices{Row: max(0, (median(steps[measureWindow-1])-1)/(measureWindow-1)), Steps: make([]float64, most)}
	p.Steps[0] = 1
	for k := 1; k < most; k++ {
		p.Steps[k] = max(median(steps[k]), p.Steps[k-1]+minRowCost)
	}
	p.SampledRow = max(minRowCost, median(sampledRows))
	if dstep != nil {
		p.Cost = median(costs)
		p.First = max(0, median(firsts))
		p.CatchUp = max(median(catchUps), p.Cost)
		p.SampledCost = median(sampledCosts)
		p.SampledFirst = max(0, median(sampledFirsts))
		p.SampledCatchUp = max(median(sampledCatchUps), p.SampledCost)
	}
	return p, nil
}

// MeasureTokens are n tokens spread over a vocabulary of vocab: the
// prompt and windows a measurement steps on.
func MeasureTokens(n, vocab int) []uint32 {
	prompt := make([]uint32, n)
	for i := range prompt {
		prompt[i] = uint32(1 + i*7919%max(1, vocab-1))
	}
	return prompt
}

// SampledJudge judges a row's logits as a sampled Verify does, for
// timing it (MeasureSteps' sampled rows): the distribution over the
// vocabulary, the draft's probability in it, and a draw.
func SampledJudge() func(logits []float32) {
	smp := sample.New(sample.Params{Temperature: 1, Seed: 1})
	var p []sample.Prob
	return func(logits []float32) {
		p = smp.Dist(p[:0], logits, nil)
		probOf(p, 0)
		smp.Float64()
	}
}

// SampledPays says whether a sampled serve's speculation could pay at the
// sampled prices: whether a window of at most maxK drafts, each standing
// with probability prior (the acceptance a window expects before it has
// seen any: its default prior, or CopyPrior for a copy of the target),
// gains what a window must (minGain). Where it cannot, the window would
// first learn that on the serve's own rounds, paying for drafts that do
// not pay: the built-in F16's sampled serves speculating with its trained
// draft ran at 0.4× plain sampling on 2 cores. Unmeasured prices pay.
func (p Prices) SampledPays(maxK int, prior float64) bool {
	if p.SampledRow == 0 {
		return true
	}
	_, gain := sampledWindow(maxK, p.Sampled()).Expect(prior).best()
	return gain > minGain
}

// Sampled are the prices a sampled request's draft name carries, as
// measured: the sampled draft's cost, row and first step's extra, and
// what its two-token catch-up costs over a one-token step.
func (p Prices) Sampled() DraftPrices {
	return DraftPrices{Cost: p.SampledCost, Row: p.SampledRow, First: p.SampledFirst, CatchUp: max(p.SampledCatchUp-p.SampledCost, 0)}
}

// sampledWindow is a sampled serve's window of at most maxK drafts,
// priced at p.
func sampledWindow(maxK int, p DraftPrices) *Window {
	w := NewWindow(maxK, p.Cost, p.Row)
	w.first, w.catchUp = p.First, p.CatchUp
	return w
}

// PricedDraft is the draft name of a sampled request whose windows are
// priced at p (two decimals each): the proposer's id, then
// "@c<cost>v<row>", as in "lookup@c0.00v0.56"; then "f<first>" where a
// round's first draft costs more and "u<catch-up>" where a round after
// one whose drafts all stood costs more (each at least half a
// hundredth), as in "…@c0.02v0.06f0.01u0.01". A name without f or u
// (every one written before they were measured) prices no first step or
// catch-up, so its replay decides as its serve did.
func PricedDraft(id string, p DraftPrices) string {
	name := fmt.Sprintf("%s@c%.2fv%.2f", id, min(max(p.Cost, 0), maxPrice), min(max(p.Row, minRowCost), maxPrice))
	if f := min(p.First, maxPrice); f >= 0.005 {
		name += fmt.Sprintf("f%.2f", f)
	}
	if u := min(p.CatchUp, maxPrice); u >= 0.005 {
		name += fmt.Sprintf("u%.2f", u)
	}
	return name
}

// maxPrice bounds the prices a draft name carries: a drafted token or a
// row at a hundred target tokens would never be speculated with.
const maxPrice = 100

// DraftPrices are the prices a sampled request's draft name carries
// (PricedDraft), in target tokens: a drafted token's cost, an extra
// row's, what a round's first draft costs more, and what a round's
// first step costs more again where it catches up on two tokens (the
// last draft of a round whose drafts all stood, and the target's token).
type DraftPrices struct {
	Cost, Row, First, CatchUp float64
}

// SplitDraft is the proposer's id in a sampled request's draft name, and
// the prices it names (priced false: none, so the files' prices); the
// limits after them, if any, are DraftLimits'. A name whose prices or
// limits do not parse, or lie outside 0 … maxPrice (a row at least
// minRowCost), is an error.
func SplitDraft(name string) (id string, p DraftPrices, priced bool, err error) {
	if _, err := DraftLimits(name); err != nil {
		return "", DraftPrices{}, false, err
	}
	name, _, _ = strings.Cut(name, "/") // the limits, if any: DraftLimits
	id, prices, priced := strings.Cut(name, "@")
	if !priced {
		return name, DraftPrices{}, false, nil
	}
	prices, ok := strings.CutPrefix(prices, "c")
	c, v, ok2 := strings.Cut(prices, "v")
	v, u, hasCatchUp := strings.Cut(v, "u")
	v, f, hasFirst := strings.Cut(v, "f")
	if ok = ok && ok2; ok {
		p.Cost, err = strconv.ParseFloat(c, 64)
		if err == nil {
			p.Row, err = strconv.ParseFloat(v, 64)
		}
		if err == nil && hasFirst {
			p.First, err = strconv.ParseFloat(f, 64)
		}
		if err == nil && hasCatchUp {
			p.CatchUp, err = strconv.ParseFloat(u, 64)
		}
	}
	if !ok || err != nil || !(p.Cost >= 0 && p.Cost <= maxPrice && p.Row >= minRowCost && p.Row <= maxPrice &&
		p.First >= 0 && p.First <= maxPrice && p.CatchUp >= 0 && p.CatchUp <= maxPrice) {
		return "", DraftPrices{}, false, fmt.Errorf("spec: draft %q: the prices after @ must be c<cost>v<row>, then f<first> or nothing, then u<catch-up> or nothing, cost, first and catch-up 0 … %d and row %v … %d", name, maxPrice, minRowCost, maxPrice)
	}
	return id, p, true, nil
}

// median is the middle of v (the mean of the two middles for an even
// count); v is reordered.
func median(v []float64) float64 {
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// stepper evaluates prompt on a session of m and returns a timer of one
// step of rows tokens after it (at most most), each row picked by pick,
// the session trimmed back after; and a timer of a draft's catch-up, a
// step of rows tokens whose last alone has its logits, judged by pick.
func stepper(ctx context.Context, m *model.Model, prompt []uint32, most int) (step, catchUp func(rows int, pick func(b *model.Batch, row int)) (time.Duration, error), closer func(), err error) {
	s, err := m.NewSession(model.SessionOptions{Context: len(prompt) + most})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("spec: measure: %w", err)
	}
	b, err := m.NewBatch(model.BatchOptions{Tokens: most, Seqs: most})
	if err != nil {
		s.Close()
		return nil, nil, nil, fmt.Errorf("spec: measure: %w", err)
	}
	if _, err := s.Eval(ctx, prompt); err != nil {
		s.Close()
		return nil, nil, nil, fmt.Errorf("spec: measure: %w", err)
	}
	window := make([]uint32, most)
	copy(window, prompt)
	timed := func(rows, logits int, pick func(b *model.Batch, row int)) (time.Duration, error) {
		start := time.Now()
		if err := b.Step(ctx, []model.Seq{{Session: s, Tokens: window[:rows], Logits: logits}}); err != nil {
			return 0, fmt.Errorf("spec: measure: %w", err)
		}
		for j := range logits {
			pick(b, j)
		}
		d := time.Since(start)
		s.Truncate(len(prompt))
		return d, nil
	}
	step = func(rows int, pick func(b *model.Batch, row int)) (time.Duration, error) {
		return timed(rows, rows, pick)
	}
	catchUp = func(rows int, pick func(b *model.Batch, row int)) (time.Duration, error) { return timed(rows, 1, pick) }
	return step, catchUp, func() { s.Close() }, nil
}

// Window is a window of at most maxK drafts (0: DefaultMaxWindow) priced
// at p: for a greedy serve, whose tokens do not depend on its windows.
func (p Prices) Window(maxK int) *Window {
	w := NewWindow(maxK, p.Cost, max(p.Row, minRowCost))
	w.steps = p.Steps
	w.catchUp = max(p.CatchUp-p.Cost, 0)
	w.first = p.First
	return w
}
