package node

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/steward/grant"
)

// TestSamplingOptions: llama.cpp's top_k, min_p and repeat_penalty reach
// the sampler through the API and are part of the request a receipt
// seals: a sampled answer cut to one candidate by top_k 1 or min_p 1 is
// the greedy answer whatever its seed; a repeat penalty changes the
// greedy answer, and its receipt replays only with the penalty shown.
func TestSamplingOptions(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	complete := func(extra string) (string, json.RawMessage) {
		t.Helper()
		return generate(t, n, "/v1/completions", `{"model":"`+fortunesModel+`","max_tokens":32,"prompt":"A man walks into a bar"`+extra+`}`)
	}
	greedy, _ := complete("")
	for _, extra := range []string{
		`,"temperature":1.5,"seed":7,"top_k":1`,
		`,"temperature":1.5,"seed":8,"min_p":1`,
	} {
		if got, _ := complete(extra); got != greedy {
			t.Errorf("%s: %q, want the greedy answer %q", extra, got, greedy)
		}
	}
	if got, _ := complete(`,"temperature":1.5,"seed":7`); got == greedy {
		t.Fatalf("a sample at temperature 1.5 gave the greedy answer; the top_k and min_p checks above prove nothing")
	}

	const penalty = `,"repeat_penalty":1.5`
	penalised, energy := complete(penalty)
	if penalised == greedy {
		t.Fatalf("repeat_penalty 1.5 left the greedy answer as it was: %q", greedy)
	}
	if again, _ := complete(penalty); again != penalised {
		t.Fatalf("a greedy answer with a repeat penalty is not deterministic: %q, then %q", penalised, again)
	}
	if one, _ := complete(`,"repeat_penalty":1`); one != greedy {
		t.Fatalf("repeat_penalty 1 (off) changed the answer: %q, want %q", one, greedy)
	}
	request := `{"model":"` + fortunesModel + `","max_tokens":32,"prompt":"A man walks into a bar"`
	for _, tc := range []struct {
		name, request, verdict string
	}{
		{"with the penalty", request + penalty + `}`, api.VerdictVerified},
		{"without it", request + `}`, api.VerdictNotReplayable},
		{"with another", request + `,"repeat_penalty":1.4}`, api.VerdictNotReplayable},
		{"counting the prompt", request + penalty + `,"repeat_last_n":-1}`, api.VerdictNotReplayable},
	} {
		body, _ := json.Marshal(map[string]any{"request": json.RawMessage(tc.request), "energy": energy})
		status, res, raw := replayRaw(t, n, string(body))
		if status != http.StatusOK || res.Verdict != tc.verdict || (tc.verdict != api.VerdictVerified && !strings.Contains(res.Reason, "not the receipt's")) {
			t.Errorf("replay %s: %d %s, want %s", tc.name, status, raw, tc.verdict)
		}
	}

	// repeat_last_n: the penalty counts the prompt too, which changes
	// the answer; its receipt replays with it (and, above, not without).
	window, energy := complete(penalty + `,"repeat_last_n":-1`)
	if window == penalised {
		t.Errorf("repeat_last_n -1 (the prompt counted too) left the penalised answer as it was: %q", window)
	}
	if got, _ := complete(penalty + `,"repeat_last_n":0`); got != greedy {
		t.Errorf("repeat_last_n 0 (no penalties): %q, want the greedy answer %q", got, greedy)
	}
	body, _ := json.Marshal(map[string]any{"request": json.RawMessage(request + penalty + `,"repeat_last_n":-1}`), "energy": energy})
	if status, res, raw := replayRaw(t, n, string(body)); status != http.StatusOK || res.Verdict != api.VerdictVerified {
		t.Errorf("replay with repeat_last_n: %d %s", status, raw)
	}
}

