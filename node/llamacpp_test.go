package node

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/api"
)

// TestLlamaCompletionServed: llama.cpp's /completion on the built-in
// model. Greedy, it writes what /v1/completions writes for the same
// prompt and length; streamed, the events add up to the whole answer;
// its replay verifies (the endpoint read from n_predict, or named), and
// given a temperature it samples.
func TestLlamaCompletionServed(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	const prompt = `"The meaning of life is"`
	openai, _ := generate(t, n, "/v1/completions", `{"model":"`+fortunesModel+`","prompt":`+prompt+`,"max_tokens":12,"temperature":0}`)
	request := `{"model":"` + fortunesModel + `","prompt":` + prompt + `,"n_predict":12,"temperature":0}`
	resp := post(t, n, "/completion", request)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var whole struct {
		Content         string          `json:"content"`
		Stop            bool            `json:"stop"`
		StopType        string          `json:"stop_type"`
		TokensPredicted int             `json:"tokens_predicted"`
		Energy          json.RawMessage `json:"energy"`
	}
	if err := json.Unmarshal(b, &whole); err != nil || resp.StatusCode != http.StatusOK || whole.Content != openai || !whole.Stop ||
		whole.StopType != "limit" || whole.TokensPredicted != 12 || len(whole.Energy) == 0 {
		t.Fatalf("%d %s; /v1/completions wrote %q", resp.StatusCode, b, openai)
	}

	resp = post(t, n, "/completion", strings.Replace(request, `"temperature":0`, `"temperature":0,"stream":true`, 1))
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var text strings.Builder
	var last map[string]any
	for _, line := range strings.Split(string(b), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		if c, _ := ev["content"].(string); c != "" {
			text.WriteString(c)
		}
		last = ev
	}
	if text.String() != whole.Content || last["stop"] != true || last["energy"] == nil {
		t.Fatalf("streamed %q, last %v; whole %q", text.String(), last, whole.Content)
	}

	for _, tc := range []struct{ body, verdict string }{
		{`{"request":` + request + `,"energy":` + string(whole.Energy) + `}`, api.VerdictVerified},
		{`{"request":` + request + `,"endpoint":"/completion","energy":` + string(whole.Energy) + `}`, api.VerdictVerified},
		{`{"request":` + strings.Replace(request, `,"n_predict":12`, "", 1) + `,"endpoint":"/completion","energy":` + string(whole.Energy) + `}`, api.VerdictNotReplayable},
	} {
		if status, res, raw := replayRaw(t, n, tc.body); status != http.StatusOK || res.Verdict != tc.verdict {
			t.Errorf("replay %s: %d %s, want %s", tc.body, status, raw, tc.verdict)
		}
	}

	// Given a temperature, it samples, under llama-server's other
	// defaults (top_k 40, top_p 0.95, min_p 0.05): two seeds, two
	// answers; the same seed, the same one.
	sampled := func(seed string) string {
		body := `{"model":"` + fortunesModel + `","prompt":` + prompt + `,"n_predict":16,"temperature":0.9,"seed":` + seed + `}`
		resp := post(t, n, "/completion", body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var a struct {
			Content string `json:"content"`
		}
		if err := json.Unmarshal(b, &a); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		return a.Content
	}
	if a, b, c := sampled("1"), sampled("2"), sampled("1"); a == b || a != c {
		t.Errorf("sampled: seed 1 %q, seed 2 %q, seed 1 again %q", a, b, c)
	}
}

// TestLlamaProps: GET /props describes the node's one model as
// llama-server does (its context, slots, chat template, special tokens
// and /completion's default sampling); /completion's answer carries the
// context in generation_settings.n_ctx, and a prompt too long for it is
// refused with llama-server's n_prompt_tokens and n_ctx.
func TestLlamaProps(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	resp, err := http.Get("http://" + n.HTTPAddr().String() + "/props")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var props struct {
		Settings struct {
			NCtx   int `json:"n_ctx"`
			Params struct {
				NPredict int     `json:"n_predict"`
				TopK     int     `json:"top_k"`
				MinP     float64 `json:"min_p"`
			} `json:"params"`
		} `json:"default_generation_settings"`
		TotalSlots   int     `json:"total_slots"`
		ModelAlias   string  `json:"model_alias"`
		ChatTemplate string  `json:"chat_template"`
		BOSToken     *string `json:"bos_token"`
	}
	if err := json.Unmarshal(b, &props); err != nil || resp.StatusCode != 200 || props.Settings.NCtx < 64 || props.TotalSlots < 1 ||
		props.ModelAlias != fortunesModel || props.BOSToken == nil || *props.BOSToken != "<s>" ||
		props.Settings.Params.TopK != 40 || props.Settings.Params.MinP != 0.05 || props.Settings.Params.NPredict != -1 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var got struct {
		Settings struct {
			NCtx int `json:"n_ctx"`
		} `json:"generation_settings"`
	}
	postJSON(t, n, "/completion", `{"prompt":"Hello","n_predict":2}`, &got)
	if got.Settings.NCtx != props.Settings.NCtx {
		t.Fatalf("generation_settings.n_ctx %d, /props %d", got.Settings.NCtx, props.Settings.NCtx)
	}
	code, v := answerOf(t, n, "/completion", `{"prompt":`+strconv.Quote(strings.Repeat("hello world ", props.Settings.NCtx))+`}`)
	e, _ := v["error"].(map[string]any)
	if code != 400 || e["code"] != "context_length_exceeded" || e["n_ctx"] != float64(props.Settings.NCtx) || e["n_prompt_tokens"].(float64) < float64(props.Settings.NCtx) {
		t.Fatalf("too long: %d %v", code, v)
	}
	resp, err = http.Get("http://" + n.HTTPAddr().String() + "/props?model=nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("an unknown model's props: %d", resp.StatusCode)
	}
}

// TestLlamaNProbs: n_probs gives each token's log-probability and its
// likeliest alternatives in llama-server's completion_probabilities,
// whole and streamed: one entry a token, their texts the content, and,
// greedy, each token the likeliest of its alternatives.
func TestLlamaNProbs(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	type prob struct {
		ID      uint32  `json:"id"`
		Token   string  `json:"token"`
		Bytes   []int   `json:"bytes"`
		Logprob float64 `json:"logprob"`
		Top     []struct {
			ID      uint32  `json:"id"`
			Logprob float64 `json:"logprob"`
		} `json:"top_logprobs"`
	}
	check := func(name, content string, predicted int, probs []prob) {
		t.Helper()
		var text strings.Builder
		for _, p := range probs {
			text.WriteString(p.Token)
			if len(p.Top) != 3 || p.Top[0].ID != p.ID || p.Top[0].Logprob != p.Logprob || p.Logprob > 0 || len(p.Bytes) != len(p.Token) {
				t.Fatalf("%s: %+v", name, p)
			}
		}
		if len(probs) != predicted || text.String() != content {
			t.Fatalf("%s: %d entries for %d tokens, their text %q, the content %q", name, len(probs), predicted, text.String(), content)
		}
	}
	const body = `{"prompt":"The meaning of life is","n_predict":8,"n_probs":3}`
	var whole struct {
		Content         string `json:"content"`
		TokensPredicted int    `json:"tokens_predicted"`
		Probs           []prob `json:"completion_probabilities"`
	}
	postJSON(t, n, "/completion", body, &whole)
	check("whole", whole.Content, whole.TokensPredicted, whole.Probs)

	var probs []prob
	var text strings.Builder
	for _, ev := range streamed[struct {
		Content string `json:"content"`
		Probs   []prob `json:"completion_probabilities"`
	}](t, n, "/completion", strings.Replace(body, `"n_probs":3`, `"n_probs":3,"stream":true`, 1)) {
		text.WriteString(ev.Content)
		probs = append(probs, ev.Probs...)
	}
	check("streamed", text.String(), whole.TokensPredicted, probs)
}

// TestLlamaReturnTokens: return_tokens answers the ids the model made,
// as many as tokens_predicted, whose text /detokenize gives back as the
// content; streamed, the events' ids add up to the whole answer's, their
// text to its content; at a stop string they end where its text begins;
// the OpenAI endpoints refuse it.
func TestLlamaReturnTokens(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	const body = `{"prompt":"The meaning of life is","n_predict":12,"return_tokens":true`
	var whole struct {
		Content         string   `json:"content"`
		TokensPredicted int      `json:"tokens_predicted"`
		Tokens          []uint32 `json:"tokens"`
	}
	postJSON(t, n, "/completion", body+`}`, &whole)
	detokenize := func(ids []uint32) string {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"tokens": ids})
		var got struct {
			Content string `json:"content"`
		}
		postJSON(t, n, "/detokenize", string(b), &got)
		return got.Content
	}
	if len(whole.Tokens) != whole.TokensPredicted || whole.TokensPredicted == 0 || strings.TrimPrefix(detokenize(whole.Tokens), " ") != strings.TrimPrefix(whole.Content, " ") {
		t.Fatalf("tokens %v (%d predicted) for %q", whole.Tokens, whole.TokensPredicted, whole.Content)
	}
	var plain struct {
		Tokens []uint32 `json:"tokens"`
	}
	postJSON(t, n, "/completion", `{"prompt":"The meaning of life is","n_predict":12}`, &plain)
	if len(plain.Tokens) != 0 {
		t.Errorf("without return_tokens: tokens %v", plain.Tokens)
	}

	var ids []uint32
	var text strings.Builder
	for _, ev := range streamed[struct {
		Content string   `json:"content"`
		Tokens  []uint32 `json:"tokens"`
	}](t, n, "/completion", body+`,"stream":true}`) {
		text.WriteString(ev.Content)
		ids = append(ids, ev.Tokens...)
	}
	if !slices.Equal(ids, whole.Tokens) || text.String() != whole.Content {
		t.Errorf("streamed: tokens %v, text %q; whole %v, %q", ids, text.String(), whole.Tokens, whole.Content)
	}

	// A stop string the answer meets: the tokens handed out end where
	// its text begins (the engine holds a stop's tokens back with it).
	words := strings.Fields(whole.Content)
	if len(words) < 3 {
		t.Fatalf("the answer %q is too short to stop in", whole.Content)
	}
	stop, _ := json.Marshal(words[2])
	var stopped struct {
		Content string   `json:"content"`
		Tokens  []uint32 `json:"tokens"`
	}
	postJSON(t, n, "/completion", body+`,"stop":[`+string(stop)+`]}`, &stopped)
	trim := func(s string) string { return strings.TrimPrefix(s, " ") }
	if strings.Contains(stopped.Content, words[2]) || len(stopped.Tokens) >= len(whole.Tokens) || !slices.Equal(stopped.Tokens, whole.Tokens[:len(stopped.Tokens)]) ||
		!strings.HasPrefix(trim(detokenize(stopped.Tokens)), trim(stopped.Content)) {
		t.Errorf("stopped at %s: %q, tokens %v (%q)", stop, stopped.Content, stopped.Tokens, detokenize(stopped.Tokens))
	}
	refusedParam(t, n, "/v1/completions", `{"model":"`+fortunesModel+`","prompt":"x","return_tokens":true}`, "return_tokens")
}

