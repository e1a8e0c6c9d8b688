package node

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/chat"
	"github.com/meshnode/meshnode/gguf/chat/think"
	"github.com/meshnode/meshnode/gguf/chat/toolcall"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/digest"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/hw/membw"
	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/engine/ggufengine"
	"github.com/meshnode/meshnode/node/engine/splitengine"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/stage"
	"github.com/meshnode/meshnode/node/stageplan"
	"github.com/meshnode/meshnode/node/wire/nodev1"
	"github.com/meshnode/meshnode/node/wire/stagewire"
)

// Split models (docs/mesh.md, "Split models"). A configured model that
// fits no single node under the memory budget (this one first), or whose
// config says split = "always", is not loaded whole: this node loads the
// first stage, places the others on peers that hold the same file (by
// weights digest) and serve meshnode-stage/1, and serves the model through
// a splitengine.Engine. Peers run stages with a stage.Server over the
// GGUF files they hold, within their budget.
//
// What peers need to plan is gossiped in the features of this node's
// meshnode-stage/1 advertisement: "free-bytes=N" (memory the node gives
// to stages now), "mem-bandwidth=N" (the memory bandwidth it measured at
// start, bytes/s: package hw/membw) and "model=HEX" per weights digest it
// can load a stage of. Peers that do not know them ignore them.
//
// The bandwidth travels here rather than in PeerAnnouncement.hardware:
// the spec's only non-deprecated bandwidth field is GpuInfo's, a GPU's
// nominal peak, while stages run on the CPU over system memory, for
// which MemoryInfo has no field.

const (
	featureFree      = "free-bytes="
	featureBandwidth = "mem-bandwidth="
	featureModel     = "model="
	// maxAdvertisedModels bounds the digests gossiped.
	maxAdvertisedModels = 32
	// splitSeqs is how many requests' KV a stage holds at once.
	splitSeqs = 4
	// splitStartTimeout bounds loading every stage of a plan.
	splitStartTimeout = 2 * time.Minute
	// splitExclusion is how long the peers of a plan that failed are
	// left out of the next plans, unless nothing fits without them.
	splitExclusion = time.Minute
)

// splitModel is a model served split across peers, this node running
// stage 0. It is a localModel; its engine refuses serves, as
// unavailable, while no plan is loaded.
type splitModel struct {
	spec   modelSpec
	file   *gguf.File
	digest [32]byte
	tok    *tokenizer.Tokenizer
	tmpl   *chat.Template
	facts  gguf.Facts
	vocab  int
	ctx    int
	costs  stageplan.Model
	be     *cpu.Backend
	draft  *spec.Drafter // nil: no speculation
	eng    *splitengine.Engine
	lost   chan lostPipeline
	// repins carries the owner's new pins to the placement (SetSplitPins).
	repins chan repin
	// closed is closed by Close: its placement stops.
	closed    chan struct{}
	closeOnce sync.Once

	mu    sync.Mutex
	plan  stageplan.Plan // the loaded plan; none while placing
	state string         // "serving", or what it waits for
	// pinned is the owner's pins, set at runtime; nil: the config's.
	pinned []string
}

// repin is a request to place a split model under new pins; done gets
// the outcome.
type repin struct {
	pins []string
	done chan error
}

// pins are the pins the model is placed under now.
func (sm *splitModel) pins() []string {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if sm.pinned != nil {
		return sm.pinned
	}
	return sm.spec.Pins
}

// lostPipeline is a pipeline the engine dropped, and why.
type lostPipeline struct {
	p   splitengine.Pipeline
	err error
}

// openSplit prepares spec's model for serving split: the tokenizer,
// template, digest and costs; no stage is loaded.
func openSplit(s modelSpec) (*splitModel, error) {
	f, err := gguf.Open(s.Path)
	if err != nil {
		return nil, err
	}
	sm := &splitModel{spec: s, file: f, facts: f.Facts(), lost: make(chan lostPipeline, 4), repins: make(chan repin), closed: make(chan struct{}), state: "placing"}
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	mc, err := model.ParseConfig(f.Metadata)
	if err != nil {
		return nil, err
	}
	if sm.tok, err = tokenizer.FromGGUF(f.Metadata); err != nil {
		return nil, err
	}
	if sm.tmpl, err = chat.FromGGUF(f.Metadata); err != nil {
		return nil, err
	}
	sm.vocab = mc.VocabSize
	if t, ok := f.Tensor("token_embd.weight"); ok && len(t.Dims) == 2 {
		sm.vocab = int(t.Dims[1])
	}
	sm.ctx = s.Context
	if sm.ctx <= 0 {
		sm.ctx = model.DefaultContext
	}
	sm.ctx = min(sm.ctx, mc.TrainContext)
	sm.costs = stageCosts(f, mc, sm.ctx)
	sum, err := digest.Files(filepath.Dir(s.Path), filepath.Base(s.Path))
	if err != nil {
		return nil, err
	}
	sm.digest = [32]byte(sum.Digest)
	uj := s.UJPerToken
	if uj == 0 {
		uj = max(1, uint64(f.Size())/1000) // as openGGUF derives it
	}
	sm.be = cpu.New(cpu.Options{Threads: s.Threads})
	if s.draftPath != "" {
		// The draft runs whole on this node, beside the first stage.
		if sm.draft, err = spec.LoadDrafter(spec.DrafterConfig{Path: s.draftPath, Max: s.DraftMax}, f, sm.vocab, sm.ctx, sm.be); err != nil {
			sm.be.Close()
			return nil, fmt.Errorf("model %q: %w", s.Name, err)
		}
	}
	sm.eng = splitengine.New(splitengine.Config{
		Recipe: s.Name, Fidelity: s.fidelity(), UJPerToken: uj,
		Weights: receipt.Weights{Digest: receipt.ContentID(sum.Digest), Precision: ggufengine.Precision(sm.facts.QuantizationType)},
		Vocab:   sm.vocab, Context: sm.ctx, Batch: model.DefaultBatch, Sessions: splitSeqs, Tokens: sm.tok,
		// A window's rows are the pipeline's to bound (startSplit),
		// and whether it answers windows (planSplit).
		Draft: sm.draft,
		Lost: func(p splitengine.Pipeline, err error) {
			select {
			case sm.lost <- lostPipeline{p, err}:
			default:
			}
		},
	}, nil)
	ok = true
	return sm, nil
}

