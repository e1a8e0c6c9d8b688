package node

import (
	"encoding/json"
	"io"
	"net/http"
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
