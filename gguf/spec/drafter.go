package spec

import (
	"context"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/digest"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/sample"
)

// DraftLookup is DrafterConfig.Path for prompt lookup (Lookup): drafts
// found in the sequence itself, no second model.
const DraftLookup = "lookup"

// DrafterConfig chooses a model's proposer.
type DrafterConfig struct {
	// Path is a GGUF draft model with the target's vocabulary, or
	// DraftLookup.
	Path string
	// Max is the most drafts per window; 0: DefaultMaxWindow.
	Max int
	// Cost is c, a drafted token's cost relative to a target token; 0:
	// the draft file's size over the target's (the bytes each token
	// reads). Fixed at load, so that the windows it sizes replay.
	Cost float64
	// Threshold stops a window's drafting below this top probability
	// (0: DefaultThreshold; negative: never).
	Threshold float64
}

// Drafter is a model's speculative proposer, shared by its serves: prompt
// lookup, or a draft model loaded on a backend with the sessions it
// drafts on (one per running serve, kept for the next, as the target's
// are). It is safe for concurrent use.
type Drafter struct {
	id        string
	file      *gguf.File
	m         *model.Model // nil for prompt lookup
	cost      float64
	copyOf    bool // the draft is the target's weights in other types
	maxK      int
	threshold float64
	opt       model.SessionOptions
	// fixedCost: the configuration set c, which measuring leaves alone.
	fixedCost bool

	mu sync.Mutex
	// prices: what Measure or MeasureSteps found last, at measuredAt
	// (zero before, or without them). A split model measures again on
	// each pipeline it is placed on, and when its steps drift.
	prices     Prices
	measuredAt time.Time
	idle       []*model.Session
}

// LoadDrafter loads cfg's proposer for a target model (its file, vocab
// tokens and context positions): prompt lookup, or a draft model loaded
// whole on be, whose vocabulary must be the target's (CheckVocab).
func LoadDrafter(cfg DrafterConfig, target *gguf.File, vocab, context int, be backend.Backend) (*Drafter, error) {
	maxK := cfg.Max
	if maxK <= 0 {
		maxK = DefaultMaxWindow
	}
	if cfg.Path == DraftLookup {
		return &Drafter{id: DraftLookup, maxK: maxK}, nil
	}
	f, err := gguf.Open(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("draft: %w", err)
	}
	d := &Drafter{file: f, maxK: maxK, threshold: cfg.Threshold}
	ok := false
	defer func() {
		if !ok {
			d.Close()
		}
	}()
	if d.m, err = model.Load(f, be); err != nil {
		return nil, fmt.Errorf("draft %s: %w", cfg.Path, err)
	}
	if err := CheckVocab(target.Metadata, f.Metadata, vocab, d.m.Config().VocabSize); err != nil {
		return nil, fmt.Errorf("draft %s cannot draft for this model: %w", cfg.Path, err)
	}
	sum, err := digest.Files(filepath.Dir(cfg.Path), filepath.Base(cfg.Path))
	if err != nil {
		return nil, fmt.Errorf("draft: %w", err)
	}
	d.id = hex.EncodeToString(sum.Digest[:])
	d.copyOf = SameShape(target, f)
	d.cost, d.fixedCost = cfg.Cost, cfg.Cost > 0
	if d.cost <= 0 {
		d.cost = float64(f.Size()) / float64(max(1, target.Size()))
	}
	d.opt = model.SessionOptions{Context: min(context, d.m.Config().TrainContext), KV: model.KVF16}
	ok = true
	return d, nil
}

// ID is what a sampled request speculating with d names (a receipt's
// sampling.draft): DraftLookup, or the draft file's weights digest in hex.
func (d *Drafter) ID() string { return d.id }

// SampledID is what a sampled request names when it may speculate with d:
// without measured prices ID, whose windows are priced by the files;
// with them "" where a sampled serve's speculation cannot pay
// (Prices.SampledPays, at the prior its window starts from), so that such
// requests sample plainly, else ID and the sampled prices measured
// (PricedDraft), which its windows are priced at. The name is part of
// the request, so a replay prices its windows alike on any machine.
func (d *Drafter) SampledID() string {
	p, measured := d.Prices()
	if !measured {
		return d.id
	}
	if !p.SampledPays(d.maxK, d.prior()) {
		return ""
	}
	return PricedDraft(d.id, p.Sampled())
}

