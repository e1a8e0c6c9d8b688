package splitengine

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/engine/ggufengine"
	"github.com/meshnode/meshnode/node/receipt"
)

// BenchmarkSplitSpeculation is decode tok/s of the built-in model split
// in 2 and 3 stages over in-process pipes (and over pipes with 1 ms of
// one-way latency per frame, about a LAN's), plainly and speculating
// with prompt lookup, and with the trained 2-layer draft where the
// shared models are present, on a prompt that repeats itself: the
// model's own greedy continuation of a line, then the line again, so
// that the text that follows is one it has seen. Each proposer's windows
// are priced by the files ("files") and by the prices Measure finds on
// the pipeline ("measured"). A split model's step waits on every stage in
// turn, so a window — one trip for up to k+1 tokens — pays more than on a
// whole model, and more than the files' sizes say. Generation goes on
// past end-of-text (as llama.cpp's reference runs do): the figure is
// decoding's, not the tiny model's sense of an ending. With
// BENCH_SAMPLED=1 the serves sample (temperature 0.7, seeds 1, 2, …), naming
// the draft as the node would. Not a timed test: make bench-spec-split.
func BenchmarkSplitSpeculation(b *testing.B) {
	ref, _ := setup(b)
	const n = 64
	prompt := repeatingPrompt(b, ref, n)
	proposers := []string{"", spec.DraftLookup}
	if dc, ok := drafts(b)["fortunes-draft"]; ok {
		proposers = append(proposers, dc.Path)
	}
	for _, lname := range []string{"2 stages", "3 stages"} {
		for _, delay := range []time.Duration{0, time.Millisecond} {
			for _, prop := range proposers {
				for _, measured := range []bool{false, true} {
					name := "plain"
					switch {
					case prop == "" && measured:
						continue
					case prop == spec.DraftLookup:
						name = "lookup"
					case prop != "":
						name = "fortunes-draft"
					}
					if prop != "" {
						name += map[bool]string{false: ",files", true: ",measured"}[measured]
					}
					b.Run(fmt.Sprintf("%s/latency=%v/%s", lname, delay, name), func(b *testing.B) {
						benchSplit(b, lname, delay, prop, measured, prompt, n)
					})
				}
			}
		}
	}
}

// repeatingPrompt is the split benchmarks' prompt, one that repeats
// itself: the model's own greedy continuation of a line (n tokens, on a
// pipeline of 2 stages), then the line again.
func repeatingPrompt(b *testing.B, ref *ggufengine.Model, n uint32) []uint32 {
	line := ref.Tokenize("A man walks into a bar", true, false)
	cont, _, err := serve(New(Config{Recipe: "fortunes", Vocab: ref.Config().VocabSize, Context: 256, Batch: 128, Tokens: noText{}},
		startSplit(b, openFile(b), layouts["2 stages"], 128, splitSeqs, 0)), line, greedy(n, nil))
	if err != nil {
		b.Fatal(err)
	}
	return slices.Concat(line, cont, line[1:])
}

