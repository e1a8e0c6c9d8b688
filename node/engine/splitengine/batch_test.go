package splitengine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

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
