package splitengine

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/hw/hwtest"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/stage"
	"github.com/meshnode/meshnode/node/wire/stagewire"
)

// TestPace: steps at their measured time, or a little off it, never
// report; steps a third slower or faster report once paceSpan of them
// are weighed, then not again within the gap; steps of a kind not
// measured, or before any measurement, are not weighed; a measurement
// that finds the pipeline unchanged doubles the gap, a changed one
// resets it.
func TestPace(t *testing.T) {
	one := paceKey{stagewire.OutToken, 1}
	window := paceKey{stagewire.OutToken, 5}
	t0 := time.Unix(1_800_000_000, 0)
	ms := time.Millisecond
	// run weighs n steps of kind k taking took, a second apart from
	// *now, and returns the steps that reported.
	run := func(p *pace, now *time.Time, k paceKey, took time.Duration, n int) []int {
		var at []int
		for i := range n {
			*now = now.Add(time.Second)
			if p.observe(k, took, *now) {
				at = append(at, i)
			}
		}
		return at
	}
	measured := func(p *pace, oneStep time.Duration) {
		p.measured(map[paceKey][]time.Duration{one: {oneStep, oneStep + ms, oneStep - ms}, window: {2 * oneStep}})
	}

	var p pace
	now := t0
	if at := run(&p, &now, one, 100*ms, 100); at != nil {
		t.Fatalf("unmeasured: reports at %v", at)
	}
	measured(&p, 10*ms)
	if p.base[one] != 10*ms || p.base[window] != 20*ms || p.gap != paceGap {
		t.Fatalf("base %v gap %v, want the medians 10ms and 20ms and %v", p.base, p.gap, paceGap)
	}
	if at := run(&p, &now, one, 12*ms, 200); at != nil {
		t.Fatalf("steps 20%% over: reports at %v", at)
	}
	if at := run(&p, &now, paceKey{stagewire.OutLogits, 1}, 100*ms, 100); at != nil {
		t.Fatalf("an unmeasured kind: reports at %v", at)
	}

	// Twice the time: a report once paceSpan steps are weighed, then
	// none within the gap (a step a second), then one as it ends.
	p, now = pace{}, t0
	measured(&p, 10*ms)
	if at := run(&p, &now, window, 40*ms, 100); len(at) != 2 || at[0] != paceSpan-1 || at[1] != paceSpan-1+int(paceGap/time.Second) {
		t.Fatalf("windows at twice their time: reports at %v, want at steps %d and %d", at, paceSpan-1, paceSpan-1+int(paceGap/time.Second))
	}

	// Faster counts too.
	p, now = pace{}, t0
	measured(&p, 20*ms)
	if at := run(&p, &now, one, 10*ms, paceSpan); len(at) != 1 || at[0] != paceSpan-1 {
		t.Fatalf("steps at half their time: reports at %v, want at step %d", at, paceSpan-1)
	}

	// Measured again unchanged, the gap doubles, to paceMaxGap; changed,
	// it is reset.
	for range 10 {
		measured(&p, 21*ms)
	}
	if p.gap != paceMaxGap {
		t.Fatalf("measured unchanged ten times: gap %v, want %v", p.gap, paceMaxGap)
	}
	measured(&p, 42*ms)
	if p.gap != paceGap {
		t.Fatalf("a base twice the last: gap %v, want it reset to %v", p.gap, paceGap)
	}
	p.reset()
	if at := run(&p, &now, one, 100*ms, 100); at != nil {
		t.Fatalf("reset: reports at %v", at)
	}
}

// pacedPipeline is a pipeline whose every step takes lat on clock (as a
// link's latency would), and no time otherwise; a step carrying more
// than one serve takes shared instead, where set.
type pacedPipeline struct {
	Pipeline
	clock       *hwtest.Clock
	lat, shared atomic.Int64
}

func (p *pacedPipeline) Step(ctx context.Context, seqs []stage.Seq) ([]stage.Result, error) {
	lat := p.lat.Load()
	if s := p.shared.Load(); s != 0 && len(seqs) > 1 {
		lat = s
	}
	p.clock.Advance(time.Duration(lat))
	return p.Pipeline.Step(ctx, seqs)
}

// TestMeasureAgainOnDrift: a measured pipeline whose steps keep their
// time does not report, however many serves run; once its steps take
// twice as long (a slower link), Drifted reports within a few serves,
// and a new measurement makes the new time the base. Sampled serves'
// steps are weighed alike, and so are steps shared by serves at once.
func TestMeasureAgainOnDrift(t *testing.T) {
	ref, _ := setup(t)
	prompts := specPrompts(t, ref)
	e, _ := specEngine(t, ref, layouts["2 stages"], spec.DrafterConfig{Path: spec.DraftLookup})
	clock := hwtest.NewClock(time.Unix(1_800_000_000, 0))
	pp := &pacedPipeline{Pipeline: e.p, clock: clock}
	pp.lat.Store(int64(4 * time.Millisecond))
	e.p, e.cfg.Now = pp, clock.Now
	if _, err := e.Measure(t.Context()); err != nil {
		t.Fatal(err)
	}
	// serves runs n serves and says whether Drifted reported; sampled
	// ones name the draft as the engine does (or none).
	sampled := false
	serves := func(n int) bool {
		for i := range n {
			req := greedy(40, nil)
			if sampled {
				seed := uint64(i)
				req = greedy(40, &receipt.Sampling{TemperatureE6: 700_000, Seed: &seed, Draft: e.Draft()})
			}
			if _, _, err := serve(e, prompts[i%len(prompts)], req); err != nil {
				t.Fatal(err)
			}
			select {
			case <-e.Drifted():
				return true
			default:
			}
		}
		return false
	}
	if serves(8) {
		t.Fatal("steps at their measured time: Drifted reported")
	}
	pp.lat.Store(int64(8 * time.Millisecond))
	if !serves(8) {
		t.Fatal("steps at twice their measured time: Drifted did not report in 8 serves")
	}
	if _, err := e.Measure(t.Context()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(paceMaxGap) // past any gap: only a drift holds a report back now
	if serves(8) {
		t.Fatal("measured again at the new time: Drifted reported")
	}
	// Sampled serves' steps (the logits of every row crossing) are
	// weighed against the sampled steps measured.
	sampled = true
	if serves(8) {
		t.Fatal("sampled steps at their measured time: Drifted reported")
	}
	pp.lat.Store(int64(16 * time.Millisecond))
	clock.Advance(paceMaxGap)
	if !serves(8) {
		t.Fatal("sampled steps at twice their measured time: Drifted did not report in 8 serves")
	}

	// A busy pipeline, its steps shared by serves that are all decoding,
	// is weighed too: as one serve's window of their rows.
	sampled = false
	if _, err := e.Measure(t.Context()); err != nil {
		t.Fatal(err)
	}
	busy := func() bool {
		var wg sync.WaitGroup
		for range splitSeqs {
			wg.Go(func() {
				for i := range 2 {
					if _, _, err := serve(e, prompts[i%len(prompts)], greedy(40, nil)); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		select {
		case <-e.Drifted():
			return true
		default:
			return false
		}
	}
	clock.Advance(paceMaxGap)
	if busy() {
		t.Fatal("shared steps at their measured time: Drifted reported")
	}
	pp.shared.Store(int64(32 * time.Millisecond)) // a step alone keeps its time
	if !busy() {
		t.Fatal("shared steps at twice their measured time: Drifted did not report")
	}
}
