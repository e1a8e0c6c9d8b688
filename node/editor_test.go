package node

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/receipt"
)

// llamaVimWarmUp and llamaVimFIM (llamaVimFIMServed with its
// response_fields) are llama.vim's requests as its
// autoload/llama.vim builds them with its default configuration (no
// model named): the ring buffer's update, which has the other files'
// text cached and answers nothing, and a completion at the cursor.
const (
	llamaVimExtra  = `[{"text":"def sub(a, b):\n    return a - b\n","time":1764000000,"filename":"util.py"}]`
	llamaVimWarmUp = `{"id_slot":0,"input_prefix":"","input_suffix":"","input_extra":` + llamaVimExtra +
		`,"prompt":"","n_predict":0,"temperature":0.0,"samplers":[],"stream":false,"cache_prompt":true,"t_max_prompt_ms":1,"t_max_predict_ms":1,"response_fields":[""]}`
	llamaVimFIMServed = `{"id_slot":0,"input_prefix":"def add(a, b):\n","input_suffix":"\n\nprint(add(1, 2))\n","input_extra":` + llamaVimExtra +
		`,"prompt":"    ","n_predict":16,"stop":[],"n_indent":4,"top_k":40,"top_p":0.90,"samplers":["top_k","top_p","infill"],"stream":false,` +
		`"cache_prompt":true,"t_max_prompt_ms":500,"t_max_predict_ms":250`
	llamaVimFIM = llamaVimFIMServed + `,"response_fields":["content","timings/prompt_n","timings/prompt_ms",` +
		`"timings/prompt_per_token_ms","timings/prompt_per_second","timings/predicted_n","timings/predicted_ms","timings/predicted_per_token_ms",` +
		`"timings/predicted_per_second","truncated","tokens_cached"]}`
)

// TestLlamaVim: llama.vim's requests are served as llama-server serves
// them, on a node whose one model has FIM tokens: the warm-up answers an
// empty object (response_fields [""]) after evaluating the context, the
// completion the fields it asks for; the completion, greedy under the
// infill filter, replays, and its sampler order is in its identity (a
// replay under another order is another request).
func TestLlamaVim(t *testing.T) {
	path, _ := coderFixture(t)
	n, _ := startNode(t, Config{Models: []string{path}})

	code, v := answerOf(t, n, "/infill", llamaVimWarmUp)
	if code != 200 || len(v) != 0 {
		t.Fatalf("warm-up: %d %v", code, v)
	}
	code, v = answerOf(t, n, "/infill", llamaVimFIM)
	content, ok := v["content"].(string)
	if code != 200 || !ok || len(v) != 11 || v["truncated"] != false || v["timings/prompt_n"].(float64) < 1 ||
		v["tokens_cached"].(float64) < v["timings/prompt_n"].(float64) {
		t.Fatalf("completion: %d %v", code, v)
	}

	// The same request whole (response_fields asks nothing of what is
	// served) carries the receipt, and replays.
	whole := llamaVimFIMServed + "}"
	var got struct {
		Content  string          `json:"content"`
		StopType string          `json:"stop_type"`
		Energy   json.RawMessage `json:"energy"`
	}
	postJSON(t, n, "/infill", whole, &got)
	if got.Content != content || got.Energy == nil {
		t.Fatalf("whole answer %q, with response_fields %q", got.Content, content)
	}
	if status, res, raw := replayRaw(t, n, `{"request":`+whole+`,"energy":`+string(got.Energy)+`}`); status != 200 || res.Verdict != api.VerdictVerified {
		t.Fatalf("replay: %d %s", status, raw)
	}
	other := strings.Replace(whole, `["top_k","top_p","infill"]`, `["top_p","top_k","infill"]`, 1)
	if status, res, raw := replayRaw(t, n, `{"request":`+other+`,"energy":`+string(got.Energy)+`}`); status != 200 || res.Verdict == api.VerdictVerified {
		t.Fatalf("replay under another order: %d %s", status, raw)
	}

	// The infill filter may end an answer where a grammar would not let
	// it: the two are not served together.
	code, v = answerOf(t, n, "/infill", strings.Replace(whole, `"n_predict":16`, `"n_predict":16,"grammar":"root ::= \"a\""`, 1))
	if code != 400 || !strings.Contains(fmt.Sprint(v), "infill sampler is not served with a grammar") {
		t.Fatalf("infill with a grammar: %d %v", code, v)
	}
}

