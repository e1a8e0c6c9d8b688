package node

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/api"
)

// TestOllamaServe: the built-in model served through Ollama's API says
// what it says through the OpenAI endpoints for the same conversation
// (chat) and prompt (generate, raw), streamed or not; the done object's
// receipt replays with the endpoint named (or, for chat, without);
// /api/show describes the model's file.
func TestOllamaServe(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	conv := `"messages":[{"role":"user","content":"A man walks into a bar"}]`
	want, _ := generate(t, n, "/v1/chat/completions", `{"model":"`+fortunesModel+`","max_tokens":12,`+conv+`}`)
	type done struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		Response        string          `json:"response"`
		Done            bool            `json:"done"`
		DoneReason      string          `json:"done_reason"`
		EvalCount       int             `json:"eval_count"`
		PromptEvalCount int             `json:"prompt_eval_count"`
		Energy          json.RawMessage `json:"energy"`
	}
	chat := `{"model":"` + fortunesModel + `","stream":false,"options":{"num_predict":12},` + conv + `}`
	var got done
	postJSON(t, n, "/api/chat", chat, &got)
	if got.Message.Content != want || !got.Done || got.DoneReason != "length" || got.EvalCount != 12 {
		t.Fatalf("/api/chat %+v, want %q", got, want)
	}
	if _, res, raw := replayRaw(t, n, `{"request":`+chat+`,"energy":`+string(got.Energy)+`}`); res.Verdict != api.VerdictVerified {
		t.Fatalf("chat replay: %s", raw)
	}

	// Streamed (Ollama's default), the same text.
	resp := post(t, n, "/api/chat", `{"model":"`+fortunesModel+`","options":{"num_predict":12},`+conv+`}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var text strings.Builder
	var last done
	for line := range strings.Lines(string(b)) {
		if err := json.Unmarshal([]byte(line), &last); err != nil {
			t.Fatalf("%v: %q", err, line)
		}
		text.WriteString(last.Message.Content)
	}
	if text.String() != want || !last.Done || last.Energy == nil {
		t.Fatalf("streamed %q (done %v), want %q", text.String(), last.Done, want)
	}

	// generate, raw: a completion of the prompt.
	plain, _ := generate(t, n, "/v1/completions", `{"model":"`+fortunesModel+`","max_tokens":8,"prompt":"Love is"}`)
	gen := `{"model":"` + fortunesModel + `","stream":false,"raw":true,"prompt":"Love is","options":{"num_predict":8}}`
	postJSON(t, n, "/api/generate", gen, &got)
	if got.Response != plain || got.EvalCount != 8 {
		t.Fatalf("/api/generate %+v, want %q", got, plain)
	}
	if _, res, raw := replayRaw(t, n, `{"request":`+gen+`,"energy":`+string(got.Energy)+`,"endpoint":"/api/generate"}`); res.Verdict != api.VerdictVerified {
		t.Fatalf("generate replay: %s", raw)
	}

	var show struct {
		Details struct {
			Format            string `json:"format"`
			Family            string `json:"family"`
			QuantizationLevel string `json:"quantization_level"`
		} `json:"details"`
		ModelInfo    map[string]any `json:"model_info"`
		Capabilities []string       `json:"capabilities"`
	}
	postJSON(t, n, "/api/show", `{"model":"`+fortunesModel+`"}`, &show)
	if show.Details.Format != "gguf" || show.Details.Family != "llama" || show.Details.QuantizationLevel != "Q8_0" ||
		show.ModelInfo["llama.context_length"] != 256.0 || show.Capabilities[0] != "completion" {
		t.Fatalf("/api/show %+v", show)
	}
}
