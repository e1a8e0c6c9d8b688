package modeltest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/model"
)

// MixOptions shape the random batch mixes of BatchInvariance.
type MixOptions struct {
	Seqs      int // sequences per mix
	MaxPrompt int // prompt lengths are 1 … MaxPrompt
	Decode    int // greedy tokens generated per sequence
	Context   int // each session's context
	Mixes     int // mixes (at least), each with its own step budget and arrivals
	// Vocab bounds the prompt ids drawn (0: the model's vocabulary).
	Vocab int
}

// MixStats says what BatchInvariance exercised.
type MixStats struct {
	Steps       int // batched steps run
	MaxSeqs     int // the most sequences in one step
	MixedSteps  int // steps holding both a prompt chunk and a decode token
	LogitsRows  int // logits rows compared, bit for bit
	ArgMaxCalls int // of which also compared through Batch.ArgMax
	Windows     int // decode steps verifying a window of several tokens
	Trims       int // of which ended with a wrong token, trimmed after
}

// BatchInvariance holds m's batched forward step to its sessions alone:
// each sequence's prompt is evaluated by a session by itself and then
// decoded greedily, and the logits of every step recorded; then the same
// sequences are served together through model.Batch in random mixes —
// random arrival steps, random order within each step, prompts cut into
// random chunks under a random per-step token budget, decode tokens
// sometimes held back a step, prefill chunks and decode tokens in the same
// step, decode steps that verify a window of several tokens at once (the
// greedy continuation, as a speculative draft that is right would
// propose it), some ending with a wrong token that is then trimmed with
// Session.Truncate and evaluated again — and every logits row must be the
// alone run's, bit for bit (so the greedy tokens are too). It returns the
// first difference as an error.
func BatchInvariance(ctx context.Context, m *model.Model, rng *rand.Rand, opt MixOptions) (MixStats, error) {
	var st MixStats
	vocab := opt.Vocab
	if vocab <= 0 {
		vocab = m.Config().VocabSize
	}
	prompts := make([][]uint32, opt.Seqs)
	for i := range prompts {
		p := make([]uint32, 1+rng.IntN(opt.MaxPrompt))
		for j := range p {
			p[j] = uint32(rng.IntN(vocab))
		}
		prompts[i] = p
	}
	want := make([][][]float32, opt.Seqs)
	for i, p := range prompts {
		rows, err := alone(ctx, m, p, opt)
		if err != nil {
			return st, fmt.Errorf("sequence %d alone: %w", i, err)
		}
		want[i] = rows
	}
	// A draw can miss what the suite is for (three mixes of a one-token
	// budget batch nothing; arrivals far apart mix no prefill with
	// decode), so up to three times opt.Mixes are drawn until a step has
	// batched sequences together and one has mixed the two.
	for mix := 0; mix < opt.Mixes || mix < 3*opt.Mixes && (st.MaxSeqs < 2 || st.MixedSteps == 0); mix++ {
		if err := mixOnce(ctx, m, rng, opt, prompts, want, &st); err != nil {
			return st, fmt.Errorf("mix %d: %w", mix, err)
		}
	}
	return st, nil
}

// alone evaluates prompt on a session of its own and decodes opt.Decode
// greedy tokens, returning the logits after the prompt and after each
// token but the last.
func alone(ctx context.Context, m *model.Model, prompt []uint32, opt MixOptions) ([][]float32, error) {
	s, err := m.NewSession(model.SessionOptions{Context: opt.Context})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	logits, err := s.Eval(ctx, prompt)
	if err != nil {
		return nil, err
	}
	var rows [][]float32
	for {
		rows = append(rows, append([]float32(nil), logits...))
		if len(rows) == opt.Decode {
			return rows, nil
		}
		if logits, err = s.Eval(ctx, []uint32{uint32(backend.ArgMax(logits))}); err != nil {
			return nil, err
		}
	}
}

type mixSeq struct {
	s       *model.Session
	prompt  []uint32
	fed     int // prompt tokens evaluated
	next    uint32
	rows    int // logits rows produced
	arrives int
}