// llamaVSCodeFIM is llama.vscode's completion request (its
// createRequestPayload) with its default settings: three completions
// (n_cmpl, its "max parallel completions"), its own top_p, the infill
// filter, and no response_fields.
const llamaVSCodeFIM = `{"id_slot":0,"input_prefix":"def add(a, b):\n","input_suffix":"\n\nprint(add(1, 2))\n","input_extra":` + llamaVimExtra +
	`,"prompt":"    ","n_predict":16,"n_cmpl":3,"top_k":40,"top_p":0.99,"stream":false,"samplers":["top_k","top_p","infill"],` +
	`"cache_prompt":true,"n_indent":4,"t_max_prompt_ms":500,"t_max_predict_ms":2500}`

// TestLlamaVSCode: llama.vscode's completion is answered as llama-server
// answers n_cmpl: an array of completions, each with its index and
// receipt; greedy, they are one completion, served once (one receipt)
// and answered three times, and a choice's replay verifies.
func TestLlamaVSCode(t *testing.T) {
	path, _ := coderFixture(t)
	n, _ := startNode(t, Config{Models: []string{path}})
	var got []struct {
		Index    int             `json:"index"`
		Content  string          `json:"content"`
		StopType string          `json:"stop_type"`
		Energy   json.RawMessage `json:"energy"`
	}
	postJSON(t, n, "/infill", llamaVSCodeFIM, &got)
	if len(got) != 3 {
		t.Fatalf("%d answers, want 3", len(got))
	}
	for i, a := range got {
		if a.Index != i || a.Content != got[0].Content || a.Energy == nil || string(a.Energy) != string(got[0].Energy) {
			t.Fatalf("answer %d: %+v; the first %q", i, a, got[0].Content)
		}
	}
	replay := `{"request":` + llamaVSCodeFIM + `,"choice":1,"energy":` + string(got[1].Energy) + `}`
	if status, res, raw := replayRaw(t, n, replay); status != 200 || res.Verdict != api.VerdictVerified {
		t.Fatalf("replay of the second: %d %s", status, raw)
	}

	// Streamed, each event names its answer, and each answer's pieces
	// are the whole answer's text, ended by its own last event.
	resp := post(t, n, "/infill", strings.Replace(llamaVSCodeFIM, `"stream":false`, `"stream":true`, 1))
	defer resp.Body.Close()
	texts, ends := make([]strings.Builder, 3), 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e struct {
			Index   int    `json:"index"`
			Content string `json:"content"`
			Stop    bool   `json:"stop"`
		}
		if err := json.Unmarshal([]byte(data), &e); err != nil || e.Index < 0 || e.Index > 2 {
			t.Fatalf("event %s: %v", data, err)
		}
		if e.Stop {
			ends++
		}
		texts[e.Index].WriteString(e.Content)
	}
	for i := range texts {
		if texts[i].String() != got[0].Content || ends != 3 {
			t.Fatalf("streamed answer %d %q, whole %q; %d ends", i, texts[i].String(), got[0].Content, ends)
		}
	}
}

// TestMinIndentServed: n_indent ends an answer at a line, after the
// first, that begins under it (a GBNF makes the random model write the
// lines); the answer tells llama-server's stop_type "limit", and
// replays.
func TestMinIndentServed(t *testing.T) {
	path, _ := coderFixture(t)
	n, _ := startNode(t, Config{Models: []string{path}})
	body := `{"input_prefix":"if x:\n","input_suffix":"","prompt":"    ","n_predict":32,"n_indent":4,` +
		`"grammar":"root ::= \"a = 1\\n    b = 2\\nc = 3\\n\""}`
	var got struct {
		Content  string          `json:"content"`
		StopType string          `json:"stop_type"`
		Energy   json.RawMessage `json:"energy"`
	}
	postJSON(t, n, "/infill", body, &got)
	if !strings.HasPrefix(got.Content, "a = 1\n    b = 2") || strings.Contains(got.Content, "c") || got.StopType != "limit" {
		t.Fatalf("answer %q, stop_type %s", got.Content, got.StopType)
	}
	if status, res, raw := replayRaw(t, n, `{"request":`+body+`,"energy":`+string(got.Energy)+`}`); status != 200 || res.Verdict != api.VerdictVerified {
		t.Fatalf("replay: %d %s", status, raw)
	}
	postJSON(t, n, "/infill", strings.Replace(body, `"n_indent":4`, `"n_indent":0`, 1), &got)
	if got.Content != "a = 1\n    b = 2\nc = 3\n" {
		t.Fatalf("without n_indent: %q", got.Content)
	}
}

