package splitengine

import (
	"fmt"
	"path/filepath"
	"sync"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/digest"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/sample"
	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/node/receipt"
)

// DraftLookup is DraftConfig.Path for prompt lookup (spec.Lookup).
const DraftLookup = "lookup"

// DraftConfig is a split model's speculative proposer, as a whole model's
// (ggufengine.Config's Draft fields).
type DraftConfig struct {
	// Path is a GGUF draft model with the target's vocabulary, or
	// DraftLookup.
	Path string
	// Max is the most drafts per window (0: spec.DefaultMaxWindow); a
	// window also fits the pipeline's logits rows (Config.Rows).
	Max int
	// Cost is c, a drafted token's cost relative to a target token (0:
	// the draft file's size over the target's); fixed, so that windows
	// replay.
	Cost float64
	// Threshold stops a window's drafting below this top probability
	// (0: spec.DefaultThreshold; negative: never).
	Threshold float64
}

// Drafter proposes drafts for a split model on the head. The draft model
// runs here whole, beside the first stage: drafting is local, and only
// the window it proposes travels the chain. It is safe for concurrent
// use; each serve drafts on a session of its own.
type Drafter struct {
	// id names it as a sampled request speculating with it names it
	// (receipt.Sampling.Draft): "lookup", or the draft's weights digest.
	id        string
	file      *gguf.File
	m         *model.Model // nil for prompt lookup
	cost      float64
	maxK      int
	threshold float64
	opt       model.SessionOptions

	mu   sync.Mutex
	idle []*model.Session
}

// LoadDraft loads cfg's proposer for a split model whose head holds
// target (vocab tokens, context positions): prompt lookup, or a draft
// model loaded whole on be, whose vocabulary must be the target's.
func LoadDraft(cfg DraftConfig, target *gguf.File, vocab, context int, be backend.Backend) (*Drafter, error) {
	maxK := cfg.Max
	if maxK <= 0 {
		maxK = spec.DefaultMaxWindow
	}
	if cfg.Path == DraftLookup {
		return &Drafter{id: DraftLookup, maxK: maxK}, nil
	}
	f, err := gguf.Open(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("splitengine: draft: %w", err)
	}
	d := &Drafter{file: f, maxK: maxK, threshold: cfg.Threshold}
	ok := false
	defer func() {
		if !ok {
			d.Close()
		}
	}()
	if d.m, err = model.Load(f, be); err != nil {
		return nil, fmt.Errorf("splitengine: draft %s: %w", cfg.Path, err)
	}
	if err := spec.CheckVocab(target.Metadata, f.Metadata, vocab, d.m.Config().VocabSize); err != nil {
		return nil, fmt.Errorf("splitengine: draft %s: %w", cfg.Path, err)
	}
	sum, err := digest.Files(filepath.Dir(cfg.Path), filepath.Base(cfg.Path))
	if err != nil {
		return nil, fmt.Errorf("splitengine: draft: %w", err)
	}
	d.id = receipt.ContentID(sum.Digest).String()
	d.cost = cfg.Cost
	if d.cost <= 0 {
		d.cost = float64(f.Size()) / float64(max(1, target.Size()))
	}
	d.opt = model.SessionOptions{Context: min(context, d.m.Config().TrainContext), KV: model.KVF16}
	ok = true
	return d, nil
}

// ID names the proposer as receipt.Sampling.Draft does.
func (d *Drafter) ID() string { return d.id }

// proposer returns a serve's proposer under its sampling parameters, and
// its release.
func (d *Drafter) proposer(p sample.Params) (spec.Proposer, func(), error) {
	if d.m == nil {
		return spec.Lookup{}, func() {}, nil
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
			return nil, nil, fmt.Errorf("splitengine: draft: %w", err)
		}
	}
	return spec.NewModelProposer(s, p, d.threshold), func() {
		d.mu.Lock()
		d.idle = append(d.idle, s)
		d.mu.Unlock()
	}, nil
}

// window sizes a serve's windows, as a whole model's (ggufengine): a
// draft model stops probing once speculation does not pay, since a probe
// first catches it up on every token since it last drafted.
func (d *Drafter) window() *spec.Window {
	w := spec.NewWindow(d.maxK, d.cost, 0)
	if d.m != nil {
		w.LimitProbes(0)
	}
	return w
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