// TestLogitBiasServed: logit_bias reaches the sampler through the API
// and is part of the request a receipt seals: banning the greedy
// answer's words changes it, the same bias gives the same answer, a
// bias that rounds to nothing changes nothing, the receipt replays only
// with the bias shown, and a request riding on a grant, whose binding
// has no place for a bias (nor for repeat_last_n), is refused, as is a bias for a token past
// the model's vocabulary.
func TestLogitBiasServed(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	const request = `{"model":"` + fortunesModel + `","max_tokens":16,"prompt":"A man walks into a bar"`
	greedy, _ := generate(t, n, "/v1/completions", request+`}`)
	// "," (29892) and "▁a" (263) held back: the greedy answer starts
	// ", and a man who".
	const bias = `,"logit_bias":{"29892":-100,"263":-100}`
	banned, energy := generate(t, n, "/v1/completions", request+bias+`}`)
	if banned == greedy || strings.HasPrefix(banned, ",") || strings.Contains(banned, " a ") {
		t.Fatalf("with , and a banned: %q (greedy %q)", banned, greedy)
	}
	if again, _ := generate(t, n, "/v1/completions", request+bias+`}`); again != banned {
		t.Fatalf("a biased greedy answer is not deterministic: %q, then %q", banned, again)
	}
	if tiny, _ := generate(t, n, "/v1/completions", request+`,"logit_bias":{"29892":1e-9}}`); tiny != greedy {
		t.Fatalf("a bias that rounds to no bias changed the answer: %q, want %q", tiny, greedy)
	}
	for _, tc := range []struct {
		name, request, verdict string
	}{
		{"with the bias", request + bias + `}`, api.VerdictVerified},
		{"without it", request + `}`, api.VerdictNotReplayable},
		{"with another", request + `,"logit_bias":{"29892":-100}}`, api.VerdictNotReplayable},
	} {
		body, _ := json.Marshal(map[string]any{"request": json.RawMessage(tc.request), "energy": energy})
		status, res, raw := replayRaw(t, n, string(body))
		if status != http.StatusOK || res.Verdict != tc.verdict {
			t.Errorf("replay %s: %d %s, want %s", tc.name, status, raw, tc.verdict)
		}
	}

	resp := post(t, n, "/v1/completions", request+`,"logit_bias":{"32000":1}}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"code":"unsupported_option"`) || !strings.Contains(string(b), "outside the vocabulary of 32000") {
		t.Errorf("a bias past the vocabulary: %d %s", resp.StatusCode, b)
	}

	caller, chain := issueGrant(t, n)
	presented, _, err := grant.PresentBody([]byte(request+bias+`,"metadata":{"joule_ceiling_uj":1000000000}}`), chain, caller, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp = post(t, n, "/v1/completions", string(presented))
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"param":"logit_bias"`) {
		t.Errorf("granted request with logit_bias: %d %s, want 400 naming logit_bias", resp.StatusCode, b)
	}
	// Nor does it cover which tokens a penalty counts, none (0) included.
	for _, last := range []string{"64", "0"} {
		presented, _, err = grant.PresentBody([]byte(request+`,"repeat_penalty":1.2,"repeat_last_n":`+last+`,"metadata":{"joule_ceiling_uj":1000000000}}`), chain, caller, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp = post(t, n, "/v1/completions", string(presented))
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"param":"repeat_last_n"`) {
			t.Errorf("granted request with repeat_last_n %s: %d %s, want 400 naming repeat_last_n", last, resp.StatusCode, b)
		}
	}
}