// TestTimeLimitsServed: the client's time limits, on a clock that moves
// a second each time it is read. A prompt slower than t_max_prompt_ms
// is answered with nothing; once t_max_predict_ms has passed, the answer
// ends after a token holding a newline. Both are sealed as cut short at
// the client's limit, and replay as a prefix of the re-run.
func TestTimeLimitsServed(t *testing.T) {
	path, _ := coderFixture(t)
	var ticks atomic.Int64
	base := time.Unix(1_800_000_000, 0)
	n, _ := startNodeWith(t, Config{Models: []string{path}}, func(n *Node) {
		n.clock = func() time.Time { return base.Add(time.Duration(ticks.Add(1)) * time.Second) }
	})
	const lines = `"grammar":"root ::= \"a\\nb\\nc\\nd\\ne\\nf\\ng\\nh\\n\""`
	for _, tc := range []struct {
		limits string
		ok     func(content string) bool
	}{
		{`"t_max_prompt_ms":500`, func(c string) bool { return c == "" }},
		{`"t_max_prompt_ms":5000,"t_max_predict_ms":2500`, func(c string) bool {
			return strings.HasSuffix(c, "\n") && strings.HasPrefix("a\nb\nc\nd\ne\nf\ng\nh\n", c) && len(c) >= 4 && len(c) < 16
		}},
	} {
		body := `{"input_prefix":"x","input_suffix":"","n_predict":32,` + tc.limits + `,` + lines + `}`
		var got struct {
			Content  string          `json:"content"`
			StopType string          `json:"stop_type"`
			Energy   json.RawMessage `json:"energy"`
		}
		postJSON(t, n, "/infill", body, &got)
		if !tc.ok(got.Content) || got.StopType != "limit" {
			t.Fatalf("%s: %q, stop_type %s", tc.limits, got.Content, got.StopType)
		}
		status, res, raw := replayRaw(t, n, `{"request":`+body+`,"energy":`+string(got.Energy)+`}`)
		if status != 200 || res.Verdict != api.VerdictVerified || res.CutShort != receipt.CutLimit {
			t.Fatalf("%s: replay %d %s", tc.limits, status, raw)
		}
	}
}

// TestLlamaVimInstruct: llama.vim's instruction editing, on chat
// completions with no model named: its warm-up (the prompt alone,
// answered {}), then the edit, streamed under its min_p and temperature
// order (llama.vim asks for no usage chunk, so the stream carries no
// receipt).
func TestLlamaVimInstruct(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	messages := `[{"role":"system","content":"You are a text-editing assistant.\n--- SELECTION ---\nx = 1\n"},{"role":"user","content":"INSTRUCTION: double it"}]`
	code, v := answerOf(t, n, "/v1/chat/completions", `{"id_slot":0,"messages":`+messages+`,"samplers":[],"n_predict":0,"stream":false,"cache_prompt":true,"response_fields":[""]}`)
	if code != 200 || len(v) != 0 {
		t.Fatalf("warm-up: %d %v", code, v)
	}
	resp := post(t, n, "/v1/chat/completions", `{"id_slot":0,"messages":`+messages+`,"min_p":0.1,"temperature":0.1,"samplers":["min_p","temperature"],"stream":true,"cache_prompt":true}`)
	defer resp.Body.Close()
	if text, _ := readChatEvents(t, resp.Body); resp.StatusCode != 200 || text == "" {
		t.Fatalf("edit: %d %q", resp.StatusCode, text)
	}
}

