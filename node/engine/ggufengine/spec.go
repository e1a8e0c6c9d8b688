package ggufengine

import (
	"fmt"
	"path/filepath"
	"sync"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/digest"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/sample"
	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/node/receipt"
)

// DraftLookup is Config.Draft for prompt lookup (spec.Lookup): drafts
// found in the sequence itself, no second model.
const DraftLookup = "lookup"

// drafter is a model's speculative proposer: prompt lookup, or a draft
// model loaded on the target's backend, with the sessions it drafts on
// (one per running serve, kept for the next, as the target's are).
type drafter struct {
	// id is what a sampled request speculating with it names
	// (receipt.Sampling.Draft): "lookup", or the draft's weights digest.
	id   string
	file *gguf.File
	m    *model.Model // nil for prompt lookup
	// cost is c, a drafted token's cost relative to a target token: the
	// ratio of the files' sizes, the bytes each token reads. Fixed at
	// load, so that the windows it sizes replay.
	cost float64
	unit uint64 // work units per drafted token (hw.WorkRecorder)
	maxK int
	// threshold: a round stops drafting below this top probability.
	threshold float64
	opt       model.SessionOptions

	mu   sync.Mutex
	idle []*model.Session
}

// loadDraft loads cfg.Draft for target m: prompt lookup, or a GGUF file
// whose vocabulary must be the target's.
func loadDraft(m *Model, cfg Config) (*drafter, error) {
	maxK := cfg.DraftMax
	if maxK <= 0 {
		maxK = spec.DefaultMaxWindow
	}
	if cfg.Draft == DraftLookup {
		return &drafter{id: DraftLookup, maxK: maxK}, nil
	}
	f, err := gguf.Open(cfg.Draft)
	if err != nil {
		return nil, fmt.Errorf("draft: %w", err)
	}
	d := &drafter{file: f, maxK: maxK, threshold: cfg.DraftThreshold}
	ok := false
	defer func() {
		if !ok {
			d.close()
		}
	}()
	if d.m, err = model.Load(f, m.be); err != nil {
		return nil, fmt.Errorf("draft %s: %w", cfg.Draft, err)
	}
	if err := spec.CheckVocab(m.file.Metadata, f.Metadata, m.model.Config().VocabSize, d.m.Config().VocabSize); err != nil {
		return nil, fmt.Errorf("draft %s cannot draft for %s: %w", cfg.Draft, m.path, err)
	}
	sum, err := digest.Files(filepath.Dir(cfg.Draft), filepath.Base(cfg.Draft))
	if err != nil {
		return nil, fmt.Errorf("draft: %w", err)
	}
	d.id = receipt.ContentID(sum.Digest).String()
	d.cost = cfg.DraftCost
	if d.cost <= 0 {
		d.cost = float64(f.Size()) / float64(max(1, m.file.Size()))
	}
	d.unit = uint64(max(1, f.Size()))
	d.opt = model.SessionOptions{Context: min(m.ctx, d.m.Config().TrainContext), KV: model.KVF16}
	ok = true
	return d, nil
}

// proposer returns a serve's proposer under its sampling parameters, and
// its release.
func (d *drafter) proposer(p sample.Params) (spec.Proposer, func(), error) {
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
			return nil, nil, fmt.Errorf("ggufengine: draft: %w", err)
		}
	}
	return spec.NewModelProposer(s, p, d.threshold), func() {
		d.mu.Lock()
		d.idle = append(d.idle, s)
		d.mu.Unlock()
	}, nil
}

// window sizes a serve's rounds. A draft model does not probe once
// speculation stops paying: a probe first catches the draft up on every
// token since it last ran, which costs as much as drafting all along.
func (d *drafter) window() *spec.Window {
	w := spec.NewWindow(d.maxK, d.cost, 0)
	if d.m != nil {
		w.LimitProbes(0)
	}
	return w
}

func (d *drafter) close() {
	if d == nil {
		return
	}
	d.mu.Lock()
	for _, s := range d.idle {
		s.Close()
	}
	d.idle = nil
	d.mu.Unlock()
	if d.file != nil {
		d.file.Close()
	}
}
