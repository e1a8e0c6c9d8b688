package ggufengine

import (
	"fmt"

	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/spec"
)

// DraftLookup is Config.Draft for prompt lookup (spec.Lookup): drafts
// found in the sequence itself, no second model.
const DraftLookup = spec.DraftLookup

// loadDraft loads cfg.Draft for target m: prompt lookup, or a draft model
// on m's backend whose vocabulary must be m's.
func loadDraft(m *Model, cfg Config) (*spec.Drafter, error) {
	d, err := spec.LoadDrafter(spec.DrafterConfig{
		Path: cfg.Draft, Max: cfg.DraftMax, Cost: cfg.DraftCost, Threshold: cfg.DraftThreshold,
	}, m.file, m.model.Config().VocabSize, m.ctx, m.be)
	if err != nil {
		return nil, fmt.Errorf("ggufengine: %s: %w", m.path, err)
	}
	return d, nil
}

// draftModel is m's draft model, nil without one (no speculation, or
// prompt lookup).
func (m *Model) draftModel() *model.Model {
	if m.draft == nil {
		return nil
	}
	return m.draft.Model()
}
