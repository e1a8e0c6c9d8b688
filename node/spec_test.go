package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/node/api"
)

// specCounts reads spec_proposed and spec_accepted from a usage.energy.
func specCounts(t *testing.T, energy json.RawMessage) (proposed, accepted int) {
	t.Helper()
	var e struct {
		Receipt struct {
			SpecProposed int `json:"spec_proposed"`
			SpecAccepted int `json:"spec_accepted"`
		} `json:"receipt"`
	}
	if err := json.Unmarshal(energy, &e); err != nil {
		t.Fatal(err)
	}
	return e.Receipt.SpecProposed, e.Receipt.SpecAccepted
}

// TestSpeculativeServesReplay: a model configured with a draft (here
// prompt lookup) speculates, and its receipts say how much; a seeded
// sampled serve that speculated replays verified with the same draft,
// and is not replayable — never diverged — on a node that no longer has
// it; "speculative": false turns it off for one request; greedy serves
// replay verified either way.
func TestSpeculativeServesReplay(t *testing.T) {
	state := t.TempDir()
	// Windows priced by the files: timed at load on a machine busy with
	// other packages' tests (make race), a verified row could cost enough
	// to keep every greedy window shut.
	cfg := Config{StateDir: state, Model: []ModelConfig{{Path: fortunesPath(t), Draft: DraftLookup, DraftPrices: DraftPricesFiles}}}
	n, stop := startNode(t, cfg)
	// A prompt the model's continuation draws on, so that lookup finds
	// drafts.
	const prompt = "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat sat on the mat."
	sampled := `{"model":"` + fortunesModel + `","max_tokens":24,"prompt":"` + prompt + `","temperature":0.7,"seed":5}`
	greedy := `{"model":"` + fortunesModel + `","max_tokens":24,"prompt":"` + prompt + `"}`
	off := `{"model":"` + fortunesModel + `","max_tokens":24,"prompt":"` + prompt + `","speculative":false}`
	_, se := generate(t, n, "/v1/completions", sampled)
	_, ge := generate(t, n, "/v1/completions", greedy)
	_, oe := generate(t, n, "/v1/completions", off)
	if p, a := specCounts(t, se); p == 0 || a > p {
		t.Fatalf("the sampled serve: %d proposed, %d accepted", p, a)
	}
	if p, _ := specCounts(t, ge); p == 0 {
		t.Fatal("the greedy serve did not speculate")
	}
	if p, _ := specCounts(t, oe); p != 0 {
		t.Fatalf(`"speculative": false speculated %d drafts`, p)
	}
	// /metrics counts what the receipts say.
	sp, sa := specCounts(t, se)
	gp, ga := specCounts(t, ge)
	m := scrapeMetrics(t, n)
	if d, a := metricValue(m, "meshnode_spec_draft_tokens_total", "model", fortunesModel), metricValue(m, "meshnode_spec_accepted_tokens_total", "model", fortunesModel); d != float64(sp+gp) || a != float64(sa+ga) {
		t.Errorf("/metrics: %v drafts, %v accepted; the receipts say %d and %d", d, a, sp+gp, sa+ga)
	}
	replay := func(n *Node, request string, energy json.RawMessage) api.ReplayResult {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"request": json.RawMessage(request), "energy": energy})
		status, res, raw := replayRaw(t, n, string(body))
		if status != http.StatusOK {
			t.Fatalf("replay: %d %s", status, raw)
		}
		return res
	}
	for name, c := range map[string][2]string{"sampled": {sampled, string(se)}, "greedy": {greedy, string(ge)}, "off": {off, string(oe)}} {
		if res := replay(n, c[0], json.RawMessage(c[1])); res.Verdict != api.VerdictVerified {
			t.Errorf("%s: replay with the draft: %+v", name, res)
		}
	}
	// The sampled serve hands back the draft it named, and a replay names
	// what the energy object says: another draft is another request.
	draftOf := func(energy json.RawMessage) (string, bool) {
		var e struct{ Draft *string }
		if err := json.Unmarshal(energy, &e); err != nil || e.Draft == nil {
			return "", false
		}
		return *e.Draft, true
	}
	if d, ok := draftOf(se); !ok || d != DraftLookup {
		t.Errorf("the sampled serve's usage.energy.draft: %q (present %v), want %q", d, ok, DraftLookup)
	}
	if d, ok := draftOf(ge); ok {
		t.Errorf("the greedy serve's usage.energy carries a draft, %q", d)
	}
	var other map[string]any
	if err := json.Unmarshal(se, &other); err != nil {
		t.Fatal(err)
	}
	other["draft"] = ""
	otherEnergy, _ := json.Marshal(other)
	if res := replay(n, sampled, otherEnergy); res.Verdict == api.VerdictVerified {
		t.Errorf("a replay told the sampled serve named no draft: %+v, want it refused as another request", res)
	}
	if err := stop(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}

	// The same node without its draft.
	cfg.Model[0].Draft = ""
	n2, _ := startNode(t, cfg)
	if res := replay(n2, sampled, se); res.Verdict != api.VerdictNotReplayable {
		t.Errorf("the sampled serve that speculated, replayed without the draft: %+v, want not replayable", res)
	}
	if res := replay(n2, greedy, ge); res.Verdict != api.VerdictVerified {
		t.Errorf("the greedy serve that speculated, replayed without the draft: %+v", res)
	}
}