// TestCompletionsLlamaOptionsServed: OpenAI's completions take
// llama-server's options as llama-server does: sampled requests with
// n_predict, with and without their own sampler order, are served and
// replay verified once the replay names /v1/completions. Unnamed,
// n_predict says /completion: the same identity under an order that
// leaves top-p and min-p out, another without one (/completion's
// defaults add them), which is not the receipt's.
func TestCompletionsLlamaOptionsServed(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	for request, unnamed := range map[string]string{
		`{"model":"` + fortunesModel + `","prompt":"A man walks into","n_predict":8,"temperature":0.8,"seed":7,` +
			`"samplers":["top_k","temperature"],"top_k":20,"cache_prompt":true,"id_slot":-1}`: api.VerdictVerified,
		`{"model":"` + fortunesModel + `","prompt":"A man walks into","n_predict":8,"temperature":0.8,"seed":7}`: api.VerdictNotReplayable,
	} {
		status, v := answerOf(t, n, "/v1/completions", request)
		if status != http.StatusOK || v["object"] != "text_completion" {
			t.Fatalf("%d %v", status, v)
		}
		usage := v["usage"].(map[string]any)
		if usage["completion_tokens"] != 8.0 {
			t.Fatalf("n_predict 8: usage %v", usage)
		}
		energy, _ := json.Marshal(usage["energy"])
		for endpoint, want := range map[string]string{`,"endpoint":"/v1/completions"`: api.VerdictVerified, "": unnamed} {
			status, res, raw := replayRaw(t, n, `{"request":`+request+`,"energy":`+string(energy)+endpoint+`}`)
			if status != http.StatusOK || res.Verdict != want {
				t.Fatalf("%s: replay %q: %d %s, want %s", request, endpoint, status, raw, want)
			}
		}
	}
}