// llamaWebUIChat is the body llama-server's web UI (tools/server/webui)
// sends for a chat with its default settings: every sampler's setting at
// its default (DRY, XTC, typical-p and dynamic temperature off), the
// sampler order, max_tokens -1, repeat_last_n 64, and the stream's
// extras.
const llamaWebUIChat = `{"messages":[{"role":"user","content":"Tell me a fortune."}],"stream":true,"return_progress":true,` +
	`"sse_ping_interval":1,"reasoning_format":"auto","reasoning_control":true,"temperature":0.8,"dynatemp_range":0,"dynatemp_exponent":1,"top_k":40,"top_p":0.95,"min_p":0.05,` +
	`"xtc_probability":0,"xtc_threshold":0.1,"typ_p":1,"repeat_last_n":64,"repeat_penalty":1,"presence_penalty":0,"frequency_penalty":0,` +
	`"dry_multiplier":0,"dry_base":1.75,"dry_allowed_length":2,"dry_penalty_last_n":-1,` +
	`"samplers":["penalties","dry","top_n_sigma","top_k","typ_p","top_p","min_p","xtc","temperature"],"backend_sampling":false,` +
	`"timings_per_token":true,"max_tokens":-1}`

// TestLlamaWebUIChat: the web UI's chat is served as llama-server serves
// it: the stream opens with the prompt's progress (its tokens, all in
// before the first token), every chunk after it carries the timings so
// far, and the last one counts the whole answer, before [DONE].
func TestLlamaWebUIChat(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	// Seeded (as the UI's settings let one be), so that the sampled
	// answer is one that says something before it ends.
	resp := post(t, n, "/v1/chat/completions", strings.Replace(llamaWebUIChat, `"temperature":0.8,`, `"temperature":0.8,"seed":1,`, 1))
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	type timings struct{ PromptN, PredictedN int }
	var (
		progress []api.PromptProgress
		content  strings.Builder
		last     *timings
		finished bool
		done     bool
	)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c struct {
			Choices []struct {
				Delta        struct{ Content string } `json:"delta"`
				FinishReason *string                  `json:"finish_reason"`
			} `json:"choices"`
			Timings *struct {
				PromptN    int `json:"prompt_n"`
				PredictedN int `json:"predicted_n"`
			} `json:"timings"`
			PromptProgress *struct{ Total, Cache, Processed int } `json:"prompt_progress"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		if p := c.PromptProgress; p != nil {
			if content.Len() > 0 || last != nil {
				t.Fatalf("prompt progress %s after the answer began", data)
			}
			progress = append(progress, api.PromptProgress{Total: p.Total, Cached: p.Cache, Processed: p.Processed})
			continue
		}
		if c.Timings == nil {
			t.Fatalf("a chunk without timings: %s", data)
		}
		last = &timings{c.Timings.PromptN, c.Timings.PredictedN}
		for _, ch := range c.Choices {
			content.WriteString(ch.Delta.Content)
			finished = finished || ch.FinishReason != nil
		}
	}
	if len(progress) == 0 {
		t.Fatal("no prompt progress")
	}
	p := progress[len(progress)-1]
	if p.Total < 5 || p.Processed != p.Total || last == nil || last.PromptN != p.Total || last.PredictedN < 1 || !finished || !done || content.Len() == 0 {
		t.Fatalf("progress %+v, last timings %+v, finished %v, [DONE] %v, %d bytes of content", progress, last, finished, done, content.Len())
	}
}

// TestContinueFinalMessage: continue_final_message (as llama-server's web
// UI sends it to continue an answer) has the model continue the final
// assistant message: given the first words of the greedy answer, the
// greedy continuation is the rest of that answer, without the words
// given.
func TestContinueFinalMessage(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	const user = `{"role":"user","content":"A man walks into a bar"}`
	whole, _ := generate(t, n, "/v1/chat/completions", `{"model":"`+fortunesModel+`","max_tokens":24,"messages":[`+user+`]}`)
	const given = ", and a man"
	if !strings.HasPrefix(whole, given) {
		t.Fatalf("the greedy answer %q does not begin %q; pick other words", whole, given)
	}
	rest, _ := generate(t, n, "/v1/chat/completions", `{"model":"`+fortunesModel+`","max_tokens":12,"continue_final_message":true,"add_generation_prompt":false,`+
		`"messages":[`+user+`,{"role":"assistant","content":"`+given+`"}]}`)
	if rest == "" || !strings.HasPrefix(whole, given+rest) {
		t.Fatalf("continued %q: %q, want the rest of the answer %q", given, rest, whole)
	}
}