// TestSampledDraftReplays: with prices measured at load, a sampled
// request names the draft as the node decided it (none, where sampled
// speculation does not pay here, or the draft with the prices its windows
// are priced at), hands that back in usage.energy.draft, and replays
// verified, on the node and on the node restarted, which measures anew.
func TestSampledDraftReplays(t *testing.T) {
	cfg := Config{StateDir: t.TempDir(), Model: []ModelConfig{{Path: fortunesPath(t), Draft: DraftLookup}}}
	n, stop := startNode(t, cfg)
	const prompt = "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat."
	sampled := `{"model":"` + fortunesModel + `","max_tokens":24,"prompt":"` + prompt + `","temperature":0.8,"seed":9}`
	_, energy := generate(t, n, "/v1/completions", sampled)
	var e struct{ Draft *string }
	if err := json.Unmarshal(energy, &e); err != nil || e.Draft == nil {
		t.Fatalf("usage.energy has no draft: %s", energy)
	}
	if id, _, priced, err := spec.SplitDraft(*e.Draft); *e.Draft != "" && (err != nil || id != DraftLookup || !priced) {
		t.Errorf("usage.energy.draft %q: want none, or lookup with the measured prices (%v)", *e.Draft, err)
	}
	t.Logf("the node named %q", *e.Draft)
	body, _ := json.Marshal(map[string]any{"request": json.RawMessage(sampled), "energy": energy})
	if status, res, raw := replayRaw(t, n, string(body)); status != http.StatusOK || res.Verdict != api.VerdictVerified {
		t.Fatalf("replay: %d %s", status, raw)
	}
	if err := stop(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}
	n2, _ := startNode(t, cfg)
	if status, res, raw := replayRaw(t, n2, string(body)); status != http.StatusOK || res.Verdict != api.VerdictVerified {
		t.Fatalf("replay on the node restarted: %d %s", status, raw)
	}
	bad, _ := json.Marshal(map[string]any{"request": json.RawMessage(sampled), "energy": json.RawMessage(strings.Replace(string(energy), `"draft":`, `"draft":"lookup@c9","x":`, 1))})
	if status, _, raw := replayRaw(t, n2, string(bad)); status != http.StatusBadRequest || !strings.Contains(raw, "c<cost>v<row>") {
		t.Errorf("a replay naming malformed prices: %d %s", status, raw)
	}
}

