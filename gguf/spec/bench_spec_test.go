package spec_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/quant"
	"github.com/meshnode/meshnode/gguf/sample"
	"github.com/meshnode/meshnode/gguf/spec"
)

// timedProposer counts the time a proposer takes and the tokens it
// drafts: its measured cost per drafted token. Both proposers measured
// (a draft model, prompt lookup) are Judged, and are judged through it as
// they would be unwrapped.
type timedProposer struct {
	p      spec.Judged
	took   time.Duration
	drafts int
}

// Propose is ProposeJudged with no judge, as the proposers' own Propose.
func (t *timedProposer) Propose(ctx context.Context, seq []uint32, gen, k int) ([]spec.Draft, error) {
	return t.ProposeJudged(ctx, seq, gen, k, nil)
}

func (t *timedProposer) ProposeJudged(ctx context.Context, seq []uint32, gen, k int, judge func(float64) (bool, bool)) ([]spec.Draft, error) {
	start := time.Now()
	d, err := t.p.ProposeJudged(ctx, seq, gen, k, judge)
	t.took += time.Since(start)
	t.drafts += len(d)
	return d, err
}

// Prefill passes a draft model's prompt work on (spec.Prefiller), as the
// engine has it done: a wrapper without it would hide the work from
// spec.Prefill, and the window would then neither count the prompt as
// the draft's catch-up nor decline a draft too dear to start — the bench
// would measure a policy the engine does not follow.
func (t *timedProposer) Prefill(ctx context.Context, prompt []uint32) error {
	if pf, ok := t.p.(spec.Prefiller); ok {
		return pf.Prefill(ctx, prompt)
	}
	return nil
}

// specRun is one case's figures.
type specRun struct {
	plainTPS, specTPS float64 // decode tokens per second
	whole             float64 // plain time over speculative, prefill included (median of the pairs)
	median            float64 // the median speedup of the runs' pairs (each pair back to back)
	st                spec.Stats
	tokens            int
	c                 float64 // measured in the runs: the proposer's time per drafted token over a target token's
	prop              float64 // the proposer's time over plain decoding's (median of the rounds): what drafting adds
	cDecode           float64 // measured alone (spec.Measure): the draft's later one-token steps over the target's (its first step's extra is Prices.First)
	v                 float64 // measured alone (spec.Measure): an extra row of a 5-row window over a one-token step
	foresight         float64 // prompt lookup only: lookupForesight's bound at v
}

// benchThreshold is BENCH_THRESHOLD, the draft's stopping probability (0:
// spec.DefaultThreshold; negative: never stop).
func benchThreshold() float64 {
	v, _ := strconv.ParseFloat(os.Getenv("BENCH_THRESHOLD"), 64)
	return v
}