// TestLlamaCachePrompt: cache_prompt false evaluates the whole prompt —
// its progress reports nothing taken from the cache, where the same
// request after a first reports the cached prefix — and answers the same.
func TestLlamaCachePrompt(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	serve := func(cache bool) (string, int) {
		t.Helper()
		body := fmt.Sprintf(`{"prompt":"The meaning of life is, as everyone knows,","n_predict":8,"stream":true,"return_progress":true,"cache_prompt":%v}`, cache)
		var text strings.Builder
		cached := -1
		for _, ev := range streamed[struct {
			Content        string `json:"content"`
			PromptProgress *struct {
				Cache int `json:"cache"`
			} `json:"prompt_progress"`
		}](t, n, "/completion", body) {
			text.WriteString(ev.Content)
			if ev.PromptProgress != nil {
				cached = ev.PromptProgress.Cache
			}
		}
		if cached < 0 {
			t.Fatalf("no prompt progress for %s", body)
		}
		return text.String(), cached
	}
	first, _ := serve(true)
	again, cached := serve(true)
	whole, none := serve(false)
	if cached == 0 || none != 0 || again != first || whole != first {
		t.Errorf("cached %d tokens (%q), then with cache_prompt false %d (%q); first %q", cached, again, none, whole, first)
	}
}

// streamed posts body to path and decodes each of the stream's data:
// events into an E, in order.
func streamed[E any](t *testing.T, n *Node, path, body string) []E {
	t.Helper()
	resp := post(t, n, path, body)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var evs []E
	for _, line := range strings.Split(string(b), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev E
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		evs = append(evs, ev)
	}
	return evs
}