// stageCosts is what placing the model in f costs: each block's tensors,
// the embeddings, the head (the embeddings again when tied), and the KV
// of splitSeqs requests at ctx positions per block, in f16.
func stageCosts(f *gguf.File, mc model.Config, ctx int) stageplan.Model {
	c := stageplan.Model{Layers: make([]int64, mc.Layers)}
	_, hasOut := f.Tensor("output.weight")
	for _, t := range f.Tensors {
		size := int64(t.Size)
		switch t.Name {
		case "token_embd.weight":
			c.Embed += size
			if !hasOut {
				c.Head += size
			}
			continue
		case "output_norm.weight", "output.weight", "output.bias":
			c.Head += size
			continue
		}
		rest, ok := strings.CutPrefix(t.Name, "blk.")
		num, _, ok2 := strings.Cut(rest, ".")
		l, err := strconv.Atoi(num)
		if ok && ok2 && err == nil && l >= 0 && l < mc.Layers {
			c.Layers[l] += size
		} else {
			c.Embed += size // rope factors and the like: small, counted once
		}
	}
	c.KVPerLayer = int64(splitSeqs) * int64(ctx) * int64(mc.KVHeads) * int64(mc.HeadDimK+mc.HeadDimV) * 2
	// The planner cuts only where LoadStage will load the stages (gemma4's
	// shared KV, per-layer embeddings and hybrid layers forbid cuts).
	c.Check = func(lo, hi int) error { return mc.CheckStage(model.LayerRange{Lo: lo, Hi: hi}) }
	return c
}

func (sm *splitModel) Name() string          { return sm.spec.Name }
func (sm *splitModel) Engine() engine.Engine { return sm.eng }
func (sm *splitModel) ContextLength() int    { return sm.ctx }
func (sm *splitModel) Facts() *gguf.Facts    { return &sm.facts }
func (sm *splitModel) Size() int64           { return sm.file.Size() }
func (sm *splitModel) Path() string          { return sm.spec.Path }
func (sm *splitModel) Backend() string       { return "cpu" }

// Draft names the model's speculative proposer ("" for none), as a
// sampled request that may speculate names it.
func (sm *splitModel) Draft() string { return sm.eng.Draft() }

// DraftName is the draft as configured ("" for none).
func (sm *splitModel) DraftName() string { return sm.spec.Draft }

// DraftPrices are the prices its windows are priced by, and when they
// were measured (on the pipeline: priceSplitDraft; zero: the files'
// prices).
func (sm *splitModel) DraftPrices() (spec.Prices, time.Time) { return sm.draft.Pricing() }

// Slots is how many generations run at once: as many as the stages hold
// sessions for.
func (sm *splitModel) Slots() int { return splitSeqs }
func (sm *splitModel) Decoder() decoder {
	return newTokenDecoder(sm.tok)
}

// ToolFormat is how the model's chat template has it write tool calls.
func (sm *splitModel) ToolFormat() (toolcall.Format, bool) {
	if isHarmony(sm.tok) {
		return toolcall.Harmony, true // as ggufModel's
	}
	return toolcall.Detect(sm.tmpl), true
}

// Harmony implements api.ReasoningModel.
func (sm *splitModel) Harmony() bool { return isHarmony(sm.tok) }

// ReplyDecoder is the decoder of a reply read back for calls or for a
// reasoning block.
func (sm *splitModel) ReplyDecoder(tools, thinking bool) decoder {
	return newToolDecoder(sm.tok, replyMarkers(sm.tmpl, tools, thinking))
}

// Thinking is the reasoning block the model's chat template has it write.
func (sm *splitModel) Thinking() (think.Tags, bool, bool) { return thinkingOf(sm.tmpl) }

// Piece implements tokenPieces.
func (sm *splitModel) Piece(id uint32) []byte { return tokenPiece(sm.tok, id) }

