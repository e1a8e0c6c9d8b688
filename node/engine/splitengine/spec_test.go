package splitengine

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/grammar"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/hwtest"
	"github.com/meshnode/meshnode/internal/netsim"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/engine/ggufengine"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/stage"
)

// sharedModels holds the built-in model's other files (its F16, the
// trained 2-layer draft): $MESHNODE_MODELS, else the project's shared
// data beside the checkout; the cases that need them skip without them.
var sharedModels = cmp.Or(os.Getenv("MESHNODE_MODELS"), filepath.Join("..", "..", "..", "..", "shared", "models"))

var referencePath = filepath.Join("..", "..", "..", "models", "reference-greedy.txt")

// stageModels finds the one model the stages serve.
type stageModels struct{ f *gguf.File }

func (m stageModels) Open([32]byte) (*gguf.File, error) { return m.f, nil }

// pipeNet is an in-process mesh of stage Servers joined by net.Pipe.
type pipeNet struct {
	ctx     context.Context
	latency func() time.Duration // each frame's one-way latency; nil: none
	servers map[identity.EndpointID]*stage.Server
	wg      sync.WaitGroup
}

type pipeDialer struct {
	net  *pipeNet
	from identity.EndpointID
}

func (d pipeDialer) Open(ctx context.Context, peer identity.EndpointID) (io.ReadWriteCloser, error) {
	srv, ok := d.net.servers[peer]
	if !ok {
		return nil, fmt.Errorf("no route to %s", peer.Short())
	}
	a, b := net.Pipe()
	var head, tail io.ReadWriteCloser = a, b
	if l := d.net.latency; l != nil {
		head, tail = netsim.Delay(a, l), netsim.Delay(b, l)
	}
	d.net.wg.Add(1)
	go func() {
		defer d.net.wg.Done()
		srv.ServeStream(d.net.ctx, d.from, tail)
		tail.Close()
	}()
	return head, nil
}

// startSplit loads f in stages of layout over an in-process pipeNet, the
// head being the first node, with rows logits rows per step, each frame
// taking delay to cross a link.
func startSplit(t testing.TB, f *gguf.File, layout []model.LayerRange, batch, rows int, delay time.Duration) *stage.Pipeline {
	t.Helper()
	return startSplitWith(t, f, layout, batch, rows, true, delay)
}

// splitSeqs is the requests the test stages hold KV for, as a node's
// are (node.splitSeqs), whatever their rows per step.
const splitSeqs = 4

// startSplitWith is startSplit whose last stage's node takes
// LoadStage.Rows only if loadRows: without it (a node of before the
// field) a step holds splitSeqs rows.
func startSplitWith(t testing.TB, f *gguf.File, layout []model.LayerRange, batch, rows int, loadRows bool, delay time.Duration) *stage.Pipeline {
	t.Helper()
	var latency func() time.Duration
	if delay > 0 {
		latency = func() time.Duration { return delay }
	}
	return startSplitLinks(t, f, layout, batch, rows, loadRows, latency)
}

// startSplitLinks is startSplitWith whose links' latency is latency()
// at each frame (nil: none), so that a benchmark may change it.
func startSplitLinks(t testing.TB, f *gguf.File, layout []model.LayerRange, batch, rows int, loadRows bool, latency func() time.Duration) *stage.Pipeline {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pn := &pipeNet{ctx: ctx, servers: map[identity.EndpointID]*stage.Server{}, latency: latency}
	be := cpu.New(cpu.Options{Threads: 1})
	clock := hwtest.NewClock(time.Unix(1_800_000_000, 0))
	var places []stage.Placement
	for i, r := range layout {
		// Each node's id is its key's, so that its stage's report is
		// held to it; it meters on a fake counter of its own.
		seed := make([]byte, ed25519.SeedSize)
		for j := range seed {
			seed[j] = byte(i*7 + j)
		}
		k, err := identity.KeyFromSeed(seed)
		if err != nil {
			t.Fatal(err)
		}
		places = append(places, stage.Placement{Peer: k.ID(), Range: r, LoadRows: loadRows || i < len(layout)-1})
		if i > 0 {
			sealer, err := receipt.NewSealer(k)
			if err != nil {
				t.Fatal(err)
			}
			c := hwtest.NewCounter("fake-rapl", hw.DomainCPU, 10*time.Millisecond, clock, 20)
			pn.servers[k.ID()] = &stage.Server{Models: stageModels{f}, Backend: be, Dial: pipeDialer{pn, k.ID()},
				Meter: hw.NewCounterMeter(c, hw.PowerModel{Watts: 25, Source: "test"}, clock, nil), Uses: hw.DomainCPU, Signer: sealer}
		}
	}
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	p, err := stage.Start(sctx, stage.PipelineConfig{File: f, Digest: [32]byte{1}, Self: places[0].Peer, Stages: places,
		Context: 256, Batch: batch, Seqs: splitSeqs, Rows: rows, Backend: be, Dial: pipeDialer{pn, places[0].Peer}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close(context.Background())
		cancel()
		for _, s := range pn.servers {
			s.Stop()
		}
		pn.wg.Wait()
		be.Close()
	})
	return p
}

