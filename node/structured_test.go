package node

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/grammar"
	"github.com/meshnode/meshnode/gguf/grammar/grammartest"
	"github.com/meshnode/meshnode/node/api"
)

// TestStructuredOutputs: response_format and text.format hold the built-in
// model's answer to the schema through the whole node (API, steward,
// engine); a schema feature that cannot be enforced is a 400 naming it; a
// too small max_tokens ends with finish_reason "length"; and a
// constrained serve replays exactly, under the grammar its request names,
// while the same request with another schema is another request.
func TestStructuredOutputs(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})

	const schema = `{"type":"object","properties":{"answer":{"type":"string","maxLength":10},"sure":{"type":"boolean"},"score":{"type":"integer"}},"required":["answer","sure"],"additionalProperties":false}`
	chat := func(format string, extra string) string {
		return `{"model":"` + fortunesModel + `","max_tokens":200` + extra + `,"messages":[{"role":"user","content":"Is it true?"}],"response_format":` + format + `}`
	}
	withSchema := `{"type":"json_schema","json_schema":{"name":"verdict","strict":true,"schema":` + schema + `}}`

	greedy := chat(withSchema, "")
	text, greedyEnergy := generate(t, n, "/v1/chat/completions", greedy)
	if err := grammartest.Validate([]byte(schema), []byte(text)); err != nil {
		t.Fatalf("chat answer %q: %v", text, err)
	}
	seeded := chat(withSchema, `,"temperature":1.2,"seed":5`)
	text, seededEnergy := generate(t, n, "/v1/chat/completions", seeded)
	if err := grammartest.Validate([]byte(schema), []byte(text)); err != nil {
		t.Fatalf("sampled chat answer %q: %v", text, err)
	}
	// A pattern holds a string, a format a date-time or a UUID, a range
	// an integer, whatever the model would write, greedy and sampled.
	const dated = `{"type":"object","properties":{"when":{"type":"string","pattern":"^(19|20)[0-9]{2}-[01][0-9]-[0-3][0-9]$"},"what":{"type":"string","pattern":"^[A-Z][a-z ]{2,12}[.!]$"},"at":{"type":"string","format":"date-time"},"id":{"type":"string","format":"uuid"},"month":{"type":"integer","minimum":1,"maximum":12}},"required":["month"],"additionalProperties":false}`
	for _, extra := range []string{"", `,"temperature":1.3,"seed":9`} {
		text, _ := generate(t, n, "/v1/chat/completions", `{"model":"`+fortunesModel+`","max_tokens":600`+extra+`,"messages":[{"role":"user","content":"When?"}],`+
			`"response_format":{"type":"json_schema","json_schema":{"name":"event","strict":true,"schema":`+dated+`}}}`)
		if err := grammartest.Validate([]byte(dated), []byte(text)); err != nil {
			t.Fatalf("patterned answer %q%s: %v", text, extra, err)
		}
	}
	// json_object: an object, or (when max_tokens cut it) the start of
	// one.
	text, _ = generate(t, n, "/v1/chat/completions", chat(`{"type":"json_object"}`, ""))
	obj, _ := grammar.AnyJSONObject()
	if m, _ := obj.NewMatcher(); !strings.HasPrefix(text, "{") || m.Advance([]byte(text)) != nil {
		t.Fatalf("json_object answer %q", text)
	}

	// Log-probabilities come with a constrained answer too: one a token,
	// whose bytes spell the answer.
	resp0 := post(t, n, "/v1/chat/completions", chat(withSchema, `,"logprobs":true`))
	b0, _ := io.ReadAll(resp0.Body)
	resp0.Body.Close()
	var lp struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			Logprobs struct {
				Content []struct {
					Bytes []byte `json:"bytes"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b0, &lp); resp0.StatusCode != http.StatusOK || err != nil || len(lp.Choices) != 1 {
		t.Fatalf("constrained with logprobs: %d %s", resp0.StatusCode, b0)
	}
	var spelled []byte
	for _, c := range lp.Choices[0].Logprobs.Content {
		spelled = append(spelled, c.Bytes...)
	}
	if got := lp.Choices[0].Message.Content; string(spelled) != got || grammartest.Validate([]byte(schema), []byte(got)) != nil {
		t.Fatalf("constrained with logprobs: %q spelled by its logprobs as %q", got, spelled)
	}

	// The responses API's text.format.
	resp := post(t, n, "/v1/responses", `{"model":"`+fortunesModel+`","max_output_tokens":200,"input":"Is it true?","text":{"format":{"type":"json_schema","name":"verdict","schema":`+schema+`}}}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var r struct {
		Output []struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"output"`
	}
	if err := json.Unmarshal(b, &r); resp.StatusCode != http.StatusOK || err != nil || len(r.Output) != 1 || len(r.Output[0].Content) != 1 {
		t.Fatalf("responses: %d %s", resp.StatusCode, b)
	}
	if err := grammartest.Validate([]byte(schema), []byte(r.Output[0].Content[0].Text)); err != nil {
		t.Fatalf("responses answer %q: %v", r.Output[0].Content[0].Text, err)
	}

	// Too few tokens to finish the JSON: "length", as OpenAI answers.
	resp = post(t, n, "/v1/chat/completions", strings.Replace(greedy, `"max_tokens":200`, `"max_tokens":3`, 1))
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var c struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &c); err != nil || len(c.Choices) != 1 || c.Choices[0].FinishReason != "length" {
		t.Fatalf("a cut constrained answer: %s", b)
	}

	// What cannot be enforced is refused, by name and place.
	for _, tc := range []struct {
		body, code, param, says string
	}{
		{chat(`{"type":"json_schema","json_schema":{"name":"v","schema":{"type":"object","properties":{"d":{"type":"string","format":"ipv6"}}}}}`, ""),
			"unsupported_schema", "response_format.json_schema.schema", `"format" at /properties/d/format`},
		{chat(`{"type":"json_schema","json_schema":{"name":"v","schema":{"type":"strng"}}}`, ""), "invalid_schema", "response_format.json_schema.schema", "strng"},
		{chat(`{"type":"json_schema","json_schema":{"schema":{}}}`, ""), "invalid_request", "response_format.json_schema.name", "name"},
		{chat(`{"type":"xml"}`, ""), "invalid_request", "response_format.type", "xml"},
		{chat(`{"type":"json_object","schema":{}}`, ""), "invalid_request", "response_format", "schema"},
		{`{"model":"` + fortunesModel + `","input":"x","text":{"format":{"type":"json_schema","name":"v","schema":{"oneOf":[{"type":"string"},{"type":"integer"}]}}}}`,
			"unsupported_schema", "text.format.schema", "oneOf"},
	} {
		path := "/v1/chat/completions"
		if strings.Contains(tc.body, `"input"`) {
			path = "/v1/responses"
		}
		resp := post(t, n, path, tc.body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error struct {
				Code, Param, Message string
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &e); resp.StatusCode != http.StatusBadRequest || err != nil || e.Error.Code != tc.code ||
			e.Error.Param != tc.param || !strings.Contains(e.Error.Message, tc.says) {
			t.Errorf("%s: %d %s, want 400 %s %s saying %s", tc.body, resp.StatusCode, b, tc.code, tc.param, tc.says)
		}
	}

	// Replay: the constrained serves verify; another schema is another
	// request.
	replay := func(request string, energy json.RawMessage) api.ReplayResult {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"request": json.RawMessage(request), "energy": energy})
		status, res, raw := replayRaw(t, n, string(body))
		if status != http.StatusOK {
			t.Fatalf("replay: %d %s", status, raw)
		}
		return res
	}
	for name, tc := range map[string]struct {
		request string
		energy  json.RawMessage
	}{"greedy": {greedy, greedyEnergy}, "seeded": {seeded, seededEnergy}} {
		if res := replay(tc.request, tc.energy); res.Verdict != api.VerdictVerified || res.Disclosure == nil {
			t.Errorf("%s constrained replay: %+v", name, res)
		}
	}
	other := strings.Replace(greedy, `"maxLength":10`, `"maxLength":11`, 1)
	if res := replay(other, greedyEnergy); res.Verdict != api.VerdictNotReplayable || !strings.Contains(res.Reason, "not the receipt's") {
		t.Errorf("replay under another schema: %+v", res)
	}
	plain := strings.Replace(greedy, `,"response_format":`+withSchema, "", 1)
	if res := replay(plain, greedyEnergy); res.Verdict != api.VerdictNotReplayable {
		t.Errorf("replay without the schema: %+v", res)
	}
}

// TestGBNFServed: llama-server's "grammar" field on the built-in model:
// completions and chat answers match the GBNF grammar (a Unicode class
// and a bounded repetition among its parts), greedy and sampled; the
// replay of each verifies, and the same request under another grammar is
// another request; bad grammars are 400s that say where.
func TestGBNFServed(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	const gbnf = "root ::= (\"yes\" | \"no\") \", \" word{1,3} [.!€]\nword ::= [a-zé]+ \" \"?"
	g, err := grammar.ParseGBNF(gbnf)
	if err != nil {
		t.Fatal(err)
	}
	quoted, _ := json.Marshal(gbnf)
	for _, tc := range []struct{ path, body string }{
		{"/v1/completions", `{"model":"` + fortunesModel + `","prompt":"Is it true?","max_tokens":40,"grammar":` + string(quoted) + `}`},
		{"/v1/completions", `{"model":"` + fortunesModel + `","prompt":"Is it true?","max_tokens":40,"temperature":1,"seed":3,"grammar":` + string(quoted) + `}`},
		{"/v1/chat/completions", `{"model":"` + fortunesModel + `","messages":[{"role":"user","content":"Yes?"}],"max_tokens":40,"grammar":` + string(quoted) + `}`},
	} {
		text, energy := generate(t, n, tc.path, tc.body)
		m, _ := g.NewMatcher()
		if err := m.Advance([]byte(text)); err != nil || !m.Accepting() {
			t.Errorf("%s: %q does not match the grammar: %v", tc.body, text, err)
		}
		for _, rc := range []struct{ request, verdict string }{
			{tc.body, api.VerdictVerified},
			{strings.Replace(tc.body, `\"no\"`, `\"nope\"`, 1), api.VerdictNotReplayable},
		} {
			body, _ := json.Marshal(map[string]any{"request": json.RawMessage(rc.request), "energy": energy})
			if status, res, raw := replayRaw(t, n, string(body)); status != http.StatusOK || res.Verdict != rc.verdict {
				t.Errorf("replay of %s: %d %s, want %s", rc.request, status, raw, rc.verdict)
			}
		}
	}
	for _, tc := range []struct{ body, code, want string }{
		{`"prompt":"x","grammar":"root ::= \"a"`, "invalid_grammar", "line 1, column 10"},
		{`"prompt":"x","grammar":"root ::= <[12]>"`, "invalid_grammar", "token references"},
		{`"prompt":"x","grammar":"start ::= \"a\""`, "invalid_grammar", `no rule \"root\"`},
		{`"messages":[{"role":"user","content":"x"}],"grammar":"root ::= \"a\"","response_format":{"type":"json_object"}}`, "", "both hold"},
		{`"messages":[{"role":"user","content":"x"}],"grammar":"root ::= \"a\"","tools":` + weatherTool, "", "cannot be combined with tools"},
	} {
		path := "/v1/completions"
		if strings.HasPrefix(tc.body, `"messages"`) {
			path = "/v1/chat/completions"
		}
		body := `{"model":"` + fortunesModel + `",` + strings.TrimSuffix(tc.body, "}") + `}`
		resp := post(t, n, path, body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"param":"grammar"`) ||
			!strings.Contains(string(b), tc.want) || tc.code != "" && !strings.Contains(string(b), `"code":"`+tc.code+`"`) {
			t.Errorf("%s: %d %s", body, resp.StatusCode, b)
		}
	}
}

// TestGuidedDecoding: vLLM's guided fields hold the built-in model's
// answer through the whole node, greedy and sampled: a choice answers one
// of its strings, a regex's answer matches it, a schema's validates, a
// grammar's matches; and a served guided answer replays.
func TestGuidedDecoding(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	const schema = `{"type":"object","properties":{"mood":{"enum":["glad","sad"]},"why":{"type":"string","pattern":"^[a-z ]{3,20}$"}},"required":["mood","why"],"additionalProperties":false}`
	for _, extra := range []string{``, `,"temperature":1.2,"seed":4`} {
		body := func(guide string) string {
			return `{"model":"` + fortunesModel + `","max_tokens":400,"prompt":"Today I feel"` + extra + `,` + guide + `}`
		}
		if text, _ := generate(t, n, "/v1/completions", body(`"guided_choice":["happy","tired","hungry"]`)); text != "happy" && text != "tired" && text != "hungry" {
			t.Errorf("guided_choice%s: %q", extra, text)
		}
		if text, _ := generate(t, n, "/v1/completions", body(`"guided_regex":"[A-Z][a-z]{2,8}( [a-z]{1,8}){0,3}\\."`)); !regexp.MustCompile(`^[A-Z][a-z]{2,8}( [a-z]{1,8}){0,3}\.$`).MatchString(text) {
			t.Errorf("guided_regex%s: %q", extra, text)
		}
		text, energy := generate(t, n, "/v1/completions", body(`"guided_json":`+schema))
		if err := grammartest.Validate([]byte(schema), []byte(text)); err != nil {
			t.Errorf("guided_json%s: %q: %v", extra, text, err)
		}
		replay, _ := json.Marshal(map[string]any{"request": json.RawMessage(body(`"guided_json":` + schema)), "energy": energy})
		if status, res, raw := replayRaw(t, n, string(replay)); status != http.StatusOK || res.Verdict != api.VerdictVerified {
			t.Errorf("replay of guided_json%s: %d %s", extra, status, raw)
		}
		if text, _ := generate(t, n, "/v1/chat/completions", `{"model":"`+fortunesModel+`","max_tokens":16,"messages":[{"role":"user","content":"hi"}]`+extra+
			`,"structured_outputs":{"grammar":"root ::= (\"ha\" | \"ho\")+ \"!\""}}`); !regexp.MustCompile(`^(ha|ho)+!$`).MatchString(text) {
			t.Errorf("structured_outputs.grammar%s: %q", extra, text)
		}
	}
}