func (sm *splitModel) Close() error {
	err := errors.New("split model closed twice")
	sm.closeOnce.Do(func() {
		close(sm.closed)
		sm.eng.Close()
		sm.draft.Close()
		sm.be.Close()
		err = sm.file.Close()
	})
	return err
}

func (sm *splitModel) isClosed() bool {
	select {
	case <-sm.closed:
		return true
	default:
		return false
	}
}

// Prompt is ggufModel's, over the file's tokenizer and template.
func (sm *splitModel) Prompt(gen *api.Generation, limit int) (string, []uint32, error) {
	return renderPrompt(sm.tok, sm.tmpl, gen, limit)
}

// Serving reports whether a plan is loaded.
func (sm *splitModel) Serving() bool { return sm.eng.Serving() }

func (sm *splitModel) setPins(pins []string) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	sm.pinned = slices.Clone(pins)
	if sm.pinned == nil {
		sm.pinned = []string{} // cleared: not the config's
	}
}

func (sm *splitModel) setState(plan stageplan.Plan, state string) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	sm.plan, sm.state = plan, state
}

// SplitStatus is a split model's plan in /api/status.
type SplitStatus struct {
	// State is "serving", or what the model waits for (a plan that fits,
	// or stages being placed again after one was lost), or "stopped" once
	// the node stops placing it (it is being unloaded, or the node stops).
	State  string        `json:"state"`
	Stages []StageStatus `json:"stages,omitempty"`
	// Pins are the pins the plan was made under ("NODE:LO-HI"): the
	// config's, or the owner's since SetSplitPins.
	Pins []string `json:"pins,omitempty"`
}

// StageStatus is one stage of a split model's plan.
type StageStatus struct {
	Node        string `json:"node"`
	Layers      string `json:"layers"` // "lo-hi", half-open
	MemoryBytes int64  `json:"memory_bytes"`
}

// lostState is a split model's state from the moment its engine drops
// the pipeline a step failed on until placeSplit, told on its own
// goroutine, says what it does about it.
const lostState = "placing again: a stage was lost"

func (sm *splitModel) status() *SplitStatus {
	sm.mu.Lock()
	st := &SplitStatus{State: sm.state, Pins: sm.pinned}
	if sm.pinned == nil {
		st.Pins = sm.spec.Pins
	}
	for _, s := range sm.plan.Stages {
		st.Stages = append(st.Stages, StageStatus{Node: s.Host, Layers: fmt.Sprintf("%d-%d", s.Lo, s.Hi), MemoryBytes: s.Bytes})
	}
	sm.mu.Unlock()
	// The engine drops a failed pipeline before the request that failed
	// on it gets its 503, and placeSplit hears of it only after: a client
	// that looks at the status on its 503 must not see the lost plan
	// serving. The state says "serving" only after the engine has the
	// pipeline, and stops saying it before the engine lets one go, so
	// the state read first and the engine after cannot disagree but for
	// a loss.
	if st.State == "serving" && !sm.eng.Serving() {
		st.State, st.Stages = lostState, nil
	}
	return st
}

// wantSplit reports whether spec's model is to be served split. used is
// what the models loaded before it hold. A model that cannot be split
// (model.Config.CheckStage) is refused under split = "always" or pins,
// with the reason; under "auto" it is loaded whole, the budget
// notwithstanding, as a model is with no budget.
func (n *Node) wantSplit(s modelSpec, used int64) (bool, error) {
	if s.reference || s.Split == SplitNever {
		return false, nil
	}
	forced := s.Split == SplitAlways || len(s.Pins) > 0
	if !forced && n.cfg.MemoryBudget == 0 {
		return false, nil // no budget: the machine's memory decides, as for any model
	}
	f, err := gguf.Open(s.Path)
	if err != nil {
		return false, fmt.Errorf("model %s: %w", s.Path, err)
	}
	defer f.Close()
	mc, err := model.ParseConfig(f.Metadata)
	if err != nil {
		return false, fmt.Errorf("model %s: %w", s.Path, err)
	}
	ctx := s.Context
	if ctx <= 0 {
		ctx = model.DefaultContext
	}
	c := stageCosts(f, mc, min(ctx, mc.TrainContext))
	if forced {
		var pins []stageplan.Pin
		for _, ps := range s.Pins {
			p, err := ParsePin(ps)
			if err != nil {
				return false, fmt.Errorf("model %s: %w", s.Path, err)
			}
			pins = append(pins, stageplan.Pin{Host: p.Node, Lo: p.Lo, Hi: p.Hi})
		}
		if err := stageplan.CheckSplit(c, pins); err != nil {
			why := fmt.Sprintf("pins %q", s.Pins)
			if len(s.Pins) == 0 {
				why = `split = "always"`
			}
			return false, fmt.Errorf("model %s: %s: %w", s.Path, why, err)
		}
		return true, nil
	}
	_, err = stageplan.Make(c, stageplan.Host{ID: "self", Free: int64(n.cfg.MemoryBudget) - used}, nil,
		stageplan.Options{Headroom: int64(n.cfg.Stages.Headroom)})
	if errors.Is(err, stageplan.ErrUnsplittable) {
		if n.log != nil {
			n.log.Warn("model fits no single node under the memory budget but cannot be split: loading it whole", "model", s.Path, "err", err)
		}
		return false, nil
	}
	return err != nil, nil
}

