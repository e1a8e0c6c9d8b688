package ggufengine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/gguf/chat"
	"github.com/meshnode/meshnode/gguf/digest"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/sample"
	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

// The built-in model, committed in the repository, and llama.cpp's greedy
// ids for it.
var (
	fortunesPath  = filepath.Join("..", "..", "..", "models", "meshnode-fortunes-q8_0.gguf")
	referencePath = filepath.Join("..", "..", "..", "models", "reference-greedy.txt")
)

var loadFortunes = sync.OnceValues(func() (*Model, error) {
	return Load(fortunesPath, Config{Fidelity: receipt.F1, UJPerToken: 250, Context: 256})
})

func fortunes(t *testing.T) *Model {
	t.Helper()
	m, err := loadFortunes()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var tokenizerContinue = tokenizer.DecodeOptions{Continue: true}

// q8References reads llama.cpp's greedy ids for the Q8_0 file.
func q8References(t *testing.T) []modeltest.GreedyCase {
	t.Helper()
	all, err := modeltest.ReadGreedyReference(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	refs := slices.DeleteFunc(all, func(c modeltest.GreedyCase) bool { return !strings.Contains(c.File, "q8_0") })
	if len(refs) == 0 {
		t.Fatal("no Q8_0 references")
	}
	return refs
}

func request(maxTokens uint32, s *receipt.Sampling) receipt.ServeRequest {
	return receipt.ServeRequest{
		PromptHash: receipt.PromptHash([]byte("p")), PromptTokens: 8, MaxTokens: maxTokens,
		FidelityFloor: receipt.F1, JouleCeilingUJ: 1 << 40, Sampling: s,
	}
}

func serve(t *testing.T, e engine.Engine, req receipt.ServeRequest, prompt []uint32) ([]uint32, engine.Outcome) {
	t.Helper()
	var got []uint32
	out, err := e.Serve(context.Background(), req, prompt, func(tok uint32) error {
		got = append(got, tok)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, out
}

// untilEOS is llama.cpp's greedy output up to (not including) the first
// end-of-generation token, which is where the engine stops.
func untilEOS(m *Model, ids []uint32) []uint32 {
	for i, id := range ids {
		if m.Tokenizer().IsEOG(id) {
			return ids[:i]
		}
	}
	return ids
}

func TestGreedyMatchesLlamaCpp(t *testing.T) {
	m := fortunes(t)
	for _, ref := range q8References(t) {
		want := untilEOS(m, ref.Generated)
		got, out := serve(t, m.Engine(), request(40, nil), ref.Prompt)
		if !slices.Equal(got, want) {
			t.Errorf("prompt %v:\n got %v\nwant %v", ref.Prompt, got, want)
		}
		if out.TokensIn != uint32(len(ref.Prompt)) || out.TokensOut != uint32(len(got)) || out.TokensAccepted != out.TokensOut {
			t.Errorf("outcome %+v for %d in, %d out", out, len(ref.Prompt), len(got))
		}
		if out.Delivered == nil || *out.Delivered != receipt.F1 {
			t.Errorf("delivered %v, want F1", out.Delivered)
		}
	}
}

func TestMaxTokens(t *testing.T) {
	m := fortunes(t)
	ref := q8References(t)[0]
	for _, n := range []uint32{0, 1, 5} {
		got, _ := serve(t, m.Engine(), request(n, nil), ref.Prompt)
		if !slices.Equal(got, ref.Generated[:n]) {
			t.Errorf("max_tokens %d: %v, want %v", n, got, ref.Generated[:n])
		}
	}
}

func TestStopString(t *testing.T) {
	m := fortunes(t)
	ref := q8References(t)[0] // ", and a man who has a little to be a man who …"
	text := func(ids []uint32) string {
		s, err := m.Tokenizer().Decode(ids, tokenizerContinue)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	full := text(untilEOS(m, ref.Generated))
	got, _ := serve(t, m.Engine(), request(40, &receipt.Sampling{Stop: []string{"little"}}), ref.Prompt)
	out := text(got)
	if strings.Contains(out, "little") || !strings.HasPrefix(full, out) || !strings.Contains(full[len(out):], "little") {
		t.Fatalf("stopped at %q of %q", out, full)
	}
	if want := full[:strings.Index(full, "little")]; strings.TrimSpace(out) != strings.TrimSpace(want) {
		t.Fatalf("output %q, want the text before the stop %q", out, want)
	}
}

func TestSeededSamplingIsReproducible(t *testing.T) {
	m := fortunes(t)
	prompt := q8References(t)[1].Prompt
	seed := func(v uint64) *receipt.Sampling {
		return &receipt.Sampling{TemperatureE6: 900_000, TopPE6: 950_000, Seed: &v}
	}
	a, _ := serve(t, m.Engine(), request(24, seed(11)), prompt)
	b, _ := serve(t, m.Engine(), request(24, seed(11)), prompt)
	c, _ := serve(t, m.Engine(), request(24, seed(12)), prompt)
	if !slices.Equal(a, b) {
		t.Fatalf("seed 11 twice:\n%v\n%v", a, b)
	}
	if slices.Equal(a, c) {
		t.Fatalf("seeds 11 and 12 gave the same %d tokens", len(a))
	}
}

func TestRefusals(t *testing.T) {
	m := fortunes(t)
	e := m.Engine()
	long := make([]uint32, m.ContextLength()+1)
	for _, tc := range []struct {
		name   string
		req    receipt.ServeRequest
		prompt []uint32
	}{
		{"decision", func() receipt.ServeRequest {
			r := request(0, nil)
			r.Decision = &receipt.Decision{Questions: 1, OptionsScored: 2}
			return r
		}(), []uint32{1, 2}},
		{"empty prompt", request(4, nil), nil},
		{"prompt beyond the context", request(4, nil), long},
		{"token outside the vocabulary", request(4, nil), []uint32{1, 32000}},
		{"top_p above 1", request(4, &receipt.Sampling{TemperatureE6: 1, TopPE6: 2_000_000}), []uint32{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			called := false
			out, err := e.Serve(context.Background(), tc.req, tc.prompt, func(uint32) error { called = true; return nil })
			if !errors.Is(err, engine.ErrRefused) {
				t.Fatalf("err %v, want ErrRefused", err)
			}
			if called || out != (engine.Outcome{}) {
				t.Fatalf("refused serve did work: emitted %v, outcome %+v", called, out)
			}
		})
	}
}

func TestCancellation(t *testing.T) {
	m := fortunes(t)
	prompt := q8References(t)[0].Prompt
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Engine().Serve(ctx, request(8, nil), prompt, func(uint32) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled before: %v", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	n := 0
	out, err := m.Engine().Serve(ctx, request(40, nil), prompt, func(uint32) error {
		if n++; n == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || out.TokensOut != 3 {
		t.Fatalf("cancelled after 3 tokens: %v, outcome %+v", err, out)
	}

	boom := errors.New("client gone")
	out, err = m.Engine().Serve(context.Background(), request(40, nil), prompt, func(uint32) error { return boom })
	if !errors.Is(err, boom) || out.TokensOut != 0 {
		t.Fatalf("emit error: %v, outcome %+v", err, out)
	}
}

// TestConversationReuse serves a second turn that extends the first
// (prompt, reply, more text) and checks it matches a fresh engine's
// answer: the reused KV cache changes nothing but the work.
func TestConversationReuse(t *testing.T) {
	m := fortunes(t)
	ref := q8References(t)[2]
	first, _ := serve(t, m.Engine(), request(10, nil), ref.Prompt)
	turn2 := slices.Concat(ref.Prompt, first, m.Tokenize(" And then", false, false))

	s, err := m.eng.pool.acquire(context.Background(), turn2)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CommonPrefix(turn2); n < len(ref.Prompt)+len(first)-1 {
		t.Fatalf("the pool picked a session sharing %d tokens, want the first turn's %d", n, len(ref.Prompt)+len(first)-1)
	}
	m.eng.pool.release(s)
	got, _ := serve(t, m.Engine(), request(12, nil), turn2)

	fresh, err := Load(fortunesPath, Config{Context: 256, Sessions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	want, _ := serve(t, fresh.Engine(), request(12, nil), turn2)
	if !slices.Equal(got, want) {
		t.Fatalf("second turn on the reused cache %v, fresh %v", got, want)
	}
}

func TestConcurrentServes(t *testing.T) {
	m := fortunes(t)
	refs := q8References(t)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for i := range 8 {
		ref := refs[i%len(refs)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			var got []uint32
			_, err := m.Engine().Serve(context.Background(), request(12, nil), ref.Prompt, func(tok uint32) error {
				got = append(got, tok)
				return nil
			})
			if want := untilEOS(m, ref.Generated[:12]); err != nil || !slices.Equal(got, want) {
				errs <- fmt.Sprintf("concurrent serve of %v: %v (%v), want %v", ref.Prompt, got, err, want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestWeights(t *testing.T) {
	m := fortunes(t)
	w, ok := m.Engine().Weights()
	if !ok || w.Precision != "int8" {
		t.Fatalf("weights %+v, %v", w, ok)
	}
	res, err := digest.Files(filepath.Dir(fortunesPath), filepath.Base(fortunesPath))
	if err != nil {
		t.Fatal(err)
	}
	if w.Digest != receipt.ContentID(res.Digest) {
		t.Fatalf("digest %s, want %s", w.Digest, res.Digest)
	}
	e := m.Engine()
	if e.Recipe() != "meshnode-fortunes-q8_0" || e.Fidelity() != receipt.F1 || e.UJPerToken() != 250 || !e.Deterministic() {
		t.Fatalf("engine advertises %q %v %d %v", e.Recipe(), e.Fidelity(), e.UJPerToken(), e.Deterministic())
	}
	if m.ContextLength() != 256 || m.Facts().Architecture != "llama" {
		t.Fatalf("context %d, facts %+v", m.ContextLength(), m.Facts())
	}
}

func TestPrecisionNames(t *testing.T) {
	for in, want := range map[string]string{
		"F32": "fp32", "F16": "fp16", "BF16": "bf16", "Q8_0": "int8", "Q6_K": "int6", "Q5_K_M": "int5",
		"Q4_0": "int4", "Q4_K_M": "int4", "IQ4_XS": "int4", "Q3_K_S": "int3", "Q2_K": "int2", "TQ1_0": "tq1_0", "": "unknown",
	} {
		if got := Precision(in); got != want {
			t.Errorf("Precision(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTextHelpers(t *testing.T) {
	m := fortunes(t)
	ids := m.Tokenize("A man walks into a bar", true, false)
	if want := q8References(t)[0].Prompt; !slices.Equal(ids, want) {
		t.Fatalf("tokenize: %v, want %v", ids, want)
	}
	text, err := m.ApplyChat([]chat.Message{{Role: "user", Content: "hi"}})
	if err != nil || !strings.Contains(text, "hi") {
		t.Fatalf("chat: %q, %v", text, err)
	}
	d := m.NewDecoder()
	var out strings.Builder
	for _, id := range q8References(t)[0].Generated[:8] {
		s, err := d.Next(id)
		if err != nil {
			t.Fatal(err)
		}
		out.WriteString(s)
	}
	out.WriteString(d.Flush())
	if got := out.String(); !strings.HasPrefix(got, ", and a man") {
		t.Fatalf("decoded %q", got)
	}
}

// TestContextLength: a configured context is capped at the trained one;
// otherwise the KV caches of all sessions must fit a quarter of memory
// (bytes per position: element size × layers × KV heads × (K+V head dims)).
func TestContextLength(t *testing.T) {
	llama1B := model.Config{TrainContext: 131072, Layers: 16, KVHeads: 8, HeadDimK: 64, HeadDimV: 64} // 32 KiB a position in f16
	small := model.Config{TrainContext: 256, Layers: 4, KVHeads: 2, HeadDimK: 48, HeadDimV: 48}
	const gib = 1 << 30
	for _, tc := range []struct {
		name     string
		cfg      Config
		mc       model.Config
		kv       model.KVType
		sessions int
		want     int
	}{
		{"configured", Config{Context: 1000, MemoryBytes: gib}, llama1B, model.KVF16, 4, 1000},
		{"configured beyond training", Config{Context: 1000}, small, model.KVF16, 1, 256},
		{"memory unknown", Config{}, llama1B, model.KVF16, 4, model.DefaultContext},
		{"memory unknown, short model", Config{}, small, model.KVF16, 4, 256},
		{"fits a quarter of 8 GiB, f16", Config{MemoryBytes: 8 * gib}, llama1B, model.KVF16, 4, 16384},
		{"fits a quarter of 8 GiB, f32", Config{MemoryBytes: 8 * gib}, llama1B, model.KVF32, 4, 8192},
		{"one session", Config{MemoryBytes: 8 * gib}, llama1B, model.KVF16, 1, 65536},
		{"plenty of memory", Config{MemoryBytes: 1024 * gib}, llama1B, model.KVF16, 4, 131072},
		{"too little for one position", Config{MemoryBytes: 1024}, llama1B, model.KVF16, 4, 1},
	} {
		if got := contextLength(tc.cfg, tc.mc, tc.kv, tc.sessions); got != tc.want {
			t.Errorf("%s: context %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestPenaltyLastN: a request's penalty_last_n has the penalties count
// the last n tokens of prompt and answer together (all of both for
// receipt.PenaltyAll), as the sampler's loop over a fresh session does
// given the prompt as its context; counting the prompt changes the
// answer from the default's, which counts the answer alone.
func TestPenaltyLastN(t *testing.T) {
	m := fortunes(t)
	prompt := q8References(t)[0].Prompt
	const n = 24
	answerOnly, _ := serve(t, m.Engine(), request(n, &receipt.Sampling{RepeatPenaltyE6: 1_500_000}), prompt)
	for _, last := range []uint32{3, 12, receipt.PenaltyAll} {
		got, _ := serve(t, m.Engine(), request(n, &receipt.Sampling{RepeatPenaltyE6: 1_500_000, PenaltyLastN: last}), prompt)
		p := sample.Params{RepeatPenalty: 1.5, PenaltyContext: prompt}
		if last != receipt.PenaltyAll {
			p.PenaltyWindow = int(last)
		}
		if want := samplerLoop(t, m, prompt, p, n); !slices.Equal(got, want) {
			t.Fatalf("penalty_last_n %d: served %v, the sampler's loop %v", last, got, want)
		}
		if last == receipt.PenaltyAll && slices.Equal(got, answerOnly) {
			t.Errorf("counting the whole prompt changed nothing: %v", got)
		}
	}
}

// TestLlamaFilters: a sampled request's llama.cpp filters (typical-p,
// top-n-sigma, XTC, the dynamic temperature, min_keep) are the sampler's:
// the served tokens are its loop's under the parameters the request's
// millionths map to, for each filter alone and all together, and differ
// from the unfiltered serve of the same seed.
func TestLlamaFilters(t *testing.T) {
	m := fortunes(t)
	prompt := q8References(t)[0].Prompt
	const n = 24
	seed := uint64(5)
	base := receipt.Sampling{TemperatureE6: 1_000_000, TopPE6: 950_000, Seed: &seed}
	plain, _ := serve(t, m.Engine(), request(n, &base), prompt)
	for _, tc := range []struct {
		name string
		mod  func(*receipt.Sampling)
		p    sample.Params
	}{
		{"typical-p", func(s *receipt.Sampling) { s.TypicalPE6 = 300_000 }, sample.Params{TypicalP: 0.3}},
		{"top-n-sigma", func(s *receipt.Sampling) { s.TopNSigmaE6 = 500_000 }, sample.Params{TopNSigma: 0.5}},
		{"xtc", func(s *receipt.Sampling) { s.XTCProbabilityE6, s.XTCThresholdE6 = 1_000_000, 50_000 }, sample.Params{XTCProbability: 1, XTCThreshold: 0.05}},
		{"dynatemp", func(s *receipt.Sampling) { s.DynaTempRangeE6, s.DynaTempExponentE6 = 900_000, 500_000 }, sample.Params{DynaTempRange: 0.9, DynaTempExponent: 0.5}},
		{"all, min_keep", func(s *receipt.Sampling) {
			s.TypicalPE6, s.TopNSigmaE6, s.XTCProbabilityE6, s.XTCThresholdE6, s.MinKeep = 500_000, 2_000_000, 500_000, 100_000, 3
		}, sample.Params{TypicalP: 0.5, TopNSigma: 2, XTCProbability: 0.5, XTCThreshold: 0.1, MinKeep: 3}},
	} {
		s := base
		tc.mod(&s)
		got, _ := serve(t, m.Engine(), request(n, &s), prompt)
		p := tc.p
		p.Temperature, p.TopP, p.Seed = 1, 0.95, seed
		if want := samplerLoop(t, m, prompt, p, n); !slices.Equal(got, want) {
			t.Errorf("%s: served %v, the sampler's loop %v", tc.name, got, want)
		}
		if slices.Equal(got, plain) {
			t.Errorf("%s: the same tokens as without it: %v", tc.name, got)
		}
	}
}

// TestDRY: a request's DRY penalty is the sampler's, its breakers read
// from the model's vocabulary and the prompt scanned with the answer:
// greedy and sampled, the served tokens are the sampler's loop's, and
// the greedy answer differs from plain greedy decoding's (the built-in
// model repeats itself).
func TestDRY(t *testing.T) {
	m := fortunes(t)
	prompt := q8References(t)[0].Prompt
	const n = 40
	plain, _ := serve(t, m.Engine(), request(n, nil), prompt)
	breakers, err := m.DRYBreakers(receipt.DefaultDRYBreakers)
	if err != nil {
		t.Fatal(err)
	}
	if len(breakers) == 0 {
		t.Fatal("no token of the vocabulary holds a breaker")
	}
	seed := uint64(3)
	for _, tc := range []struct {
		name string
		s    receipt.Sampling
	}{
		{"greedy", receipt.Sampling{DRYMultiplierE6: 2_000_000, DRYBaseE6: 1_750_000, DRYAllowedLength: 1, DRYLastN: receipt.PenaltyAll}},
		{"greedy, last 16", receipt.Sampling{DRYMultiplierE6: 2_000_000, DRYBaseE6: 1_750_000, DRYAllowedLength: 1, DRYLastN: 16}},
		{"sampled", receipt.Sampling{TemperatureE6: 800_000, Seed: &seed, DRYMultiplierE6: 800_000, DRYBaseE6: 1_750_000, DRYAllowedLength: 2, DRYLastN: 64}},
	} {
		got, _ := serve(t, m.Engine(), request(n, &tc.s), prompt)
		d := &sample.DRY{Multiplier: float64(tc.s.DRYMultiplierE6) / 1e6, Base: 1.75, AllowedLength: int(tc.s.DRYAllowedLength), Breakers: breakers, Context: prompt}
		if tc.s.DRYLastN != receipt.PenaltyAll {
			d.LastN = int(tc.s.DRYLastN)
		}
		p := sample.Params{Temperature: float64(tc.s.TemperatureE6) / 1e6, Seed: seed, DRY: d}
		if want := samplerLoop(t, m, prompt, p, n); !slices.Equal(got, want) {
			t.Errorf("%s: served %v, the sampler's loop %v", tc.name, got, want)
		}
		if tc.s.TemperatureE6 == 0 && slices.Equal(got, plain) {
			t.Errorf("%s: DRY left greedy decoding's answer as it was: %v", tc.name, got)
		}
	}
}

// samplerLoop is the reference for a serve under p: up to n tokens
// picked by p's sampler from the logits of one-token steps over a fresh
// session, until the model ends.
func samplerLoop(t *testing.T, m *Model, prompt []uint32, p sample.Params, n int) []uint32 {
	t.Helper()
	ctx := context.Background()
	s, err := m.model.NewSession(model.SessionOptions{Context: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, logits, err := s.Prefill(ctx, prompt)
	if err != nil {
		t.Fatal(err)
	}
	smp := sample.New(p)
	var out []uint32
	for len(out) < n {
		next := smp.Sample(logits, out)
		if m.Tokenizer().IsEOG(next) {
			break
		}
		if out = append(out, next); len(out) < n {
			if logits, err = s.Eval(ctx, []uint32{next}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

// TestGenerate: Generate with the request's parameters is Serve; with a
// repeat penalty (which no request carries) it is the sampler's loop over
// a fresh session, and unlike llama.cpp's unpenalised greedy output.
func TestGenerate(t *testing.T) {
	m := fortunes(t)
	ref := q8References(t)[0]
	ctx := context.Background()
	run := func(g Generation) []uint32 {
		t.Helper()
		var got []uint32
		if _, err := m.Engine().Generate(ctx, ref.Prompt, g, func(id uint32) error {
			got = append(got, id)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	const n = 20
	if got, want := run(Generation{MaxTokens: n}), untilEOS(m, ref.Generated[:n]); !slices.Equal(got, want) {
		t.Fatalf("greedy Generate %v, llama.cpp %v", got, want)
	}

	p := sample.Params{RepeatPenalty: 1.5}
	got := run(Generation{Sampling: p, MaxTokens: n})
	if want := samplerLoop(t, m, ref.Prompt, p, n); !slices.Equal(got, want) {
		t.Fatalf("repeat penalty 1.5: Generate %v, the sampler's loop %v", got, want)
	}
	if slices.Equal(got, untilEOS(m, ref.Generated[:n])) {
		t.Fatalf("repeat penalty 1.5 changed nothing: %v", got)
	}

	for _, g := range []Generation{
		{Sampling: sample.Params{Temperature: 1, TopP: 2}, MaxTokens: 4},
		{Sampling: sample.Params{RepeatPenalty: -1}, MaxTokens: 4},
		{MaxTokens: -1},
	} {
		called := false
		out, err := m.Engine().Generate(ctx, ref.Prompt, g, func(uint32) error { called = true; return nil })
		if !errors.Is(err, engine.ErrRefused) || called || out != (engine.Outcome{}) {
			t.Errorf("Generate(%+v): %v, emitted %v, outcome %+v; want a refusal and no work", g, err, called, out)
		}
	}
	if _, err := m.Engine().Generate(ctx, nil, Generation{MaxTokens: 4}, func(uint32) error { return nil }); !errors.Is(err, engine.ErrRefused) {
		t.Errorf("Generate of an empty prompt: %v, want a refusal", err)
	}
}

// TestPromptProgress: a serve given engine.WithPromptProgress reports its
// prompt's evaluation as it goes, on the goroutine that emits: after the
// steps that took part of a prompt longer than a step (its Processed
// rising), then the whole prompt before the first token; a second serve
// of the same prompt reports the cached prefix it reused.
func TestPromptProgress(t *testing.T) {
	m, err := Load(fortunesPath, Config{Fidelity: receipt.F1, UJPerToken: 1, Context: 256, Sessions: 1, Batch: 16, PrefillChunk: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	prompt := m.Tokenize(strings.Repeat("A man walks into a bar and asks for a glass of water. ", 4), true, false)
	if len(prompt) < 40 {
		t.Fatalf("a prompt of %d tokens; the test needs several steps of 16", len(prompt))
	}
	serveWith := func() []engine.PromptProgress {
		var seen []engine.PromptProgress
		emitted := false
		ctx := engine.WithPromptProgress(context.Background(), func(p engine.PromptProgress) {
			if emitted {
				t.Errorf("progress %+v after the first token", p)
			}
			seen = append(seen, p)
		})
		if _, err := m.Engine().Serve(ctx, request(4, nil), prompt, func(uint32) error { emitted = true; return nil }); err != nil {
			t.Fatal(err)
		}
		return seen
	}
	first := serveWith()
	if len(first) < 2 {
		t.Fatalf("reports %+v: want steps of the prompt, then the whole", first)
	}
	for i, p := range first {
		if p.Total != len(prompt) || p.Cached != 0 || p.Processed > p.Total || i > 0 && p.Processed <= first[i-1].Processed {
			t.Fatalf("report %d of %+v: not a rising count of %d prompt tokens", i, first, len(prompt))
		}
	}
	if last := first[len(first)-1]; last.Processed != len(prompt) {
		t.Errorf("last report %+v: the whole prompt is not in", last)
	}
	again := serveWith()
	if last := again[len(again)-1]; last.Cached != len(prompt)-1 || last.Processed != len(prompt) {
		t.Errorf("the same prompt again: %+v, want %d cached (all but the last token, whose logits are not kept)", again, len(prompt)-1)
	}
}