// TestSpeculativeTrueRefused: "speculative": true is honoured where the
// serve can speculate (constrained output too), and where it cannot (a
// model without a draft) is a 400 naming the field and saying why, not a
// plain decode; /api/status names each model's draft.
func TestSpeculativeTrueRefused(t *testing.T) {
	const prompt = "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat."
	on := `{"model":"` + fortunesModel + `","max_tokens":16,"prompt":"` + prompt + `","speculative":true}`
	constrained := `{"model":"` + fortunesModel + `","max_tokens":8,"speculative":true,"response_format":{"type":"json_object"},"messages":[{"role":"user","content":"Is it true?"}]}`
	refused := func(n *Node, path, body, why string) {
		t.Helper()
		code, v := answerOf(t, n, path, body)
		e, _ := v["error"].(map[string]any)
		if code != http.StatusBadRequest || e["param"] != "speculative" || e["code"] != "unsupported_option" || !strings.Contains(fmt.Sprint(e["message"]), why) {
			t.Errorf("%s: %d %v, want a 400 on speculative saying %q", body, code, v, why)
		}
	}

	n, _ := startNode(t, Config{Model: []ModelConfig{{Path: fortunesPath(t), Draft: DraftLookup, DraftPrices: DraftPricesFiles}}})
	if ms := n.Status().Models; len(ms) != 1 || ms[0].Draft != DraftLookup {
		t.Errorf("status models %+v, want one with draft %q", ms, DraftLookup)
	} else if s := ms[0].Speculation; s == nil || *s != (SpecStatus{Prices: DraftPricesFiles, Row: spec.DefaultRowCost, SampledRow: spec.DefaultRowCost, SampledDraft: DraftLookup}) {
		t.Errorf("status speculation %+v, want lookup priced by the files (c 0, v %v), sampled requests naming it bare", s, spec.DefaultRowCost)
	}
	_, energy := generate(t, n, "/v1/completions", on)
	if p, _ := specCounts(t, energy); p == 0 {
		t.Error(`"speculative": true with a draft did not speculate`)
	}
	generate(t, n, "/v1/chat/completions", constrained)
	generate(t, n, "/v1/chat/completions", strings.Replace(constrained, `"speculative":true`, `"speculative":false`, 1))

	plain, _ := startNode(t, Config{Model: []ModelConfig{{Path: fortunesPath(t)}}})
	if ms := plain.Status().Models; len(ms) != 1 || ms[0].Draft != "" {
		t.Errorf("status models %+v, want one without a draft", ms)
	}
	refused(plain, "/v1/completions", on, "has no draft")
	generate(t, plain, "/v1/completions", strings.Replace(on, `"speculative":true`, `"speculative":false`, 1))
}

// TestDraftConfig: a model's draft is "lookup" or a model of the models
// dir by name, never a path; a staged config may not name a path either.
func TestDraftConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "small.gguf"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Config{ModelsDir: dir}
	for _, tc := range []struct {
		draft, want string
		ok          bool
	}{
		{"", "", true},
		{"lookup", DraftLookup, true},
		{"small", filepath.Join(dir, "small.gguf"), true},
		{"small.gguf", filepath.Join(dir, "small.gguf"), true},
		{"../small.gguf", "", false},
		{filepath.Join(dir, "small.gguf"), "", false},
		{"missing", "", false},
	} {
		got, err := c.draftOf(ModelConfig{Name: "m", Draft: tc.draft})
		if tc.ok != (err == nil) || err == nil && got != tc.want {
			if real, _ := filepath.EvalSymlinks(tc.want); got != real || err != nil {
				t.Errorf("draft %q: %q, %v", tc.draft, got, err)
			}
		}
	}
	if err := CheckStagedConfig([]byte("[[model]]\npath = \"a\"\ndraft = \"/tmp/x.gguf\"\n")); !errors.Is(err, ErrNotStageable) {
		t.Errorf("a staged draft path: %v", err)
	}
	if err := CheckStagedConfig([]byte("[[model]]\npath = \"a\"\ndraft = \"lookup\"\n")); err != nil {
		t.Errorf("a staged lookup draft: %v", err)
	}
}

