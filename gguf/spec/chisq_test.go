package spec_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/gguf/grammar"
	"github.com/meshnode/meshnode/gguf/sample"
	"github.com/meshnode/meshnode/gguf/spec"
)

// bigram is a synthetic language model over a small vocabulary: the
// logits after a token depend on that token alone.
type bigram [][]float32

func newBigram(rng *rand.Rand, v int, scale float64) bigram {
	b := make(bigram, v)
	for i := range b {
		b[i] = make([]float32, v)
		for j := range b[i] {
			b[i][j] = float32(rng.NormFloat64() * scale)
		}
	}
	return b
}

// rows are a bigram target's rows over a window.
type rows struct {
	m      bigram
	window []uint32
}

func (r rows) Logits(j int) []float32 { return r.m[r.window[j]] }
func (r rows) ArgMax(j int) uint32    { panic("a sampled verification asked for an argmax") }

// verifier decides a window: spec.Verify (spec.VerifyAllowed under
// masks, one a row), or a wrong rule to show the test can fail.
type verifier func(smp *sample.Sampler, r spec.Rows, drafts []spec.Draft, hist []uint32, masks [][]uint64) (int, uint32)

func rightRule(smp *sample.Sampler, r spec.Rows, drafts []spec.Draft, hist []uint32, masks [][]uint64) (int, uint32) {
	if masks != nil {
		return spec.VerifyAllowed(smp, r, drafts, hist, masks)
	}
	return spec.Verify(smp, false, r, drafts, hist)
}

// acceptAll keeps every draft, then samples the target: the output is
// then the draft's, which is the error the rejection rule exists to
// avoid.
func acceptAll(smp *sample.Sampler, r spec.Rows, drafts []spec.Draft, hist []uint32, masks [][]uint64) (int, uint32) {
	h := append([]uint32(nil), hist...)
	for _, d := range drafts {
		h = append(h, d.Token)
	}
	var last []uint64
	if masks != nil {
		last = masks[len(drafts)]
	}
	return len(drafts), smp.SampleAllowed(r.Logits(len(drafts)), h, last)
}

// grammarLike is a mask that depends on the token before (a grammar's
// state): after token a, the tokens b with (a+b) mod 3 ≠ 0.
func grammarLike(a uint32) []uint64 {
	var m uint64
	for b := range uint32(64) {
		if (a+b)%3 != 0 {
			m |= 1 << b
		}
	}
	return []uint64{m}
}

// twoTokens generates two tokens after token 0 speculatively: drafts of
// up to two tokens from the draft bigram (sampled under the request's
// pipeline, unmasked), or the fixed proposal lookup when it is not nil,
// verified against the target bigram, each row under mask (nil: none) of
// the token before it.
func twoTokens(p sample.Params, target, draft bigram, lookup []uint32, mask func(uint32) []uint64, rule verifier) [2]uint32 {
	smp, dsmp := samplers(p)
	var gen []uint32
	last := uint32(0)
	for len(gen) < 2 {
		var drafts []spec.Draft
		hist := append([]uint32(nil), gen...)
		prev := last
		for len(drafts) < 2-len(gen) {
			if lookup != nil {
				drafts = append(drafts, spec.Draft{Token: lookup[len(gen)+len(drafts)]})
				continue
			}
			q := dsmp.Dist(nil, draft[prev], hist)
			tok := dsmp.Draw(q)
			drafts = append(drafts, spec.Draft{Token: tok, Q: q})
			hist = append(hist, tok)
			prev = tok
		}
		window := spec.Tokens(last, drafts)
		var masks [][]uint64
		if mask != nil {
			for _, tok := range window {
				masks = append(masks, mask(tok))
			}
		}
		acc, next := rule(smp, rows{target, window}, drafts, gen, masks)
		for _, d := range drafts[:acc] {
			gen = append(gen, d.Token)
		}
		gen = append(gen, next)
		last = gen[len(gen)-1]
	}
	return [2]uint32{gen[0], gen[1]}
}

// samplers are a speculative run's samplers under p: the target's, and
// the draft's, seeded apart from it.
func samplers(p sample.Params) (target, draft *sample.Sampler) {
	dp := p
	dp.Seed ^= 0x5eed
	return sample.New(p), sample.New(dp)
}

// targetAndDraft are a synthetic target over v tokens and a draft that is
// the target perturbed.
func targetAndDraft(rng *rand.Rand, v int) (target, draft bigram) {
	target = newBigram(rng, v, 1)
	draft = make(bigram, v)
	for i := range draft {
		draft[i] = make([]float32, v)
		for j := range draft[i] {
			draft[i][j] = target[i][j] + float32(rng.NormFloat64()*0.8)
		}
	}
	return target, draft
}

