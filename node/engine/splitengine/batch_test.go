package splitengine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/stage"
)

// TestSharedSteps: serves at once share the pipeline's steps, through
// real stages: while the first step is held, the other serves' steps
// queue, and the next step carries them. Each serve, greedy or
// seeded, gets the tokens the whole model gives it alone. Told to step
// each serve alone (as the benchmarks compare), no step carries two.
func TestSharedSteps(t *testing.T) {
	ref, _ := setup(t)
	prompts := []string{"Q: What is love?\nA:", "A man walks into a bar", "Q: Why did the chicken cross the road?\nA:", "Knock knock."}
	seed := uint64(11)
	reqs := []receipt.ServeRequest{greedy(16, nil), greedy(16, nil),
		greedy(16, &receipt.Sampling{TemperatureE6: 800_000, Seed: &seed}), greedy(16, &receipt.Sampling{TemperatureE6: 800_000, TopK: 40, Seed: &seed})}
	want := make([][]uint32, len(prompts))
	for i, p := range prompts {
		var err error
		if want[i], _, err = serve(ref.Engine(), ref.Tokenize(p, true, false), reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, alone := range []bool{false, true} {
		gp := &gatedPipeline{Pipeline: startSplit(t, openFile(t), layouts["3 stages"], 64, splitSeqs, 0), serves: len(prompts)}
		w, _ := ref.Engine().Weights()
		e := New(Config{Recipe: "fortunes", Fidelity: receipt.F1, UJPerToken: 250, Weights: w,
			Vocab: ref.Config().VocabSize, Context: 256, Batch: 64, Sessions: splitSeqs, Tokens: ref.Tokenizer()}, gp)
		e.alone, gp.e = alone, e
		var wg sync.WaitGroup
		errs := make([]error, len(prompts))
		for i, p := range prompts {
			wg.Go(func() {
				got, _, err := serve(e, ref.Tokenize(p, true, false), reqs[i])
				if err == nil && !slices.Equal(got, want[i]) {
					err = fmt.Errorf("tokens %v, alone on the whole model %v", got, want[i])
				}
				errs[i] = err
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("alone %v, serve %d (%q): %v", alone, i, prompts[i], err)
			}
		}
		switch {
		case !gp.held:
			t.Errorf("alone %v: the other serves' steps never queued behind the first", alone)
		case !alone && gp.most < 2:
			t.Errorf("shared steps: no step carried two serves' steps")
		case alone && gp.most != 1:
			t.Errorf("alone: a step carried %d serves' steps", gp.most)
		}
	}
}

// gatedPipeline holds its first step until every one of serves has a
// step in it or waiting behind it, and counts the most sequences a step
// carried.
type gatedPipeline struct {
	Pipeline
	e      *Engine
	serves int
	steps  int
	held   bool
	most   int
}

// Step is called with the engine's lock held, one at a time.
func (g *gatedPipeline) Step(ctx context.Context, seqs []stage.Seq) ([]stage.Result, error) {
	if g.steps++; g.steps == 1 {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			g.e.qmu.Lock()
			n := len(g.e.queue)
			g.e.qmu.Unlock()
			if len(seqs)+n >= g.serves {
				g.held = true
				break
			}
		}
	}
	g.most = max(g.most, len(seqs))
	return g.Pipeline.Step(ctx, seqs)
}

// TestReportsWork: a serve's work reaches its meter: every token a step
// carried for it, times the head's stage's weight bytes, and with a draft
// model, the draft's tokens evaluated, times its file's size; so that
// serves sharing the head's meter share its energy by their work.
func TestReportsWork(t *testing.T) {
	ref, m := setup(t)
	prompt := ref.Tokenize("Q: What is love?\nA:", true, false)
	if !engine.ReportsWork(newEngine(ref, &whole{m: m, sessions: map[uint64]*model.Session{}}, nil)) {
		t.Fatal("the engine does not say it reports work")
	}
	be := cpu.New(cpu.Options{Threads: 1})
	t.Cleanup(func() { be.Close() })
	for _, draft := range []string{"", spec.DraftLookup, fortunesPath} {
		w := &countingWhole{whole: whole{m: m, sessions: map[uint64]*model.Session{}}}
		e := newEngine(ref, w, nil)
		var unit uint64
		if draft != "" {
			// Priced cheap, so that the model drafts.
			d, err := spec.LoadDrafter(spec.DrafterConfig{Path: draft, Cost: 0.05}, openFile(t), ref.Config().VocabSize, 256, be)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			e.cfg.Draft, unit = d, d.Unit()
		}
		var work workCount
		var got []uint32
		out, err := e.Serve(hw.WithWork(context.Background(), &work), greedy(24, nil), prompt, func(id uint32) error { got = append(got, id); return nil })
		if err != nil {
			t.Fatal(err)
		}
		head := uint64(w.tokens) * uint64(m.WeightBytes())
		drafted := work.units - head
		switch {
		case w.tokens < len(prompt)+int(out.TokensOut)-1:
			t.Errorf("draft %q: the steps carried %d tokens, fewer than the prompt's %d and the %d out", draft, w.tokens, len(prompt), out.TokensOut)
		case work.units < head:
			t.Errorf("draft %q: %d units of work reported, less than the %d tokens stepped × %d bytes", draft, work.units, w.tokens, m.WeightBytes())
		case unit == 0 && drafted != 0:
			t.Errorf("draft %q, which reads no weights: %d units beyond the steps'", draft, drafted)
		case unit != 0 && (drafted%unit != 0 || drafted/unit < uint64(len(prompt))):
			t.Errorf("draft model: %d units beyond the steps', want a whole number of its tokens (%d bytes each), at least its prompt's %d", drafted, unit, len(prompt))
		}
	}
}

// workCount sums the work reported.
type workCount struct {
	mu    sync.Mutex
	units uint64
}

func (w *workCount) AddWork(units uint64) {
	w.mu.Lock()
	w.units += units
	w.mu.Unlock()
}
