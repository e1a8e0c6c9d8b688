package steward

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/receipt"
)

type backendSpec struct {
	name     string
	fidelity receipt.Fidelity
	ujTok    uint64
	ujOpt    uint64
}

func backendsOf(specs ...backendSpec) []Backend {
	var bs []Backend
	for _, s := range specs {
		e := newFake(s.fidelity, s.ujTok)
		e.ujPerOption = s.ujOpt
		bs = append(bs, Backend{Name: s.name, Engine: e})
	}
	return bs
}

func TestRoute(t *testing.T) {
	decision := func(r receipt.ServeRequest, options uint32) receipt.ServeRequest {
		r.Decision = &receipt.Decision{Questions: 1, OptionsScored: options}
		return r
	}
	tests := []struct {
		name      string
		backends  []backendSpec
		req       receipt.ServeRequest
		chosen    string
		estimates []uint64
		reasons   []string // "" for admissible
	}{
		{
			name:      "cheapest admissible wins",
			backends:  []backendSpec{{"tiny", receipt.F1, 1, 0}, {"large", receipt.F4, 30, 0}, {"mid", receipt.F3, 9, 0}},
			req:       genRequest(20, 30, receipt.F2, 1000),
			chosen:    "mid",
			estimates: []uint64{50, 1500, 450},
			reasons:   []string{"below floor (F1 < F2)", "over ceiling (1500 uJ > 1000 uJ)", ""},
		},
		{
			name:      "floor is inclusive, ceiling is inclusive",
			backends:  []backendSpec{{"a", receipt.F2, 20, 0}},
			req:       genRequest(20, 30, receipt.F2, 1000),
			chosen:    "a",
			estimates: []uint64{1000},
			reasons:   []string{""},
		},
		{
			name:      "tie goes to the earlier registration",
			backends:  []backendSpec{{"first", receipt.F3, 9, 0}, {"second", receipt.F4, 9, 0}, {"third", receipt.F2, 9, 0}},
			req:       genRequest(10, 10, receipt.F2, 1000),
			chosen:    "first",
			estimates: []uint64{180, 180, 180},
			reasons:   []string{"", "", ""},
		},
		{
			name:      "both reasons",
			backends:  []backendSpec{{"bad", receipt.F0, 100, 0}, {"ok", receipt.F4, 1, 0}},
			req:       genRequest(10, 10, receipt.F1, 1000),
			chosen:    "ok",
			estimates: []uint64{2000, 20},
			reasons:   []string{"below floor (F0 < F1); over ceiling (2000 uJ > 1000 uJ)", ""},
		},
		{
			// §3.6: a decision is never priced for max_tokens, and its
			// option cost follows the schema.
			name:      "decision excludes max_tokens and prices options",
			backends:  []backendSpec{{"gen", receipt.F2, 10, 0}, {"decider", receipt.F2, 10, 40}},
			req:       decision(genRequest(50, 4000, receipt.F1, 1000), 12),
			chosen:    "gen",
			estimates: []uint64{500, 980},
			reasons:   []string{"", ""},
		},
		{
			name:      "option cost can make a decision inadmissible",
			backends:  []backendSpec{{"decider", receipt.F2, 10, 50}},
			req:       decision(genRequest(50, 0, receipt.F1, 1000), 12),
			estimates: []uint64{1100},
			reasons:   []string{"over ceiling (1100 uJ > 1000 uJ)"},
		},
		{
			name:      "overflow is inadmissible, not wrapped",
			backends:  []backendSpec{{"huge", receipt.F4, 1 << 62, 0}},
			req:       genRequest(10, 10, receipt.F0, ^uint64(0)),
			estimates: []uint64{^uint64(0)},
			reasons:   []string{"over ceiling (estimate overflows uint64)"},
		},
		{
			name:      "nothing admissible",
			backends:  []backendSpec{{"tiny", receipt.F0, 1, 0}, {"large", receipt.F4, 100, 0}},
			req:       genRequest(10, 10, receipt.F2, 100),
			estimates: []uint64{20, 2000},
			reasons:   []string{"below floor (F0 < F2)", "over ceiling (2000 uJ > 100 uJ)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSteward(t, Config{Backends: backendsOf(tt.backends...)})
			rt, err := s.Route(tt.req)
			if tt.chosen == "" {
				if !errors.Is(err, ErrNoAdmissibleBackend) || rt.Chosen != -1 || rt.Justification != "" {
					t.Fatalf("Route = %+v, %v; want no admissible backend", rt, err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if got := rt.Candidates[rt.Chosen].Backend; got != tt.chosen {
					t.Fatalf("chose %s, want %s", got, tt.chosen)
				}
				if !strings.HasPrefix(rt.Justification, tt.chosen+": cheapest admissible") || strings.ContainsAny(rt.Justification, "\n\u00b5") {
					t.Fatalf("justification %q is not one ASCII line naming %s", rt.Justification, tt.chosen)
				}
			}
			if len(rt.Candidates) != len(tt.backends) {
				t.Fatalf("%d candidates, want one per backend (%d)", len(rt.Candidates), len(tt.backends))
			}
			for i, c := range rt.Candidates {
				if c.Backend != tt.backends[i].name || c.Fidelity != tt.backends[i].fidelity || c.Recipe != "fake-model" {
					t.Errorf("candidate %d = %+v, out of registration order", i, c)
				}
				if c.EstimateUJ != tt.estimates[i] {
					t.Errorf("%s: estimate %d, want %d", c.Backend, c.EstimateUJ, tt.estimates[i])
				}
				if c.Admissible != (tt.reasons[i] == "") || c.Reason != tt.reasons[i] {
					t.Errorf("%s: admissible %v reason %q, want reason %q", c.Backend, c.Admissible, c.Reason, tt.reasons[i])
				}
			}
		})
	}
}

// TestNoAdmissibleServeError: the serve's error carries every candidate
// and its reason.
func TestNoAdmissibleServeError(t *testing.T) {
	s := newSteward(t, Config{Backends: backendsOf(backendSpec{"tiny", receipt.F0, 1, 0}, backendSpec{"large", receipt.F4, 100, 0})})
	_, err := s.Serve(t.Context(), genRequest(10, 10, receipt.F2, 100), promptOf(10), nil)
	var se *ServeError
	if !errors.As(err, &se) || !errors.Is(err, ErrNoAdmissibleBackend) || se.Stage != StageRoute {
		t.Fatalf("Serve error = %v, want a route-stage ServeError wrapping ErrNoAdmissibleBackend", err)
	}
	if se.Route == nil || len(se.Route.Candidates) != 2 || se.Route.Candidates[0].Reason == "" || se.Route.Candidates[1].Reason == "" {
		t.Fatalf("ServeError route %+v lacks the candidates' reasons", se.Route)
	}
	for _, want := range []string{"tiny: below floor", "large: over ceiling"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestNoBackendsYet: a steward may start with no backend (a node that
// serves no model until its owner loads one): it refuses serves at the
// route, and serves once a backend is added.
func TestNoBackendsYet(t *testing.T) {
	s := newSteward(t, Config{})
	req := genRequest(4, 4, receipt.F0, 1_000_000)
	_, err := s.Serve(context.Background(), req, promptOf(4), func(uint32) error { return nil })
	if !errors.Is(err, ErrNoAdmissibleBackend) {
		t.Fatalf("serve with no backend: %v, want ErrNoAdmissibleBackend", err)
	}
	if err := s.AddBackend(Backend{Name: "late", Engine: newFake(receipt.F2, 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Serve(context.Background(), req, promptOf(4), func(uint32) error { return nil }); err != nil {
		t.Fatalf("serve after AddBackend: %v", err)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	good := backendsOf(backendSpec{"a", receipt.F1, 1, 0})
	bad := newFake(9, 1)
	latin1 := newFake(1, 1)
	latin1.recipe = "caf\xe9"
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no key", Config{Meter: &fakeMeter{}, Backends: good}},
		{"no meter", Config{Key: testKey(t, 1), Backends: good}},
		{"unnamed backend", Config{Key: testKey(t, 1), Meter: &fakeMeter{}, Backends: []Backend{{Engine: newFake(1, 1)}}}},
		{"duplicate backend", Config{Key: testKey(t, 1), Meter: &fakeMeter{}, Backends: append(good, good...)}},
		{"nil engine", Config{Key: testKey(t, 1), Meter: &fakeMeter{}, Backends: []Backend{{Name: "x"}}}},
		{"fidelity out of range", Config{Key: testKey(t, 1), Meter: &fakeMeter{}, Backends: []Backend{{Name: "x", Engine: bad}}}},
		{"name not UTF-8", Config{Key: testKey(t, 1), Meter: &fakeMeter{}, Backends: []Backend{{Name: "cpu:caf\xe9", Engine: newFake(1, 1)}}}},
		{"recipe not UTF-8", Config{Key: testKey(t, 1), Meter: &fakeMeter{}, Backends: []Backend{{Name: "x", Engine: latin1}}}},
		{"newline in name", Config{Key: testKey(t, 1), Meter: &fakeMeter{}, Backends: []Backend{{Name: "cpu:a\nb", Engine: newFake(1, 1)}}}},
		{"control character in name", Config{Key: testKey(t, 1), Meter: &fakeMeter{}, Backends: []Backend{{Name: "cpu:\x1b[2Jx", Engine: newFake(1, 1)}}}},
	}
	for _, tt := range tests {
		if _, err := New(tt.cfg); err == nil {
			t.Errorf("%s: New accepted it", tt.name)
		}
	}
	// A name outside ASCII is fine: only control characters would break
	// the route's one line.
	s := newSteward(t, Config{Backends: []Backend{{Name: "cpu:modèle", Engine: newFake(1, 1)}}})
	if err := s.AddBackend(Backend{Name: "cpu:a\rb", Engine: newFake(1, 1)}); err == nil {
		t.Error("AddBackend accepted a name with a carriage return")
	}
}

// TestForRecipe: a serve that names its model routes among that model's
// backends only, even when another model's backend is cheaper.
func TestForRecipe(t *testing.T) {
	cheap, dear := newFake(receipt.F3, 1), newFake(receipt.F3, 100)
	cheap.recipe, dear.recipe = "small-model", "big-model"
	s := newSteward(t, Config{Backends: []Backend{{Name: "cpu-small", Engine: cheap}, {Name: "cpu-big", Engine: dear}}})
	req := genRequest(4, 4, receipt.F2, 1_000_000)

	served, err := s.Serve(context.Background(), req, promptOf(4), nil, ForRecipe("big-model"))
	if err != nil {
		t.Fatal(err)
	}
	if served.Receipt.Receipt.Backend != "cpu-big" || len(served.Route.Candidates) != 1 {
		t.Fatalf("served on %s weighing %d candidates, want cpu-big alone", served.Receipt.Receipt.Backend, len(served.Route.Candidates))
	}
	if served, err = s.Serve(context.Background(), req, promptOf(4), nil); err != nil || served.Receipt.Receipt.Backend != "cpu-small" {
		t.Fatalf("unscoped serve: %v on %v, want the cheapest backend", err, served)
	}
	_, err = s.Serve(context.Background(), req, promptOf(4), nil, ForRecipe("absent-model"))
	if !errors.Is(err, ErrNoAdmissibleBackend) {
		t.Fatalf("serve for a recipe no backend runs: %v, want ErrNoAdmissibleBackend", err)
	}
	rt, err := s.Route(req, ForRecipe("small-model"))
	if err != nil || len(rt.Candidates) != 1 || rt.Candidates[0].Backend != "cpu-small" {
		t.Fatalf("Route(ForRecipe) = %+v, %v", rt, err)
	}
}

// TestAddRemoveBackend: backends registered while the steward runs are
// routed to; removed ones are not; a duplicate or unnamed one is refused.
func TestAddRemoveBackend(t *testing.T) {
	first := newFake(receipt.F3, 10)
	s := newSteward(t, Config{Backends: []Backend{{Name: "first", Engine: first}}})
	cheaper := newFake(receipt.F3, 1)
	cheaper.recipe = "other"
	if err := s.AddBackend(Backend{Name: "cheaper", Engine: cheaper}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddBackend(Backend{Name: "first", Engine: cheaper}); err == nil {
		t.Fatal("a second backend named first was accepted")
	}
	if err := s.AddBackend(Backend{Engine: cheaper}); err == nil {
		t.Fatal("an unnamed backend was accepted")
	}
	req := genRequest(4, 4, receipt.F2, 1_000_000)
	served, err := s.Serve(context.Background(), req, promptOf(4), nil)
	if err != nil || served.Receipt.Receipt.Backend != "cheaper" {
		t.Fatalf("serve after AddBackend: %v on %v, want the added, cheaper backend", err, served)
	}
	if !s.RemoveBackend("cheaper") || s.RemoveBackend("cheaper") {
		t.Fatal("RemoveBackend should report true once, then false")
	}
	if served, err = s.Serve(context.Background(), req, promptOf(4), nil); err != nil || served.Receipt.Receipt.Backend != "first" {
		t.Fatalf("serve after RemoveBackend: %v on %v", err, served)
	}
	if len(s.Backends()) != 1 {
		t.Fatalf("Backends = %v", s.Backends())
	}
}

// TestAttackDeclaredPromptTokens: a request that declares a prompt far
// shorter than its payload (a granted body's metadata.prompt_tokens "1")
// is priced on the steward's own count of the payload, so a backend whose
// real estimate passes the ceiling is not admitted and nothing runs; the
// candidates record the count priced and the reason says both figures.
// The declared figure stays in the request (its identity is signed over
// it), and a count below it never lowers the price.
func TestAttackDeclaredPromptTokens(t *testing.T) {
	eng := newFake(receipt.F2, 100)
	s := newSteward(t, Config{Backends: []Backend{{Name: "fake", Engine: eng}}})
	lying := genRequest(1, 8, receipt.F0, 1_000) // declared: 100 × (1+8) = 900 µJ
	prompt := promptOf(200)                      // counted: 100 × (200+8) = 20800 µJ

	_, err := s.Serve(t.Context(), lying, prompt, nil, WithPromptTokens(uint32(len(prompt))))
	var se *ServeError
	if !errors.As(err, &se) || !errors.Is(err, ErrNoAdmissibleBackend) || eng.serves != 0 {
		t.Fatalf("Serve = %v with the engine run %d times; want no admissible backend and no work", err, eng.serves)
	}
	c := se.Route.Candidates[0]
	if c.EstimateUJ != 20_800 || c.PromptTokens != 200 ||
		c.Reason != "over ceiling (20800 uJ on 200 prompt tokens counted, 1 declared > 1000 uJ)" {
		t.Fatalf("candidate %+v, want the estimate priced on the 200 tokens counted", c)
	}

	// Admitted where the count fits: the justification says what it
	// priced, and the request (and so its id) keeps the declared figure.
	fits := genRequest(1, 8, receipt.F0, 30_000)
	served, err := s.Serve(t.Context(), fits, prompt, nil, WithPromptTokens(200))
	if err != nil {
		t.Fatal(err)
	}
	id, _ := fits.ID()
	if served.Receipt.Receipt.RequestID != id || served.Route.Candidates[0].PromptTokens != 200 ||
		!strings.Contains(served.Receipt.Receipt.Route, "est 20800 uJ on 200 prompt tokens counted, 1 declared <= ceiling 30000 uJ") {
		t.Fatalf("receipt route %q, candidates %+v", served.Receipt.Receipt.Route, served.Route.Candidates)
	}

	// A count below the declared figure prices the declared one, and
	// Route weighs as Serve does.
	rt, err := s.Route(genRequest(300, 8, receipt.F0, 1_000_000), WithPromptTokens(200))
	if err != nil || rt.Candidates[0].EstimateUJ != 30_800 || rt.Candidates[0].PromptTokens != 0 || strings.Contains(rt.Justification, "counted") {
		t.Fatalf("Route = %+v, %v; want the declared 300 tokens priced", rt, err)
	}
	rt, _ = s.Route(lying, WithPromptTokens(200))
	if rt.Chosen >= 0 || rt.Candidates[0].EstimateUJ != 20_800 {
		t.Fatalf("Route of the lying request = %+v, want it priced on the count", rt)
	}
}