// benchSplit serves prompt n tokens at a time on the built-in model
// split by layout, speculating with proposer (a draft's path, "lookup",
// or "" for none), its windows priced by the pipeline's measured prices
// if measured, else by the files'.
func benchSplit(b *testing.B, layout string, delay time.Duration, proposer string, measured bool, prompt []uint32, n uint32) {
	f := openFile(b)
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	cfg := Config{Recipe: "fortunes", Fidelity: receipt.F1, Vocab: 32000, Context: 256, Batch: 128, Tokens: noText{}}
	if proposer != "" {
		// The default window, up to 8 drafts: the stages answer 9 rows
		// a step (LoadStage.Rows), though they hold the KV of
		// splitSeqs requests.
		d, err := spec.LoadDrafter(spec.DrafterConfig{Path: proposer}, f, cfg.Vocab, cfg.Context, be)
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		cfg.Draft = d
	}
	e := New(cfg, startSplit(b, f, layouts[layout], 128, spec.DefaultMaxWindow+1, delay))
	var prices spec.Prices
	if measured {
		var err error
		if prices, err = e.Measure(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	sampled := os.Getenv("BENCH_SAMPLED") != ""
	var tokens, proposed, accepted uint32
	var decode time.Duration
	var seed uint64
	for b.Loop() {
		req := greedy(n, nil)
		if sampled {
			// As the node sends a sampled request: naming the draft as
			// the engine names it now (with the prices measured, or
			// none); a seed a serve.
			seed++
			req = greedy(n, &receipt.Sampling{TemperatureE6: 700_000, Seed: &seed, Draft: e.Draft()})
		}
		out, took, err := decodeServe(b.Context(), e, req, prompt)
		if err != nil {
			b.Fatal(err)
		}
		decode += took
		tokens += out.TokensOut - 1
		proposed, accepted = proposed+out.SpecProposed, accepted+out.SpecAccepted
	}
	b.ReportMetric(float64(tokens)/decode.Seconds(), "decode-tok/s")
	if proposed > 0 {
		b.ReportMetric(float64(accepted)/float64(proposed), "accepted")
		b.ReportMetric(float64(tokens)/float64(tokens-accepted), "tok/step")
	}
	if measured {
		b.ReportMetric(prices.Cost, "c")
		b.ReportMetric(prices.Row, "v")
	}
}

// decodeServe serves req on e and returns the outcome and the time
// decoding took: from the first token (the prompt's) to the last.
func decodeServe(ctx context.Context, e *Engine, req receipt.ServeRequest, prompt []uint32) (engine.Outcome, time.Duration, error) {
	var first time.Time
	out, err := e.Serve(ctx, req, prompt, func(uint32) error {
		if first.IsZero() {
			first = time.Now()
		}
		return nil
	})
	return out, time.Since(first), err
}

// BenchmarkSplitDrift is decode tok/s of the built-in model in 2 stages,
// speculating with the trained 2-layer draft (prompt lookup without the
// shared models), on BenchmarkSplitSpeculation's prompt: its pipeline
// measured over links of no latency (where the draft does not pay), then
// served over links of 1 ms one way. "kept": on the prices measured at
// placement, as before a split model measured again; "again": measured
// again each time Drifted reports, as the node does. The first serves
// run on the old prices in both (the drift shows over 32 steps). Not a
// timed test: make bench-spec-split.
func BenchmarkSplitDrift(b *testing.B) {
	ref, _ := setup(b)
	const n = 64
	prompt := repeatingPrompt(b, ref, n)
	proposer := spec.DraftLookup
	if dc, ok := drafts(b)["fortunes-draft"]; ok {
		proposer = dc.Path
	}
	for _, again := range []bool{false, true} {
		b.Run(map[bool]string{false: "kept", true: "again"}[again], func(b *testing.B) {
			f := openFile(b)
			be := cpu.New(cpu.Options{Threads: 1})
			defer be.Close()
			d, err := spec.LoadDrafter(spec.DrafterConfig{Path: proposer}, f, 32000, 256, be)
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			var lat atomic.Int64
			e := New(Config{Recipe: "fortunes", Fidelity: receipt.F1, Vocab: 32000, Context: 256, Batch: 128, Tokens: noText{}, Draft: d},
				startSplitLinks(b, f, layouts["2 stages"], 128, spec.DefaultMaxWindow+1, true, func() time.Duration { return time.Duration(lat.Load()) }))
			placed, err := e.Measure(b.Context())
			if err != nil {
				b.Fatal(err)
			}
			lat.Store(int64(time.Millisecond))
			var measures atomic.Int32
			var last atomic.Value
			last.Store(placed)
			if again {
				ctx, cancel := context.WithCancel(b.Context())
				done := make(chan struct{})
				defer func() { cancel(); <-done }()
				go func() {
					defer close(done)
					for {
						select {
						case <-ctx.Done():
							return
						case <-e.Drifted():
							if p, err := e.Measure(ctx); err == nil {
								measures.Add(1)
								last.Store(p)
							}
						}
					}
				}()
			}
			var tokens, accepted uint32
			var decode time.Duration
			for b.Loop() {
				out, took, err := decodeServe(b.Context(), e, greedy(n, nil), prompt)
				if err != nil {
					b.Fatal(err)
				}
				decode += took
				tokens += out.TokensOut - 1
				accepted += out.SpecAccepted
			}
			b.ReportMetric(float64(tokens)/decode.Seconds(), "decode-tok/s")
			b.ReportMetric(float64(tokens)/float64(tokens-accepted), "tok/step")
			b.ReportMetric(float64(measures.Load()), "measured-again")
			b.ReportMetric(placed.Cost, "c-placed")
			b.ReportMetric(last.Load().(spec.Prices).Cost, "c-last")
		})
	}
}

// BenchmarkSplitConcurrent is decode tok/s of 4 serves at once (64 tokens
// each, greedy) on the built-in model in 2 stages over links of 1 ms one
// way, plainly and speculating with prompt lookup: their steps shared
// (what the engine does) against each serve stepping alone (as before
// serves shared steps). A split model's step waits on its links, so a
// step that carries every waiting serve's token serves them in one trip.
// Not a timed test: make bench-split.
func BenchmarkSplitConcurrent(b *testing.B) {
	ref, _ := setup(b)
	prompts := [][]uint32{ref.Tokenize("A man walks into a bar", true, false), ref.Tokenize("Q: What is love?\nA:", true, false),
		ref.Tokenize("Knock knock.", true, false), ref.Tokenize("The cat sat on the mat.", true, false)}
	for _, proposer := range []string{"", spec.DraftLookup} {
		for _, alone := range []bool{true, false} {
			name := map[bool]string{true: "alone", false: "shared"}[alone]
			if proposer != "" {
				name = proposer + "/" + name
			} else {
				name = "plain/" + name
			}
			b.Run(name, func(b *testing.B) {
				f := openFile(b)
				be := cpu.New(cpu.Options{Threads: 1})
				defer be.Close()
				cfg := Config{Recipe: "fortunes", Fidelity: receipt.F1, Vocab: 32000, Context: 256, Batch: 128, Sessions: len(prompts), Tokens: noText{}}
				rows := splitSeqs
				if proposer != "" {
					d, err := spec.LoadDrafter(spec.DrafterConfig{Path: proposer}, f, cfg.Vocab, cfg.Context, be)
					if err != nil {
						b.Fatal(err)
					}
					defer d.Close()
					cfg.Draft, rows = d, spec.DefaultMaxWindow+1
				}
				e := New(cfg, startSplit(b, f, layouts["2 stages"], 128, rows, time.Millisecond))
				e.alone = alone
				var tokens atomic.Int64
				start := time.Now()
				for b.Loop() {
					var wg sync.WaitGroup
					for _, p := range prompts {
						wg.Go(func() {
							out, _, err := decodeServe(b.Context(), e, greedy(64, nil), p)
							if err != nil {
								b.Error(err)
							}
							tokens.Add(int64(out.TokensOut))
						})
					}
					wg.Wait()
					if b.Failed() {
						b.FailNow()
					}
				}
				b.ReportMetric(float64(tokens.Load())/time.Since(start).Seconds(), "tok/s")
			})
		}
	}
}

// BenchmarkSplitPrediction is greedy decode tok/s of the built-in model
// split in 2 stages, with no draft, over in-process pipes with no
// latency and with 1 ms one way per frame (about a LAN's), given a
// predicted output (spec.Predicted) against the same serves without
// one: its own plain answer ("whole") and that answer with an eighth of
// its tokens, in its middle, replaced ("edited"). A window of the
// prediction's tokens is one trip through the stages for up to 9
// tokens. The tokens are the same either way (TestPrediction). Each
// side's fastest of BENCH_REPS (default 3) alternating rounds, the
// speedup and the predicted tokens accepted. Not a timed test: make
// bench-spec-split.
func BenchmarkSplitPrediction(b *testing.B) {
	ref, _ := setup(b)
	reps := 3
	if v, err := strconv.Atoi(os.Getenv("BENCH_REPS")); err == nil && v > 0 {
		reps = v
	}
	const n = 64
	prompt := ref.Tokenize("There once was a man from Nantucket", true, false)
	for _, delay := range []time.Duration{0, time.Millisecond} {
		f := openFile(b)
		be := cpu.New(cpu.Options{Threads: 1})
		e := New(Config{Recipe: "fortunes", Fidelity: receipt.F1, Vocab: 32000, Context: 256, Batch: 128, Tokens: noText{}},
			startSplit(b, f, layouts["2 stages"], 128, spec.DefaultMaxWindow+1, delay))
		// round serves once, predicted pred (nil: none), and returns
		// decode tok/s after the first token, the tokens and the outcome.
		round := func(pred []uint32) (float64, []uint32, engine.Outcome) {
			ctx := b.Context()
			if pred != nil {
				ctx = engine.WithPrediction(ctx, pred)
			}
			var got []uint32
			var first time.Time
			out, err := e.Serve(ctx, greedy(n, nil), prompt, func(t uint32) error {
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
				b.Fatalf("%d tokens", len(got))
			}
			return float64(len(got)-1) / time.Since(first).Seconds(), got, out
		}
		_, answer, _ := round(nil)
		k := len(answer)
		edited := slices.Concat(answer[:k/2-k/16], slices.Repeat([]uint32{400}, k/8), answer[k/2+k/16:])
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
							b.Fatalf("latency %v, %s: the tokens differ from plain decoding's", delay, pc.name)
						}
						if s > pred {
							pred, out = s, o
						}
					},
				}
				sides[r%2]()
				sides[(r+1)%2]()
			}
			fmt.Printf("2 stages, latency %-4v %-7s plain %8.1f tok/s, predicted %8.1f tok/s: %.2f× (%d tokens, %d of %d predicted tokens accepted)\n",
				delay, pc.name, plain, pred, pred/plain, out.TokensOut, out.SpecAccepted, out.SpecProposed)
		}
		e.Close()
		be.Close()
	}
}