// pairs is the six-token vocabulary's pairs of tokens, as the
// chi-square tests count them (n[first][second]) or weigh them.
const pairs = 6

// pairsChiSquare is Pearson's statistic for the counts n of trials draws
// against the probabilities want, its degrees of freedom (the pairs with
// any probability, less one), and the draws of pairs with none.
func pairsChiSquare(n [pairs][pairs]int, want [pairs][pairs]float64, trials int) (stat float64, df, stray int) {
	for a := range pairs {
		for b := range pairs {
			e := want[a][b] * float64(trials)
			if e == 0 {
				stray += n[a][b]
				continue
			}
			d := float64(n[a][b]) - e
			stat += d * d / e
			df++
		}
	}
	return stat, df - 1, stray
}

// chiSquareCritical is the chi-square distribution's upper α quantile
// for df degrees of freedom, by the Wilson–Hilferty approximation, for
// the z of α.
func chiSquareCritical(df int, z float64) float64 {
	d := float64(df)
	c := 1 - 2/(9*d) + z*math.Sqrt(2/(9*d))
	return d * c * c * c
}

// TestRejectionSamplingDistribution: speculative sampling draws the
// target's distribution. A synthetic target and draft (bigram models over
// 6 tokens, the draft a perturbed target) generate two tokens 20000
// times, each with its own seed; the counts of the 36 (first, second)
// pairs are held to the target's own joint distribution under the
// request's pipeline, p(a | 0)·p(b | a), by a chi-square test at
// significance 0.001 (the seeds are fixed, so the test is deterministic:
// it passes or fails the same way every run). It must hold with drafts
// sampled from the draft model, with a fixed deterministic proposal (as
// prompt lookup makes), under temperature alone and with top-k and a
// penalty, and with each row under a grammar-like mask of the token
// before it (the target's distribution is then the masked one, and the
// unmasked drafts often propose what it excludes); and it must fail for
// a rule that accepts every draft.
func TestRejectionSamplingDistribution(t *testing.T) {
	const (
		v      = pairs
		trials = 20000
		z001   = 3.0902 // the standard normal's upper 0.001 quantile
	)
	rng := rand.New(rand.NewPCG(21, 21))
	target, draft := targetAndDraft(rng, v)
	// The target's joint distribution of the two tokens after token 0.
	joint := func(p sample.Params, mask func(uint32) []uint64) [v][v]float64 {
		var out [v][v]float64
		smp := sample.New(p)
		m := func(a uint32) []uint64 {
			if mask == nil {
				return nil
			}
			return mask(a)
		}
		for _, a := range smp.DistAllowed(nil, target[0], nil, m(0)) {
			for _, b := range smp.DistAllowed(nil, target[a.ID], []uint32{a.ID}, m(a.ID)) {
				out[a.ID][b.ID] = a.P * b.P
			}
		}
		return out
	}
	chi := func(p sample.Params, lookup []uint32, mask func(uint32) []uint64, rule verifier) (stat float64, df int, stray int) {
		var n [v][v]int
		for i := range trials {
			p.Seed = uint64(i)*7919 + 1
			tt := twoTokens(p, target, draft, lookup, mask, rule)
			n[tt[0]][tt[1]]++
		}
		want := joint(p, mask)
		return pairsChiSquare(n, want, trials)
	}
	for _, tc := range []struct {
		name   string
		p      sample.Params
		lookup []uint32
		mask   func(uint32) []uint64
	}{
		{"temperature 1, draft model", sample.Params{Temperature: 1}, nil, nil},
		{"temperature 0.8, top-k 4, repeat penalty 1.5, draft model", sample.Params{Temperature: 0.8, TopK: 4, RepeatPenalty: 1.5}, nil, nil},
		{"temperature 1, deterministic proposal", sample.Params{Temperature: 1}, []uint32{2, 3}, nil},
		{"temperature 0.8, top-k 4, deterministic proposal", sample.Params{Temperature: 0.8, TopK: 4}, []uint32{2, 3}, nil},
		{"temperature 1, draft model, masked", sample.Params{Temperature: 1}, nil, grammarLike},
		{"temperature 0.8, top-k 3, repeat penalty 1.5, draft model, masked", sample.Params{Temperature: 0.8, TopK: 3, RepeatPenalty: 1.5}, nil, grammarLike},
		{"temperature 1, deterministic proposal, masked", sample.Params{Temperature: 1}, []uint32{1, 4}, grammarLike},
		// llama.cpp's other filters; XTC's draw makes the target's
		// distribution the mixture of its two branches.
		{"temperature 0.9, typical-p 0.9, XTC 0.5 at 0.2, draft model", sample.Params{Temperature: 0.9, TypicalP: 0.9, XTCProbability: 0.5, XTCThreshold: 0.2}, nil, nil},
		{"temperature 1, top-n-sigma 1.5, dynatemp 0.5, min-p 0.3 keeping 3, deterministic proposal",
			sample.Params{Temperature: 1, TopNSigma: 1.5, DynaTempRange: 0.5, DynaTempExponent: 1, MinP: 0.3, MinKeep: 3}, []uint32{2, 3}, nil},
	} {
		stat, df, stray := chi(tc.p, tc.lookup, tc.mask, rightRule)
		crit := chiSquareCritical(df, z001)
		t.Logf("%s: chi-square %.1f on %d degrees of freedom (critical at 0.001: %.1f)", tc.name, stat, df, crit)
		if stat > crit || stray > 0 {
			t.Errorf("%s: the output is not the target's distribution: chi-square %.1f > %.1f on %d degrees of freedom, or %d draws of tokens the pipeline excludes", tc.name, stat, crit, df, stray)
		}
	}
	// The test has power: accepting every draft gives the draft's
	// distribution, and fails it.
	for _, mask := range []func(uint32) []uint64{nil, grammarLike} {
		stat, df, stray := chi(sample.Params{Temperature: 1}, nil, mask, acceptAll)
		if crit := chiSquareCritical(df, z001); stat <= crit && stray == 0 {
			t.Errorf("accepting every draft (masked %v) passed: chi-square %.1f ≤ %.1f on %d degrees of freedom", mask != nil, stat, crit, df)
		} else {
			t.Logf("accepting every draft (masked %v): chi-square %.1f (critical %.1f), %d stray: rejected, as it should be", mask != nil, stat, crit, stray)
		}
	}
	// Nor does verifying against the unmasked rows pass under masks: a
	// rule that forgets the grammar.
	forget := func(smp *sample.Sampler, r spec.Rows, drafts []spec.Draft, hist []uint32, _ [][]uint64) (int, uint32) {
		return spec.Verify(smp, false, r, drafts, hist)
	}
	if stat, df, stray := chi(sample.Params{Temperature: 1}, nil, grammarLike, forget); stat <= chiSquareCritical(df, z001) && stray == 0 {
		t.Errorf("verifying without the masks passed: chi-square %.1f on %d degrees of freedom", stat, df)
	}
}