// TestLlamaFilters: llama.cpp's other filters reach the sampler through
// the API and are sealed into the request, DRY on greedy answers too
// (it changes them): top_n_sigma near 0 leaves the
// likeliest token alone (the greedy answer whatever the seed), min_keep
// holds more than min_p 1 would keep; typical-p, XTC and the dynamic
// temperature change a seeded answer, and its receipt replays only with
// them; on a greedy request they are refused.
func TestLlamaFilters(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	request := `{"model":"` + fortunesModel + `","max_tokens":32,"prompt":"A man walks into a bar"`
	complete := func(extra string) (string, json.RawMessage) {
		t.Helper()
		return generate(t, n, "/v1/completions", request+extra+`}`)
	}
	greedy, _ := complete("")
	if got, _ := complete(`,"temperature":1.5,"seed":7,"top_n_sigma":0.0001`); got != greedy {
		t.Errorf("top_n_sigma 0.0001: %q, want the greedy answer %q", got, greedy)
	}
	if got, _ := complete(`,"temperature":1.5,"seed":7,"min_p":1,"min_keep":50`); got == greedy {
		t.Errorf("min_keep 50 beside min_p 1 gave the greedy answer: min_keep kept nothing more")
	}
	const sampled = `,"temperature":1,"seed":11`
	plain, _ := complete(sampled)
	for _, filter := range []string{
		`,"typical_p":0.3`,
		`,"xtc_probability":1,"xtc_threshold":0.05`,
		`,"dynatemp_range":1,"dynatemp_exponent":0.5`,
	} {
		got, energy := complete(sampled + filter)
		if got == plain {
			t.Errorf("%s left the seeded answer as it was: %q", filter, got)
		}
		if again, _ := complete(sampled + filter); again != got {
			t.Errorf("%s: a seeded answer is not deterministic: %q, then %q", filter, got, again)
		}
		replays(t, n, filter, energy, []replayCase{
			{"with it", request + sampled + filter + `}`, api.VerdictVerified},
			{"without it", request + sampled + `}`, api.VerdictNotReplayable},
		})
	}
	// DRY changes a greedy answer (the built-in model repeats itself),
	// and is sealed with it.
	const dry = `,"dry_multiplier":1.5,"dry_allowed_length":1,"dry_penalty_last_n":-1`
	dried, energy := complete(dry)
	if dried == greedy {
		t.Errorf("DRY left the greedy answer as it was: %q", greedy)
	}
	if again, _ := complete(dry); again != dried {
		t.Errorf("a greedy answer under DRY is not deterministic: %q, then %q", dried, again)
	}
	replays(t, n, "DRY", energy, []replayCase{
		{"with it", request + dry + `}`, api.VerdictVerified},
		{"without it", request + `}`, api.VerdictNotReplayable},
		{"with other breakers", request + dry + `,"dry_sequence_breakers":["\n"]}`, api.VerdictNotReplayable},
	})
	resp := post(t, n, "/v1/completions", request+`,"typical_p":0.5}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "greedy") {
		t.Errorf("typical_p on a greedy request: %d %s, want a 400 saying it is greedy", resp.StatusCode, b)
	}
	// A grant's binding does not cover them.
	caller, chain := issueGrant(t, n)
	presented, _, err := grant.PresentBody([]byte(request+sampled+`,"xtc_probability":0.5,"metadata":{"joule_ceiling_uj":1000000000}}`), chain, caller, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp = post(t, n, "/v1/completions", string(presented))
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"param":"xtc_probability"`) {
		t.Errorf("granted request with xtc_probability: %d %s, want 400 naming it", resp.StatusCode, b)
	}
	presented, _, err = grant.PresentBody([]byte(request+dry+`,"metadata":{"joule_ceiling_uj":1000000000}}`), chain, caller, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp = post(t, n, "/v1/completions", string(presented))
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"param":"dry_multiplier"`) {
		t.Errorf("granted request with DRY: %d %s, want 400 naming dry_multiplier", resp.StatusCode, b)
	}
}

// TestMirostat: llama.cpp's mirostat, both versions, served end to end on
// the built-in model: it changes a seeded answer and is deterministic;
// at a tiny target surprise it keeps the likeliest token alone, so it
// answers the greedy answer; it picks in place of the filters, so top_k
// 1 beside it changes nothing and is not sealed (the request without it
// replays the receipt); its receipt replays only with its version and
// target; it is refused on a greedy request, with a prediction, and on a
// grant.
func TestMirostat(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	request := `{"model":"` + fortunesModel + `","max_tokens":32,"prompt":"A man walks into a bar"`
	complete := func(extra string) (string, json.RawMessage) {
		t.Helper()
		return generate(t, n, "/v1/completions", request+extra+`}`)
	}
	greedy, _ := complete("")
	const sampled = `,"temperature":1,"seed":11`
	plain, _ := complete(sampled)
	if plain == greedy {
		t.Fatalf("the seeded answer is the greedy one: the checks below prove nothing")
	}
	if got, _ := complete(sampled + `,"mirostat":2,"mirostat_tau":0.01,"mirostat_eta":1`); got != greedy {
		t.Errorf("mirostat 2 at a target of 0.01 bits: %q, want the greedy answer %q", got, greedy)
	}
	for _, m := range []string{`,"mirostat":1,"mirostat_tau":3`, `,"mirostat":2,"mirostat_tau":3`} {
		got, energy := complete(sampled + m)
		if got == plain || got == greedy {
			t.Errorf("%s left the seeded answer as it was: %q", m, got)
		}
		if again, _ := complete(sampled + m); again != got {
			t.Errorf("%s: a seeded answer is not deterministic: %q, then %q", m, got, again)
		}
		if filtered, _ := complete(sampled + m + `,"top_k":1,"repeat_penalty":1.5`); filtered != got {
			t.Errorf("%s: top_k and repeat_penalty beside it changed the answer: %q, without them %q", m, filtered, got)
		}
		replays(t, n, m, energy, []replayCase{
			{"with it", request + sampled + m + `}`, api.VerdictVerified},
			{"with the filters it replaces", request + sampled + m + `,"top_k":1,"min_p":0.5}`, api.VerdictVerified},
			{"without it", request + sampled + `}`, api.VerdictNotReplayable},
			{"with another target", request + sampled + m + `,"mirostat_tau":4}`, api.VerdictNotReplayable},
		})
	}
	refusedParam(t, n, "/v1/completions", request+`,"mirostat":2}`, "mirostat")
	refusedParam(t, n, "/v1/chat/completions", `{"model":"`+fortunesModel+`","max_tokens":8,"messages":[{"role":"user","content":"hi"}],"temperature":1,"mirostat":2,`+
		`"prediction":{"type":"content","content":"hello"}}`, "prediction")
	refusedOnGrant(t, n, request+sampled+`,"mirostat":1,"metadata":{"joule_ceiling_uj":1000000000}}`, "mirostat")
}

// TestAdaptiveP: llama.cpp's adaptive-p, served end to end on the
// built-in model where samplers lists adaptive_p: it changes a seeded
// answer and is deterministic; its receipt replays with it and not
// without it or with another decay; it is refused where samplers leaves
// it out, on a greedy request, with a prediction and on a grant (whose
// binding covers no sampler order, which adaptive-p needs).
func TestAdaptiveP(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	const prompt = `{"model":"` + fortunesModel + `","n_predict":32,"prompt":"A man walks into a bar","temperature":1,"seed":11,"min_p":0.05`
	complete := func(extra string) (string, json.RawMessage) {
		t.Helper()
		return generate(t, n, "/v1/completions", prompt+extra+`}`)
	}
	const order = `,"samplers":["min_p","temperature","adaptive_p"]`
	plain, _ := complete(order)
	const on = order + `,"adaptive_target":0.1`
	got, energy := complete(on)
	if got == plain {
		t.Errorf("adaptive-p at 0.1 left the seeded answer as it was: %q", got)
	}
	if again, _ := complete(on); again != got {
		t.Errorf("a seeded answer under adaptive-p is not deterministic: %q, then %q", got, again)
	}
	replays(t, n, "adaptive-p", energy, []replayCase{
		{"with it", prompt + on + `}`, api.VerdictVerified},
		{"with its default decay given", prompt + on + `,"adaptive_decay":0.9}`, api.VerdictVerified},
		{"without it", prompt + order + `}`, api.VerdictNotReplayable},
		{"with another decay", prompt + on + `,"adaptive_decay":0.5}`, api.VerdictNotReplayable},
	})
	refusedParam(t, n, "/v1/completions", prompt+`,"adaptive_target":0.1}`, "adaptive_target")
	refusedParam(t, n, "/v1/completions", `{"model":"`+fortunesModel+`","prompt":"x","adaptive_target":0.1`+order+`}`, "adaptive_target")
	refusedParam(t, n, "/v1/chat/completions", `{"model":"`+fortunesModel+`","max_tokens":8,"messages":[{"role":"user","content":"hi"}],"temperature":1,"adaptive_target":0.5`+order+
		`,"prediction":{"type":"content","content":"hello"}}`, "prediction")
	refusedOnGrant(t, n, prompt+on+`,"metadata":{"joule_ceiling_uj":1000000000}}`, "samplers") // the order adaptive-p needs is refused first
}

// refusedParam posts body to path and wants a 400 naming param.
func refusedParam(t *testing.T, n *Node, path, body, param string) {
	t.Helper()
	resp := post(t, n, path, body)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"param":"`+param+`"`) {
		t.Errorf("%s: %d %s, want 400 naming %s", body, resp.StatusCode, b, param)
	}
}