// TestDraftPricesConfig: draft_prices is "measured" or "files" (or unset,
// measured); anything else is refused, naming the key.
func TestDraftPricesConfig(t *testing.T) {
	for _, v := range []string{"", DraftPricesMeasured, DraftPricesFiles, "sometimes"} {
		toml := "state_dir = \"/s\"\n[[model]]\npath = \"x\"\ndraft = \"lookup\"\n"
		if v != "" {
			toml += "draft_prices = \"" + v + "\"\n"
		}
		c, err := ParseConfig([]byte(toml))
		if err == nil {
			err = c.Resolve()
		}
		bad := v == "sometimes"
		if bad != (err != nil) || bad && !strings.Contains(err.Error(), "draft_prices") {
			t.Errorf("draft_prices %q: %v", v, err)
		}
		if !bad && c.Model[0].DraftPrices != v {
			t.Errorf("draft_prices %q parsed as %q", v, c.Model[0].DraftPrices)
		}
	}
}

// TestConstrainedServesSpeculate: output held to a grammar (a GBNF
// grammar, a response format, a forced tool call) speculates: a greedy
// serve's output is the one it gets with "speculative": false, its receipt counts the drafts
// verified, and it replays verified; a seeded sampled one names the
// draft in its request (usage.energy.draft) and replays verified too.
func TestConstrainedServesSpeculate(t *testing.T) {
	cfg := Config{StateDir: t.TempDir(), Model: []ModelConfig{{Path: fortunesPath(t), Draft: DraftLookup, DraftPrices: DraftPricesFiles}}}
	n, _ := startNode(t, cfg)
	const prompt = "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat sat on the mat."
	grammar := `{"model":"` + fortunesModel + `","max_tokens":40,"prompt":"` + prompt + `","grammar":"root ::= \"The \" [a-z .]+"}`
	schema := `{"model":"` + fortunesModel + `","max_tokens":40,"messages":[{"role":"user","content":"` + prompt + `"}],` +
		`"response_format":{"type":"json_schema","json_schema":{"name":"said","schema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}}}`
	replay := func(request string, energy json.RawMessage) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"request": json.RawMessage(request), "energy": energy})
		if status, res, raw := replayRaw(t, n, string(body)); status != http.StatusOK || res.Verdict != api.VerdictVerified {
			t.Errorf("replay of %s: %d %s", request, status, raw)
		}
	}
	var proposed, accepted int
	for _, c := range []struct{ path, body string }{{"/v1/completions", grammar}, {"/v1/chat/completions", schema}} {
		text, energy := generate(t, n, c.path, c.body)
		plain, _ := generate(t, n, c.path, strings.Replace(c.body, `{"model"`, `{"speculative":false,"model"`, 1))
		if text != plain {
			t.Errorf("%s: speculating %q, plainly %q", c.path, text, plain)
		}
		p, a := specCounts(t, energy)
		proposed, accepted = proposed+p, accepted+a
		replay(c.body, energy)
	}
	if proposed == 0 || accepted == 0 {
		t.Errorf("the constrained serves: %d drafts proposed, %d accepted", proposed, accepted)
	}
	// A call forced by tool_choice (its grammar held from the start):
	// the same call either way, and the speculating serve replays.
	tools := `{"model":"` + fortunesModel + `","tool_choice":"required","parallel_tool_calls":false,` +
		`"tools":[{"type":"function","function":{"name":"w","parameters":{"type":"object","properties":{"c":{"enum":["O","P"]}},"required":["c"],"additionalProperties":false}}}],` +
		`"messages":[{"role":"user","content":"?"}]}`
	call := func(body string) ([2]string, json.RawMessage) {
		got := chatTools(t, n, body)
		if len(got.Choices) != 1 || len(got.Choices[0].Message.ToolCalls) != 1 {
			t.Fatalf("%s: %+v", body, got)
		}
		c := got.Choices[0].Message.ToolCalls[0]
		return [2]string{c.Function.Name, c.Function.Arguments}, got.Usage.Energy
	}
	specCall, callEnergy := call(tools)
	if plain, _ := call(strings.Replace(tools, `{"model"`, `{"speculative":false,"model"`, 1)); specCall != plain {
		t.Errorf("the forced call speculating %v, plainly %v", specCall, plain)
	}
	replay(tools, callEnergy)
	sampled := strings.Replace(grammar, `{"model"`, `{"temperature":0.3,"seed":3,"model"`, 1)
	_, energy := generate(t, n, "/v1/completions", sampled)
	var e struct{ Draft *string }
	if err := json.Unmarshal(energy, &e); err != nil || e.Draft == nil || *e.Draft != DraftLookup {
		t.Errorf("the sampled constrained serve's usage.energy.draft: %v, want %q", e.Draft, DraftLookup)
	}
	replay(sampled, energy)
}