// TestSampledReplay: a seeded sampled speculative generation repeats
// exactly: the same seed and proposals give the same tokens.
func TestSampledReplay(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	target, draft := newBigram(rng, 8, 1), newBigram(rng, 8, 1)
	for seed := range uint64(50) {
		p := sample.Params{Temperature: 0.9, TopP: 0.95, Seed: seed}
		if a, b := twoTokens(p, target, draft, nil, nil, rightRule), twoTokens(p, target, draft, nil, nil, rightRule); a != b {
			t.Fatalf("seed %d: %v then %v", seed, a, b)
		}
	}
}

// TestConstrainedRejectionSampling: under a grammar, speculative sampling
// (Allowed, Masks, VerifyAllowed) draws the target's constrained
// distribution, p(a | 0) under the first position's mask times p(b | a)
// under the second's, whatever the drafts: sampled from a draft model
// left free (so often refused by the grammar: those are verified, their
// rejection drawing from the residual), sampled from the draft model held
// to the grammar, or a fixed proposal the grammar refuses at first. The
// chi-square test is TestRejectionSamplingDistribution's; and dropping
// the free draft's refused drafts rather than verifying them skews the
// output, which the test catches.
func TestConstrainedRejectionSampling(t *testing.T) {
	const (
		v      = pairs
		trials = 20000
		z001   = 3.0902
	)
	rng := rand.New(rand.NewPCG(31, 31))
	target, draft := targetAndDraft(rng, v)
	pieces := [][]byte{[]byte("a"), []byte("b"), []byte("c"), []byte("d"), []byte("e"), []byte("f")}
	piece := func(id uint32) []byte { return pieces[id] }
	voc := grammar.NewVocab(v, v, piece, nil)
	g, err := grammar.ParseGBNF(`root ::= [bce] [acdf] [a-f]*`)
	if err != nil {
		t.Fatal(err)
	}
	start := func() *grammar.Constraint {
		c, err := grammar.NewConstraint(g, voc, piece)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// dropAll is Allowed that also drops a refused sampled draft.
	dropAll := func(con *grammar.Constraint, drafts []spec.Draft) []spec.Draft {
		c := con.Clone()
		for j, d := range drafts {
			if c.Accept(d.Token) != nil {
				return drafts[:j]
			}
		}
		return drafts
	}
	two := func(p sample.Params, mode string, allowed func(*grammar.Constraint, []spec.Draft) []spec.Draft) [2]uint32 {
		smp, dsmp := samplers(p)
		con := start()
		var gen []uint32
		last := uint32(0)
		for len(gen) < 2 {
			var drafts []spec.Draft
			hist := append([]uint32(nil), gen...)
			prev := last
			held := con.Clone()
			for len(drafts) < 2-len(gen) {
				var d spec.Draft
				switch mode {
				case "lookup":
					d = spec.Draft{Token: []uint32{0, 2}[len(gen)+len(drafts)]} // "a" the grammar refuses first
				case "free":
					d.Q = dsmp.Dist(nil, draft[prev], hist)
					d.Token = dsmp.Draw(d.Q)
				case "held":
					mask, err := held.Mask()
					if err != nil {
						t.Fatal(err)
					}
					d.Q = dsmp.DistAllowed(nil, draft[prev], hist, mask)
					d.Token = dsmp.Draw(d.Q)
					if err := held.Accept(d.Token); err != nil {
						t.Fatal(err)
					}
				}
				drafts = append(drafts, d)
				hist = append(hist, d.Token)
				prev = d.Token
			}
			drafts = allowed(con, drafts)
			masks, err := spec.Masks(con, drafts, nil)
			if err != nil {
				t.Fatal(err)
			}
			drafts = drafts[:len(masks)-1]
			acc, next := spec.VerifyAllowed(smp, rows{target, spec.Tokens(last, drafts)}, drafts, gen, masks)
			for _, tok := range append(spec.Tokens(0, drafts)[1:1+acc], next) {
				if err := con.Accept(tok); err != nil {
					t.Fatalf("%s: token %d after %v: %v", mode, tok, gen, err)
				}
				gen, last = append(gen, tok), tok
			}
		}
		return [2]uint32{gen[0], gen[1]}
	}
	joint := func(p sample.Params) [v][v]float64 {
		var out [v][v]float64
		smp := sample.New(p)
		c := start()
		m1, _ := c.Mask()
		for _, a := range smp.DistAllowed(nil, target[0], nil, m1) {
			ca := c.Clone()
			if err := ca.Accept(a.ID); err != nil {
				t.Fatal(err)
			}
			m2, _ := ca.Mask()
			for _, b := range smp.DistAllowed(nil, target[a.ID], []uint32{a.ID}, m2) {
				out[a.ID][b.ID] = a.P * b.P
			}
		}
		return out
	}
	chi := func(p sample.Params, mode string, allowed func(*grammar.Constraint, []spec.Draft) []spec.Draft) (stat float64, df, stray int) {
		var n [v][v]int
		for i := range trials {
			p.Seed = uint64(i)*7919 + 1
			tt := two(p, mode, allowed)
			n[tt[0]][tt[1]]++
		}
		want := joint(p)
		return pairsChiSquare(n, want, trials)
	}
	for _, mode := range []string{"free", "held", "lookup"} {
		for _, p := range []sample.Params{{Temperature: 1}, {Temperature: 0.8, TopK: 3, RepeatPenalty: 1.5}} {
			stat, df, stray := chi(p, mode, spec.Allowed)
			crit := chiSquareCritical(df, z001)
			t.Logf("%s drafts, %+v: chi-square %.1f on %d degrees of freedom (critical %.1f)", mode, p, stat, df, crit)
			if stat > crit || stray > 0 {
				t.Errorf("%s drafts, %+v: not the target's constrained distribution: chi-square %.1f > %.1f, or %d draws the grammar refuses", mode, p, stat, crit, stray)
			}
		}
	}
	if stat, df, _ := chi(sample.Params{Temperature: 1}, "free", dropAll); stat <= chiSquareCritical(df, z001) {
		t.Errorf("dropping refused sampled drafts passed: chi-square %.1f on %d degrees of freedom", stat, df)
	} else {
		t.Logf("dropping refused sampled drafts: chi-square %.1f: rejected, as it should be", stat)
	}
}