// selfFree is the memory this node gives to a split model's first stage
// or to peers' stages now: the budget (else the machine's available
// memory) less what the whole models, the stages it serves and the other
// split models' first stages hold.
func (n *Node) selfFree(except *splitModel) int64 {
	var free int64
	if n.cfg.MemoryBudget > 0 {
		free = int64(n.cfg.MemoryBudget)
	} else if n.hardware != nil {
		free = int64(n.hardware.Memory.AvailableBytes)
	}
	free -= n.wholeModelBytes()
	for _, sm := range n.splitList() {
		if sm != except {
			sm.mu.Lock()
			if len(sm.plan.Stages) > 0 {
				free -= sm.plan.Stages[0].Bytes
			}
			sm.mu.Unlock()
		}
	}
	if n.stageSrv != nil {
		free -= n.stageSrv.Used()
	}
	return max(free, 0)
}

// startStages serves stages to peers (unless the config turns it off)
// and places the split models, on the mesh node mn before it serves.
func (n *Node) startStages(ctx context.Context, stack *closers, run func(string, func(context.Context) error, context.Context)) error {
	if n.cfg.Stages.StageServe() {
		paths := n.stagePaths()
		files := &stage.Files{Paths: paths}
		be := cpu.New(cpu.Options{})
		var budget int64
		if n.cfg.MemoryBudget > 0 {
			budget = max(1, n.selfFree(nil))
		}
		// Each stage meters its part on this node's meter and signs its
		// report under the node key, for the head's receipt.
		sealer, err := receipt.NewSealer(n.key)
		if err != nil {
			return fmt.Errorf("stages: %w", err)
		}
		srv := &stage.Server{Models: files, Backend: be, Dial: stage.MeshDialer{Node: n.mesh}, Budget: budget, Log: n.log,
			Meter: n.meters.Meter, Uses: hw.DomainCPU, Signer: sealer}
		if err := stage.Register(n.mesh, srv); err != nil {
			return fmt.Errorf("stages: %w", err)
		}
		n.mu.Lock()
		n.stageSrv = srv
		n.mu.Unlock()
		stack.push("stage server", func() error {
			srv.Stop()
			be.Close()
			return files.Close()
		})
		// The digests peers plan with are hashed once, off the start
		// path: a large file takes a while.
		run("stage digests", func(ctx context.Context) error {
			var ds [][32]byte
			for _, p := range paths {
				if ctx.Err() != nil {
					return nil
				}
				sum, err := digest.Files(filepath.Dir(p), filepath.Base(p))
				if err != nil {
					n.log.Debug("stages: not offering a file", "file", p, "err", err)
					continue
				}
				if d := [32]byte(sum.Digest); !slices.Contains(ds, d) {
					ds = append(ds, d)
				}
			}
			n.mu.Lock()
			n.stageDigests = ds
			n.mu.Unlock()
			n.updateSelf()
			return nil
		}, ctx)
	}
	n.mu.Lock()
	n.splitCtx = ctx
	n.mu.Unlock()
	for _, sm := range n.splitList() {
		run("split model "+sm.Name(), func(ctx context.Context) error { n.placeSplit(ctx, sm); return nil }, ctx)
	}
	return nil
}

// splitList is the split models being served (not closed).
func (n *Node) splitList() []*splitModel {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*splitModel
	for _, sm := range n.splits {
		if !sm.isClosed() {
			out = append(out, sm)
		}
	}
	return out
}

// addSplit records sm as served, dropping closed ones.
func (n *Node) addSplit(sm *splitModel) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.splits = slices.DeleteFunc(n.splits, (*splitModel).isClosed)
	n.splits = append(n.splits, sm)
}

// splitModel is the split model served as name, or nil.
func (n *Node) splitModel(name string) *splitModel {
	for _, sm := range n.splitList() {
		if sm.Name() == name {
			return sm
		}
	}
	return nil
}

// loadSplit serves spec's model split, for owner control: registered
// with the steward, its weights recorded, and placed from now on, until
// the node stops or the model is unloaded.
func (n *Node) loadSplit(s modelSpec) (*instance, error) {
	n.mu.Lock()
	ctx := n.splitCtx
	n.mu.Unlock()
	if ctx == nil {
		return nil, errors.New("split models are placed once the mesh runs")
	}
	sm, err := openSplit(s)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*instance, error) {
		n.steward.RemoveBackend(backendOf(sm).Name)
		sm.Close()
		return nil, err
	}
	if err := n.steward.AddBackend(backendOf(sm)); err != nil {
		sm.Close()
		return nil, err
	}
	if err := n.recordWeights(sm); err != nil {
		return fail(err)
	}
	in, err := n.models.add(sm)
	if err != nil {
		return fail(err)
	}
	n.addSplit(sm)
	go n.placeSplit(ctx, sm)
	return in, nil
}

