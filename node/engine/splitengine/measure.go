package splitengine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/node/wire/stagewire"
)

// ErrNoDraft is Measure's error on an engine without a proposer.
var ErrNoDraft = errors.New("splitengine: the model has no draft to price")

// measurePrompt is the length of the prompt the measuring request holds
// on the stages: a short one, so that its steps are decoding's.
const measurePrompt = 16

// Measure prices speculation on the pipeline serving now: a split
// model's step is a trip through its stages, which the files' sizes know
// nothing of, so the windows they price stay short where every draft
// that stands saves a round trip. A request of its own, taking a serve's
// place, holds a short prompt on the stages and times steps of 1 to
// Draft.Max()+1 rows through them, greedy and sampled (the logits of
// every row crossing the links, and judged as a verify judges them), and
// the draft's steps here (spec.Drafter.MeasureSteps), then leaves the
// stages. The draft keeps the prices: greedy serves' windows are sized
// by them, and new sampled requests name them (spec.Drafter.SampledID),
// until the pipeline is measured again. Its steps through the stages are
// what the serves' steps are then weighed against: when those drift,
// Drifted says so. It takes a fraction of a second on a LAN; serves step
// between its steps. A pipeline whose last stage answers fewer rows than
// a measured window (a node of before LoadStage's rows) is not measured,
// and the files' prices stand.
func (e *Engine) Measure(ctx context.Context) (spec.Prices, error) {
	d := e.cfg.Draft
	if d == nil {
		return spec.Prices{}, ErrNoDraft
	}
	if e.cfg.Context <= measurePrompt+1 {
		return spec.Prices{}, fmt.Errorf("splitengine: measure: a context of %d positions holds no window after a prompt", e.cfg.Context)
	}
	select {
	case e.slots <- struct{}{}:
		defer func() { <-e.slots }()
	case <-ctx.Done():
		return spec.Prices{}, ctx.Err()
	}
	r := &run{e: e, id: e.next.Add(1), want: stagewire.OutToken, measuring: true}
	defer r.forget()
	prompt := spec.MeasureTokens(min(measurePrompt, e.cfg.Batch), e.cfg.Vocab)
	if _, err := r.step(ctx, prompt, stagewire.OutToken, 1); err != nil {
		return spec.Prices{}, fmt.Errorf("splitengine: measure: %w", err)
	}
	most := min(r.rows(), d.Max()+1, e.cfg.Context-len(prompt), e.cfg.Batch)
	window := spec.MeasureTokens(most, e.cfg.Vocab)
	judge := spec.SampledJudge()
	// The steps through the stages alone, of each kind: what serves'
	// steps are weighed against (pace).
	samples := map[paceKey][]time.Duration{}
	step := func(ctx context.Context, rows int, sampled bool) (time.Duration, error) {
		want := stagewire.OutToken
		if sampled {
			want = stagewire.OutLogits
		}
		start := e.cfg.Now()
		res, err := r.step(ctx, window[:rows], want, rows)
		if err != nil {
			return 0, err
		}
		k := paceKey{want, rows}
		samples[k] = append(samples[k], r.took)
		switch {
		case sampled && rows == 1:
			judge(res.Logits)
		case sampled:
			for _, l := range res.Rows {
				judge(l)
			}
		}
		took := e.cfg.Now().Sub(start)
		return took, r.trim(ctx, len(prompt))
	}
	p, err := d.MeasureSteps(ctx, step, most)
	if err != nil {
		return spec.Prices{}, fmt.Errorf("splitengine: measure: %w", err)
	}
	e.mu.Lock()
	if r.p == e.p {
		e.pace.measured(samples)
	}
	e.mu.Unlock()
	return p, nil
}
