package modeltest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/model"
)

// The sessions and steps of StageScript.
var (
	stageSession = model.SessionOptions{Context: 64}
	stageBatch   = model.BatchOptions{Tokens: 16, Seqs: 2}
)

// Splits are the stage layouts worth trying on a model of n blocks:
// every 2-stage split and, from 3 blocks, two 3-stage ones, with a middle
// stage of one block and of the rest.
func Splits(n int) [][]model.LayerRange {
	var out [][]model.LayerRange
	for c := 1; c < n; c++ {
		out = append(out, []model.LayerRange{{Lo: 0, Hi: c}, {Lo: c, Hi: n}})
	}
	if n >= 3 {
		out = append(out, []model.LayerRange{{Lo: 0, Hi: 1}, {Lo: 1, Hi: 2}, {Lo: 2, Hi: n}})
		out = append(out, []model.LayerRange{{Lo: 0, Hi: 1}, {Lo: 1, Hi: n - 1}, {Lo: n - 1, Hi: n}})
	}
	return out
}

// SplitsOf is a few of Splits' layouts for the model in f, of its own
// number of blocks n (a fixture's 2 or 4): every one for n = 2; for more,
// the two-stage split at the middle and three stages with a middle one of
// a block, so that a device check's time does not grow with n.
func SplitsOf(f *gguf.File) ([][]model.LayerRange, error) {
	cfg, err := model.ParseConfig(f.Metadata)
	if err != nil {
		return nil, err
	}
	n := cfg.Layers
	if n <= 2 {
		return Splits(n), nil
	}
	return [][]model.LayerRange{
		{{Lo: 0, Hi: n / 2}, {Lo: n / 2, Hi: n}},
		{{Lo: 0, Hi: 1}, {Lo: 1, Hi: 2}, {Lo: 2, Hi: n}},
	}, nil
}

// pipeline is a model in stages run in one process as stages run on
// several nodes: hidden rows copied out of one stage's batch and into the
// next's.
type pipeline struct {
	batches  []*model.Batch
	sessions [][]*model.Session // [stage][sequence]
	carry    func([]float32)
	hidden   []float32
}

// newPipeline loads the stages of layout, or, with layout nil, the whole
// model as Load loads it.
func newPipeline(f *gguf.File, be backend.Backend, layout []model.LayerRange, seqs int) (*pipeline, error) {
	p := &pipeline{}
	stages := layout
	if stages == nil {
		stages = []model.LayerRange{{}}
	}
	for i, r := range stages {
		var m *model.Model
		var err error
		if layout == nil {
			m, err = model.Load(f, be)
		} else {
			m, err = model.LoadStage(f, be, r)
		}
		if err != nil {
			return nil, fmt.Errorf("stage %v: %w", r, err)
		}
		b, err := m.NewBatch(stageBatch)
		if err != nil {
			return nil, err
		}
		var ss []*model.Session
		for range seqs {
			s, err := m.NewSession(stageSession)
			if err != nil {
				return nil, err
			}
			ss = append(ss, s)
		}
		p.batches, p.sessions = append(p.batches, b), append(p.sessions, ss)
		if i == len(stages)-1 && !m.Last() {
			// Its rows would be hidden states, not logits.
			return nil, fmt.Errorf("stages %v end at block %d of the model's %d", layout, r.Hi, m.Config().Layers)
		}
	}
	return p, nil
}

// stepSeq is one sequence's part of a step.
type stepSeq struct {
	seq    int
	tokens []uint32
	logits bool
}

func (p *pipeline) step(ctx context.Context, in []stepSeq) ([][]float32, error) {
	for i, b := range p.batches {
		seqs := make([]model.Seq, len(in))
		for j, sq := range in {
			seqs[j] = model.Seq{Session: p.sessions[i][sq.seq]}
			if sq.logits {
				seqs[j].Logits = 1
			}
			if i == 0 {
				seqs[j].Tokens = sq.tokens
			} else {
				seqs[j].Count = len(sq.tokens)
			}
		}
		var err error
		if i == 0 {
			err = b.Step(ctx, seqs)
		} else {
			err = b.StepHidden(ctx, seqs, p.hidden)
		}
		if err != nil {
			return nil, fmt.Errorf("stage %d: %w", i, err)
		}
		if i < len(p.batches)-1 {
			p.hidden = b.Hidden(p.hidden)
			if p.carry != nil {
				p.carry(p.hidden)
			}
		}
	}
	last := p.batches[len(p.batches)-1]
	var out [][]float32
	for j, sq := range in {
		if sq.logits {
			out = append(out, slices.Clone(last.Logits(j)))
		}
	}
	return out, nil
}