// SampledWindow is the window of a sampled serve whose request names
// draft (SampledID's form): priced as the name says, or, for a name
// without prices, by the files' sizes (Window).
func (d *Drafter) SampledWindow(draft string) (*Window, error) {
	id, p, priced, err := SplitDraft(draft)
	switch {
	case err != nil:
		return nil, err
	case id != d.id:
		return nil, fmt.Errorf("spec: the request names draft %q, not this model's %q", id, d.id)
	case !priced:
		return d.Window(false), nil
	}
	return sampledWindow(d.maxK, p).Expect(d.prior()), nil
}

// prior is the acceptance d's windows expect before they have seen any:
// CopyPrior for a copy of the target (SameShape), else DefaultPrior.
func (d *Drafter) prior() float64 {
	if d.copyOf {
		return CopyPrior
	}
	return DefaultPrior
}

// Model is the draft model, nil for prompt lookup: for an engine that
// steps its serves' drafts together (ModelProposer.StepWith).
func (d *Drafter) Model() *model.Model { return d.m }

// Cost is c, a drafted token's cost relative to a target token.
func (d *Drafter) Cost() float64 { return d.cost }

// Max is the most drafts per window: DefaultMaxWindow without a drafter
// (nil), whose serves may still draft from a prediction.
func (d *Drafter) Max() int {
	if d == nil {
		return DefaultMaxWindow
	}
	return d.maxK
}

// Unit is the work a drafted token does, in the units of a target token's
// file size (the bytes it reads): the draft file's size; 0 for prompt
// lookup, which reads no weights.
func (d *Drafter) Unit() uint64 {
	if d.file == nil {
		return 0
	}
	return uint64(max(1, d.file.Size()))
}

// Proposer returns a serve's proposer under its sampling parameters, and
// its release.
func (d *Drafter) Proposer(p sample.Params) (Proposer, func(), error) {
	if d.m == nil {
		return Lookup{}, func() {}, nil
	}
	d.mu.Lock()
	var s *model.Session
	if n := len(d.idle); n > 0 {
		s, d.idle = d.idle[n-1], d.idle[:n-1]
	}
	d.mu.Unlock()
	if s == nil {
		var err error
		if s, err = d.m.NewSession(d.opt); err != nil {
			return nil, nil, fmt.Errorf("draft: %w", err)
		}
	}
	return NewModelProposer(s, p, d.threshold), func() {
		d.mu.Lock()
		d.idle = append(d.idle, s)
		d.mu.Unlock()
	}, nil
}

// Measure times the draft's and target's steps on this machine
// (Measure) and keeps the prices for greedy serves' windows. It is for
// the engine to call once both models are loaded, before serving.
func (d *Drafter) Measure(ctx context.Context, target *model.Model) (Prices, error) {
	p, err := Measure(ctx, target, d.m, measureReps, measureBudget)
	return d.keep(p, err)
}

// MeasureSteps is Measure for a target timed by step, whose steps take
// up to most rows (MeasureSteps): a split model's pipeline, measured
// when it is placed. The prices it keeps replace those kept before.
func (d *Drafter) MeasureSteps(ctx context.Context, step StepTimer, most int) (Prices, error) {
	p, err := MeasureSteps(ctx, step, most, d.m, measureReps, measureBudget)
	return d.keep(p, err)
}

// keep keeps the prices measured, with the configured cost where one
// is set (and the catch-up and the first step's extra in proportion).
func (d *Drafter) keep(p Prices, err error) (Prices, error) {
	if err != nil {
		return Prices{}, err
	}
	if d.fixedCost {
		// The catch-up in proportion: what the configuration says a
		// step costs, times what two tokens cost over one.
		if p.Cost > 0 {
			p.CatchUp = d.cost * p.CatchUp / p.Cost
			p.First = d.cost * p.First / p.Cost
		}
		p.Cost = d.cost
	}
	d.mu.Lock()
	d.prices, d.measuredAt = p, time.Now()
	d.mu.Unlock()
	return p, nil
}