// wholeModelBytes is what the models served whole hold.
func (n *Node) wholeModelBytes() int64 {
	var used int64
	for _, in := range n.models.all() {
		if n.splitModel(in.m.Name()) == nil {
			used += in.m.Size()
		}
	}
	return used
}

// stagePaths are the GGUF files peers may load stages of: the models
// dir's and the configured models'.
func (n *Node) stagePaths() []string {
	var paths []string
	if entries, err := os.ReadDir(n.cfg.ModelsDir); err == nil {
		for _, e := range entries {
			if !e.IsDir() && strings.EqualFold(filepath.Ext(e.Name()), ".gguf") {
				paths = append(paths, filepath.Join(n.cfg.ModelsDir, e.Name()))
			}
		}
	}
	for _, in := range n.models.all() {
		if p := in.m.Path(); p != "" && !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
	}
	return paths
}

// stageAdvertisement is this node's meshnode-stage/1 entry: the
// protocol's features, the memory it gives to stages and the digests it
// loads stages of.
func (n *Node) stageAdvertisement() *nodev1.MeshSubprotocol {
	adv := stagewire.Advertisement()
	adv.Features = append(adv.Features, featureFree+strconv.FormatInt(n.selfFree(nil), 10))
	if bw := n.memBandwidth(); bw > 0 {
		adv.Features = append(adv.Features, featureBandwidth+strconv.FormatInt(int64(bw), 10))
	}
	n.mu.Lock()
	ds := n.stageDigests
	n.mu.Unlock()
	for i, d := range ds {
		if i == maxAdvertisedModels {
			break
		}
		adv.Features = append(adv.Features, featureModel+hex.EncodeToString(d[:]))
	}
	return adv
}

// stageOffer is what a peer's meshnode-stage/1 entry offers.
type stageOffer struct {
	free      int64
	bandwidth float64 // bytes/s; 0 when not said
	models    [][32]byte
	// rows: its stages answer windows (stagewire.FeatureRows); loadRows:
	// it takes LoadStage.Rows (stagewire.FeatureLoadRows).
	rows, loadRows bool
}

// stageOfferOf reads a peer's offer from its announcement; false when it
// does not serve meshnode-stage/1 or says nothing of its memory.
func stageOfferOf(a *nodev1.PeerAnnouncement) (stageOffer, bool) {
	for _, sp := range a.GetSubprotocols() {
		if !stagewire.Matches(sp.GetName(), sp.GetMajor()) {
			continue
		}
		var o stageOffer
		haveFree := false
		for _, f := range sp.GetFeatures() {
			if v, ok := strings.CutPrefix(f, featureFree); ok {
				if b, err := strconv.ParseInt(v, 10, 64); err == nil && b >= 0 {
					o.free, haveFree = b, true
				}
			} else if f == stagewire.FeatureRows {
				o.rows = true
			} else if f == stagewire.FeatureLoadRows {
				o.loadRows = true
			} else if v, ok := strings.CutPrefix(f, featureBandwidth); ok {
				if b, err := strconv.ParseInt(v, 10, 64); err == nil && b > 0 {
					o.bandwidth = float64(b)
				}
			} else if v, ok := strings.CutPrefix(f, featureModel); ok {
				var d [32]byte
				if b, err := hex.DecodeString(v); err == nil && len(b) == 32 && len(o.models) < maxAdvertisedModels {
					copy(d[:], b)
					o.models = append(o.models, d)
				}
			}
		}
		return o, haveFree
	}
	return stageOffer{}, false
}

// planSplit plans sm under pins over the peers that offer it, leaving
// out the excluded ones unless nothing fits without them. The memory of
// held's stages (sm's plan being replaced) counts as free on their peers,
// which gossip it as used.
func (n *Node) planSplit(sm *splitModel, excluded map[string]time.Time, pins []string, held stageplan.Plan) (stageplan.Plan, error) {
	self := stageplan.Host{ID: n.key.ID().String(), Free: n.selfFree(sm), Bandwidth: n.memBandwidth()}
	opt, err := n.splitOptions(self.ID, pins)
	if err != nil {
		return stageplan.Plan{}, err
	}
	return planSplitOver(sm.costs, self, n.mesh.Peers(), sm.digest, sm.draft != nil, excluded, opt, held, time.Now())
}

// planSplitOver is planSplit over peers, for a model of costs and digest
// d that speculates or not, at now.
func planSplitOver(costs stageplan.Model, self stageplan.Host, peers []mesh.Peer, d [32]byte, speculates bool, excluded map[string]time.Time, opt stageplan.Options, held stageplan.Plan, now time.Time) (stageplan.Plan, error) {
	// A speculating model sends windows down the chain, and any model
	// does for a predicted output: a node whose stages predate windows
	// would answer each with one row. Such nodes take a model's stages
	// only where it does not speculate and fits no other way (its
	// pipeline then refuses predictions: stage.Placement.Windowless).
	plan, err := planHosts(costs, self, splitHosts(peers, d, true), excluded, opt, held, now)
	if err != nil && !speculates {
		plan, err = planHosts(costs, self, splitHosts(peers, d, false), excluded, opt, held, now)
	}
	return plan, err
}

