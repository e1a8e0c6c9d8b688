package ggufengine

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/node/receipt"
)

// mixRequest is one serve of a batched mix: a prompt and how it samples.
type mixRequest struct {
	prompt []uint32
	req    receipt.ServeRequest
}

// randomMix makes n requests: prompts of 1 to 120 tokens of the model's
// ordinary pieces, half greedy, half sampled with a seed.
func randomMix(rng *rand.Rand, n int) []mixRequest {
	out := make([]mixRequest, n)
	for i := range out {
		p := make([]uint32, 1+rng.IntN(120))
		for j := range p {
			p[j] = uint32(300 + rng.IntN(1500))
		}
		var s *receipt.Sampling
		if i%2 == 1 {
			seed := rng.Uint64()
			s = &receipt.Sampling{TemperatureE6: 800_000, TopK: 40, TopPE6: 950_000, RepeatPenaltyE6: 1_100_000, Seed: &seed}
		}
		out[i] = mixRequest{prompt: p, req: request(uint32(4+rng.IntN(20)), s)}
	}
	return out
}

// TestBatchedServesMatchAlone: serves running together, their prompts
// chunked into the same steps as the others' decode tokens, emit exactly
// the tokens each emits served alone on an engine of one slot (greedy and
// seeded sampling with penalties), and the scheduler did batch them.
func TestBatchedServesMatchAlone(t *testing.T) {
	batched, err := Load(fortunesPath, Config{Context: 256, Sessions: 6, PrefillChunk: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer batched.Close()
	alone, err := Load(fortunesPath, Config{Context: 256, Sessions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Close()

	mix := randomMix(rand.New(rand.NewPCG(19, 1)), 12)
	want := make([][]uint32, len(mix))
	for i, r := range mix {
		want[i], _ = serve(t, alone.Engine(), r.req, r.prompt)
	}
	got := make([][]uint32, len(mix))
	var wg sync.WaitGroup
	for i, r := range mix {
		wg.Go(func() {
			out, err := batched.Engine().Serve(context.Background(), r.req, r.prompt, func(tok uint32) error {
				got[i] = append(got[i], tok)
				return nil
			})
			if err != nil || out.TokensOut != uint32(len(got[i])) {
				t.Errorf("serve %d: %v, outcome %+v", i, err, out)
			}
		})
	}
	wg.Wait()
	for i := range mix {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("serve %d (%d prompt tokens): batched %v, alone %v", i, len(mix[i].prompt), got[i], want[i])
		}
	}
	st := batched.Engine().SchedStats()
	t.Logf("scheduler: %+v", st)
	if st.MaxSeqs < 2 || st.MixedSteps == 0 {
		t.Errorf("the serves were not batched together, or no step mixed a prompt chunk with decoding: %+v", st)
	}
}

// TestCancelOneServe: a serve cancelled mid-generation stops with ctx's
// error while the serves batched with it finish with the tokens they get
// alone, and its slot serves again.
func TestCancelOneServe(t *testing.T) {
	m, err := Load(fortunesPath, Config{Context: 256, Sessions: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	refs := q8References(t)
	want := make([][]uint32, len(refs))
	for i, ref := range refs {
		want[i] = untilEOS(m, ref.Generated[:20])
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	// The victim decodes with EOS banned (its greedy text ends after 32
	// tokens, which raced the cancel) and waits at its second token until
	// serve 0 has its first, so that it is still decoding beside them when
	// serve 0's third token cancels it, however the goroutines run.
	var victimErr error
	var victim, atCancel atomic.Int32
	started, joined := make(chan struct{}), make(chan struct{})
	wg.Go(func() {
		noEOS := biased(receipt.LogitBias{Token: m.Tokenizer().EOS(), BiasE6: -100_000_000})
		_, victimErr = m.Engine().Serve(ctx, request(200, noEOS), refs[0].Prompt, func(uint32) error {
			if victim.Add(1) == 2 {
				close(started)
				<-joined
			}
			return nil
		})
	})
	got := make([][]uint32, len(refs))
	for i, ref := range refs {
		wg.Go(func() {
			<-started
			_, err := m.Engine().Serve(context.Background(), request(20, nil), ref.Prompt, func(tok uint32) error {
				got[i] = append(got[i], tok)
				switch {
				case i == 0 && len(got[i]) == 1:
					close(joined)
				case i == 0 && len(got[i]) == 3:
					atCancel.Store(victim.Load())
					cancel() // the victim goes while this one and the others decode
				}
				return nil
			})
			if err != nil {
				t.Errorf("serve %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	// At most a round's tokens after the cancel: a window of up to eight
	// drafts and the target's own.
	if after := victim.Load() - atCancel.Load(); !errors.Is(victimErr, context.Canceled) || after > 9 {
		t.Errorf("the cancelled serve: %v, %d tokens after the cancel (%d in all)", victimErr, after, victim.Load())
	}
	for i := range refs {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("serve %d beside the cancelled one: %v, want %v", i, got[i], want[i])
		}
	}
	// Every slot is back: three serves at once still run.
	for i := range 3 {
		wg.Go(func() {
			if g, _ := serve(t, m.Engine(), request(20, nil), refs[i%len(refs)].Prompt); !slices.Equal(g, want[i%len(refs)]) {
				t.Errorf("after the cancel, serve %d: %v", i, g)
			}
		})
	}
	wg.Wait()
}

// TestLongPromptDoesNotStallDecoding: while a long prompt is evaluated in
// chunks, the serves already decoding keep getting a token every step.
func TestLongPromptDoesNotStallDecoding(t *testing.T) {
	m, err := Load(fortunesPath, Config{Context: 256, Sessions: 3, PrefillChunk: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	refs := q8References(t)
	long := make([]uint32, 200)
	for i := range long {
		long[i] = uint32(300 + (i*37)%1500)
	}
	var decoded atomic.Int64
	var atFirst int64 = -1
	var wg sync.WaitGroup
	longStarts := make(chan struct{})
	// EOS banned: the decoders go on for their 120 tokens, where their
	// greedy texts' ends (after 32 tokens for the first) could come before
	// the long prompt was taken.
	noEOS := biased(receipt.LogitBias{Token: m.Tokenizer().EOS(), BiasE6: -100_000_000})
	for i := range 2 {
		wg.Go(func() {
			n := 0
			_, err := m.Engine().Serve(context.Background(), request(120, noEOS), refs[i].Prompt, func(uint32) error {
				if n++; n == 2 && i == 0 {
					close(longStarts)
				}
				decoded.Add(1)
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	<-longStarts
	before := decoded.Load()
	_, err = m.Engine().Serve(context.Background(), request(1, nil), long, func(uint32) error {
		atFirst = decoded.Load()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// 200 tokens in chunks of 4 take 50 steps, each with the decoders'
	// tokens.
	if atFirst-before < 20 {
		t.Errorf("the decoders emitted %d tokens while a 200-token prompt was evaluated in chunks of 4", atFirst-before)
	}
	t.Logf("decoders emitted %d tokens during the long prompt; %+v", atFirst-before, m.Engine().SchedStats())
}

// TestSlots: slots and context from memory.
func TestSlots(t *testing.T) {
	llama1B := model.Config{TrainContext: 131072, Layers: 16, KVHeads: 8, HeadDimK: 64, HeadDimV: 64} // 32 KiB a position in f16
	small := model.Config{TrainContext: 256, Layers: 4, KVHeads: 2, HeadDimK: 48, HeadDimV: 48}       // 1.5 KiB
	const gib = 1 << 30
	for _, tc := range []struct {
		name       string
		cfg        Config
		mc         model.Config
		ctx, slots int
	}{
		{"memory unknown", Config{}, llama1B, model.DefaultContext, DefaultSessions},
		{"configured", Config{Sessions: 7, Context: 100, MemoryBytes: gib}, llama1B, 100, 7},
		{"8 GiB: the default context for 4, so 4", Config{MemoryBytes: 8 * gib}, llama1B, 16384, 4},
		{"8 GiB, a 4096 context: 16 fit", Config{MemoryBytes: 8 * gib, Context: 4096}, llama1B, 4096, 16},
		{"8 GiB, the whole trained context: 1 at least", Config{MemoryBytes: 8 * gib, Context: 131072}, llama1B, 131072, 1},
		{"short model, much memory: capped", Config{MemoryBytes: 64 * gib}, small, 256, MaxSlots},
		{"short model, 16 MiB: 10 fit", Config{MemoryBytes: 16 << 20}, small, 256, 10},
	} {
		ctx, n := slots(tc.cfg, tc.mc, model.KVF16)
		if ctx != tc.ctx || n != tc.slots {
			t.Errorf("%s: context %d and %d slots, want %d and %d", tc.name, ctx, n, tc.ctx, tc.slots)
		}
	}
}

// TestCloseWithWaitingServes: closing the engine ends the serves waiting
// for a step with an error rather than leaving them blocked.
func TestCloseWithWaitingServes(t *testing.T) {
	m, err := Load(fortunesPath, Config{Context: 256, Sessions: 2})
	if err != nil {
		t.Fatal(err)
	}
	prompt := q8References(t)[0].Prompt
	errs := make(chan error, 2)
	first := make(chan struct{}, 2)
	for range 2 {
		go func() {
			_, err := m.Engine().Serve(context.Background(), request(250, nil), prompt, func(uint32) error {
				select {
				case first <- struct{}{}:
				default:
				}
				return nil
			})
			errs <- err
		}()
	}
	<-first
	m.eng.sched.close()
	for range 2 {
		if err := <-errs; err != nil && !errors.Is(err, errClosed) {
			t.Errorf("a serve at close: %v", err)
		}
	}
	if _, err := m.Engine().Serve(context.Background(), request(4, nil), prompt, func(uint32) error { return nil }); !errors.Is(err, errClosed) {
		t.Errorf("a serve after close: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestComposeShares: a step takes every decode token first, then prompt
// tokens oldest first: all the budget left when nothing decodes, else as
// many as the step decodes and at least the chunk; a prompt's last chunk
// needs a logits row, and waits for one.
func TestComposeShares(t *testing.T) {
	m := fortunes(t)
	b, err := m.model.NewBatch(model.BatchOptions{Tokens: 40, Seqs: 6})
	if err != nil {
		t.Fatal(err)
	}
	sc := &sched{batch: b, budget: 40, chunk: 4}
	decode := func() *job { return &job{tokens: []uint32{1}} }
	prompt := func(n int) *job { return &job{tokens: make([]uint32, n)} }
	shape := func(seqs []model.Seq) (got []int) {
		for _, sq := range seqs {
			n := len(sq.Tokens)
			if sq.Logits > 0 {
				n = -n // a logits row
			}
			got = append(got, n)
		}
		return got
	}
	for _, tc := range []struct {
		name  string
		queue []*job
		want  []int
	}{
		{"prompts alone take the budget, oldest first", []*job{prompt(30), prompt(25)}, []int{-30, 10}},
		{"two decoding: the chunk", []*job{prompt(30), decode(), decode()}, []int{-1, -1, 4}},
		{"five decoding: five prompt tokens", []*job{prompt(30), decode(), decode(), decode(), decode(), decode()}, []int{-1, -1, -1, -1, -1, 5}},
		{"a short prompt ends within the share", []*job{prompt(3), prompt(30), decode()}, []int{-1, -3, 1}},
		{"no logits row left: all but the last token", []*job{decode(), decode(), decode(), decode(), decode(), decode(), prompt(3)}, []int{-1, -1, -1, -1, -1, -1, 2}},
	} {
		sc.queue = tc.queue
		seqs, _ := sc.compose(nil, nil)
		if got := shape(seqs); !slices.Equal(got, tc.want) {
			t.Errorf("%s: step %v, want %v (negative: a logits row)", tc.name, got, tc.want)
		}
	}
}

// TestStepPanicFailsItsServes: a step that panics fails the serves in it
// with errStep, and the scheduler goes on serving.
func TestStepPanicFailsItsServes(t *testing.T) {
	m, err := Load(fortunesPath, Config{Context: 64, Sessions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := m.model.NewSession(model.SessionOptions{Context: 64})
	if err != nil {
		t.Fatal(err)
	}
	h := m.eng.sched.open()
	defer h.close()
	boom := func(*model.Batch, int) uint32 { panic("device lost") }
	if _, err := h.run(context.Background(), s, []uint32{1, 2, 3}, boom); !errors.Is(err, errStep) || !strings.Contains(err.Error(), "device lost") {
		t.Fatalf("a panicking step: %v", err)
	}
	s.Truncate(0)
	if _, err := h.run(context.Background(), s, []uint32{1, 2, 3}, func(b *model.Batch, i int) uint32 { return b.ArgMax(i) }); err != nil {
		t.Fatalf("the next step: %v", err)
	}
}
