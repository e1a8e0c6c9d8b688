package grant

import (
	"errors"
	"testing"

	"github.com/meshnode/meshnode/node/receipt"
)

func derive(t *testing.T, body string) receipt.ServeRequest {
	t.Helper()
	r, err := GrantedServeRequest([]byte(body))
	if err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return r
}

// TestGrantedServeRequest: the derivation reads the body alone, and reads
// it the same way for every endpoint that carries the same prompt.
func TestGrantedServeRequest(t *testing.T) {
	chat := derive(t, `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}],
		"max_tokens":9,"metadata":{"joule_ceiling_uj":"5000","fidelity_floor":2}}`)
	responses := derive(t, `{"model":"m","instructions":"be brief","input":[{"type":"message","role":"user","content":"hi there"}],
		"max_output_tokens":9,"metadata":{"joule_ceiling_uj":5000,"fidelity_floor":"2"}}`)
	if chat != responses {
		t.Fatalf("one conversation, two requests:\n%+v\n%+v", chat, responses)
	}
	msgs, err := receipt.MarshalCanonical([]message{{"system", "be brief"}, {"user", "hi there"}})
	if err != nil {
		t.Fatal(err)
	}
	want := receipt.ServeRequest{PromptHash: receipt.PromptHash(msgs), PromptTokens: 4, MaxTokens: 9, FidelityFloor: receipt.F2, JouleCeilingUJ: 5000}
	if chat != want {
		t.Fatalf("got %+v\nwant %+v", chat, want)
	}
	// Responses with a string input is one user message.
	if a, b := derive(t, `{"input":"hi","metadata":{"joule_ceiling_uj":1}}`), derive(t, `{"messages":[{"role":"user","content":"hi"}],"metadata":{"joule_ceiling_uj":1}}`); a != b {
		t.Fatal("a string input is not one user message")
	}
	// Completions: the prompt's bytes; a body estimate unless metadata
	// names the count; the default output ceiling.
	comp := derive(t, `{"prompt":["How many joules?"],"metadata":{"joule_ceiling_uj":"7"}}`)
	if comp.PromptHash != receipt.PromptHash([]byte("How many joules?")) || comp.PromptTokens != 4 || comp.MaxTokens != DefaultGrantedMaxTokens {
		t.Fatalf("completion %+v", comp)
	}
	if r := derive(t, `{"prompt":"x","metadata":{"joule_ceiling_uj":"7","prompt_tokens":"31"}}`); r.PromptTokens != 31 {
		t.Fatalf("prompt_tokens %d", r.PromptTokens)
	}
	// max_completion_tokens wins over max_tokens.
	if r := derive(t, `{"messages":[{"role":"user","content":"x"}],"max_tokens":5,"max_completion_tokens":6,"metadata":{"joule_ceiling_uj":1}}`); r.MaxTokens != 6 {
		t.Fatalf("max_tokens %d", r.MaxTokens)
	}
	// Sampling as the node builds it, with no seed drawn; the presentation
	// and unknown fields do not enter.
	s := derive(t, `{"prompt":"x","temperature":0.7,"top_p":0.9,"seed":-1,"stop":["","END"],"presence_penalty":0.5,
		"top_k":40,"min_p":0.05,"repeat_penalty":1.1,
		"jcp_presentation":{"anything":1},"user":"u","metadata":{"joule_ceiling_uj":1}}`)
	seed := ^uint64(0)
	if sp := s.Sampling; sp == nil || sp.TemperatureE6 != 700_000 || sp.TopPE6 != 900_000 || sp.Seed == nil || *sp.Seed != seed ||
		len(sp.Stop) != 1 || sp.Stop[0] != "END" || sp.PresencePenaltyE6 != 500_000 ||
		sp.TopK != 40 || sp.MinPE6 != 50_000 || sp.RepeatPenaltyE6 != 1_100_000 {
		t.Fatalf("sampling %+v", s.Sampling)
	}
	// A repeat penalty of 1 is none; greedy drops the truncations but not
	// the penalty, which changes a greedy answer too.
	if r := derive(t, `{"prompt":"x","repeat_penalty":1,"top_k":3,"min_p":0.5,"metadata":{"joule_ceiling_uj":1}}`); r.Sampling != nil {
		t.Fatalf("no-op options carry sampling %+v", r.Sampling)
	}
	if r := derive(t, `{"prompt":"x","repeat_penalty":1.3,"metadata":{"joule_ceiling_uj":1}}`); r.Sampling == nil || r.Sampling.RepeatPenaltyE6 != 1_300_000 {
		t.Fatalf("greedy with a repeat penalty: sampling %+v", r.Sampling)
	}
	if r := derive(t, `{"prompt":"x","temperature":0.7,"metadata":{"joule_ceiling_uj":1}}`); r.Sampling.Seed != nil {
		t.Fatal("the derivation drew a seed")
	}
	if r := derive(t, `{"prompt":"x","temperature":0,"top_p":0.5,"seed":3,"metadata":{"joule_ceiling_uj":1}}`); r.Sampling != nil {
		t.Fatalf("greedy request carries sampling %+v", r.Sampling)
	}
}

