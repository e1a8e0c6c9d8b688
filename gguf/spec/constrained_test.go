package spec_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/grammar"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/sample"
	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/gguf/tokenizer"
)

// byteVocab is a vocabulary of the bytes "abcde{}" and pairs of them,
// then an end of generation.
func byteVocab() (*grammar.Vocab, func(uint32) []byte, uint32) {
	var pieces [][]byte
	const letters = "abcde{}"
	for i := range len(letters) {
		pieces = append(pieces, []byte{letters[i]})
	}
	for i := range len(letters) {
		for j := range len(letters) {
			pieces = append(pieces, []byte{letters[i], letters[j]})
		}
	}
	eos := uint32(len(pieces))
	piece := func(id uint32) []byte {
		if int(id) < len(pieces) {
			return pieces[id]
		}
		return nil
	}
	return grammar.NewVocab(len(pieces)+1, len(pieces), piece, []uint32{eos}), piece, eos
}

// TestConstrainedWindowsMatchPlain: greedy speculation under a grammar
// (Allowed, Masks, VerifyAllowed) gives plain constrained greedy
// decoding's tokens, one for one, whatever the drafts: a bigram target
// over byteVocab, grammars that end and that do not, with a penalty and
// without, and drafts that are the plain output (all stand), that stray
// from it, and that the grammar refuses. It must fail for verification
// that ignores the masks.
func TestConstrainedWindowsMatchPlain(t *testing.T) {
	v, piece, eos := byteVocab()
	rng := rand.New(rand.NewPCG(3, 4))
	target := newBigram(rng, v.Size(), 2)
	var grammars []*grammar.Grammar
	for _, src := range []string{
		`root ::= "{" ("ab" | "cd" | "e")* "}"`,
		`root ::= ("a" [bc]* "d")+ "e"`,
		`root ::= [a-e]+`,
	} {
		g, err := grammar.ParseGBNF(src)
		if err != nil {
			t.Fatal(err)
		}
		grammars = append(grammars, g)
	}
	const n = 24
	plain := func(g *grammar.Grammar, p sample.Params) []uint32 {
		con, err := grammar.NewConstraint(g, v, piece)
		if err != nil {
			t.Fatal(err)
		}
		smp := sample.New(p)
		var out []uint32
		last := eos // the prompt's last token
		for len(out) < n {
			mask, err := con.Mask()
			if err != nil {
				t.Fatal(err)
			}
			tok := smp.SampleAllowed(target[last], out, mask)
			out = append(out, tok)
			if tok == eos || con.Accept(tok) != nil || con.Done() {
				break
			}
			last = tok
		}
		return out
	}
	// speculative decodes as the engines do, drafting with propose; the
	// rounds are counted to check the drafts were verified.
	speculative := func(g *grammar.Grammar, p sample.Params, masked bool, propose func(out []uint32) []uint32) (out []uint32, accepted int) {
		con, err := grammar.NewConstraint(g, v, piece)
		if err != nil {
			t.Fatal(err)
		}
		smp := sample.New(p)
		last := eos
		var buf [][]uint64
		for len(out) < n {
			var drafts []spec.Draft
			for _, tok := range propose(out) {
				drafts = append(drafts, spec.Draft{Token: tok})
			}
			drafts = drafts[:min(len(drafts), n-len(out)-1)]
			drafts = spec.Allowed(con, drafts)
			masks, err := spec.Masks(con, drafts, buf)
			if err != nil {
				t.Fatal(err)
			}
			buf = masks
			drafts = drafts[:len(masks)-1]
			window := spec.Tokens(last, drafts)
			var acc int
			var next uint32
			if masked {
				acc, next = spec.VerifyAllowed(smp, rows{target, window}, drafts, out, masks)
			} else {
				acc, next = spec.Verify(smp, false, rows{target, window}, drafts, out)
			}
			accepted += acc
			for _, tok := range append(window[1:1+acc], next) {
				out = append(out, tok)
				if tok == eos || con.Accept(tok) != nil || con.Done() {
					return out, accepted
				}
				last = tok
			}
		}
		return out, accepted
	}
	diverged := 0
	for gi, g := range grammars {
		for _, p := range []sample.Params{{}, {RepeatPenalty: 1.5}} {
			want := plain(g, p)
			for _, tc := range []struct {
				name    string
				propose func(out []uint32) []uint32
			}{
				// The plain output's next tokens: every draft stands.
				{"the output itself", func(out []uint32) []uint32 {
					return want[len(out):min(len(want), len(out)+4)]
				}},
				// The output with its third token changed.
				{"straying", func(out []uint32) []uint32 {
					d := slices.Clone(want[len(out):min(len(want), len(out)+4)])
					if len(d) > 2 {
						d[2] = (d[2] + 1) % eos
					}
					return d
				}},
				{"random", func([]uint32) []uint32 {
					d := make([]uint32, rng.IntN(6))
					for i := range d {
						d[i] = uint32(rng.IntN(int(eos) + 1))
					}
					return d
				}},
			} {
				got, acc := speculative(g, p, true, tc.propose)
				if !slices.Equal(got, want) {
					t.Errorf("grammar %d, %+v, drafts %s: %v, plain %v", gi, p, tc.name, got, want)
				}
				if tc.name == "the output itself" && len(want) > 2 && acc == 0 {
					t.Errorf("grammar %d, %+v: no draft of the output itself stood", gi, p)
				}
				if got, _ := speculative(g, p, false, tc.propose); !slices.Equal(got, want) {
					diverged++
				}
			}
		}
	}
	if diverged == 0 {
		t.Error("verifying without the masks gave plain constrained decoding's tokens every time: the test cannot tell")
	}
}

