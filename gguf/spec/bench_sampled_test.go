package spec_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/sample"
	"github.com/meshnode/meshnode/gguf/spec"
)

// BenchmarkSampledSpeculation (make bench-spec-sampled) decodes sampled
// tokens (temperature 0.7, BENCH_SEEDS seeds of BENCH_TG tokens after the
// reference prompts; at most 32 on the 1B shape) on the built-in F16 with
// each of its proposers, and on make bench-spec's 1B-shaped inflation of
// the built-in Q8_0 (BENCH_CACHE) with the built-in as draft and lookup:
// plainly; speculating whatever the measured prices say, its windows
// priced by the files, as sampled serves did before Prices.SampledPays
// ("always"); and as the engine now serves them, which speculates only
// where SampledPays says, its windows priced at the sampled prices its
// draft name carries ("engine"). It prints the sampled prices that
// Drafter.Measure found, the decision, and tok/s of each with the
// speedups over plain, each the total of the seeds' runs, the three
// alternating per seed.
func BenchmarkSampledSpeculation(b *testing.B) {
	if os.Getenv("MESHNODE_BENCH_SPEC") == "" {
		b.Skip("set MESHNODE_BENCH_SPEC=1 (make bench-spec-sampled): takes a minute")
	}
	shared := os.Getenv("MESHNODE_MODELS")
	if shared == "" {
		shared = filepath.Join("..", "..", "..", "shared", "models")
	}
	cacheDir := benchCacheDir()
	tg, seeds := envInt("BENCH_TG", 64), envInt("BENCH_SEEDS", 8)
	be := benchBackend(b, envInt("BENCH_THREADS", runtime.NumCPU()))
	defer be.Close()
	refs := referencePrompts(b)
	ctx := context.Background()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "target\tdraft\tsampled c\tsampled first\tsampled catch-up\tsampled v\tspeculates\tplain tok/s\talways tok/s\talways\taccept\tengine tok/s\tengine\t\n")
	for _, tc := range []struct {
		target string
		drafts []string
		tg     int
	}{
		{filepath.Join(shared, "meshnode-fortunes-f16.gguf"), []string{"meshnode-fortunes-draft-q8_0.gguf", "meshnode-fortunes-q8_0.gguf", spec.DraftLookup}, tg},
		// make bench-spec's inflation of the built-in Q8_0 to a 1B
		// model's shape, where it has made it; its draft the built-in.
		{filepath.Join(cacheDir, "meshnode-fortunes-1b-shape-q8_0.gguf"), []string{"meshnode-fortunes-q8_0.gguf", spec.DraftLookup}, min(tg, 32)},
	} {
		if !fileExists(tc.target) {
			b.Logf("%s: skipped, no such file (set MESHNODE_MODELS; make bench-spec makes the 1B shape)", tc.target)
			continue
		}
		runSampledCase(b, ctx, be, tw, tc.target, shared, tc.drafts, refs, tc.tg, seeds)
	}
	tw.Flush()
}

// runSampledCase is BenchmarkSampledSpeculation's rows for one target.
func runSampledCase(b *testing.B, ctx context.Context, be backend.Backend, tw io.Writer, targetPath, shared string, drafts []string, refs [][]uint32, tg, seeds int) {
	tf, target := loadBench(b, targetPath, be)
	defer tf.Close()
	for _, draft := range drafts {
		path := draft
		if draft != spec.DraftLookup {
			if path = filepath.Join(shared, draft); !fileExists(path) {
				b.Logf("%s: skipped, no %s", draft, path)
				continue
			}
		}
		d, err := spec.LoadDrafter(spec.DrafterConfig{Path: path}, tf, target.Config().VocabSize, 256, be)
		if err != nil {
			b.Fatal(err)
		}
		p, err := d.Measure(ctx, target)
		if err != nil {
			b.Fatal(err)
		}
		var took [3]time.Duration // plain, always, engine
		var st spec.Stats
		for seed := range uint64(seeds) {
			sp := sample.Params{Temperature: 0.7, Seed: seed + 1}
			prompt := refs[int(seed)%len(refs)]
			for i, speculate := range []bool{false, true, d.SampledID() != ""} {
				var prop spec.Proposer
				var w *spec.Window
				release := func() {}
				if speculate {
					if prop, release, err = d.Proposer(sp); err != nil {
						b.Fatal(err)
					}
					// always: the files' prices; engine: the request's.
					if w = d.Window(false); i == 2 {
						if w, err = d.SampledWindow(d.SampledID()); err != nil {
							b.Fatal(err)
						}
					}
				}
				s, err := target.NewSession(model.SessionOptions{Context: 256})
				if err != nil {
					b.Fatal(err)
				}
				bt, err := target.NewBatch(model.BatchOptions{Tokens: 16, Seqs: 16})
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				_, rs, err := spec.Generate(ctx, bt, s, prompt, tg, sp, prop, w)
				took[i] += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				if i == 1 {
					st.Proposed, st.Accepted = st.Proposed+rs.Proposed, st.Accepted+rs.Accepted
				}
				release()
				s.Close()
			}
		}
		tokens := float64(seeds * tg)
		tps := func(d time.Duration) float64 { return tokens / d.Seconds() }
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t+%.3f\t%.3f\t%.3f\t%v\t%.1f\t%.1f\t%.2f×\t%.2f\t%.1f\t%.2f×\t\n", filepath.Base(targetPath), draft, p.SampledCost, p.SampledFirst, p.SampledCatchUp, p.SampledRow, d.SampledID() != "",
			tps(took[0]), tps(took[1]), took[0].Seconds()/took[1].Seconds(), float64(st.Accepted)/float64(max(1, st.Proposed)),
			tps(took[2]), took[0].Seconds()/took[2].Seconds())
		d.Close()
	}
}