// TestGrantedServeRequestRefuses: a body that cannot be served as a
// granted request is a 400, never a default.
func TestGrantedServeRequestRefuses(t *testing.T) {
	for name, body := range map[string]string{
		"no ceiling":            `{"prompt":"x"}`,
		"null ceiling":          `{"prompt":"x","metadata":{"joule_ceiling_uj":null}}`,
		"negative ceiling":      `{"prompt":"x","metadata":{"joule_ceiling_uj":"-1"}}`,
		"floor above F4":        `{"prompt":"x","metadata":{"joule_ceiling_uj":1,"fidelity_floor":5}}`,
		"no prompt":             `{"metadata":{"joule_ceiling_uj":1}}`,
		"prompt and messages":   `{"prompt":"x","messages":[{"role":"user","content":"x"}],"metadata":{"joule_ceiling_uj":1}}`,
		"two prompts":           `{"prompt":["a","b"],"metadata":{"joule_ceiling_uj":1}}`,
		"unknown role":          `{"messages":[{"role":"wizard","content":"x"}],"metadata":{"joule_ceiling_uj":1}}`,
		"image part":            `{"messages":[{"role":"user","content":[{"type":"image_url"}]}],"metadata":{"joule_ceiling_uj":1}}`,
		"zero max_tokens":       `{"prompt":"x","max_tokens":0,"metadata":{"joule_ceiling_uj":1}}`,
		"temperature above 2":   `{"prompt":"x","temperature":3,"metadata":{"joule_ceiling_uj":1}}`,
		"negative top_k":        `{"prompt":"x","temperature":1,"top_k":-1,"metadata":{"joule_ceiling_uj":1}}`,
		"min_p above 1":         `{"prompt":"x","temperature":1,"min_p":2,"metadata":{"joule_ceiling_uj":1}}`,
		"repeat_penalty above":  `{"prompt":"x","repeat_penalty":11,"metadata":{"joule_ceiling_uj":1}}`,
		"not JSON":              `{"prompt":`,
		"trailing data":         `{"prompt":"x","metadata":{"joule_ceiling_uj":1}} {}`,
		"responses typed items": `{"input":[{"type":"function_call","role":"user"}],"metadata":{"joule_ceiling_uj":1}}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := GrantedServeRequest([]byte(body))
			if !errors.Is(err, ErrMalformed) || HTTPStatus(err) != 400 {
				t.Fatalf("got %v", err)
			}
		})
	}
	if _, err := GrantedServeRequest([]byte(`{"prompt":"x"}`)); !errors.Is(err, ErrNoCeiling) {
		t.Fatalf("got %v", err)
	}
}

// TestPresentBody: what meshcli writes is a body whose derived request is
// the one the presentation was signed for, and which the steward verifies.
func TestPresentBody(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"metadata":{"joule_ceiling_uj":"9000"}}`)
	out, id, err := PresentBody(body, delegated(t, nil, nil), key(t, seedCaller), fixedRand(3))
	if err != nil {
		t.Fatal(err)
	}
	req, err := GrantedServeRequest(out)
	if err != nil {
		t.Fatal(err)
	}
	if requestID(t, req) != id || requestID(t, derive(t, string(body))) != id {
		t.Fatal("the body with its presentation derives another request")
	}
	p, err := BodyPresentation(out)
	if err != nil || p == nil {
		t.Fatalf("presentation %v %v", p, err)
	}
	if _, err := Verify(p, id, key(t, seedSteward).DIDKey()); err != nil {
		t.Fatal(err)
	}
	// Presenting again replaces the presentation rather than signing over it.
	again, id2, err := PresentBody(out, delegated(t, nil, nil), key(t, seedCaller), fixedRand(4))
	if err != nil || id2 != id {
		t.Fatalf("re-present: %v", err)
	}
	if p2, _ := BodyPresentation(again); p2.Nonce == p.Nonce {
		t.Fatal("re-presenting reused the nonce")
	}
	if p, err := BodyPresentation(body); p != nil || err != nil {
		t.Fatalf("a body without a presentation: %v %v", p, err)
	}
	if _, err := BodyPresentation([]byte(`{"jcp_presentation":{"chain":[]}}`)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("got %v", err)
	}
}

// TestIssue: root and child issuance, and refusal of a widening child.
func TestIssue(t *testing.T) {
	root, err := Issue(Issuance{Issuer: key(t, seedOwner), Subject: key(t, seedCaller).DIDKey(), BudgetUJ: 1000,
		Expiry: t0.Add(48 * 3600e9), Caveats: []Caveat{MaxCostUJ(10)}, Rand: fixedRand(1)})
	if err != nil {
		t.Fatal(err)
	}
	chain, err := Issue(Issuance{Issuer: key(t, seedCaller), Subject: key(t, seedSteward).DIDKey(), BudgetUJ: 500,
		Expiry: t0.Add(24 * 3600e9), Parent: root, Rand: fixedRand(2)})
	if err != nil {
		t.Fatal(err)
	}
	if len(chain) != 2 || len(root) != 1 || chain[1].Grant.Capability.Resource != AnyRequest || chain[1].Grant.Capability.Actions[0] != ActionInfer {
		t.Fatalf("chain %+v", chain)
	}
	b, err := (&ChainFile{Chain: chain}).Chain.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseChainFile([]byte(`{"chain":` + string(b) + `}`))
	if err != nil || back.Leaf().ID != chain.Leaf().ID {
		t.Fatalf("chain file: %v", err)
	}
	for _, tail := range []string{"}", " {}", "x"} {
		if _, err := ParseChainFile([]byte(`{"chain":` + string(b) + `}` + tail)); !errors.Is(err, ErrMalformed) {
			t.Errorf("a chain file with %q after it: %v", tail, err)
		}
	}
	for name, iss := range map[string]Issuance{
		"wider budget":    {Issuer: key(t, seedCaller), Subject: key(t, seedSteward).DIDKey(), BudgetUJ: 2000, Expiry: t0, Parent: root},
		"not the subject": {Issuer: key(t, seedOther), Subject: key(t, seedSteward).DIDKey(), BudgetUJ: 1, Expiry: t0, Parent: root},
		"no expiry":       {Issuer: key(t, seedOwner), Subject: key(t, seedSteward).DIDKey(), BudgetUJ: 1},
	} {
		if _, err := Issue(iss); err == nil {
			t.Errorf("%s: issued", name)
		}
	}
}
