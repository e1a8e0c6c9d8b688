package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/stageplan"
)

// splitFixture writes the random-weight fixture spec (the built-in
// model's tokenizer) to a file of its own and returns its path.
func splitFixture(t *testing.T, name string, spec modeltest.Spec) string {
	t.Helper()
	src, err := gguf.Open(fortunesPath(t))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	b, err := modeltest.Generate(spec, src.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".gguf")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// fixtureCosts is the planner's view of the model at path.
func fixtureCosts(t *testing.T, path string) (*gguf.File, model.Config, stageplan.Model) {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	mc, err := model.ParseConfig(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	return f, mc, stageCosts(f, mc, splitContext)
}

// TestSplitPlanChecksStages: the split planner cuts a model only where
// LoadStage will load the stages (model.Config.CheckStage): a plain llama
// anywhere; a gemma4 model whose last blocks read earlier blocks' KV
// only before them, the cut that memory alone would choose moved back;
// a gemma4 model with per-layer embeddings and the hybrids (qwen35, lfm2) not at
// all, refused with the model's reason. Every planned stage loads.
func TestSplitPlanChecksStages(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	const big = 1 << 40
	peer := []stageplan.Host{{ID: "peer", Free: big}}
	loads := func(t *testing.T, f *gguf.File, p stageplan.Plan) {
		t.Helper()
		for _, s := range p.Stages {
			_, err := model.LoadStage(f, be, model.LayerRange{Lo: s.Lo, Hi: s.Hi})
			if err != nil {
				t.Fatalf("plan %v: stage %d-%d does not load: %v", p, s.Lo, s.Hi, err)
			}
		}
	}

	t.Run("llama", func(t *testing.T) {
		f, _, c := fixtureCosts(t, splitFixture(t, "llama", modeltest.Fixture("llama", "Q8_0")))
		p, err := stageplan.Make(c, stageplan.Host{ID: "self", Free: big}, peer, stageplan.Options{Force: true})
		if err != nil || p.String() != "self:0-1 peer:1-2" {
			t.Fatalf("plan %v, %v; want self:0-1 peer:1-2", p, err)
		}
		loads(t, f, p)
	})

	t.Run("gemma4 shared KV", func(t *testing.T) {
		// 6 blocks, 4 and 5 reading 2's and 3's KV: cuts at 1 and 2 only.
		f, mc, c := fixtureCosts(t, splitFixture(t, "gemma4kv", modeltest.StageFixture("gemma4", "Q8_0", 6)))
		if mc.KVSource(4) != 2 || mc.KVSource(5) != 3 {
			t.Fatalf("fixture's KV sources %d %d, want 2 3", mc.KVSource(4), mc.KVSource(5))
		}
		// This node holds blocks 0-4 by memory; the plan cuts at 2.
		free := c.Embed + 5*c.KVPerLayer
		for _, b := range c.Layers[:5] {
			free += b
		}
		p, err := stageplan.Make(c, stageplan.Host{ID: "self", Free: free}, peer, stageplan.Options{})
		if err != nil || p.String() != "self:0-2 peer:2-6" {
			t.Fatalf("plan %v, %v; want self:0-2 peer:2-6", p, err)
		}
		loads(t, f, p)
		unchecked := c
		unchecked.Check = nil
		if p, _ := stageplan.Make(unchecked, stageplan.Host{ID: "self", Free: free}, peer, stageplan.Options{}); p.String() != "self:0-5 peer:5-6" {
			t.Errorf("by memory alone the plan is %v, want self:0-5 peer:5-6 (the test's premise)", p)
		}
		// A pin across the shared KV is refused up front, naming it.
		for _, pins := range [][]stageplan.Pin{{{Host: "peer", Lo: 3, Hi: 6}}, {{Host: "self", Lo: 0, Hi: 4}}} {
			_, err := stageplan.Make(c, stageplan.Host{ID: "self", Free: big}, peer, stageplan.Options{Pins: pins})
			if !errors.Is(err, stageplan.ErrPin) || !errors.Is(err, model.ErrUnsupported) || !strings.Contains(err.Error(), "KV cache") {
				t.Errorf("pins %v: %v, want ErrPin naming the shared KV", pins, err)
			}
		}
	})

	for _, tc := range []struct{ name, arch, why string }{
		{"gemma4 per-layer embeddings", "gemma4", "per-layer"},
		{"qwen35 hybrid", "qwen35", "recurrent state"},
		{"lfm2 hybrid", "lfm2", "recurrent state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, c := fixtureCosts(t, splitFixture(t, tc.arch, modeltest.Fixture(tc.arch, "Q8_0")))
			if p, err := stageplan.Make(c, stageplan.Host{ID: "self", Free: big}, peer, stageplan.Options{}); err != nil || p.Split() {
				t.Fatalf("fits alone: %v, %v; want it whole", p, err)
			}
			_, err := stageplan.Make(c, stageplan.Host{ID: "self", Free: big}, peer, stageplan.Options{Force: true})
			if !errors.Is(err, stageplan.ErrUnsplittable) || !errors.Is(err, model.ErrUnsupported) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("forced split: %v, want ErrUnsplittable naming %q", err, tc.why)
			}
			t.Log(err)
		})
	}
}