// TestPostSamplingProbs: /completion's post_sampling_probs reports each
// token under the distribution it was drawn from, on the built-in model:
// under top-k 3 at most three tokens, whose probabilities sum to 1 and
// hold the token's own; greedy, the pick alone at probability 1; the
// text is what the same request without it answers, whole and
// streamed. The OpenAI endpoints refuse it; a sampled serve with it, or
// with mirostat or adaptive-p, refuses "speculative": true on a model
// with a draft.
func TestPostSamplingProbs(t *testing.T) {
	n, _ := startNode(t, Config{Model: []ModelConfig{{Path: fortunesPath(t), Draft: "lookup"}}})
	type prob struct {
		ID       uint32  `json:"id"`
		Prob     float64 `json:"prob"`
		Logprob  *float64
		TopProbs []struct {
			ID   uint32  `json:"id"`
			Prob float64 `json:"prob"`
		} `json:"top_probs"`
	}
	complete := func(body string) (string, []prob) {
		t.Helper()
		resp := post(t, n, "/completion", body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got struct {
			Content string `json:"content"`
			Probs   []prob `json:"completion_probabilities"`
		}
		if err := json.Unmarshal(b, &got); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, b)
		}
		return got.Content, got.Probs
	}
	const base = `{"model":"` + fortunesModel + `","prompt":"A man walks into a bar","n_predict":24,"n_probs":5`
	for _, tc := range []struct {
		name, extra string
		most        int
	}{
		{"sampled, top-k 3", `,"temperature":1,"seed":3,"top_k":3,"speculative":false`, 3},
		{"greedy", ``, 1},
	} {
		text, probs := complete(base + tc.extra + `,"post_sampling_probs":true}`)
		if plain, _ := complete(base + tc.extra + `}`); plain != text {
			t.Errorf("%s: %q with post_sampling_probs, %q without", tc.name, text, plain)
		}
		if len(probs) == 0 {
			t.Fatalf("%s: no completion_probabilities", tc.name)
		}
		for i, p := range probs {
			var sum, own float64
			for _, a := range p.TopProbs {
				sum += a.Prob
				if a.ID == p.ID {
					own = a.Prob
				}
			}
			if len(p.TopProbs) == 0 || len(p.TopProbs) > tc.most || math.Abs(sum-1) > 1e-9 || own != p.Prob || p.Logprob != nil {
				t.Fatalf("%s: token %d: %+v, want at most %d tokens summing to 1, its own prob among them", tc.name, i, p, tc.most)
			}
			if tc.most == 1 && p.Prob != 1 {
				t.Fatalf("greedy: token %d at %v", i, p.Prob)
			}
		}
	}
	// Streamed, each event carries its tokens' probabilities.
	resp := post(t, n, "/completion", base+`,"temperature":1,"seed":3,"top_k":3,"speculative":false,"post_sampling_probs":true,"stream":true}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"top_probs":[`) || strings.Contains(string(b), `"top_logprobs"`) {
		t.Errorf("streamed: %s", b)
	}
	refusedParam(t, n, "/v1/completions", `{"model":"`+fortunesModel+`","prompt":"x","logprobs":2,"post_sampling_probs":true}`, "post_sampling_probs")
	for _, extra := range []string{`"n_probs":2,"post_sampling_probs":true`, `"mirostat":2`, `"adaptive_target":0.3,"samplers":["temperature","adaptive_p"]`} {
		refusedParam(t, n, "/completion", base[:len(base)-len(`,"n_probs":5`)]+`,"temperature":1,"speculative":true,`+extra+`}`, "speculative")
	}
}