// TestSpeculativeLimitsServed: llama-server's bounds on the rounds
// through the node (on completions, as on /completion): speculative.n_max 0 decodes without speculation;
// n_max 1 bounds a greedy serve's rounds (no more accepted drafts than
// target tokens) and leaves its text as it is; a seeded sampled serve's
// draft name carries its bounds, and it replays verified; p_min for a
// prompt-lookup model is a 400 naming the field.
func TestSpeculativeLimitsServed(t *testing.T) {
	cfg := Config{StateDir: t.TempDir(), Model: []ModelConfig{{Path: fortunesPath(t), Draft: DraftLookup, DraftPrices: DraftPricesFiles}}}
	n, _ := startNode(t, cfg)
	const prompt = "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat sat on the mat."
	body := func(extra string) string {
		return `{"model":"` + fortunesModel + `","max_tokens":32,"prompt":"` + prompt + `"` + extra + `}`
	}
	text, free := generate(t, n, "/v1/completions", body(""))
	if p, _ := specCounts(t, free); p == 0 {
		t.Fatal("the unbounded serve did not speculate")
	}
	if _, off := generate(t, n, "/v1/completions", body(`,"speculative.n_max":0`)); func() bool { p, _ := specCounts(t, off); return p != 0 }() {
		t.Error("speculative.n_max 0 speculated")
	}
	got, one := generate(t, n, "/v1/completions", body(`,"speculative.n_max":1`))
	p, a := specCounts(t, one)
	var usage struct {
		Receipt struct {
			TokensOut int `json:"tokens_out"`
		} `json:"receipt"`
	}
	if err := json.Unmarshal(one, &usage); err != nil {
		t.Fatal(err)
	}
	if got != text || p == 0 || 2*a > usage.Receipt.TokensOut+1 {
		t.Errorf("n_max 1: %q (unbounded %q), %d proposed, %d accepted of %d tokens", got, text, p, a, usage.Receipt.TokensOut)
	}
	sampled := body(`,"temperature":0.5,"seed":7,"speculative.n_max":2,"speculative.n_min":2`)
	_, energy := generate(t, n, "/v1/completions", sampled)
	var e struct{ Draft *string }
	if err := json.Unmarshal(energy, &e); err != nil || e.Draft == nil || *e.Draft != DraftLookup+"/n2m2" {
		t.Errorf("the sampled serve's usage.energy.draft: %v, want %q", e.Draft, DraftLookup+"/n2m2")
	}
	rb, _ := json.Marshal(map[string]any{"request": json.RawMessage(sampled), "energy": energy})
	if status, res, raw := replayRaw(t, n, string(rb)); status != http.StatusOK || res.Verdict != api.VerdictVerified {
		t.Errorf("replay of the bounded sampled serve: %d %s", status, raw)
	}
	code, v := answerOf(t, n, "/v1/completions", body(`,"speculative.p_min":0.8`))
	if er, _ := v["error"].(map[string]any); code != http.StatusBadRequest || er["param"] != "speculative.p_min" {
		t.Errorf("p_min for prompt lookup: %d %v", code, v)
	}
}