// planHosts plans over the hosts all, leaving out the excluded ones
// unless nothing fits without them; held's stages count as free.
func planHosts(costs stageplan.Model, self stageplan.Host, all []stageplan.Host, excluded map[string]time.Time, opt stageplan.Options, held stageplan.Plan, now time.Time) (stageplan.Plan, error) {
	for i := range all {
		for _, s := range held.Stages[min(1, len(held.Stages)):] {
			if s.Host == all[i].ID {
				all[i].Free += s.Bytes
			}
		}
	}
	var fresh []stageplan.Host
	for _, h := range all {
		if until, ex := excluded[h.ID]; !ex || now.After(until) {
			fresh = append(fresh, h)
		}
	}
	plan, err := stageplan.Make(costs, self, fresh, opt)
	if err != nil && len(fresh) < len(all) {
		plan, err = stageplan.Make(costs, self, all, opt)
	}
	return plan, err
}

// splitHosts are the peers that offer stages of the model with digest
// d (and, with rows, answer windows: stagewire.FeatureRows), with their
// free memory and bandwidth from gossip and their RTT.
func splitHosts(peers []mesh.Peer, d [32]byte, rows bool) []stageplan.Host {
	var hosts []stageplan.Host
	for _, p := range peers {
		o, ok := stageOfferOf(p.Announcement)
		if !ok || !slices.Contains(o.models, d) || rows && !o.rows {
			continue
		}
		hosts = append(hosts, stageplan.Host{ID: p.ID.String(), Free: o.free, RTT: p.RTT, Bandwidth: o.bandwidth})
	}
	return hosts
}

// splitOptions are the planner's options for a split model with pins
// ("NODE:LO-HI", NODE "self" for this node, whose id is self).
func (n *Node) splitOptions(self string, pins []string) (stageplan.Options, error) {
	opt := stageplan.Options{
		Headroom: int64(n.cfg.Stages.Headroom), MaxRTT: n.cfg.Stages.MaxRTT.Duration,
		// Planned split from the start: even a model that would fit this
		// node now (a peer's stage ended) keeps the split it was
		// configured for.
		Force: true,
	}
	for _, ps := range pins {
		p, err := ParsePin(ps)
		if err != nil {
			return stageplan.Options{}, err
		}
		if p.Node == "self" {
			p.Node = self
		}
		opt.Pins = append(opt.Pins, stageplan.Pin{Host: p.Node, Lo: p.Lo, Hi: p.Hi})
	}
	return opt, nil
}

// measureBandwidth is this node's memory bandwidth in bytes/s, 0 when
// it cannot be measured.
func (n *Node) measureBandwidth(ctx context.Context) float64 {
	probe := n.memProbe
	if probe == nil {
		probe = func(ctx context.Context) (float64, error) {
			return membw.Measure(ctx, membw.DefaultSize, membw.DefaultRounds)
		}
	}
	bw, err := probe(ctx)
	if err != nil {
		n.log.Debug("memory bandwidth not measured", "err", err)
		return 0
	}
	n.log.Debug("memory bandwidth", "GB/s", bw/1e9)
	return bw
}

// memBandwidth is the bandwidth measured at start, in bytes/s (0: none).
func (n *Node) memBandwidth() float64 {
	if n.hardware == nil {
		return 0
	}
	return n.hardware.Memory.BandwidthGBps * 1e9
}

// placeSplit keeps sm placed until ctx ends: it plans, loads the stages
// (the last first), serves, and when a stage is lost (a step fails, or
// its node leaves or goes down) withdraws the model from gossip, plans
// again without that stage's peer and loads the new plan.
func (n *Node) placeSplit(ctx context.Context, sm *splitModel) {
	// An unloaded model's placement ends with it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sm.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	events := n.mesh.Subscribe(ctx, 64)
	excluded := map[string]time.Time{}
	first := n.splitRetry
	if first <= 0 {
		first = time.Second
	}
	wait := first
	// pending is the owner's new pins while nothing is loaded: the next
	// plan is made under them, and they are kept only if it loads.
	var pending *repin
	for {
		pins, excl := sm.pins(), excluded
		if pending != nil {
			pins, excl = pending.pins, nil
		}
		plan, err := n.planSplit(sm, excl, pins, stageplan.Plan{})
		if err == nil {
			var p *stage.Pipeline
			if p, err = n.startSplit(ctx, sm, plan); err == nil {
				sm.eng.Set(p) // before the state: see status
				sm.setState(plan, "serving")
				n.updateSelf()
				n.log.Info("split model serving", "model", sm.Name(), "plan", plan.String())
				n.priceSplitDraft(ctx, sm)
				if pending != nil {
					sm.setPins(pending.pins)
					pending.done <- nil
					pending = nil
				}
				why := n.awaitLoss(ctx, sm, &p, &plan, &events)
				if why == nil {
					sm.setState(stageplan.Plan{}, "stopped") // before the engine: see status
					sm.eng.Set(nil)
					return
				}
				n.log.Warn("split model lost a stage: placing it again", "model", sm.Name(), "err", why)
				sm.setState(stageplan.Plan{}, "placing again: "+why.Error())
				n.updateSelf()
				for _, s := range plan.Stages[1:] {
					excluded[s.Host] = time.Now().Add(splitExclusion)
				}
				wait = first
				continue
			}
			for _, s := range plan.Stages[1:] {
				excluded[s.Host] = time.Now().Add(splitExclusion)
			}
			err = fmt.Errorf("loading plan %v: %w", plan, err)
			if pending != nil {
				err = fmt.Errorf("%w: %w", ErrRepin, err)
			}
		}
		if pending != nil {
			// Refused: plan again at once under the pins there were.
			pending.done <- err
			pending = nil
			continue
		}
		sm.setState(stageplan.Plan{}, "waiting for a plan: "+err.Error())
		n.log.Debug("split model not placed", "model", sm.Name(), "err", err)
		timer := time.NewTimer(wait)
	waiting:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
				break waiting
			case r := <-sm.repins:
				// Nothing is loaded: new pins are placed at once.
				pending = &r
				timer.Stop()
				wait = first
				break waiting
			}
		}
		wait = min(2*wait, 10*time.Second)
	}
}

