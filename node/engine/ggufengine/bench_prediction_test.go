package ggufengine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

// BenchmarkPrediction is make bench-prediction: greedy serves given a
// predicted output (OpenAI's prediction: spec.Predicted) against the
// same serves without one, on models with no draft of their own: the
// built-in Q8_0 and, where the bench cache holds it (make bench-spec
// makes it), the 1B-shaped Q8_0. Each is predicted its own plain answer
// ("whole": a file given back unchanged) and that answer with an eighth
// of its tokens, in its middle, replaced ("edited": an edit of a few
// lines). The tokens are the same either way (TestPrediction). Decode
// tok/s after the first token, each side's fastest of BENCH_REPS
// (default 3) alternating rounds, the speedup and the predicted tokens
// accepted.
func BenchmarkPrediction(b *testing.B) {
	if os.Getenv("MESHNODE_BENCH_SPEC") == "" {
		b.Skip("set MESHNODE_BENCH_SPEC=1 (make bench-prediction)")
	}
	reps := benchEnvInt("BENCH_REPS", 3)
	type benchCase struct {
		name, target string
		tg           uint32
	}
	cases := []benchCase{{"built-in Q8_0", fortunesPath, 128}}
	if p := filepath.Join(benchCache(b), "meshnode-fortunes-1b-shape-q8_0.gguf"); fileExists(p) {
		cases = append(cases, benchCase{"fortunes-1B Q8_0", p, 64})
	} else {
		b.Logf("no 1B-shaped Q8_0 in %s (make bench-spec makes it): the built-in model only", benchCache(b))
	}
	for _, bc := range cases {
		m, err := Load(bc.target, Config{Fidelity: receipt.F1, UJPerToken: 1, Context: 512, Sessions: 1})
		if err != nil {
			b.Fatal(err)
		}
		prompt := m.Tokenize("There once was a man from Nantucket", true, false) // answered at length
		// round serves once, predicted pred (nil: none), and returns
		// decode tok/s after the first token, the tokens and the outcome.
		round := func(pred []uint32) (float64, []uint32, engine.Outcome) {
			ctx := context.Background()
			if pred != nil {
				ctx = engine.WithPrediction(ctx, pred)
			}
			var first time.Time
			var got []uint32
			out, err := m.Engine().Serve(ctx, request(bc.tg, nil), prompt, func(t uint32) error {
				if len(got) == 0 {
					first = time.Now()
				}
				got = append(got, t)
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			if len(got) < 2 {
				b.Fatalf("%s: %d tokens", bc.name, len(got))
			}
			return float64(len(got)-1) / time.Since(first).Seconds(), got, out
		}
		_, answer, _ := round(nil)
		n := len(answer)
		edited := slices.Concat(answer[:n/2-n/16], slices.Repeat([]uint32{400}, n/8), answer[n/2+n/16:])
		for _, pc := range []struct {
			name string
			pred []uint32
		}{{"whole", answer}, {"edited", edited}} {
			var plain, pred float64
			var out engine.Outcome
			for r := range b.N * reps {
				sides := []func(){
					func() { p, _, _ := round(nil); plain = max(plain, p) },
					func() {
						s, got, o := round(pc.pred)
						if !slices.Equal(got, answer) {
							b.Fatalf("%s, %s: the tokens differ from plain decoding's", bc.name, pc.name)
						}
						if s > pred {
							pred, out = s, o
						}
					},
				}
				sides[r%2]()
				sides[(r+1)%2]()
			}
			fmt.Printf("%-18s %-7s plain %8.1f tok/s, predicted %8.1f tok/s: %.2f× (%d tokens, %d of %d predicted tokens accepted)\n",
				bc.name, pc.name, plain, pred, pred/plain, out.TokensOut, out.SpecAccepted, out.SpecProposed)
		}
		m.Close()
	}
}