// TestPredictionServed: a chat given a predicted output (OpenAI's
// prediction) on the built-in model, which has no draft of its own,
// answers as without it, drafting from it: predicting the answer, most
// of its tokens are accepted predicted tokens, as usage's
// completion_tokens_details and the receipt both count them, and the
// serve replays; a sampled chat names its prediction as its draft and
// replays, and not with another; bad predictions are refused, naming
// the field.
func TestPredictionServed(t *testing.T) {
	n, _ := startNode(t, Config{StateDir: t.TempDir(), Model: []ModelConfig{{Path: fortunesPath(t)}}})
	body := func(extra string) string {
		return `{"model":"` + fortunesModel + `","max_tokens":32,"messages":[{"role":"user","content":"A man walks into a bar"}]` + extra + `}`
	}
	plain, energy := generate(t, n, "/v1/chat/completions", body(""))
	if p, _ := specCounts(t, energy); p != 0 {
		t.Fatalf("a serve without a prediction proposed %d drafts on a model without a draft", p)
	}
	pred, _ := json.Marshal(plain)
	req := body(`,"prediction":{"type":"content","content":` + string(pred) + `}`)
	resp := post(t, n, "/v1/chat/completions", req)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var answer struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
			Details          struct {
				Accepted *int `json:"accepted_prediction_tokens"`
				Rejected *int `json:"rejected_prediction_tokens"`
			} `json:"completion_tokens_details"`
			Energy json.RawMessage `json:"energy"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &answer); err != nil || resp.StatusCode != http.StatusOK || len(answer.Choices) != 1 {
		t.Fatalf("with a prediction: %d %s", resp.StatusCode, b)
	}
	u := answer.Usage
	p, a := specCounts(t, u.Energy)
	if got := answer.Choices[0].Message.Content; got != plain {
		t.Errorf("with the answer predicted: %q, without %q", got, plain)
	}
	if u.Details.Accepted == nil || u.Details.Rejected == nil || *u.Details.Accepted != a || *u.Details.Rejected != p-a || 2*a < u.CompletionTokens {
		t.Errorf("predicted tokens: usage says %v accepted and %v rejected, the receipt %d of %d, of %d tokens", u.Details.Accepted, u.Details.Rejected, a, p, u.CompletionTokens)
	}
	rb, _ := json.Marshal(map[string]any{"request": json.RawMessage(req), "energy": u.Energy})
	if status, res, raw := replayRaw(t, n, string(rb)); status != http.StatusOK || res.Verdict != api.VerdictVerified {
		t.Errorf("replay of the predicted serve: %d %s", status, raw)
	}
	// Sampled: the request names its prediction as its draft
	// (usage.energy.draft), and replays.
	sampled := body(`,"temperature":0.7,"seed":11,"prediction":{"type":"content","content":` + string(pred) + `}`)
	_, energy = generate(t, n, "/v1/chat/completions", sampled)
	var e struct{ Draft *string }
	if err := json.Unmarshal(energy, &e); err != nil || e.Draft == nil || !strings.HasPrefix(*e.Draft, "predicted:") {
		t.Errorf("the sampled serve's usage.energy.draft: %v, want the prediction's", e.Draft)
	}
	rb, _ = json.Marshal(map[string]any{"request": json.RawMessage(sampled), "energy": energy})
	if status, res, raw := replayRaw(t, n, string(rb)); status != http.StatusOK || res.Verdict != api.VerdictVerified {
		t.Errorf("replay of the sampled predicted serve: %d %s", status, raw)
	}
	other := strings.Replace(sampled, `"content":`, `"content":"x`, 1)
	rb, _ = json.Marshal(map[string]any{"request": json.RawMessage(other), "energy": energy})
	if status, res, _ := replayRaw(t, n, string(rb)); status == http.StatusOK && res.Verdict == api.VerdictVerified {
		t.Error("the sampled serve replayed as verified with another prediction")
	}
	for name, extra := range map[string]string{
		"a prediction too long":   `,"prediction":{"type":"content","content":"` + strings.Repeat("fortune ", 400) + `"}`,
		"speculation turned off":  `,"speculative":false,"prediction":{"type":"content","content":"x"}`,
		"n_max 0":                 `,"speculative.n_max":0,"prediction":{"type":"content","content":"x"}`,
		"a prediction not text":   `,"prediction":{"type":"content","content":[{"type":"image_url"}]}`,
		"a prediction of no type": `,"prediction":{"content":"x"}`,
		"p_min":                   `,"speculative.p_min":0.5,"prediction":{"type":"content","content":"x"}`,
	} {
		code, v := answerOf(t, n, "/v1/chat/completions", body(extra))
		if er, _ := v["error"].(map[string]any); code != http.StatusBadRequest || er["param"] == nil || !strings.HasPrefix(er["param"].(string), "prediction") && er["param"] != "speculative.p_min" {
			t.Errorf("%s: %d %v", name, code, v)
		}
	}
}
