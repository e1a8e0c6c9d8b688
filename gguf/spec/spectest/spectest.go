// Package spectest is the check a backend's speculative decoding must
// pass, for the device backends' tests (CUDA and Metal, on their CPU
// stand-ins and on a GPU): a model on the backend decodes speculatively,
// with each proposer, what it decodes plainly.
//
// What it holds a device to: a verified window's rows are the bits of
// one-token decoding (their argmax picked on the device, their logits
// read back for penalties and sampling), and a rejected draft's keys and
// values are trimmed from the device's cache. Greedy speculation must then
// give plain greedy decoding's tokens one for one, and a seeded sampled
// speculation must repeat exactly — on a stand-in, whose arithmetic is
// the CPU's bit for bit, the CPU's own speculation with the same seed.
package spectest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/sample"
	"github.com/meshnode/meshnode/gguf/spec"
)

// Models are a target and, optionally, its draft model (nil: the draft
// model's checks are not run), loaded on one backend.
type Models struct {
	Target, Draft *model.Model
}

// Run is what one proposer's speculation did under one set of sampling
// parameters on the backend under test.
type Run struct {
	Proposer string
	Params   sample.Params
	Stats    spec.Stats
}

// Params are the sampling parameters Check decodes with: greedy by the
// argmax (picked where the logits are), and seeded sampling (the
// rejection rule, on the rows' logits read back).
var Params = []sample.Params{
	{},
	{Temperature: 0.8, TopK: 40, Seed: 7},
}

// The proposers Check speculates with, by name.
const (
	Lookup = "lookup" // prompt lookup (spec.Lookup)
	Junk   = "junk"   // mostly wrong drafts: rejections and trims at every position of a window
	Draft  = "draft"  // the draft model (Models.Draft)
)

// Check decodes n tokens after prompt on dev, plainly and speculating
// with each of proposers (Lookup, Junk, Draft) under each of Params,
// windows fixed at k drafts, and returns an error naming the first difference:
//   - for greedy parameters, the speculative tokens against dev's plain
//     decoding;
//   - for sampled ones, the speculative tokens against ref's speculation
//     with the same proposer and seed, or, with no ref, against dev's own
//     second run (a seeded request repeats exactly);
//   - with a ref, dev's plain tokens against ref's (a backend whose
//     arithmetic is the reference's bit for bit, as the device stand-ins'
//     is the CPU's; a GPU's float64 sums may differ by an ulp, so its
//     checks go without one).
//
// It also fails where a session's cache, after a speculative generation,
// holds other tokens than the prompt and the output (rejected drafts not
// trimmed). The runs it returns are dev's speculative ones.
func Check(ctx context.Context, dev Models, ref *Models, prompt []uint32, n, k int, proposers ...string) ([]Run, error) {
	var runs []Run
	for _, p := range Params {
		want, _, err := Generate(ctx, dev, prompt, n, p, "", 0)
		if err != nil {
			return nil, fmt.Errorf("spectest: %+v: plain: %w", p, err)
		}
		if ref != nil {
			refPlain, _, err := Generate(ctx, *ref, prompt, n, p, "", 0)
			if err != nil {
				return nil, fmt.Errorf("spectest: %+v: plain on the reference: %w", p, err)
			}
			if !slices.Equal(want, refPlain) {
				return nil, fmt.Errorf("spectest: %+v: plain decoding gave %v, the reference %v", p, want, refPlain)
			}
		}
		for _, name := range proposers {
			got, st, err := Generate(ctx, dev, prompt, n, p, name, k)
			if err != nil {
				return nil, fmt.Errorf("spectest: %+v, %s: %w", p, name, err)
			}
			against, what := want, "plain decoding"
			if !p.Greedy() {
				on := dev
				what = "a second run"
				if ref != nil {
					on, what = *ref, "the reference's speculation"
				}
				if against, _, err = Generate(ctx, on, prompt, n, p, name, k); err != nil {
					return nil, fmt.Errorf("spectest: %+v, %s, %s: %w", p, name, what, err)
				}
			}
			if !slices.Equal(got, against) {
				return nil, fmt.Errorf("spectest: %+v, %s: speculating gave %v, %s %v", p, name, got, what, against)
			}
			runs = append(runs, Run{Proposer: name, Params: p, Stats: st})
		}
	}
	return runs, nil
}