// TestIgnoreEOS: ignore_eos bans the model's end tokens, so an answer
// the built-in model ends early runs to its ceiling; the ban is in the
// request's identity (its receipt replays with ignore_eos, and with
// min_tokens at the ceiling, which is what it seals, and not without);
// SillyTavern's ban_eos_token is the same setting; a grant refuses it.
func TestIgnoreEOS(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	const request = `{"model":"` + fortunesModel + `","max_tokens":96,"prompt":"Love is"`
	answer := func(body string) (string, string, int, json.RawMessage) {
		t.Helper()
		resp := post(t, n, "/v1/completions", body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got struct {
			Choices []struct {
				Text         string `json:"text"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage struct {
				CompletionTokens int             `json:"completion_tokens"`
				Energy           json.RawMessage `json:"energy"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(b, &got); err != nil || resp.StatusCode != http.StatusOK || len(got.Choices) != 1 {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, b)
		}
		return got.Choices[0].Text, got.Choices[0].FinishReason, got.Usage.CompletionTokens, got.Usage.Energy
	}
	text, finish, tokens, _ := answer(request + `}`)
	if finish != "stop" || tokens >= 96 {
		t.Fatalf("the greedy answer %q ends %q after %d tokens: it must end at the model's end token for this test", text, finish, tokens)
	}
	long, finish, tokens, energy := answer(request + `,"ignore_eos":true}`)
	if finish != "length" || tokens != 96 || !strings.HasPrefix(long, text) {
		t.Errorf("with ignore_eos: %q ends %q after %d tokens, want 96 tokens that begin with %q", long, finish, tokens, text)
	}
	replays(t, n, "ignore_eos", energy, []replayCase{
		{"with it", request + `,"ignore_eos":true}`, api.VerdictVerified},
		{"as min_tokens", request + `,"min_tokens":96}`, api.VerdictVerified},
		{"without it", request + `}`, api.VerdictNotReplayable},
	})
	resp := post(t, n, "/completion", `{"prompt":"Love is","n_predict":96,"ban_eos_token":true}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var llama struct {
		Content         string `json:"content"`
		TokensPredicted int    `json:"tokens_predicted"`
	}
	if err := json.Unmarshal(b, &llama); err != nil || llama.Content != long || llama.TokensPredicted != 96 {
		t.Errorf("/completion with ban_eos_token: %s, want the ignore_eos answer", b)
	}
	refusedOnGrant(t, n, request+`,"ignore_eos":true,"metadata":{"joule_ceiling_uj":1000000000}}`, "ignore_eos")
}

// TestMinTokens: min_tokens holds the built-in model's end token back
// until the answer has that many tokens: a greedy answer that ended after
// k tokens runs to at least k+5, beginning as it did; its receipt
// replays with min_tokens and not without; past the ceiling, and on a
// grant, it is refused.
func TestMinTokens(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	const request = `{"model":"` + fortunesModel + `","max_tokens":96,"prompt":"Love is"`
	answer := func(body string) (string, int, json.RawMessage) {
		t.Helper()
		var got struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage struct {
				CompletionTokens int             `json:"completion_tokens"`
				Energy           json.RawMessage `json:"energy"`
			} `json:"usage"`
		}
		postJSON(t, n, "/v1/completions", body, &got)
		if len(got.Choices) != 1 {
			t.Fatalf("%s: %+v", body, got)
		}
		return got.Choices[0].Text, got.Usage.CompletionTokens, got.Usage.Energy
	}
	short, k, _ := answer(request + `}`)
	if k >= 90 {
		t.Fatalf("the greedy answer %q runs to %d tokens: it must end early for this test", short, k)
	}
	held := fmt.Sprintf(`,"min_tokens":%d`, k+5)
	long, tokens, energy := answer(request + held + `}`)
	if tokens < k+5 || !strings.HasPrefix(long, short) {
		t.Errorf("min_tokens %d: %q, %d tokens; without it %q, %d tokens", k+5, long, tokens, short, k)
	}
	replays(t, n, "min_tokens", energy, []replayCase{
		{"with it", request + held + `}`, api.VerdictVerified},
		{"without it", request + `}`, api.VerdictNotReplayable},
	})
	refusedParam(t, n, "/v1/completions", request+`,"min_tokens":97}`, "min_tokens")
	refusedOnGrant(t, n, request+held+`,"metadata":{"joule_ceiling_uj":1000000000}}`, "min_tokens")
}

// replayCase is a request shown with a served answer's energy, and the
// verdict its replay must give.
type replayCase struct{ name, request, verdict string }

// replays replays each case against energy (usage.energy), the answer
// of what's request.
func replays(t *testing.T, n *Node, what string, energy json.RawMessage, cases []replayCase) {
	t.Helper()
	for _, tc := range cases {
		body, _ := json.Marshal(map[string]any{"request": json.RawMessage(tc.request), "energy": energy})
		if status, res, raw := replayRaw(t, n, string(body)); status != http.StatusOK || res.Verdict != tc.verdict {
			t.Errorf("%s: replay %s: %d %s, want %s", what, tc.name, status, raw, tc.verdict)
		}
	}
}

// refusedOnGrant presents body (a completions request) on a grant the
// node issued, and wants a 400 naming param.
func refusedOnGrant(t *testing.T, n *Node, body, param string) {
	t.Helper()
	caller, chain := issueGrant(t, n)
	presented, _, err := grant.PresentBody([]byte(body), chain, caller, nil)
	if err != nil {
		t.Fatal(err)
	}
	refusedParam(t, n, "/v1/completions", string(presented), param)
}