// layouts are the built-in model (4 blocks) in 2 and 3 stages.
var layouts = map[string][]model.LayerRange{
	"2 stages": {{Lo: 0, Hi: 2}, {Lo: 2, Hi: 4}},
	"3 stages": {{Lo: 0, Hi: 1}, {Lo: 1, Hi: 3}, {Lo: 3, Hi: 4}},
}

// drafts are the proposers tried, each with the default window of at
// most 8 drafts: prompt lookup, and where the shared models are, the
// built-in model's F16 (another quantisation of it) and the trained
// 2-layer draft. The F16 keeps its windows full (no threshold, a low
// cost: its windows grow to 7 rows), so that rejections, trims and stops
// inside a window are many.
func drafts(t testing.TB) map[string]spec.DrafterConfig {
	out := map[string]spec.DrafterConfig{"lookup": {Path: spec.DraftLookup}}
	if p := filepath.Join(sharedModels, "meshnode-fortunes-f16.gguf"); exists(p) {
		out["f16"] = spec.DrafterConfig{Path: p, Cost: 0.01, Threshold: -1}
	}
	if p := filepath.Join(sharedModels, "meshnode-fortunes-draft-q8_0.gguf"); exists(p) {
		out["fortunes-draft"] = spec.DrafterConfig{Path: p, Cost: 0.1}
	}
	if len(out) == 1 {
		t.Logf("no shared models in %s: prompt lookup only", sharedModels)
	}
	return out
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// specEngine serves the built-in model split by layout, speculating with
// dc, on a pipeline whose steps hold 9 rows (8 drafts and the last
// token) on stages sized for splitSeqs requests.
func specEngine(t testing.TB, ref *ggufengine.Model, layout []model.LayerRange, dc spec.DrafterConfig) (*Engine, *trimCounter) {
	t.Helper()
	return specEngineWith(t, ref, layout, dc, true, nil)
}

// specEngineWith is specEngine whose last stage's node takes
// LoadStage.Rows only if loadRows, its pipeline wrapped by windowed
// where set.
func specEngineWith(t testing.TB, ref *ggufengine.Model, layout []model.LayerRange, dc spec.DrafterConfig, loadRows bool, windowed func(*trimCounter) Pipeline) (*Engine, *trimCounter) {
	t.Helper()
	f := openFile(t)
	be := cpu.New(cpu.Options{Threads: 1})
	t.Cleanup(func() { be.Close() })
	d, err := spec.LoadDrafter(dc, f, ref.Config().VocabSize, 256, be)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	tc := &trimCounter{Pipeline: startSplitWith(t, f, layout, 16, spec.DefaultMaxWindow+1, loadRows, 0)}
	var p Pipeline = tc
	if windowed != nil {
		p = windowed(tc)
	}
	w, _ := ref.Engine().Weights()
	e := New(Config{Recipe: "fortunes", Fidelity: receipt.F1, UJPerToken: 250, Weights: w,
		Vocab: ref.Config().VocabSize, Context: 256, Batch: 16, Draft: d, Tokens: ref.Tokenizer()}, p)
	return e, tc
}

// trimCounter counts the trims of rejected drafts (not the forgetting
// of a request, a trim to 0), and the most rows a step asked for.
type trimCounter struct {
	*stage.Pipeline
	trims   int
	maxRows int
}

// windowless is a pipeline whose stages predate windows.
type windowless struct{ *trimCounter }

func (windowless) Windows() bool { return false }

func (c *trimCounter) Step(ctx context.Context, seqs []stage.Seq) ([]stage.Result, error) {
	for _, q := range seqs {
		c.maxRows = max(c.maxRows, q.Rows)
	}
	return c.Pipeline.Step(ctx, seqs)
}

func (c *trimCounter) Trim(ctx context.Context, request uint64, n int) error {
	if n > 0 {
		c.trims++
	}
	return c.Pipeline.Trim(ctx, request, n)
}

// specPrompts are the llama.cpp reference prompts and one that repeats
// itself, which prompt lookup drafts well.
func specPrompts(t testing.TB, ref *ggufengine.Model) [][]uint32 {
	all, err := modeltest.ReadGreedyReference(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]uint32
	for _, c := range all {
		if strings.Contains(c.File, "q8_0") {
			out = append(out, c.Prompt)
		}
	}
	return append(out, ref.Tokenize(repeating, true, false))
}

const repeating = "A man walks into a bar, and a man who has a little to be a man who walks into a bar, and a man who"

func greedy(n uint32, s *receipt.Sampling) receipt.ServeRequest {
	return receipt.ServeRequest{PromptHash: receipt.PromptHash([]byte("p")), PromptTokens: 8, MaxTokens: n,
		FidelityFloor: receipt.F1, JouleCeilingUJ: 1 << 40, Sampling: s}
}

// penaltyBias are logit biases served beside a repeat penalty: "▁the"
// (278) and "," (29892) held back, "." (29889) urged on.
var penaltyBias = []receipt.LogitBias{{Token: 278, BiasE6: -2_000_000}, {Token: 29889, BiasE6: 1_500_000}, {Token: 29892, BiasE6: -3_000_000}}

// TestSpeculativeGreedyMatchesPlain: through 2 and 3 stages, with prompt
// lookup and with drafts of the model's own vocabulary, a greedy serve
// (with and without a penalty and logit biases, which need the windows'
// logits rather than their tokens) emits the whole model's plain greedy
// tokens, every stage trimming the rejected drafts (a later step whose
// start did not match what a stage holds would be refused), and reports
// what it speculated.
func TestSpeculativeGreedyMatchesPlain(t *testing.T) {
	ref, _ := setup(t)
	prompts := specPrompts(t, ref)
	for dname, dc := range drafts(t) {
		for lname, layout := range layouts {
			e, tc := specEngine(t, ref, layout, dc)
			var proposed, accepted uint32
			for _, s := range []*receipt.Sampling{nil, {RepeatPenaltyE6: 1_300_000, LogitBias: penaltyBias}} {
				for _, prompt := range prompts {
					want, _, err := serve(ref.Engine(), prompt, greedy(40, s))
					if err != nil {
						t.Fatal(err)
					}
					got, out, err := serve(e, prompt, greedy(40, s))
					if err != nil {
						t.Fatalf("%s, %s: %v", dname, lname, err)
					}
					if !slices.Equal(got, want) {
						t.Fatalf("%s, %s, %+v: speculative %v, plain %v", dname, lname, s, got, want)
					}
					if out.TokensOut != uint32(len(got)) || out.TokensAccepted != out.TokensOut || out.SpecAccepted > out.SpecProposed {
						t.Fatalf("%s, %s: outcome %+v for %d tokens", dname, lname, out, len(got))
					}
					if out.Split == nil || len(out.Split.Reports) != len(layout)-1 {
						t.Fatalf("%s, %s: split %+v", dname, lname, out.Split)
					}
					proposed, accepted = proposed+out.SpecProposed, accepted+out.SpecAccepted
				}
			}
			if proposed == 0 {
				t.Errorf("%s, %s: nothing was proposed", dname, lname)
			}
			if accepted < proposed && tc.trims == 0 {
				t.Errorf("%s, %s: %d of %d drafts rejected, and no trim", dname, lname, proposed-accepted, proposed)
			}
			// The F16's windows, sized by its acceptance, grow past
			// the splitSeqs rows the stages hold requests for (the
			// old cap), within the 8 drafts of the default window.
			if tc.maxRows > spec.DefaultMaxWindow+1 || dname == "f16" && tc.maxRows <= splitSeqs {
				t.Errorf("%s, %s: the largest window had %d rows", dname, lname, tc.maxRows)
			}
			t.Logf("%s, %s: %d of %d drafts accepted, %d trims, windows of up to %d rows", dname, lname, accepted, proposed, tc.trims, tc.maxRows)
		}
	}
}

// TestSpeculativeWindowsOf8: windows fixed at the default most drafts,
// 8 — 9 rows a step on stages that hold the KV of splitSeqs requests —
// cross 2 and 3 stages and give the whole model's plain greedy output,
// with and without a penalty and logit biases (which need the rows'
// logits).
func TestSpeculativeWindowsOf8(t *testing.T) {
	ref, _ := setup(t)
	prompts := specPrompts(t, ref)
	for dname, dc := range drafts(t) {
		if dname == "fortunes-draft" {
			continue // its threshold declines most of a window
		}
		for lname, layout := range layouts {
			e, tc := specEngine(t, ref, layout, dc)
			e.window = func() *spec.Window { return spec.Fixed(spec.DefaultMaxWindow) }
			for _, s := range []*receipt.Sampling{nil, {RepeatPenaltyE6: 1_300_000, LogitBias: penaltyBias}} {
				for _, prompt := range prompts {
					want, _, err := serve(ref.Engine(), prompt, greedy(40, s))
					if err != nil {
						t.Fatal(err)
					}
					got, _, err := serve(e, prompt, greedy(40, s))
					if err != nil {
						t.Fatalf("%s, %s: %v", dname, lname, err)
					}
					if !slices.Equal(got, want) {
						t.Fatalf("%s, %s, %+v: speculative %v, plain %v", dname, lname, s, got, want)
					}
				}
			}
			if tc.maxRows != spec.DefaultMaxWindow+1 {
				t.Errorf("%s, %s: the largest window had %d rows, want %d", dname, lname, tc.maxRows, spec.DefaultMaxWindow+1)
			}
		}
	}
}

// TestSpeculativeOlderLastStage: where the last stage's node predates
// LoadStage.Rows (it is sent LoadStage without the field), the split
// model is still served, speculating with windows held to the stages'
// splitSeqs rows (3 drafts), and its greedy output is still plain
// greedy decoding's.
func TestSpeculativeOlderLastStage(t *testing.T) {
	ref, _ := setup(t)
	prompts := specPrompts(t, ref)
	for dname, dc := range drafts(t) {
		if dname == "fortunes-draft" {
			continue // f16 fills its windows; lookup costs nothing
		}
		for lname, layout := range layouts {
			e, tc := specEngineWith(t, ref, layout, dc, false, nil)
			if r := e.Rows(); r != splitSeqs {
				t.Fatalf("%s, %s: steps of %d rows through an older last stage, want %d", dname, lname, r, splitSeqs)
			}
			var proposed uint32
			for _, prompt := range prompts {
				want, _, err := serve(ref.Engine(), prompt, greedy(40, nil))
				if err != nil {
					t.Fatal(err)
				}
				got, out, err := serve(e, prompt, greedy(40, nil))
				if err != nil {
					t.Fatalf("%s, %s: %v", dname, lname, err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%s, %s: speculative %v, plain %v", dname, lname, got, want)
				}
				proposed += out.SpecProposed
			}
			if proposed == 0 || tc.maxRows > splitSeqs || dname == "f16" && tc.maxRows != splitSeqs {
				t.Errorf("%s, %s: %d drafts proposed, windows of up to %d rows (want up to %d)", dname, lname, proposed, tc.maxRows, splitSeqs)
			}
		}
	}
}

// TestSpeculativeSampledRepeats: a seeded sampled request that names the
// proposer speculates, repeats exactly, and gives the whole model's
// speculative engine's tokens with the same proposer (the same windows,
// verified on the same rows, drawing from the same stream). One that
// does not name it decodes plainly, as the whole model's plain engine.
func TestSpeculativeSampledRepeats(t *testing.T) {
	ref, _ := setup(t)
	prompt := specPrompts(t, ref)[0]
	for dname, dc := range drafts(t) {
		e, _ := specEngine(t, ref, layouts["3 stages"], dc)
		path := dc.Path
		if path == spec.DraftLookup {
			path = ggufengine.DraftLookup
		}
		whole, err := ggufengine.Load(fortunesPath, ggufengine.Config{Fidelity: receipt.F1, UJPerToken: 250, Context: 256, Sessions: 1,
			Draft: path, DraftMax: dc.Max, DraftCost: dc.Cost, DraftThreshold: dc.Threshold})
		if err != nil {
			t.Fatal(err)
		}
		defer whole.Close()
		if e.Draft() != whole.Draft() {
			t.Fatalf("%s: the split engine names its draft %q, the whole model's %q", dname, e.Draft(), whole.Draft())
		}
		for _, seed := range []uint64{1, 2, 3} {
			s := &receipt.Sampling{TemperatureE6: 900_000, TopPE6: 950_000, Seed: &seed, Draft: e.Draft()}
			a, outA, err := serve(e, prompt, greedy(32, s))
			if err != nil {
				t.Fatal(err)
			}
			b, _, err := serve(e, prompt, greedy(32, s))
			if err != nil {
				t.Fatal(err)
			}
			w, outW, err := serve(whole.Engine(), prompt, greedy(32, s))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(a, b) || !slices.Equal(a, w) {
				t.Fatalf("%s, seed %d: %v, then %v; the whole model's %v", dname, seed, a, b, w)
			}
			if outA.SpecProposed != outW.SpecProposed || outA.SpecAccepted != outW.SpecAccepted {
				t.Errorf("%s, seed %d: %d of %d accepted, the whole model %d of %d", dname, seed, outA.SpecAccepted, outA.SpecProposed, outW.SpecAccepted, outW.SpecProposed)
			}
			s2 := *s
			s2.Draft = ""
			p, outP, err := serve(e, prompt, greedy(32, &s2))
			if err != nil {
				t.Fatal(err)
			}
			want, _, err := serve(ref.Engine(), prompt, greedy(32, &s2))
			if err != nil {
				t.Fatal(err)
			}
			if outP.SpecProposed != 0 || !slices.Equal(p, want) {
				t.Fatalf("%s, seed %d, no draft named: %v (%d proposed), plain %v", dname, seed, p, outP.SpecProposed, want)
			}
		}
	}
}

// noText is the Tokens of a fixture: no end-of-generation token, and no
// text (the serves have no stop strings).
type noText struct{}

func (noText) IsEOG(uint32) bool                  { return false }
func (noText) Piece(uint32, bool) (string, error) { return "", nil }

// TestSpeculativeFixtures: on every architecture's fixture (random
// weights, 4 blocks) in 2 and 3 stages, greedy speculation with prompt
// lookup and with the fixture in another quantisation as the draft emits
// the whole model's one-token greedy decoding.
func TestSpeculativeFixtures(t *testing.T) {
	voc := openFile(t)
	dir := t.TempDir()
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	prompt := []uint32{1, 5, 9, 13, 5, 9, 13, 5, 9, 13, 5}
	const n = 24
	proposed := map[string]uint32{}
	defer func() {
		if proposed["lookup"] == 0 && !t.Failed() {
			t.Error("prompt lookup proposed nothing on any fixture")
		}
	}()
	for _, arch := range modeltest.Archs {
		if modeltest.Hybrid(arch) {
			// A hybrid's recurrent state cannot be rewound by a later
			// stage, so LoadStage refuses to split it (TestStagesBitExact
			// checks the refusal).
			continue
		}
		paths := map[string]string{}
		for _, ft := range []string{"Q8_0", "Q4_0"} {
			// StageFixture: gemma4's without per-layer embeddings,
			// which keep a model whole.
			spec := modeltest.StageFixture(arch, ft, 4)
			file, err := modeltest.Generate(spec, voc.Metadata)
			if err != nil {
				t.Fatal(err)
			}
			paths[ft] = filepath.Join(dir, arch+"-"+ft+".gguf")
			if err := os.WriteFile(paths[ft], file, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		f, m := modeltest.Load(t, paths["Q8_0"], be)
		vocab := m.Config().VocabSize
		// The whole model's greedy decoding, a token at a time.
		s, err := m.NewSession(model.SessionOptions{Context: 256})
		if err != nil {
			t.Fatal(err)
		}
		next, err := s.EvalArgMax(context.Background(), prompt)
		if err != nil {
			t.Fatal(err)
		}
		var want []uint32
		for len(want) < n {
			want = append(want, next)
			if next, err = s.EvalArgMax(context.Background(), []uint32{next}); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
		for dname, dc := range map[string]spec.DrafterConfig{
			"lookup": {Path: spec.DraftLookup},
			"Q4_0":   {Path: paths["Q4_0"], Cost: 0.05, Threshold: -1},
		} {
			d, err := spec.LoadDrafter(dc, f, vocab, 256, be)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			for lname, layout := range layouts {
				e := New(Config{Recipe: arch, Fidelity: receipt.F1, Vocab: vocab, Context: 256, Batch: 16,
					Draft: d, Tokens: noText{}}, startSplit(t, f, layout, 16, spec.DefaultMaxWindow+1, 0))
				got, out, err := serve(e, prompt, greedy(n, nil))
				if err != nil {
					t.Fatalf("%s, %s, %s: %v", arch, dname, lname, err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%s, %s, %s: speculative %v, plain %v", arch, dname, lname, got, want)
				}
				// Prompt lookup proposes only where the output repeats
				// the context, which a random model's may never do; a
				// draft model proposes at every step.
				proposed[dname] += out.SpecProposed
				if dname != "lookup" && out.SpecProposed == 0 {
					t.Errorf("%s, %s, %s: nothing proposed", arch, dname, lname)
				}
				t.Logf("%s, %s, %s: %d of %d drafts accepted", arch, dname, lname, out.SpecAccepted, out.SpecProposed)
			}
		}
	}
}

// TestSpeculativeNoTokenPastTheEnd: max_tokens or a stop string inside a
// window of accepted drafts ends a split model's output exactly where
// plain decoding ends it, with nothing beyond.
func TestSpeculativeNoTokenPastTheEnd(t *testing.T) {
	ref, _ := setup(t)
	prompt := specPrompts(t, ref)[0]
	ds := drafts(t)
	dc, ok := ds["f16"] // full windows, nearly all accepted
	if !ok {
		dc = ds["lookup"]
	}
	e, _ := specEngine(t, ref, layouts["2 stages"], dc)
	for _, req := range []receipt.ServeRequest{greedy(1, nil), greedy(2, nil), greedy(5, nil), greedy(7, nil),
		greedy(40, &receipt.Sampling{Stop: []string{" man who"}}), greedy(40, &receipt.Sampling{Stop: []string{"little"}})} {
		want, _, err := serve(ref.Engine(), prompt, req)
		if err != nil {
			t.Fatal(err)
		}
		got, out, err := serve(e, prompt, req)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) || out.TokensOut != uint32(len(want)) {
			t.Fatalf("max %d, sampling %+v: speculative %v (%d out), plain %v", req.MaxTokens, req.Sampling, got, out.TokensOut, want)
		}
	}
}

// TestSpeculativeConstrained: under a grammar (a JSON schema, and GBNF
// that loops on the prompt's words), through 2 and 3 stages, a greedy
// serve with each proposer emits the whole model's plain constrained
// tokens, its windows verified row by row under the grammar (drafts
// proposed and accepted; rejected ones trimmed on every stage).
func TestSpeculativeConstrained(t *testing.T) {
	ref, _ := setup(t)
	prompts := specPrompts(t, ref)
	schema, err := grammar.FromSchema([]byte(`{"type":"object","properties":{"why":{"type":"string","maxLength":40},"ok":{"enum":[true,"maybe"]}},"required":["why","ok"],"additionalProperties":false}`))
	if err != nil {
		t.Fatal(err)
	}
	words, err := grammar.ParseGBNF(`root ::= [a-zA-Z .,]+`)
	if err != nil {
		t.Fatal(err)
	}
	for dname, dc := range drafts(t) {
		for lname, layout := range layouts {
			e, tc := specEngine(t, ref, layout, dc)
			var proposed, accepted uint32
			for _, g := range []*grammar.Grammar{schema, words} {
				id := engine.GrammarID(g)
				ctx := engine.WithGrammar(context.Background(), g)
				run := func(e engine.Engine, prompt []uint32) ([]uint32, engine.Outcome) {
					var got []uint32
					out, err := e.Serve(ctx, greedy(40, &receipt.Sampling{Grammar: &id}), prompt, func(t uint32) error { got = append(got, t); return nil })
					if err != nil {
						t.Fatalf("%s, %s: %v", dname, lname, err)
					}
					return got, out
				}
				for _, prompt := range prompts {
					want, _ := run(ref.Engine(), prompt)
					got, out := run(e, prompt)
					if !slices.Equal(got, want) {
						t.Fatalf("%s, %s, grammar %s: speculative %v, plain %v", dname, lname, g, got, want)
					}
					if out.SpecAccepted > out.SpecProposed || out.TokensOut != uint32(len(got)) {
						t.Fatalf("%s, %s: outcome %+v for %d tokens", dname, lname, out, len(got))
					}
					proposed, accepted = proposed+out.SpecProposed, accepted+out.SpecAccepted
				}
			}
			if accepted == 0 || accepted < proposed && tc.trims == 0 {
				t.Errorf("%s, %s: %d of %d drafts accepted, %d trims", dname, lname, accepted, proposed, tc.trims)
			}
			t.Logf("%s, %s: %d of %d drafts accepted, %d trims", dname, lname, accepted, proposed, tc.trims)
		}
	}
}

// TestSpeculativeLimits: through 2 stages, a greedy request's n_max
// bounds its windows (2 rows at n_max 1, where unbounded they grow past
// it) and n_min above the window turns them off, its tokens the whole
// model's; a p_min for prompt lookup is refused.
func TestSpeculativeLimits(t *testing.T) {
	ref, _ := setup(t)
	prompt := specPrompts(t, ref)[0]
	want, _, err := serve(ref.Engine(), prompt, greedy(40, nil))
	if err != nil {
		t.Fatal(err)
	}
	e, tc := specEngine(t, ref, layouts["2 stages"], drafts(t)["lookup"])
	run := func(l spec.Limits) ([]uint32, engine.Outcome, int, error) {
		var got []uint32
		tc.maxRows = 0
		out, err := e.Serve(engine.WithSpecLimits(context.Background(), l), greedy(40, nil), prompt, func(t uint32) error { got = append(got, t); return nil })
		return got, out, tc.maxRows, err
	}
	got, free, rows, err := run(spec.Limits{})
	if err != nil || !slices.Equal(got, want) || rows <= 2 {
		t.Fatalf("unbounded: %+v, windows of up to %d rows, %v; the test needs wider ones", free, rows, err)
	}
	got, one, rows, err := run(spec.Limits{Max: 1})
	if err != nil || !slices.Equal(got, want) || one.SpecProposed == 0 || rows != 2 {
		t.Errorf("n_max 1: %+v, windows of up to %d rows, %v (tokens equal: %v)", one, rows, err, slices.Equal(got, want))
	}
	got, none, _, err := run(spec.Limits{Min: spec.DefaultMaxWindow + 1})
	if err != nil || !slices.Equal(got, want) || none.SpecProposed != 0 {
		t.Errorf("n_min past the window: %+v, %v", none, err)
	}
	if _, _, _, err := run(spec.Limits{PMin: 0.5}); !errors.Is(err, engine.ErrRefused) {
		t.Errorf("p_min with prompt lookup: %v, want refused", err)
	}
}

// TestPrediction: a split model given a predicted output drafts from it
// through the stages, with no draft of its own and in place of one it
// has, and answers with plain decoding's tokens: predicting the answer,
// most tokens are accepted drafts, and a prediction that strays is
// trimmed from the stages; a sampled serve names its prediction and
// repeats; a model whose pipeline has a stage that predates windows
// refuses one.
func TestPrediction(t *testing.T) {
	ref, _ := setup(t)
	prompt := specPrompts(t, ref)[0]
	want, _, err := serve(ref.Engine(), prompt, greedy(40, nil))
	if err != nil {
		t.Fatal(err)
	}
	bare := func(windows bool) (*Engine, *trimCounter) {
		f := openFile(t)
		tc := &trimCounter{Pipeline: startSplitWith(t, f, layouts["2 stages"], 16, spec.DefaultMaxWindow+1, true, 0)}
		var p Pipeline = tc
		if !windows {
			p = windowless{tc}
		}
		w, _ := ref.Engine().Weights()
		return New(Config{Recipe: "fortunes", Fidelity: receipt.F1, UJPerToken: 250, Weights: w,
			Vocab: ref.Config().VocabSize, Context: 256, Batch: 16, Tokens: ref.Tokenizer()}, p), tc
	}
	// A pipeline that cannot answer windows refuses; its serves without
	// a prediction decode as ever.
	e, _ := bare(false)
	if !errors.Is(func() error {
		_, err := e.Serve(engine.WithPrediction(context.Background(), want), greedy(8, nil), prompt, func(uint32) error { return nil })
		return err
	}(), engine.ErrRefused) || e.TakesPrediction() {
		t.Error("a split model on a windowless pipeline took a prediction")
	}
	// A draft on it drafts nothing: its windows would not be answered.
	e, tc := specEngineWith(t, ref, layouts["2 stages"], drafts(t)["lookup"], true, func(tc *trimCounter) Pipeline { return windowless{tc} })
	if got, out, err := serve(e, prompt, greedy(40, nil)); err != nil || !slices.Equal(got, want) || out.SpecProposed != 0 || tc.maxRows > 1 {
		t.Errorf("lookup on a windowless pipeline: %+v, %v, steps of up to %d rows; tokens equal plain: %v", out, err, tc.maxRows, slices.Equal(got, want))
	}
	lookupE, lookupTC := specEngine(t, ref, layouts["3 stages"], drafts(t)["lookup"])
	bareE, bareTC := bare(true)
	edited := slices.Concat(want[:12], []uint32{400, 401, 402, 403}, want[16:])
	for name, c := range map[string]struct {
		e  *Engine
		tc *trimCounter
	}{"no draft, 2 stages": {bareE, bareTC}, "lookup, 3 stages": {lookupE, lookupTC}} {
		for pname, pred := range map[string][]uint32{"whole": want, "edited": edited} {
			c.tc.trims = 0
			var got []uint32
			out, err := c.e.Serve(engine.WithPrediction(context.Background(), pred), greedy(40, nil), prompt, func(t uint32) error { got = append(got, t); return nil })
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("%s, %s: %v; tokens equal plain: %v", name, pname, err, slices.Equal(got, want))
			}
			if out.SpecAccepted*10 < out.TokensOut*5 || pname == "edited" && c.tc.trims == 0 {
				t.Errorf("%s, %s: %d of %d tokens accepted drafts (%d proposed), %d trims", name, pname, out.SpecAccepted, out.TokensOut, out.SpecProposed, c.tc.trims)
			}
		}
	}
	seed := uint64(3)
	if _, _, err := serve(bareE, prompt, greedy(8, &receipt.Sampling{TemperatureE6: 700_000, Seed: &seed})); err != nil {
		t.Fatalf("a sampled serve without a prediction: %v", err)
	}
	_, err = bareE.Serve(engine.WithPrediction(context.Background(), want), greedy(8, &receipt.Sampling{TemperatureE6: 700_000, Seed: &seed}), prompt, func(uint32) error { return nil })
	if !errors.Is(err, engine.ErrRefused) {
		t.Errorf("a sampled serve with a prediction it does not name: %v, want refused", err)
	}
	named := spec.PricedDraft(spec.PredictionID(want), spec.PredictionPrices(spec.Prices{}, false))
	var firsts [][]uint32
	for range 2 {
		var got []uint32
		out, err := bareE.Serve(engine.WithPrediction(context.Background(), want), greedy(40, &receipt.Sampling{TemperatureE6: 700_000, Seed: &seed, Draft: named}), prompt, func(t uint32) error { got = append(got, t); return nil })
		if err != nil || out.SpecProposed == 0 {
			t.Fatalf("a sampled serve naming its prediction: %+v, %v", out, err)
		}
		firsts = append(firsts, got)
	}
	if !slices.Equal(firsts[0], firsts[1]) {
		t.Errorf("a seeded sampled serve with a prediction did not repeat: %v, %v", firsts[0], firsts[1])
	}
}