// benchWindows is BENCH_WINDOWS, the windows each case runs with, comma
// separated (0: adaptive; default "0,4").
func benchWindows() []int {
	var out []int
	for _, f := range strings.Split(os.Getenv("BENCH_WINDOWS"), ",") {
		if k, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && k >= 0 {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return []int{0, 4}
	}
	return out
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// loadBench opens the GGUF file at path and loads its model on be; the
// caller closes the file.
func loadBench(b *testing.B, path string, be backend.Backend) (*gguf.File, *model.Model) {
	f, err := gguf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	m, err := model.Load(f, be)
	if err != nil {
		f.Close()
		b.Fatal(err)
	}
	return f, m
}

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkSpeculative is make bench-spec: greedy decode speed without
// and with speculation, on the same prompts and thread count, for
//   - the built-in model's F16 with its Q8_0 as draft, with its Q4_0
//     (modeltest.Requantize, made once in the bench cache), and with
//     meshnode-fortunes-draft (in $MESHNODE_MODELS, ../shared/models);
//   - the built-in Q8_0 with prompt lookup, on prompts that repeat
//     themselves (a prompt, the model's own continuation, the prompt
//     again);
//   - the built-in model inflated to about Llama-3.2-1B's shape
//     (modeltest.Inflate, made once in the bench cache from the F16, or
//     from the built-in Q8_0 where the F16 is absent): the
//     same function at a 1B model's cost, with prompt lookup on the
//     repeating prompts, with the built-in Q8_0 as draft and with its own
//     Q4_0 (inflated alike) as draft;
//   - the built-in Q8_0 and the inflated 1B given a predicted output
//     (spec.Predicted, as OpenAI's prediction drafts): each prompt's
//     plain answer with an eighth of it replaced (editedAnswer);
//   - the 1B-shaped Q8_0 with prompt lookup on a repeating prompt, and
//     with its Q4_0 as draft (BENCH_CACHE's
//     llama-3.2-1b-shape-{q8_0,q4_0}.gguf; see bench-batch), when present.
//
// For each: decode tok/s plain and speculating (prefill excluded, the
// draft model's included; each prompt's fastest of BENCH_REPS rounds, the
// two alternating which goes first), the median speedup of the runs'
// pairs (each pair back to back, so under the same load) and with
// prefill counted, the proposer's time as a share of plain decoding's
// (what drafting adds, measured in the run), the acceptance rate, tokens per round E and drafts per round K, c (the proposer's measured time per
// drafted token over the target's per token), the ideal speedup
// E / (K·c + 1) and ours as a share of it, and, with v the measured cost
// of an extra verified row, E / (K·(c+v) + 1); for prompt lookup, the
// foresight bound (lookupForesight): what rounds that knew which of
// lookup's drafts stand would reach at that v; and the goal column,
// issue 21's verdict (specGoal). Each case runs twice:
// speculating as the engine does a greedy serve (spec.Window priced by
// spec.Measure's c and v, as Drafter.Measure prices them at load — the
// "c decode" and "v" columns —, a copy's prior, the calibrated rule; "c
// sizes" is what a sampled serve's window is priced at), and with a fixed window of 4
// (spec.Fixed), which shows what speculation does where the adaptive
// window declines it. The speculative tokens must equal the plain ones.
// Knobs: BENCH_BACKEND (cpu, cuda or metal: benchBackend), BENCH_THREADS
// (the CPU's threads, default all CPUs), BENCH_TG (64), BENCH_REPS (2),
// BENCH_CASE (run the cases whose name holds it), BENCH_WINDOWS (the
// windows, comma separated, 0 for adaptive; default "0,4"), BENCH_THRESHOLD (the
// draft's stopping probability; default spec.DefaultThreshold, negative:
// never stop).
func BenchmarkSpeculative(b *testing.B) {
	if os.Getenv("MESHNODE_BENCH_SPEC") == "" {
		b.Skip("set MESHNODE_BENCH_SPEC=1 (make bench-spec): takes minutes")
	}
	threads := envInt("BENCH_THREADS", runtime.NumCPU())
	tg, reps := envInt("BENCH_TG", 64), envInt("BENCH_REPS", 2)
	be := benchBackend(b, threads)
	defer be.Close()
	shared := os.Getenv("MESHNODE_MODELS")
	cacheDir := benchCacheDir()
	fortunePrompts := referencePrompts(b)
	type benchCase struct {
		name, target, draft string // draft: a path, "lookup", or benchPrediction
		ctx                 int
		tg                  int
		prompts             func(m *model.Model) [][]uint32
		// threshold: the draft's stopping probability for this case (0:
		// BENCH_THRESHOLD or the default).
		threshold float64
		// prepare, if set, makes the case's files where they are missing
		// (only for a case that runs).
		prepare func()
	}
	fixed := func([][]uint32) func(*model.Model) [][]uint32 {
		return func(*model.Model) [][]uint32 { return fortunePrompts }
	}(nil)
	repeating := func(m *model.Model) [][]uint32 {
		var out [][]uint32
		for _, p := range fortunePrompts {
			g := greedyTokens(b, m, p, 48)
			out = append(out, slices.Concat(p, g, p[1:]))
		}
		return out
	}
	oneB := func(*model.Model) [][]uint32 {
		p := []uint32{128000}
		for i := range 15 {
			p = append(p, uint32(1000+i*37))
		}
		return [][]uint32{p}
	}
	f16 := filepath.Join(shared, "meshnode-fortunes-f16.gguf")
	// from is a case's prepare: it makes path from the model src, once,
	// in the bench cache, where src is present.
	from := func(src, path string, make func(src, dst string) error) func() {
		return func() {
			if fileExists(path) || !fileExists(src) {
				return
			}
			if err := os.MkdirAll(cacheDir, 0o755); err != nil {
				b.Fatal(err)
			}
			if err := make(src, path); err != nil {
				b.Fatal(err)
			}
		}
	}
	builtinQ8 := filepath.Join("..", "..", "models", "meshnode-fortunes-q8_0.gguf")
	// The built-in model's F16 quantised to Q4_0: a more quantised copy of
	// the target, the draft that costs least for how often it is right.
	q4 := filepath.Join(cacheDir, "meshnode-fortunes-q4_0.gguf")
	requantize := from(f16, q4, func(src, dst string) error { return modeltest.Requantize(src, dst, quant.Q4_0) })
	// The built-in model inflated to about Llama-3.2-1B's shape (42
	// heads of its 48 dimensions, 21 KV heads, 8192 feed-forward units, 16
	// blocks; Q8_0; modeltest.Inflate): its function — what drafts of it
	// are worth — at a 1B model's cost, whose windows' rows stream the
	// same weights (v about 0.1), where the 13.9M model's rows are
	// arithmetic (about 0.3).
	// Its Q4_0 (the same seed, so the same function less Q4_0's error)
	// is the more quantised copy the issue names as the 1B model's draft.
	// Where the F16 is absent (the GPU machine: the device tool's carry
	// limit leaves it behind) they are made from the built-in Q8_0, the
	// same function less Q8_0's error, and named apart in the cache.
	inflateFrom, fromTag := f16, ""
	if !fileExists(f16) {
		inflateFrom, fromTag = builtinQ8, "-from-q8_0"
	}
	inflatedTo := func(typ quant.Type) (string, func()) {
		path := filepath.Join(cacheDir, fmt.Sprintf("meshnode-fortunes-1b-shape-%s%s.gguf", strings.ToLower(typ.String()), fromTag))
		return path, from(inflateFrom, path, func(src, dst string) error {
			sh := modeltest.InflateShape{Heads: 42, KVHeads: 21, FF: 8192, Layers: 16}
			return modeltest.Inflate(src, dst, typ, sh, 1)
		})
	}
	inflated, inflate := inflatedTo(quant.Q8_0)
	inflatedQ4, inflateQ4 := inflatedTo(quant.Q4_0)
	cases := []benchCase{
		{"fortunes F16 + Q8_0 draft", f16, filepath.Join(shared, "meshnode-fortunes-q8_0.gguf"), 256, tg, fixed, 0, nil},
		{"fortunes F16 + Q4_0 draft", f16, q4, 256, tg, fixed, 0, requantize},
		{"fortunes F16 + fortunes-draft", f16, filepath.Join(shared, "meshnode-fortunes-draft-q8_0.gguf"), 256, tg, fixed, 0, nil},
		{"fortunes F16 + lookup, repeating prompt", f16, "lookup", 256, tg, repeating, 0, nil},
		{"fortunes Q8_0 + lookup, repeating prompt", builtinQ8, "lookup", 256, tg, repeating, 0, nil},
		// Random weights give every next token a probability near
		// 1/128256: no draft would pass a threshold, so none is set.
		// Random weights make little of a repeated prompt (acceptance
		// 0.2–0.3): the case where speculation must not cost more than
		// it brings, on a model whose extra rows cost little.
		{"1B-shape Q8_0 + lookup, repeating prompt", filepath.Join(cacheDir, "llama-3.2-1b-shape-q8_0.gguf"), "lookup", 512, min(tg, 32), func(m *model.Model) [][]uint32 {
			var out [][]uint32
			for _, p := range oneB(m) {
				g := greedyTokens(b, m, p, 48)
				out = append(out, slices.Concat(p, g, p[1:]))
			}
			return out
		}, 0, nil},
		{"fortunes-1B Q8_0 + lookup, repeating prompt", inflated, "lookup", 256, tg, repeating, 0, inflate},
		{"fortunes-1B Q8_0 + fortunes Q8_0 draft", inflated, builtinQ8, 256, tg, fixed, 0, inflate},
		{"fortunes-1B Q8_0 + its Q4_0 draft", inflated, inflatedQ4, 256, tg, fixed, 0, func() { inflate(); inflateQ4() }},
		// A predicted output (OpenAI's prediction): each prompt's plain
		// answer with an eighth of it replaced, no draft model.
		{"fortunes Q8_0 + prediction, its answer edited", builtinQ8, benchPrediction, 256, tg, fixed, 0, nil},
		{"fortunes-1B Q8_0 + prediction, its answer edited", inflated, benchPrediction, 256, min(tg, 64), fixed, 0, inflate},
		{"1B-shape Q8_0 + Q4_0 draft", filepath.Join(cacheDir, "llama-3.2-1b-shape-q8_0.gguf"), filepath.Join(cacheDir, "llama-3.2-1b-shape-q4_0.gguf"), 512, min(tg, 32), oneB, -1, nil},
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "case\tthreads\ttokens\tplain tok/s\tspec tok/s\tspeedup\tmedian\twith prefill\tdrafting\taccept\tE\tK\tc\tc decode\tc sizes\tv\tideal\t%% of ideal\tideal+v\t%% of it\tforesight\tgoal\t\n")
	for _, bc := range cases {
		if f := os.Getenv("BENCH_CASE"); f != "" && !strings.Contains(bc.name, f) {
			continue
		}
		if bc.prepare != nil {
			bc.prepare()
		}
		if _, err := os.Stat(bc.target); err != nil {
			b.Logf("%s: skipped, no %s (set MESHNODE_MODELS / BENCH_CACHE)", bc.name, bc.target)
			continue
		}
		if bc.draft != "lookup" && bc.draft != benchPrediction {
			if _, err := os.Stat(bc.draft); err != nil {
				b.Logf("%s: skipped, no %s", bc.name, bc.draft)
				continue
			}
		}
		th := bc.threshold
		if th == 0 {
			th = benchThreshold()
		}
		for _, fixed := range benchWindows() {
			r, cSizes := runSpecCase(b, be, bc.target, bc.draft, bc.ctx, bc.tg, reps, th, fixed, bc.prompts)
			e := float64(r.tokens) / float64(r.st.Rounds)
			k := float64(r.st.Proposed) / float64(r.st.Rounds)
			accept := float64(r.st.Accepted) / float64(max(1, r.st.Proposed))
			ideal := e / (k*r.c + 1)
			idealV := e / (k*(r.c+r.v) + 1)
			speedup := r.specTPS / r.plainTPS
			name := bc.name + ", adaptive"
			if fixed > 0 {
				name = fmt.Sprintf("%s, K=%d fixed", bc.name, fixed)
			}
			foresight := "–"
			if r.foresight > 0 {
				foresight = fmt.Sprintf("%.2f×", r.foresight)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.1f\t%.2f×\t%.2f×\t%.2f×\t%.1f%%\t%.2f\t%.2f\t%.2f\t%.3f\t%.3f\t%.3f\t%.2f\t%.2f×\t%.0f%%\t%.2f×\t%.0f%%\t%s\t%s\t\n",
				name, be.Threads(), r.tokens, r.plainTPS, r.specTPS, speedup, r.median, r.whole, 100*r.prop, accept, e, k, r.c, r.cDecode, cSizes, r.v, ideal, 100*speedup/ideal, idealV, 100*speedup/idealV, foresight,
				specGoal(speedup, ideal, accept, r.c))
		}
	}
	tw.Flush()
}

// specGoal is issue 21's verdict on one case: the speedup at least 80% of
// the ideal E / (K·c + 1), at least 1.5× where the acceptance is 0.7 or
// more and a drafted token costs c ≤ 0.25 of a target token, and never
// more than 5% below plain decoding. "met", or what was missed.
func specGoal(speedup, ideal, accept, c float64) string {
	var missed []string
	if speedup < 0.95 {
		missed = append(missed, "over 5% slower")
	}
	if speedup < 0.8*ideal {
		missed = append(missed, fmt.Sprintf("%.0f%% of the ideal", 100*speedup/ideal))
	}
	if accept >= 0.7 && c <= 0.25 && speedup < 1.5 {
		missed = append(missed, "under 1.5×")
	}
	if len(missed) == 0 {
		return "met"
	}
	return "missed: " + strings.Join(missed, ", ")
}

// TestSpecGoal: the bench's verdicts on the figures of docs/engine.md's
// table ("Speed of speculative decoding").
func TestSpecGoal(t *testing.T) {
	for _, c := range []struct {
		speedup, ideal, accept, c float64
		want                      string
	}{
		{0.99, 1.02, 0, 0, "met"},                             // the draft turned off
		{1.76, 2.77, 0.59, 0.002, "missed: 64% of the ideal"}, // lookup on the built-in F16
		{2.05, 2.46, 0.46, 0, "met"},                          // lookup on the 1B shape
		{5.36, 7.49, 1.00, 0.010, "missed: 72% of the ideal"}, // the 1B shape's fortunes draft
		{1.25, 1.39, 0.92, 0.58, "met"},                       // its Q4_0: c > 0.25
		{1.40, 1.70, 0.80, 0.20, "missed: under 1.5×"},        // 82% of the ideal, but acceptance and c ask 1.5×
		{0.90, 1.02, 0, 0, "missed: over 5% slower"},          // the draft turned off too late
		{0.70, 2.00, 0.75, 0.1, "missed: over 5% slower, 35% of the ideal, under 1.5×"},
	} {
		if got := specGoal(c.speedup, c.ideal, c.accept, c.c); got != c.want {
			t.Errorf("specGoal(%v, %v, %v, %v) = %q, want %q", c.speedup, c.ideal, c.accept, c.c, got, c.want)
		}
	}
}

// benchCacheDir is BENCH_CACHE, where the benchmarks keep the models they
// make: by default the user cache's meshnode-bench.
func benchCacheDir() string {
	if dir := os.Getenv("BENCH_CACHE"); dir != "" {
		return dir
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "meshnode-bench")
	}
	return ""
}

// referencePrompts are the three prompts of the built-in model's
// llama.cpp reference (models/reference-greedy.txt).
func referencePrompts(b *testing.B) [][]uint32 {
	refs, err := modeltest.ReadGreedyReference(filepath.Join("..", "..", "models", "reference-greedy.txt"))
	if err != nil {
		b.Fatal(err)
	}
	var out [][]uint32
	for _, c := range refs[:3] {
		out = append(out, c.Prompt)
	}
	return out
}

// greedyTokens decodes n greedy tokens after prompt.
func greedyTokens(b *testing.B, m *model.Model, prompt []uint32, n int) []uint32 {
	s, err := m.NewSession(model.SessionOptions{Context: 256})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	bt, err := m.NewBatch(model.BatchOptions{Tokens: 16, Seqs: 16})
	if err != nil {
		b.Fatal(err)
	}
	out, _, err := spec.Generate(context.Background(), bt, s, prompt, n, sample.Params{}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// benchPrediction is a case's draft for drafting from a predicted output
// (spec.Predicted): each prompt's plain answer with an eighth of it, in
// its middle, replaced (editedAnswer).
const benchPrediction = "prediction"

// editedAnswer is answer with an eighth of its tokens, in its middle,
// replaced by token 400: a file given back with a few lines changed.
func editedAnswer(answer []uint32) []uint32 {
	n := len(answer)
	return slices.Concat(answer[:n/2-n/16], slices.Repeat([]uint32{400}, n/8), answer[n/2+n/16:])
}

// runSpecCase measures one target and proposer over the prompts, and
// returns the figures and c as the engine fixes it from the files' sizes.
func runSpecCase(b *testing.B, be backend.Backend, targetPath, draftPath string, ctxLen, tg, reps int, threshold float64, fixed int, prompts func(*model.Model) [][]uint32) (specRun, float64) {
	ctx := context.Background()
	tf, target := loadBench(b, targetPath, be)
	defer tf.Close()
	var draft *model.Model
	cSizes, copyOf := 0.0, false
	if draftPath != "lookup" && draftPath != benchPrediction {
		var df *gguf.File
		df, draft = loadBench(b, draftPath, be)
		defer df.Close()
		if err := spec.CheckVocab(tf.Metadata, df.Metadata, target.Config().VocabSize, draft.Config().VocabSize); err != nil {
			b.Fatal(err)
		}
		cSizes = float64(df.Size()) / float64(tf.Size())
		copyOf = spec.SameShape(tf, df)
	}
	s, err := target.NewSession(model.SessionOptions{Context: ctxLen})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	bt, err := target.NewBatch(model.BatchOptions{Tokens: 16, Seqs: 16})
	if err != nil {
		b.Fatal(err)
	}
	var ds *model.Session
	if draft != nil {
		if ds, err = draft.NewSession(model.SessionOptions{Context: ctxLen}); err != nil {
			b.Fatal(err)
		}
		defer ds.Close()
	}
	ps := prompts(target)
	// What the engine measures at load (Drafter.Measure), with more
	// rounds: the prices a greedy serve's windows are sized by.
	prices, err := spec.Measure(ctx, target, draft, 32, 0)
	if err != nil {
		b.Fatal(err)
	}
	// prefill is the time of evaluating each prompt, taken out of the
	// generations' times.
	// A shared machine's load only ever adds time, so each figure is
	// built from fastest runs: a prompt's prefill (the fastest of all its
	// measurements, three at a time), the draft's prefill likewise where
	// Generate has the draft take in the prompt, and each generation's
	// whole time; decode time is a generation's time less the prefills.
	prefillOf := func(sess *model.Session, p []uint32) time.Duration {
		var best time.Duration
		for range 3 {
			sess.Truncate(0)
			start := time.Now()
			if _, err := sess.Eval(ctx, p); err != nil {
				b.Fatal(err)
			}
			if d := time.Since(start); best == 0 || d < best {
				best = d
			}
		}
		sess.Truncate(0)
		return best
	}
	fastest := func(cur, d time.Duration) time.Duration {
		if cur == 0 || d < cur {
			return d
		}
		return cur
	}
	pre, dpre := make([]time.Duration, len(ps)), make([]time.Duration, len(ps))
	plainAll, specAll := make([][]time.Duration, len(ps)), make([][]time.Duration, len(ps))
	var propTs []time.Duration
	var best specRun
	drafts := 0
	perPrompt := make([]spec.Stats, len(ps))
	wants := make([][]uint32, len(ps)) // each prompt's plain tokens
	for round := range reps {
		var propT time.Duration
		var st spec.Stats
		tokens := 0
		drafts = 0
		for pi, p := range ps {
			var want, got []uint32
			plain := func() {
				pre[pi] = fastest(pre[pi], prefillOf(s, p))
				start := time.Now()
				var err error
				if want, _, err = spec.Generate(ctx, bt, s, p, tg, sample.Params{}, nil, nil); err != nil {
					b.Fatal(err)
				}
				plainAll[pi] = append(plainAll[pi], time.Since(start))
			}
			speculative := func() {
				prop := &timedProposer{p: spec.Lookup{}}
				if draft != nil {
					ds.Truncate(0)
					prop.p = spec.NewModelProposer(ds, sample.Params{}, threshold)
				}
				// As the engine's Drafter.Window sizes a greedy serve's.
				w := prices.Window(0)
				if copyOf {
					w.Expect(spec.CopyPrior)
				}
				if draftPath == benchPrediction {
					// The plain answer: this round's, where plain ran
					// first, else the round before's.
					answer := want
					if answer == nil {
						answer = wants[pi]
					}
					prop.p = spec.NewPredicted(editedAnswer(answer))
					w.Expect(spec.CopyPrior) // as Drafter.PredictionWindow
				}
				if fixed > 0 {
					w = spec.Fixed(fixed)
				}
				w.Limit(tg) // as the engine limits it by the request's max_tokens
				pre[pi] = fastest(pre[pi], prefillOf(s, p))
				if draft != nil && w.Starts(len(p)) {
					// The draft's prefill, which Generate does after the
					// target's: prompt work too.
					dpre[pi] = fastest(dpre[pi], prefillOf(ds, p))
				}
				start := time.Now()
				var rs spec.Stats
				var err error
				if got, rs, err = spec.Generate(ctx, bt, s, p, tg, sample.Params{}, prop, w); err != nil {
					b.Fatal(err)
				}
				specAll[pi] = append(specAll[pi], time.Since(start))
				propT += prop.took
				drafts += prop.drafts
				st.Rounds += rs.Rounds
				st.Proposed += rs.Proposed
				st.Accepted += rs.Accepted
				perPrompt[pi] = rs
			}
			// The two alternate which goes first, so that neither always
			// runs in the other's wake.
			if round%2 == 0 {
				plain()
				speculative()
			} else {
				speculative()
				plain()
			}
			if !slices.Equal(got, want) {
				b.Fatalf("speculative tokens %v differ from plain %v", got, want)
			}
			wants[pi] = want
			tokens += len(got)
		}
		propTs = append(propTs, propT)
		// The counts are the same every round (greedy, deterministic).
		best.st, best.tokens = st, tokens
	}
	decode := func(pi int, d time.Duration, speculative bool) float64 {
		d -= pre[pi]
		if speculative {
			d -= dpre[pi]
		}
		return d.Seconds()
	}
	var ratios, wholes, props []float64
	var sumPlain, sumSpec float64
	for pi := range ps {
		sumPlain += decode(pi, slices.Min(plainAll[pi]), false)
		sumSpec += decode(pi, slices.Min(specAll[pi]), true)
		for r := range reps {
			// Each pair ran back to back: its ratio sees the same load.
			ratios = append(ratios, decode(pi, plainAll[pi][r], false)/decode(pi, specAll[pi][r], true))
			wholes = append(wholes, plainAll[pi][r].Seconds()/specAll[pi][r].Seconds())
		}
	}
	for r, propT := range propTs {
		var plainT float64
		for pi := range ps {
			plainT += decode(pi, plainAll[pi][r], false)
		}
		props = append(props, propT.Seconds()/plainT)
		if drafts > 0 {
			c := propT.Seconds() / float64(drafts) / (plainT / float64(best.tokens))
			if r == 0 || c < best.c {
				best.c = c
			}
		}
	}
	best.plainTPS, best.specTPS = float64(best.tokens)/sumPlain, float64(best.tokens)/sumSpec
	best.median, best.whole, best.prop = spec.Median(ratios), spec.Median(wholes), spec.Median(props)
	b.Logf("%s: pairs' speedups %.2f; the target's step over 1, 2, … rows, in one-token steps (spec.Prices.Steps) %.2f; the draft's step, its two-token catch-up and its first step's extra %.3f, %.3f, %.3f",
		filepath.Base(targetPath)+"+"+filepath.Base(draftPath), ratios, prices.Steps, prices.Cost, prices.CatchUp, prices.First)
	for pi, rs := range perPrompt {
		// Per prompt: where the proposer's drafts are right, and where
		// they are not (the rounds are the same every rep).
		b.Logf("  prompt %d: %d rounds, %d of %d drafts accepted, fastest %.2f×", pi, rs.Rounds, rs.Accepted, rs.Proposed,
			decode(pi, slices.Min(plainAll[pi]), false)/decode(pi, slices.Min(specAll[pi]), true))
	}
	best.cDecode, best.v = prices.Cost, prices.Row
	if draftPath == "lookup" {
		var sum float64
		for pi, p := range ps {
			sum += lookupForesight(b, p, wants[pi], best.v, spec.DefaultMaxWindow)
		}
		best.foresight = float64(best.tokens) / sum
	}
	return best, cSizes
}

// lookupForesight is the fewest target passes in which rounds of prompt
// lookup's drafts could yield out (the plain tokens after prompt) if each
// round knew how many of its drafts will stand: at each point it proposes
// exactly those (at most max), at 1 + k·v passes for k drafts, or none
// where the first would fall. No window can do better with lookup's
// proposals at this v; what separates the engine's rounds from it is
// drafts that fall, which lookup's figures (the n-gram, its reach) do not
// foretell.
func lookupForesight(b *testing.B, prompt, out []uint32, v float64, max int) float64 {
	n := len(out)
	seq := slices.Clone(prompt)
	// stand[i]: the drafts proposed after out[:i] that would stand.
	stand := make([]int, n)
	for i := range n {
		d, err := spec.Lookup{}.Propose(context.Background(), seq, i, max)
		if err != nil {
			b.Fatal(err)
		}
		for stand[i] < len(d) && i+stand[i] < n && d[stand[i]].Token == out[i+stand[i]] {
			stand[i]++
		}
		seq = append(seq, out[i])
	}
	// passes[i]: the fewest passes that yield out[:i].
	passes := make([]float64, n+1)
	for i := 1; i <= n; i++ {
		passes[i] = math.Inf(1)
	}
	for i := range n {
		for k := 0; k <= stand[i]; k++ {
			j := min(n, i+k+1)
			passes[j] = min(passes[j], passes[i]+1+float64(k)*v)
		}
	}
	return passes[n]
}