func (p *pipeline) truncate(seq, n int) {
	for _, ss := range p.sessions {
		ss[seq].Truncate(n)
	}
}

// StageScript runs a fixed script through the model in f, whole (layout
// nil, as Load loads it) or split into the stages of layout, on be, and
// returns the logits of every step that asks for them. Two sequences
// share the steps: a prompt beside the other's first chunk, the rest of
// that prompt beside a decode token, decode steps, a rewind of both (a
// rejected speculative draft: Truncate on every stage) and more
// decoding. carry, when set, changes the hidden rows between stages (the
// f16 round trip of a transport). The tokens decoded are the argmax of
// follow's rows when follow is set (so that a run whose logits differ
// still evaluates the same tokens), else of the run's own.
func StageScript(ctx context.Context, f *gguf.File, be backend.Backend, layout []model.LayerRange, carry func([]float32), follow [][]float32) ([][]float32, error) {
	p, err := newPipeline(f, be, layout, 2)
	if err != nil {
		return nil, err
	}
	p.carry = carry
	promptA := []uint32{1, 17, 42, 99, 7, 256, 3, 1000, 12}
	promptB := []uint32{1, 5, 600, 33, 8}
	var all [][]float32
	run := func(in []stepSeq) ([]uint32, error) {
		out, err := p.step(ctx, in)
		if err != nil {
			return nil, err
		}
		pick := out
		if follow != nil {
			if len(follow) < len(all)+len(out) {
				return nil, fmt.Errorf("the run to follow has %d rows", len(follow))
			}
			pick = follow[len(all) : len(all)+len(out)]
		}
		all = append(all, out...)
		var next []uint32
		for _, l := range pick {
			next = append(next, uint32(backend.ArgMax(l)))
		}
		return next, nil
	}
	next, err := run([]stepSeq{{0, promptA, true}, {1, promptB[:3], false}})
	if err != nil {
		return nil, err
	}
	a := next[0]
	if next, err = run([]stepSeq{{1, promptB[3:], true}, {0, []uint32{a}, true}}); err != nil {
		return nil, err
	}
	b, a := next[0], next[1]
	lenA, lenB := len(promptA)+1, len(promptB)
	for range 4 {
		if next, err = run([]stepSeq{{0, []uint32{a}, true}, {1, []uint32{b}, true}}); err != nil {
			return nil, err
		}
		a, b = next[0], next[1]
		lenA, lenB = lenA+1, lenB+1
	}
	p.truncate(0, lenA-3)
	p.truncate(1, lenB-2)
	if next, err = run([]stepSeq{{0, []uint32{a ^ 1, 11}, true}, {1, []uint32{b ^ 1}, true}}); err != nil {
		return nil, err
	}
	a, b = next[0], next[1]
	for range 2 {
		if next, err = run([]stepSeq{{1, []uint32{b}, true}, {0, []uint32{a}, true}}); err != nil {
			return nil, err
		}
		b, a = next[0], next[1]
	}
	return all, nil
}

// StagesBitExact runs StageScript on the whole model and on every layout,
// and returns an error at the first logit of a layout that is not the
// whole model's, bit for bit.
func StagesBitExact(ctx context.Context, f *gguf.File, be backend.Backend, layouts [][]model.LayerRange) error {
	want, err := StageScript(ctx, f, be, nil, nil, nil)
	if err != nil {
		return fmt.Errorf("whole model: %w", err)
	}
	cfg, err := model.ParseConfig(f.Metadata)
	if err != nil {
		return err
	}
layouts:
	for _, layout := range layouts {
		// A layout the model cannot run (gemma4's shared KV across
		// stages, its per-layer embeddings) must be refused as
		// Config.CheckStage says, by LoadStage itself.
		for _, r := range layout {
			if cerr := cfg.CheckStage(r); cerr != nil {
				if _, err := model.LoadStage(f, be, r); !errors.Is(err, model.ErrUnsupported) {
					return fmt.Errorf("stages %v: CheckStage refuses %v (%v), LoadStage gives %v", layout, r, cerr, err)
				}
				continue layouts
			}
		}
		got, err := StageScript(ctx, f, be, layout, nil, nil)
		if err != nil {
			return fmt.Errorf("stages %v: %w", layout, err)
		}
		if len(got) != len(want) {
			return fmt.Errorf("stages %v: %d logits rows, the whole model %d", layout, len(got), len(want))
		}
		for i := range want {
			for j := range want[i] {
				if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
					return fmt.Errorf("stages %v: logits row %d differs at %d: %v, the whole model %v", layout, i, j, got[i][j], want[i][j])
				}
			}
		}
	}
	return nil
}