// TestHeldDrafts: a draft model held to a grammar (ModelProposer.Hold)
// drafts its own constrained decoding — greedy, the picks plain
// constrained greedy decoding of the draft makes; sampled, from its
// distribution over the allowed tokens (Q holds no other) — stops where
// the grammar ends, and leaves the constraint it follows where it was.
// Left free, the same draft proposes what the grammar refuses.
func TestHeldDrafts(t *testing.T) {
	be := cpu.New(cpu.Options{Threads: 1})
	defer be.Close()
	l := open(t, be, filepath.Join("..", "..", "models", "meshnode-fortunes-q8_0.gguf"))
	tok, err := tokenizer.FromGGUF(l.f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	size := l.m.Config().VocabSize
	piece := func(id uint32) []byte {
		p, err := tok.Piece(id, false)
		if err != nil {
			return nil
		}
		return []byte(p)
	}
	var eog []uint32
	for id := range uint32(size) {
		if tok.IsEOG(id) {
			eog = append(eog, id)
		}
	}
	v := grammar.NewVocab(size, size, piece, eog)
	g, err := grammar.ParseGBNF(`root ::= "{\"said\": \"" [a-z ]{1,12} "\", \"ok\": " ("true" | "false") "}"`)
	if err != nil {
		t.Fatal(err)
	}
	prompt := tok.Encode("The cat sat on the mat.", tokenizer.EncodeOptions{AddSpecial: true})
	ctx := context.Background()
	newSession := func() *model.Session {
		s, err := l.m.NewSession(model.SessionOptions{Context: 256})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	always := func(float64) (bool, bool) { return true, true }
	const k = 24

	// The draft's own constrained greedy decoding.
	con, err := grammar.NewConstraint(g, v, piece)
	if err != nil {
		t.Fatal(err)
	}
	s := newSession()
	logits, err := s.Eval(ctx, prompt)
	if err != nil {
		t.Fatal(err)
	}
	smp := sample.New(sample.Params{})
	var want []uint32
	for len(want) < k && !con.Done() {
		mask, err := con.Mask()
		if err != nil {
			t.Fatal(err)
		}
		next := smp.SampleAllowed(logits, want, mask)
		want = append(want, next)
		if err := con.Accept(next); err != nil {
			t.Fatal(err)
		}
		if logits, err = s.Eval(ctx, []uint32{next}); err != nil {
			t.Fatal(err)
		}
	}
	if !con.Done() {
		t.Fatalf("the grammar did not end in %d tokens: %v", k, want)
	}

	start, err := grammar.NewConstraint(g, v, piece)
	if err != nil {
		t.Fatal(err)
	}
	firstMask, _ := start.Mask()
	firstMask = slices.Clone(firstMask)
	mp := spec.NewModelProposer(newSession(), sample.Params{}, 0)
	mp.Hold(start)
	drafts, err := mp.ProposeJudged(ctx, prompt, len(prompt), k, always)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint32
	for _, d := range drafts {
		got = append(got, d.Token)
	}
	if !slices.Equal(got, want) {
		t.Errorf("held greedy drafts %v, the draft's constrained greedy decoding %v", got, want)
	}
	if m, _ := start.Mask(); !slices.Equal(m, firstMask) {
		t.Error("proposing moved the constraint the drafts follow")
	}

	// Sampled: every draft and every token of its Q allowed.
	seed := uint64(4)
	mp = spec.NewModelProposer(newSession(), sample.Params{Temperature: 1.2, Seed: seed}, 0)
	mp.Hold(start)
	drafts, err = mp.ProposeJudged(ctx, prompt, len(prompt), k, always)
	if err != nil {
		t.Fatal(err)
	}
	if len(drafts) == 0 || len(spec.Allowed(start, drafts)) != len(drafts) {
		t.Fatalf("held sampled drafts: %d, of which the grammar allows the first %d", len(drafts), len(spec.Allowed(start, drafts)))
	}
	masks, err := spec.Masks(start, drafts, nil)
	if err != nil {
		t.Fatal(err)
	}
	for j, d := range drafts {
		for _, x := range d.Q {
			if !grammar.Allowed(masks[j], x.ID) {
				t.Fatalf("sampled draft %d: its Q gives %d, which the grammar does not allow there, %v", j, x.ID, x.P)
			}
		}
	}

	// Free, the draft writes its own text where the grammar forces JSON.
	free := spec.NewModelProposer(newSession(), sample.Params{}, 0)
	drafts, err = free.ProposeJudged(ctx, prompt, len(prompt), k, always)
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Allowed(start, drafts)) == len(drafts) {
		t.Errorf("the free draft's %d drafts all fit the grammar: the test cannot tell", len(drafts))
	}
}