// Generate decodes n tokens after prompt on ms.Target with p by
// spec.Generate, speculating with the named proposer (Lookup, Junk or
// Draft; "": plainly) under a window fixed at k drafts, on a session and batch
// of its own (a draft model's on a session of ms.Draft), and checks that
// the session then holds the prompt and the output less its last token.
func Generate(ctx context.Context, ms Models, prompt []uint32, n int, p sample.Params, proposer string, k int) ([]uint32, spec.Stats, error) {
	m := ms.Target
	ctxLen := len(prompt) + n + k + 1
	s, err := m.NewSession(model.SessionOptions{Context: ctxLen})
	if err != nil {
		return nil, spec.Stats{}, err
	}
	defer s.Close()
	b, err := m.NewBatch(model.BatchOptions{Tokens: k + 1, Seqs: k + 1})
	if err != nil {
		return nil, spec.Stats{}, err
	}
	var prop spec.Proposer
	switch proposer {
	case "":
	case Lookup:
		prop = spec.Lookup{}
	case Junk:
		prop = JunkDrafts(m.Config().VocabSize)
	case Draft:
		if ms.Draft == nil {
			return nil, spec.Stats{}, errors.New("no draft model")
		}
		ds, err := ms.Draft.NewSession(model.SessionOptions{Context: ctxLen})
		if err != nil {
			return nil, spec.Stats{}, err
		}
		defer ds.Close()
		// No threshold: the draft drafts every token asked for.
		prop = spec.NewModelProposer(ds, p, -1)
	default:
		return nil, spec.Stats{}, fmt.Errorf("no proposer %q", proposer)
	}
	var w *spec.Window
	if prop != nil {
		w = spec.Fixed(k)
	}
	out, st, err := spec.Generate(ctx, b, s, prompt, n, p, prop, w)
	if err != nil {
		return nil, st, err
	}
	if want := append(slices.Clone(prompt), out[:n-1]...); !slices.Equal(s.Tokens(), want) {
		return nil, st, fmt.Errorf("the session holds %d tokens %v, want the prompt and the output less its last token (%d): rejected drafts not trimmed", s.Len(), s.Tokens(), len(want))
	}
	return out, st, nil
}

// JunkDrafts proposes the last token plus 1, 2, … (modulo its value, the
// vocabulary's size): drafts that are mostly wrong, so that windows are
// rejected at every position.
type JunkDrafts int

// Propose implements spec.Proposer.
func (v JunkDrafts) Propose(_ context.Context, seq []uint32, _, k int) ([]spec.Draft, error) {
	d := make([]spec.Draft, k)
	for i := range d {
		d[i] = spec.Draft{Token: (seq[len(seq)-1] + uint32(i) + 1) % uint32(v)}
	}
	return d, nil
}

// Repeating is a prompt that says the same thing twice (after token 1),
// so that prompt lookup finds something to propose: n tokens spread over
// a vocabulary of vocab.
func Repeating(vocab, n int) []uint32 {
	var p []uint32
	for i := range n {
		p = append(p, uint32((i*37+5)%vocab))
	}
	return append(append([]uint32{1}, p...), p...)
}

// Exercised reports an error where runs (Check's) did not exercise what
// Check is for: junk drafts never verified or never rejected, or a draft
// model that proposed nothing.
func Exercised(runs []Run) error {
	for _, r := range runs {
		switch {
		case r.Proposer == Junk && (r.Stats.Proposed == 0 || r.Stats.Accepted == r.Stats.Proposed):
			return fmt.Errorf("spectest: %+v: junk drafts never rejected (%+v): no trim was checked", r.Params, r.Stats)
		case r.Proposer == Draft && r.Stats.Proposed == 0:
			return fmt.Errorf("spectest: %+v: the draft model proposed nothing (%+v)", r.Params, r.Stats)
		}
	}
	return nil
}

