package steward

import (
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/receipt"
)

// events records the order in which the fakes were called.
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(s string) {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.log = append(e.log, s)
	e.mu.Unlock()
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.log...)
}

// fakeMeter returns a fixed figure for every span.
type fakeMeter struct {
	ev        *events
	energy    hw.Energy
	openErr   error
	closeErr  error
	mu        sync.Mutex
	open      int
	closed    int
	minWindow time.Duration
}

func (m *fakeMeter) Open() (hw.Span, error) {
	m.ev.add("meter open")
	if m.openErr != nil {
		return nil, m.openErr
	}
	m.mu.Lock()
	m.open++
	m.mu.Unlock()
	return fakeSpan{m}, nil
}

func (m *fakeMeter) MinWindow() time.Duration { return m.minWindow }
func (m *fakeMeter) Name() string             { return "fake" }

type fakeSpan struct{ m *fakeMeter }

func (s fakeSpan) Close() (hw.Energy, error) {
	s.m.ev.add("meter close")
	s.m.mu.Lock()
	s.m.closed++
	s.m.mu.Unlock()
	if s.m.closeErr != nil {
		return hw.Energy{}, s.m.closeErr
	}
	return s.m.energy, nil
}

// fakeEngine emits a scripted output and reports a scripted outcome.
type fakeEngine struct {
	ev            *events
	recipe        string
	fidelity      receipt.Fidelity
	ujPerToken    uint64
	ujPerOption   uint64
	deterministic bool
	// weights returns what Weights reports on its n-th call (from 0).
	weights  func(n int) (receipt.Weights, bool)
	training *receipt.Training
	// tokens are emitted in order (for a generation), up to max_tokens
	// unless ignoreMax.
	tokens    []uint32
	ignoreMax bool
	delivered *receipt.Fidelity
	// outcome, when set, rewrites the honest outcome.
	outcome func(*engine.Outcome)
	// failAfter, when ≥ 0, makes Serve fail with err after that many
	// tokens.
	failAfter int
	err       error
	// onToken, when set, is called as each token is produced, before it
	// is emitted: the work of a decode step.
	onToken func()

	mu     sync.Mutex
	wcalls int
	serves int
}

func newFake(fid receipt.Fidelity, ujPerToken uint64) *fakeEngine {
	return &fakeEngine{recipe: "fake-model", fidelity: fid, ujPerToken: ujPerToken, deterministic: true,
		tokens: []uint32{5, 6, 7, 8}, failAfter: -1}
}

func (e *fakeEngine) Recipe() string             { return e.recipe }
func (e *fakeEngine) Fidelity() receipt.Fidelity { return e.fidelity }
func (e *fakeEngine) UJPerToken() uint64         { return e.ujPerToken }
func (e *fakeEngine) UJPerOptionScored() uint64  { return e.ujPerOption }
func (e *fakeEngine) Deterministic() bool        { return e.deterministic }

func (e *fakeEngine) Weights() (receipt.Weights, bool) {
	e.mu.Lock()
	n := e.wcalls
	e.wcalls++
	e.mu.Unlock()
	if e.weights == nil {
		return receipt.Weights{}, false
	}
	return e.weights(n)
}

func (e *fakeEngine) Training() (receipt.Training, bool) {
	if e.training == nil {
		return receipt.Training{}, false
	}
	return *e.training, true
}

func (e *fakeEngine) Serve(ctx context.Context, req receipt.ServeRequest, prompt []uint32, emit func(uint32) error) (engine.Outcome, error) {
	e.ev.add("engine serve")
	defer e.ev.add("engine done")
	e.mu.Lock()
	e.serves++
	e.mu.Unlock()
	if e.failAfter == 0 && errors.Is(e.err, engine.ErrRefused) {
		return engine.Outcome{}, e.err
	}
	out := engine.Outcome{TokensIn: uint32(len(prompt)), Delivered: e.delivered}
	fin := func(err error) (engine.Outcome, error) {
		if e.outcome != nil {
			e.outcome(&out)
		}
		return out, err
	}
	if req.Decision != nil && !e.ignoreMax {
		return fin(nil)
	}
	for i, tok := range e.tokens {
		if i == e.failAfter {
			return fin(e.err)
		}
		if uint32(i) >= req.MaxTokens && !e.ignoreMax {
			break
		}
		if err := ctx.Err(); err != nil {
			return fin(err)
		}
		if e.onToken != nil {
			e.onToken()
		}
		if err := emit(tok); err != nil {
			return fin(err)
		}
		out.TokensOut++
		out.TokensAccepted++
	}
	return fin(nil)
}

// fakeAuthorizer admits or refuses, and hands out a debit.
type fakeAuthorizer struct {
	ev    *events
	err   error
	debit *fakeDebit
	got   []Authorization
}

func (a *fakeAuthorizer) Authorize(_ context.Context, z Authorization) (Debit, error) {
	a.ev.add("authorise")
	a.got = append(a.got, z)
	if a.err != nil {
		return nil, a.err
	}
	if a.debit == nil {
		return nil, nil
	}
	return a.debit, nil
}

type fakeDebit struct {
	ev      *events
	grant   receipt.ContentID
	breach  string
	err     error
	settled []hw.Energy
}

func (d *fakeDebit) GrantID() receipt.ContentID { return d.grant }
func (d *fakeDebit) Settle(e hw.Energy) (string, error) {
	d.ev.add("debit")
	d.settled = append(d.settled, e)
	return d.breach, d.err
}

// fakeJournal keeps the envelopes it is given, in order.
type fakeJournal struct {
	ev   *events
	err  error
	mu   sync.Mutex
	envs [][]byte
}

func (j *fakeJournal) Sealed(s *receipt.Sealed) error {
	j.ev.add("journal")
	if j.err != nil {
		return j.err
	}
	j.mu.Lock()
	j.envs = append(j.envs, s.Envelope)
	j.mu.Unlock()
	return nil
}

func (j *fakeJournal) envelopes() [][]byte {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([][]byte(nil), j.envs...)
}

// counterReader is a deterministic nonce source.
type counterReader struct{ n uint64 }

func (c *counterReader) Read(p []byte) (int, error) {
	for i := range p {
		if i%8 == 0 {
			c.n++
		}
		p[i] = byte(c.n >> (8 * (i % 8)))
	}
	return len(p), nil
}

func testKey(t testing.TB, n byte) *identity.Key {
	t.Helper()
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = n ^ byte(i)
	}
	k, err := identity.KeyFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newSteward(t testing.TB, cfg Config) *Steward {
	t.Helper()
	if cfg.Key == nil {
		cfg.Key = testKey(t, 1)
	}
	if cfg.Meter == nil {
		cfg.Meter = &fakeMeter{energy: hw.Estimated(4_000)}
	}
	if cfg.Rand == nil {
		cfg.Rand = &counterReader{}
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func genRequest(promptTokens, maxTokens uint32, floor receipt.Fidelity, ceiling uint64) receipt.ServeRequest {
	return receipt.ServeRequest{
		PromptHash:     receipt.PromptHash([]byte("prompt")),
		PromptTokens:   promptTokens,
		MaxTokens:      maxTokens,
		FidelityFloor:  floor,
		JouleCeilingUJ: ceiling,
	}
}

func promptOf(n int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = binary.LittleEndian.Uint32([]byte{byte(i), 1, 0, 0})
	}
	return p
}