// awaitLoss waits until p is lost, and says why; nil when ctx ends. A
// stage's node that leaves or goes down takes p out of service at once,
// so that no request is sent to it.
//
// New pins from the owner are placed here (repinSplit), and the
// pipeline measured again when its steps drift from its prices.
func (n *Node) awaitLoss(ctx context.Context, sm *splitModel, p **stage.Pipeline, plan *stageplan.Plan, events *<-chan mesh.Event) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case r := <-sm.repins:
			if lost := n.repinSplit(ctx, sm, r, p, plan); lost != nil {
				return lost
			}
		case l := <-sm.lost:
			if l.p == splitengine.Pipeline(*p) {
				return l.err
			}
		case <-sm.eng.Drifted():
			// A link's latency, or a stage's load, has changed what a
			// round trip costs against a draft since it was priced.
			n.log.Info("speculative decoding: the pipeline's steps drifted from its prices; measuring again", "model", sm.Name())
			n.priceSplitDraft(ctx, sm)
		case ev, ok := <-*events:
			if !ok {
				*events = nil
				continue
			}
			if ev.Kind != mesh.PeerLeft && ev.Kind != mesh.PeerDown {
				continue
			}
			for _, s := range plan.Stages[1:] {
				if s.Host == ev.Peer.String() {
					sm.eng.Set(nil)
					return fmt.Errorf("%w: layers %d-%d: node %s %v (%s)", stage.ErrStageLost, s.Lo, s.Hi, ev.Peer.Short(), ev.Kind, ev.Reason)
				}
			}
		}
	}
}

// splitPriceTimeout bounds priceSplitDraft: the measurement itself takes
// a fraction of a second on a LAN.
const splitPriceTimeout = 10 * time.Second

// repinRetries and repinRetryWait bound how long new pins wait for a
// peer of the old plan to free its stage's budget (repinSplit).
const (
	repinRetries   = 10
	repinRetryWait = 100 * time.Millisecond
)

// repinSplit places sm under r's pins while *p serves *plan, and answers
// r. A new plan on other peers is loaded (downstream first) before it
// replaces *p, so that pins that cannot be placed leave the model served
// as it was. A new plan that keeps a peer of the old one on another range
// cannot be loaded beside it (the peer's budget holds the old stage), so
// the old plan is stopped first, and loaded again if the new one fails;
// it returns why the model is left with no plan, nil when it has one.
func (n *Node) repinSplit(ctx context.Context, sm *splitModel, r repin, p **stage.Pipeline, plan *stageplan.Plan) error {
	np, err := n.planSplit(sm, nil, r.pins, *plan)
	if err != nil {
		r.done <- err
		return nil
	}
	if slices.EqualFunc(np.Stages, plan.Stages, func(a, b stageplan.Stage) bool { return a.Host == b.Host && a.Lo == b.Lo && a.Hi == b.Hi }) {
		sm.setPins(r.pins)
		sm.setState(*plan, "serving")
		r.done <- nil
		return nil
	}
	shares := slices.ContainsFunc(np.Stages[1:], func(s stageplan.Stage) bool {
		return slices.ContainsFunc(plan.Stages[1:], func(o stageplan.Stage) bool { return o.Host == s.Host })
	})
	if shares {
		// Requests in flight end with a retryable 503, as when a stage
		// is lost.
		sm.setState(stageplan.Plan{}, "placing under new pins") // before the engine: see status
		sm.eng.Set(nil)
		n.updateSelf()
	}
	pl, err := n.startSplit(ctx, sm, np)
	// The old plan's stages on a peer the new plan keeps were closed just
	// now, and that peer frees their budget once it sees their streams
	// end: a load that finds its budget still held is tried again, a few
	// times, before the new pins count as failed.
	for try := 0; shares && errors.Is(err, stagewire.CodeNoMemory) && try < repinRetries && ctx.Err() == nil; try++ {
		t := time.NewTimer(repinRetryWait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
			pl, err = n.startSplit(ctx, sm, np)
		}
	}
	if err != nil {
		err = fmt.Errorf("%w: loading plan %v: %w", ErrRepin, np, err)
		if shares {
			old, rerr := n.startSplit(ctx, sm, *plan)
			if rerr != nil {
				r.done <- fmt.Errorf("%w; the old plan did not load again either (%v): placing the model anew", err, rerr)
				return fmt.Errorf("%w: the old plan did not load again after new pins failed: %w", stage.ErrStageLost, rerr)
			}
			*p = old
			sm.eng.Set(old)
			sm.setState(*plan, "serving")
			n.updateSelf()
		}
		r.done <- err
		return nil
	}
	sm.setPins(r.pins)
	sm.setState(np, "serving")
	sm.eng.Set(pl) // closes the old plan's stages
	*p, *plan = pl, np
	n.log.Info("split model placed under new pins", "model", sm.Name(), "pins", r.pins, "plan", np.String())
	n.updateSelf()
	r.done <- nil
	n.priceSplitDraft(ctx, sm)
	return nil
}