// Prices are the prices windows are priced by, and whether they were
// measured: those kept, else the files' (a drafted token at the draft
// file's size over the target's, or the configured cost; a verified row
// at DefaultRowCost; greedy and sampled alike).
func (d *Drafter) Prices() (Prices, bool) {
	p, at := d.Pricing()
	return p, !at.IsZero()
}

// Pricing is Prices with when they were measured (zero: the files'
// prices), read together; nothing for no drafter (nil).
func (d *Drafter) Pricing() (Prices, time.Time) {
	if d == nil {
		return Prices{}, time.Time{}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.measuredAt.IsZero() {
		return Prices{Cost: d.cost, Row: DefaultRowCost, SampledCost: d.cost, SampledRow: DefaultRowCost}, time.Time{}
	}
	return d.prices, d.measuredAt
}

// Drafter.Measure's rounds: up to measureReps, and no more once
// measureBudget has passed (Measure: three rounds within five times it;
// a large model's steps take a tenth of a second and more, and the load
// waits for them).
const (
	measureReps   = 15
	measureBudget = 300 * time.Millisecond
)

// Window sizes a serve's windows. Its probes, once speculation stops
// paying, count a draft model's catch-up on the tokens it skipped, so a
// draft that is not far cheaper than the target never probes (Window).
// A greedy serve's windows are priced by what Measure found, when it has
// run: its tokens are plain greedy decoding's whatever the windows, so
// they may follow the machine; a sampled serve's windows decide what it
// draws, and so are priced by what its request names (SampledWindow),
// here the files' sizes and DefaultRowCost, the same on any machine, so
// that it replays.
//
// A draft that is a copy of the target in other types (SameShape) is
// expected to stand as often as CopyPrior from the first round.
func (d *Drafter) Window(greedy bool) *Window {
	if p, measured := d.Prices(); greedy && measured {
		return p.Window(d.maxK).Expect(d.prior())
	}
	return NewWindow(d.maxK, d.cost, 0).Expect(d.prior())
}

// PredictionWindow sizes the rounds of a greedy serve that drafts from a
// predicted output (Predicted) on a model whose proposer is d (nil:
// none), at most d's most drafts: its drafts cost nothing to find, as
// prompt lookup's (c 0), its rows are priced as d measured them (else
// DefaultRowCost), and it expects them to stand as a copy's do
// (CopyPrior): a prediction is text the answer repeats.
func (d *Drafter) PredictionWindow() *Window {
	if p, measured := d.Prices(); measured {
		p.Cost, p.CatchUp, p.First = 0, 0, 0
		return p.Window(d.Max()).Expect(CopyPrior)
	}
	return NewWindow(d.Max(), 0, 0).Expect(CopyPrior)
}

// SameShape reports whether draft holds the target's tensors — the same
// architecture, names and dimensions, in any types: a quantised copy of
// the same model, whose drafts are the target's picks but where
// rounding tips a close call.
func SameShape(target, draft *gguf.File) bool {
	ta, _ := target.Metadata.String("general.architecture")
	da, _ := draft.Metadata.String("general.architecture")
	if ta != da || len(target.Tensors) != len(draft.Tensors) {
		return false
	}
	dims := make(map[string][]int64, len(draft.Tensors))
	for _, t := range draft.Tensors {
		dims[t.Name] = t.Dims
	}
	for _, t := range target.Tensors {
		if d, ok := dims[t.Name]; !ok || !slices.Equal(d, t.Dims) {
			return false
		}
	}
	return true
}

// Close frees the draft model's sessions and file.
func (d *Drafter) Close() error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	for _, s := range d.idle {
		s.Close()
	}
	d.idle = nil
	d.mu.Unlock()
	if d.file != nil {
		return d.file.Close()
	}
	return nil
}
