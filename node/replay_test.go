package node

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/receipt"
)

// TestReplayEndToEnd: a generation on the built-in model is replayed
// through POST /v1/mesh/replay from what its client holds (the request it
// sent, the usage.energy it got): a greedy or seeded one verifies and
// comes with a disclosure that opens the receipt, and so does a sampled
// one whose seed the node drew and handed back in usage.energy.seed;
// another request, or that one without its seed, is not replayable; a
// body that holds no request or no receipt is a 400, another node's
// receipt a 404.
func TestReplayEndToEnd(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})

	serve := func(path, body string) json.RawMessage {
		t.Helper()
		_, energy := generate(t, n, path, body)
		return energy
	}
	replay := func(request string, energy json.RawMessage) (int, api.ReplayResult, string) {
		t.Helper()
		body, err := json.Marshal(map[string]any{"request": json.RawMessage(request), "energy": energy})
		if err != nil {
			t.Fatal(err)
		}
		return replayRaw(t, n, string(body))
	}

	const greedy = `{"model":"` + fortunesModel + `","max_tokens":8,"messages":[{"role":"user","content":"A man walks into a bar"}]}`
	greedyEnergy := serve("/v1/chat/completions", greedy)
	const seeded = `{"model":"` + fortunesModel + `","max_tokens":8,"prompt":"Once upon a time","temperature":0.9,"seed":42}`
	const unseeded = `{"model":"` + fortunesModel + `","max_tokens":8,"prompt":"Once upon a time","temperature":0.9}`

	unseededEnergy := serve("/v1/completions", unseeded)
	var drawn struct {
		Seed *uint64 `json:"seed"`
	}
	if err := json.Unmarshal(unseededEnergy, &drawn); err != nil || drawn.Seed == nil || *drawn.Seed >= 1<<53 {
		t.Fatalf("an unseeded sample's usage.energy has no seed below 2^53 (%v): %s", err, unseededEnergy)
	}
	for _, e := range []json.RawMessage{greedyEnergy, serve("/v1/completions", seeded)} {
		if strings.Contains(string(e), `"seed"`) {
			t.Fatalf("usage.energy names a seed the node did not draw: %s", e)
		}
	}
	withSeed := func(seed any) json.RawMessage {
		var e map[string]any
		json.Unmarshal(unseededEnergy, &e)
		if seed == nil {
			delete(e, "seed")
		} else {
			e["seed"] = seed
		}
		b, _ := json.Marshal(e)
		return b
	}

	for _, tc := range []struct {
		name, request string
		energy        json.RawMessage
		verdict       string
		reason        string
	}{
		{"greedy chat", greedy, greedyEnergy, api.VerdictVerified, ""},
		{"seeded completion", seeded, serve("/v1/completions", seeded), api.VerdictVerified, ""},
		{"another prompt", strings.Replace(greedy, "a bar", "a tavern", 1), greedyEnergy, api.VerdictNotReplayable, "not the receipt's"},
		{"another max_tokens", strings.Replace(greedy, `"max_tokens":8`, `"max_tokens":9`, 1), greedyEnergy, api.VerdictNotReplayable, "not the receipt's"},
		{"unseeded sample, its drawn seed", unseeded, unseededEnergy, api.VerdictVerified, ""},
		{"unseeded sample, the seed left out", unseeded, withSeed(nil), api.VerdictNotReplayable, "without a seed"},
		{"unseeded sample, another seed", unseeded, withSeed(*drawn.Seed ^ 1), api.VerdictNotReplayable, "not the receipt's"},
		{"the drawn seed sent in the request", strings.Replace(unseeded, `"temperature":0.9`, fmt.Sprintf(`"temperature":0.9,"seed":%d`, *drawn.Seed), 1), withSeed(nil), api.VerdictVerified, ""},
		{"another model", strings.Replace(greedy, fortunesModel, "mesh-reference", 1), greedyEnergy, api.VerdictNotReplayable, `names model "mesh-reference"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, res, raw := replay(tc.request, tc.energy)
			if status != http.StatusOK || res.Verdict != tc.verdict || !strings.Contains(res.Reason, tc.reason) {
				t.Fatalf("replay: %d %s, want %s (%q)", status, raw, tc.verdict, tc.reason)
			}
			var e struct {
				EnvelopeHex string `json:"envelope_hex"`
			}
			json.Unmarshal(tc.energy, &e)
			env, _ := hex.DecodeString(e.EnvelopeHex)
			sealed, err := receipt.Open(env, n.key.Public())
			if err != nil {
				t.Fatal(err)
			}
			r := sealed.Receipt
			if res.Receipt != sealed.ID.String() || res.Sequence != r.Sequence || res.RequestID != r.RequestID.String() || res.Backend != r.Backend {
				t.Fatalf("the answer does not name the receipt: %s", raw)
			}
			if tc.verdict != api.VerdictVerified {
				if res.Disclosure != nil {
					t.Fatalf("a disclosure without a verified replay: %s", raw)
				}
				return
			}
			// What a third party checks: the disclosure opens the receipt's
			// commitment, on exactly the tokens the serve handed out.
			var d struct {
				Disclosure *receipt.Disclosure `json:"disclosure"`
			}
			if err := json.Unmarshal([]byte(raw), &d); err != nil || d.Disclosure == nil {
				t.Fatalf("no disclosure in %s (%v)", raw, err)
			}
			if !d.Disclosure.Opens(&r) || len(d.Disclosure.Output) != int(r.TokensOut) {
				t.Fatalf("the disclosure does not open the receipt: %s", raw)
			}
			if res.ReplayedRequestID != res.RequestID {
				t.Fatalf("replayed request id %s, receipt's %s", res.ReplayedRequestID, res.RequestID)
			}
		})
	}

	// Another node's receipt.
	other, err := identity.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	sealer, err := receipt.NewSealer(other)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := sealer.Seal(receipt.Receipt{Backend: "cpu:x", Recipe: fortunesModel, Route: "r", Energy: hw.Estimated(1)})
	if err != nil {
		t.Fatal(err)
	}
	foreignEnergy, _ := json.Marshal(foreign.Usage())

	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"not JSON", `{"request":`, http.StatusBadRequest, "invalid_request"},
		{"no request", `{"energy":` + string(greedyEnergy) + `}`, http.StatusBadRequest, "invalid_request"},
		{"request of no endpoint", `{"request":{"model":"m"},"energy":` + string(greedyEnergy) + `}`, http.StatusBadRequest, "invalid_request"},
		{"bad request", `{"request":{"model":"` + fortunesModel + `","messages":[]},"energy":` + string(greedyEnergy) + `}`, http.StatusBadRequest, "invalid_request"},
		{"no energy", `{"request":` + greedy + `}`, http.StatusBadRequest, "invalid_request"},
		{"energy without envelope", `{"request":` + greedy + `,"energy":{"receipt":{}}}`, http.StatusBadRequest, "invalid_request"},
		{"broken envelope", `{"request":` + greedy + `,"energy":{"envelope_hex":"d28443a10127"}}`, http.StatusBadRequest, "invalid_receipt"},
		{"another node's receipt", `{"request":` + greedy + `,"energy":` + string(foreignEnergy) + `}`, http.StatusNotFound, "receipt_not_ours"},
	} {
		status, _, raw := replayRaw(t, n, tc.body)
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(raw), &e); status != tc.status || err != nil || e.Error.Code != tc.code || e.Error.Message == "" {
			t.Errorf("%s: %d %s, want %d %s", tc.name, status, raw, tc.status, tc.code)
		}
	}
}

func replayRaw(t *testing.T, n *Node, body string) (int, api.ReplayResult, string) {
	t.Helper()
	resp := post(t, n, "/v1/mesh/replay", body)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var res api.ReplayResult
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatalf("replay answer: %v: %s", err, b)
		}
	}
	return resp.StatusCode, res, string(b)
}

// TestReplayCeilingStop: a generation the steward stopped at its joule
// ceiling is sealed cut short, and replaying it verifies its tokens as
// the first of what the model makes, instead of reporting a divergence
// where the steward stopped it.
func TestReplayCeilingStop(t *testing.T) {
	n := startSteppingNode(t)
	const request = `{"model":"mesh-reference","max_tokens":32,"messages":[{"role":"user","content":"hi"}],"metadata":{"joule_ceiling_uj":"60000"}}`
	status, v := answerOf(t, n, "/v1/chat/completions", request)
	if status != http.StatusOK {
		t.Fatalf("serve: %d %v", status, v)
	}
	choice := v["choices"].([]any)[0].(map[string]any)
	usage := v["usage"].(map[string]any)
	energy := usage["energy"].(map[string]any)
	if choice["finish_reason"] != "joule_ceiling" || energy["receipt"].(map[string]any)["cut_short"] != "joule_ceiling" {
		t.Fatalf("finish %v, receipt %v", choice["finish_reason"], energy["receipt"])
	}
	raw, err := json.Marshal(energy)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"request": json.RawMessage(request), "energy": json.RawMessage(raw)})
	code, res, text := replayRaw(t, n, string(body))
	tokens := int(usage["completion_tokens"].(float64))
	if code != http.StatusOK || res.Verdict != api.VerdictVerified || res.CutShort != "joule_ceiling" || res.PrefixTokens != tokens {
		t.Fatalf("replay: %d %s; want verified on the %d tokens served", code, text, tokens)
	}
}

// TestBatchedServesReplayVerified: generations served at once on the
// built-in model, their steps batched together by the engine, each
// replay verified afterwards, served alone: a request's tokens do not
// depend on what it was batched with. Their receipts are shares of the
// meter's figure (on the test node's estimator, Estimator).
func TestBatchedServesReplayVerified(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	in, ok := n.models.get(fortunesModel)
	if !ok {
		t.Fatal("the built-in model is not loaded")
	}
	g, ok := in.m.(*ggufModel)
	if !ok {
		t.Fatalf("the built-in model is a %T", in.m)
	}
	if g.m.Slots() < 4 {
		t.Fatalf("%d slots", g.m.Slots())
	}
	prompts := []string{"A man walks into a bar", "Once upon a time", "The best thing about a fortune is", "Why did the chicken",
		"Never trust a", "He who laughs"}
	requests := make([]string, len(prompts))
	energies := make([]json.RawMessage, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		requests[i] = fmt.Sprintf(`{"model":"%s","max_tokens":%d,"prompt":%q}`, fortunesModel, 10+2*i, p)
		if i%2 == 1 {
			requests[i] = fmt.Sprintf(`{"model":"%s","max_tokens":%d,"prompt":%q,"temperature":0.8,"seed":%d}`, fortunesModel, 10+2*i, p, 7+i)
		}
		wg.Go(func() { _, energies[i] = generate(t, n, "/v1/completions", requests[i]) })
	}
	wg.Wait()
	st := g.m.Engine().SchedStats()
	if st.MaxSeqs < 2 {
		t.Fatalf("the generations were never batched together: %+v", st)
	}
	t.Logf("scheduler: %+v", st)
	for i := range prompts {
		body, _ := json.Marshal(map[string]any{"request": json.RawMessage(requests[i]), "energy": energies[i]})
		status, res, raw := replayRaw(t, n, string(body))
		if status != http.StatusOK || res.Verdict != api.VerdictVerified {
			t.Errorf("replay of batched serve %d: %d %s", i, status, raw)
		}
	}
}