// priceSplitDraft measures what speculation costs on the pipeline sm
// serves on now (splitengine.Engine.Measure), where sm drafts and its
// windows are not to be priced by the files. Until it has, and where it
// cannot, windows are priced as before: by the files' sizes, or by the
// last pipeline measured. It runs on the placing goroutine, which it
// holds for at most splitPriceTimeout (the measuring request waits for a
// serve's place).
func (n *Node) priceSplitDraft(ctx context.Context, sm *splitModel) {
	if sm.draft == nil || sm.spec.DraftPrices == DraftPricesFiles {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, splitPriceTimeout)
	defer cancel()
	p, err := sm.eng.Measure(ctx)
	if err != nil {
		n.log.Warn("speculative decoding: the pipeline's prices not measured", "model", sm.Name(), "draft", sm.spec.Draft, "err", err)
		return
	}
	n.log.Info("speculative decoding: the pipeline's prices measured", "model", sm.Name(), "draft", sm.spec.Draft,
		"cost", p.Cost, "row", p.Row, "catch_up", p.CatchUp, "first", p.First, "sampled_cost", p.SampledCost, "sampled_row", p.SampledRow,
		"sampled_first", p.SampledFirst, "sampled_catch_up", p.SampledCatchUp, "sampled_draft", sm.eng.Draft())
}

// startSplit loads plan's stages, the last first.
func (n *Node) startSplit(ctx context.Context, sm *splitModel, plan stageplan.Plan) (*stage.Pipeline, error) {
	// Which peers take LoadStage.Rows, from their announcements: the
	// last stage's node decides how many drafts a window holds.
	// Which answer windows at all.
	loadRows, rowsOf := map[identity.EndpointID]bool{}, map[identity.EndpointID]bool{n.key.ID(): true}
	for _, p := range n.mesh.Peers() {
		if o, ok := stageOfferOf(p.Announcement); ok {
			loadRows[p.ID], rowsOf[p.ID] = o.loadRows, o.rows
		}
	}
	var places []stage.Placement
	for _, s := range plan.Stages {
		id, err := identity.ParseEndpointID(s.Host)
		if err != nil {
			return nil, err
		}
		places = append(places, stage.Placement{Peer: id, Range: model.LayerRange{Lo: s.Lo, Hi: s.Hi}, LoadRows: loadRows[id], Windowless: !rowsOf[id]})
	}
	// A window holds the draft's most drafts (a model without a draft
	// drafts from predictions: spec.DefaultMaxWindow) and the last
	// token, apart from the requests the stages hold KV for; a last
	// stage on a node that predates the field holds them to splitSeqs
	// rows (splitSeqs-1 drafts). A window is one step: at most a step's
	// positions.
	rows := min(max(splitSeqs, sm.draft.Max()+1), model.DefaultBatch)
	ctx, cancel := context.WithTimeout(ctx, splitStartTimeout)
	defer cancel()
	return stage.Start(ctx, stage.PipelineConfig{
		File: sm.file, Digest: sm.digest, Self: n.key.ID(), Stages: places,
		Context: sm.ctx, KV: model.KVF16, Batch: model.DefaultBatch, Seqs: splitSeqs, Rows: rows,
		Backend: sm.be, Dial: n.headDialer(),
		// A stage's node that died without a word (killed, powered off)
		// is found out by a probe within seconds: its connection closes
		// and the step fails, rather than waiting out the connection's
		// idle timeout.
		Suspect: n.mesh.Probe,
	})
}

// headDialer is what a split model's head opens its stages' streams
// with: the mesh's (splitDial wrapping it in tests).
func (n *Node) headDialer() stage.Dialer {
	var d stage.Dialer = stage.MeshDialer{Node: n.mesh}
	if n.splitDial != nil {
		d = n.splitDial(d)
	}
	return d
}

// updateSelf gossips the announcement again at once (a split model's
// route appears or is withdrawn).
func (n *Node) updateSelf() {
	if err := n.mesh.UpdateSelf(); err != nil {
		n.log.Debug("mesh: announcement not updated", "err", err)
	}
}