func mixOnce(ctx context.Context, m *model.Model, rng *rand.Rand, opt MixOptions, prompts [][]uint32, want [][][]float32, st *MixStats) error {
	budget := []int{1, 3, 8, 16, 64}[rng.IntN(5)]
	b, err := m.NewBatch(model.BatchOptions{Tokens: budget, Seqs: min(budget, opt.Seqs)})
	if err != nil {
		return err
	}
	seqs := make([]*mixSeq, len(prompts))
	for i, p := range prompts {
		s, err := m.NewSession(model.SessionOptions{Context: opt.Context})
		if err != nil {
			return err
		}
		defer s.Close()
		seqs[i] = &mixSeq{s: s, prompt: p, arrives: rng.IntN(4)}
	}
	var step []model.Seq
	var who []*mixSeq
	var wrong []bool // the step's window ends with a wrong token
	for t := 0; ; t++ {
		step, who, wrong = step[:0], who[:0], wrong[:0]
		left, logits, done, prefill, decode := budget, 0, true, false, false
		for _, i := range rng.Perm(len(seqs)) {
			q := seqs[i]
			if q.rows == opt.Decode {
				continue
			}
			done = false
			if q.arrives > t || left == 0 {
				continue
			}
			if q.fed < len(q.prompt) {
				n := 1 + rng.IntN(min(left, len(q.prompt)-q.fed))
				end := q.fed+n == len(q.prompt)
				if end && logits == b.Seqs() {
					continue
				}
				k := 0
				if end {
					k = 1
				}
				step = append(step, model.Seq{Session: q.s, Tokens: q.prompt[q.fed : q.fed+n], Logits: k})
				wrong = append(wrong, false)
				q.fed += n
				left -= n
				prefill = true
			} else {
				if rng.IntN(7) == 0 || logits == b.Seqs() {
					continue // held back a step, as a client still taking its last token would be
				}
				// A window of w tokens: the next token and the greedy
				// continuation after it, the last one sometimes wrong.
				seq := indexOf(seqs, q)
				w := 1
				if rng.IntN(2) == 0 {
					w = 1 + rng.IntN(min(left, b.Seqs()-logits, opt.Decode-q.rows, 4))
				}
				win := []uint32{q.next}
				for j := 1; j < w; j++ {
					win = append(win, uint32(backend.ArgMax(want[seq][q.rows+j-1])))
				}
				bad := w > 1 && rng.IntN(2) == 0
				if bad {
					win[w-1] = (win[w-1] + 1) % uint32(m.Config().VocabSize)
				}
				if w > 1 {
					st.Windows++
				}
				step = append(step, model.Seq{Session: q.s, Tokens: win, Logits: w})
				wrong = append(wrong, bad)
				left -= w
				decode = true
			}
			logits += step[len(step)-1].Logits
			who = append(who, q)
		}
		if done {
			return nil
		}
		if len(step) == 0 {
			continue
		}
		if err := b.Step(ctx, step); err != nil {
			return fmt.Errorf("step %d: %w", t, err)
		}
		st.Steps++
		st.MaxSeqs = max(st.MaxSeqs, len(step))
		if prefill && decode {
			st.MixedSteps++
		}
		for i, q := range who {
			k := step[i].Logits
			if wrong[i] {
				// The row after the wrong token has no reference; its
				// position is trimmed and evaluated again next time.
				k--
				q.s.Truncate(q.s.Len() - 1)
				st.Trims++
			}
			seq := indexOf(seqs, q)
			for r := 0; r < k && q.rows < opt.Decode; r++ {
				ref := want[seq][q.rows]
				got := b.LogitsAt(i, r)
				for j := range ref {
					if math.Float32bits(got[j]) != math.Float32bits(ref[j]) {
						return fmt.Errorf("step %d (%d sequences, %d tokens, position %d of %d in it): sequence %d's logits row %d (row %d of %d of its window) differs from its run alone at id %d: %v, alone %v",
							t, len(step), budget-left, i, len(step), seq, q.rows, r, step[i].Logits, j, got[j], ref[j])
					}
				}
				q.next = uint32(backend.ArgMax(ref))
				if rng.IntN(2) == 0 {
					st.ArgMaxCalls++
					if a := b.ArgMaxAt(i, r); a != q.next {
						return fmt.Errorf("step %d: sequence %d: Batch.ArgMaxAt %d, the logits' argmax %d", t, seq, a, q.next)
					}
				}
				q.rows++
				st.LogitsRows++
			}
		}
	}
}

func indexOf(seqs []*mixSeq, q *mixSeq) int {
	for i, s := range seqs {
		if s == q {
			return i
		}
	}
	return -1
}