// TestWantSplitUnsplittable: a model that cannot be split is refused
// under split = "always" or pins, with the reason; under "auto" it is
// loaded whole even when it fits no single node under the budget.
func TestWantSplitUnsplittable(t *testing.T) {
	qwen := splitFixture(t, "qwen35", modeltest.Fixture("qwen35", "Q8_0"))
	gemma := splitFixture(t, "gemma4kv", modeltest.StageFixture("gemma4", "Q8_0", 6))
	n := &Node{cfg: Config{MemoryBudget: MinMemoryBudget}}
	for _, tc := range []struct {
		name string
		m    ModelConfig
		want error // nil: not split
	}{
		{"always", ModelConfig{Path: qwen, Split: SplitAlways}, stageplan.ErrUnsplittable},
		{"pins", ModelConfig{Path: qwen, Pins: []string{"self:0-2"}}, stageplan.ErrPin},
		{"auto", ModelConfig{Path: qwen, Split: SplitAuto}, nil},
		{"pins across the shared KV", ModelConfig{Path: gemma, Pins: []string{"self:0-3"}}, stageplan.ErrPin},
	} {
		tc.m.Context = splitContext
		split, err := n.wantSplit(modelSpec{ModelConfig: tc.m}, 0)
		if tc.want == nil {
			if split || err != nil {
				t.Errorf("%s: %v, %v; want whole", tc.name, split, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) || !errors.Is(err, model.ErrUnsupported) {
			t.Errorf("%s: %v, %v; want %v with the model's reason", tc.name, split, err, tc.want)
		}
		t.Logf("%s: %v", tc.name, err)
	}
	// Pins the model allows split it.
	if split, err := n.wantSplit(modelSpec{ModelConfig: ModelConfig{Path: gemma, Context: splitContext, Pins: []string{"self:0-2"}}}, 0); !split || err != nil {
		t.Errorf("allowed pins: %v, %v", split, err)
	}
}

// TestSetSplitPinsChecked: the owner's pins across a cut the model
// forbids are refused before any peer is asked, as bad pins with the
// model's reason (BAD_REQUEST on the owner-control facade), and the
// model keeps its pins.
func TestSetSplitPinsChecked(t *testing.T) {
	path := splitFixture(t, "gemma4kv", modeltest.StageFixture("gemma4", "Q8_0", 6))
	sm, err := openSplit(modelSpec{ModelConfig: ModelConfig{Name: "g4", Path: path, Context: splitContext}})
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close()
	n := &Node{}
	n.addSplit(sm)
	// Nothing serves sm.repins: a pin that got past the check would
	// block until ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = (&ownerRuntime{n}).SetSplitPins(ctx, "g4", []string{"self:0-1", strings.Repeat("ab", 32) + ":1-4"})
	if !errors.Is(err, control.ErrBadPins) || !errors.Is(err, stageplan.ErrPin) || !strings.Contains(err.Error(), "KV cache") {
		t.Fatalf("pins leaving blocks 4-6 a stage of their own: %v, want bad pins naming the shared KV", err)
	}
	t.Log(err)
	if st := sm.status(); st.Pins != nil {
		t.Errorf("refused pins changed the model's: %v", st.Pins)
	}
}

// TestSplitEchoLogprobsRefused: a model split across nodes cannot score
// its prompt (its last stage, with the head, is on another node), so an
// echo asking for logprobs is refused, naming echo; an echo alone is its
// prompt's text.
func TestSplitEchoLogprobsRefused(t *testing.T) {
	sm, err := openSplit(modelSpec{ModelConfig: ModelConfig{Name: "llama", Path: splitFixture(t, "llama", modeltest.StageFixture("llama", "Q8_0", 4)), Context: splitContext}})
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close()
	s := &servedModel{in: &instance{m: sm}}
	p := &preparedGeneration{s: s, pieces: sm}
	var e *api.Error
	if err := p.prepareEcho(&api.Generation{Prompt: "x", Echo: true}); !errors.As(err, &e) || e.Code != "unsupported_option" || e.Param != "echo" {
		t.Fatalf("echo with logprobs on a split model: %v", err)
	}
	p = &preparedGeneration{s: s}
	if err := p.prepareEcho(&api.Generation{Prompt: "x", Echo: true}); err != nil || p.echo == nil || *p.echo != "x" {
		t.Fatalf("echo alone: %v, %v", err, p.echo)
	}
}