// Files is Check of a target and its draft model, given as files, on dev
// against ref (nil: dev alone): 8 tokens after a prompt of a vocabulary's
// first 1000 tokens, windows of 4, with the draft model and with junk
// drafts, and then Exercised — the device backends' suite on their
// parity fixtures.
func Files(ctx context.Context, dev, ref backend.Backend, target, draft *gguf.File) ([]Run, error) {
	on := func(be backend.Backend) (Models, error) {
		t, err := model.Load(target, be)
		if err != nil {
			return Models{}, err
		}
		d, err := model.Load(draft, be)
		return Models{Target: t, Draft: d}, err
	}
	ms, err := on(dev)
	if err != nil {
		return nil, fmt.Errorf("spectest: %w", err)
	}
	var refMs *Models
	if ref != nil {
		r, err := on(ref)
		if err != nil {
			return nil, fmt.Errorf("spectest: the reference: %w", err)
		}
		refMs = &r
	}
	runs, err := Check(ctx, ms, refMs, Repeating(1000, 6), 8, 4, Draft, Junk)
	if err != nil {
		return nil, err
	}
	return runs, Exercised(runs)
}

// Builtin is Check of the built-in model (meshnode-fortunes-q8_0.gguf in
// dir, the repository's models/) on be alone, with prompt lookup and junk
// drafts, windows of 4, 24 tokens after a prompt that repeats itself: the
// first reference prompt of dir's reference-greedy.txt, llama.cpp's greedy
// continuation of it, and the prompt again. A trained model continues it
// as before, so lookup's drafts must stand: it fails where greedy lookup
// had none accepted.
func Builtin(ctx context.Context, be backend.Backend, dir string) ([]Run, error) {
	cases, err := modeltest.ReadGreedyReference(filepath.Join(dir, "reference-greedy.txt"))
	if err != nil {
		return nil, fmt.Errorf("spectest: %w", err)
	}
	if len(cases) == 0 || len(cases[0].Generated) < 24 {
		return nil, fmt.Errorf("spectest: %s: no reference case of 24 tokens", dir)
	}
	f, err := gguf.Open(filepath.Join(dir, "meshnode-fortunes-q8_0.gguf"))
	if err != nil {
		return nil, fmt.Errorf("spectest: %w", err)
	}
	defer f.Close()
	m, err := model.Load(f, be)
	if err != nil {
		return nil, fmt.Errorf("spectest: %w", err)
	}
	c := cases[0]
	runs, err := Check(ctx, Models{Target: m}, nil, slices.Concat(c.Prompt, c.Generated[:24], c.Prompt[1:]), 24, 4, Lookup, Junk)
	if err != nil {
		return nil, err
	}
	for _, r := range runs {
		if r.Proposer == Lookup && r.Params.Greedy() && r.Stats.Accepted == 0 {
			return runs, fmt.Errorf("spectest: greedy prompt lookup on a repeating prompt had no draft accepted: %+v", r.Stats)
		}
	}
	return runs, Exercised(runs)
}

// Suite is the device backends' test: Files of target and draft on dev
// against ref (nil: dev alone), then, with builtin set (the repository's
// models/), Builtin on dev; it fails t on an error and logs every run.
func Suite(t testing.TB, dev, ref backend.Backend, target, draft *gguf.File, builtin string) {
	t.Helper()
	ctx := context.Background()
	runs, err := Files(ctx, dev, ref, target, draft)
	if err != nil {
		t.Fatal(err)
	}
	if builtin != "" {
		more, err := Builtin(ctx, dev, builtin)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, more...)
	}
	for _, r := range runs {
		t.Logf("%s %+v: %+v", r.Proposer, r.Params, r.Stats)
	}
}
