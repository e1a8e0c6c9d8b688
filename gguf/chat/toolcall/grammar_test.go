package toolcall

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/meshnode/meshnode/gguf/chat/harmony"
	"github.com/meshnode/meshnode/gguf/grammar"
)

var grammarTools = []Tool{
	{Name: "get_weather", Parameters: []byte(`{"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"], "additionalProperties": false}`)},
	{Name: "now"},
}

func matches(t *testing.T, g *grammar.Grammar, s string) bool {
	t.Helper()
	m, err := g.NewMatcher()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Advance([]byte(s)); err != nil {
		if !errors.Is(err, grammar.ErrRejected) {
			t.Fatalf("%q: %v", s, err)
		}
		return false
	}
	return m.Accepting()
}

// TestGrammar: for each format the grammar takes exactly the calls the
// template writes (the arguments held to the tool's schema; the named
// tool only; one call unless parallel), and what it takes parses back,
// after the prefix, to those calls.
func TestGrammar(t *testing.T) {
	for _, tc := range []struct {
		f              Format
		only           string
		parallel       bool
		accept, reject []string
		wantCallsFirst int // calls in accept[0]
	}{
		{Hermes, "", true,
			[]string{"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>",
				"<tool_call>\n{\"name\": \"now\", \"arguments\": {\"any\": [1, 2]}}\n</tool_call>"},
			[]string{"Sure.", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": 2}}\n</tool_call>",
				"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
				"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"x\": 1}}\n</tool_call>"}, 2},
		{Hermes, "", false,
			[]string{"<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"},
			[]string{"<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"}, 1},
		{Llama3, "get_weather", true,
			[]string{`{"name": "get_weather", "parameters": {"city": "Oslo", "days": 3}}`},
			[]string{`{"name": "now", "parameters": {}}`, `{"name": "get_weather", "parameters": {"city": "Oslo", "days": 1.5}}`}, 1},
		{Mistral, "", true,
			[]string{`[{"name": "now", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "Rome"}}]`},
			[]string{`[TOOL_CALLS][{"name": "now", "arguments": {}}]`, `[]`}, 2},
		{Granite, "", false,
			[]string{`[{"name": "now", "arguments": {}}]`},
			[]string{`<|tool_call|>[{"name": "now", "arguments": {}}]`, `[{"name": "now", "arguments": {}}, {"name": "now", "arguments": {}}]`}, 1},
		{Generic, "now", true,
			[]string{`{"tool_calls": [{"name": "now", "arguments": {}}]}`},
			[]string{`{"tool_calls": [{"name": "now", "arguments": {}}, {"name": "now", "arguments": {}}]}`}, 1},
		// Gemma 4: its notation, one call (the separators are control
		// tokens), the schema not enforced.
		{Gemma4, "", true,
			[]string{`call:get_weather{city:<|"|>Paris <b><|"|>,days:3,opts:{deep:[true,null,-1.5e2,<|"|><|"|>]}}`, `call:now{}`,
				`call:get_weather{days: 2}`},
			[]string{`<|tool_call>call:now{}`, `call:now{}<tool_call|>`, `call:get_time{}`, `call:now{a:<|"|>x<|y<|"|>}`,
				`call:now{a:b}`, `call:now{}call:now{}`, `call:now{"a":1}`}, 1},
		// LFM2: a Python list of calls after the control token, the
		// keywords the schema's properties (any identifier where it has
		// none), the values Python literals, the schema's types not
		// enforced.
		{LFM2, "", true,
			[]string{`[get_weather(city='Paris', days=3), now(x="a\"b", y=[True, None, {'k': -1.5e2}], z=null)]`, `[now()]`,
				`[get_weather(days='soon')]`, `[now(a='\x41\u2603\U0001F600\n\q')]`},
			[]string{`<|tool_call_start|>[now()]`, `[now()]<|tool_call_end|>`, `[get_time()]`, `[get_weather(town='Oslo')]`,
				`[now('x')]`, `[]`, `[now(a=inf)]`, `[now(a='x)]`, `[now(a='\xZZ')]`, `[now(a='\u26')]`}, 2},
		{LFM2, "now", false,
			[]string{`[now(a=1)]`},
			[]string{`[now(), now()]`, `[get_weather(city='Oslo')]`}, 1},
	} {
		g, prefix, err := Grammar(tc.f, grammarTools, tc.only, tc.parallel)
		if err != nil {
			t.Fatalf("%v: %v", tc.f, err)
		}
		for i, s := range tc.accept {
			if !matches(t, g, s) {
				t.Errorf("%v only=%q parallel=%v rejects %q", tc.f, tc.only, tc.parallel, s)
				continue
			}
			content, calls := Parse(tc.f, prefix+s)
			if content != "" || len(calls) == 0 || i == 0 && len(calls) != tc.wantCallsFirst {
				t.Errorf("%v: %q parses to %q %+v", tc.f, prefix+s, content, calls)
			}
		}
		for _, s := range tc.reject {
			if matches(t, g, s) {
				t.Errorf("%v only=%q parallel=%v takes %q", tc.f, tc.only, tc.parallel, s)
			}
		}
	}

	if _, _, err := Grammar(Hermes, grammarTools, "missing", true); err == nil {
		t.Error("a grammar for a tool not given")
	}
	_, _, err := Grammar(Hermes, []Tool{{Name: "ok"}, {Name: "f", Parameters: []byte(`{"type": "string", "format": "ipv6"}`)}}, "", true)
	var se *SchemaError
	var ue *grammar.UnsupportedError
	if !errors.As(err, &se) || se.Index != 1 || !errors.As(err, &ue) || ue.Keyword != "format" {
		t.Errorf("unsupported keyword: %v", err)
	}
}

// TestHarmonyGrammar: a forced harmony reply is an optional analysis
// message, then one message to functions.NAME whose text is arguments of
// the tool's schema, as gpt-oss writes it; package harmony's parser reads
// what the grammar takes back as that one call, the reasoning apart.
func TestHarmonyGrammar(t *testing.T) {
	const call = `<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}`
	for _, tc := range []struct {
		only           string
		accept, reject []string
	}{
		{"", []string{
			call,
			"<|channel|>analysis<|message|>Need the weather; a < b, x<<y.\n<|end|><|start|>assistant" + call,
			`<|channel|>commentary to=functions.now json<|message|>{}`,
			`<|channel|>commentary to=functions.now<|message|>{"any": [1]}`,
		}, []string{
			"Sure.",
			"<|channel|>final<|message|>It is sunny.",
			`<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}`,
			`<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"days": 2}`,
			// One call a turn: the model ends it with <|call|>.
			call + "<|end|><|start|>assistant" + call,
			// The analysis cannot hold a marker, nor end the reply.
			"<|channel|>analysis<|message|>a<|channel|>final<|message|>b<|end|><|start|>assistant" + call,
			"<|channel|>analysis<|message|>Thinking.",
		}},
		{"now", []string{`<|channel|>commentary to=functions.now <|constrain|>json<|message|>{}`},
			[]string{call}},
	} {
		g, prefix, err := Grammar(Harmony, grammarTools, tc.only, true)
		if err != nil || prefix != "" {
			t.Fatalf("only %q: %v, prefix %q", tc.only, err, prefix)
		}
		for _, s := range tc.accept {
			if !matches(t, g, s) {
				t.Errorf("only %q rejects %q", tc.only, s)
				continue
			}
			rep := harmony.Parse(s, true)
			if rep.Content != "" || len(rep.Calls) != 1 || !json.Valid([]byte(rep.Calls[0].Arguments)) {
				t.Errorf("%q parses to %+v", s, rep)
			}
		}
		for _, s := range tc.reject {
			if matches(t, g, s) {
				t.Errorf("only %q takes %q", tc.only, s)
			}
		}
	}
	rep := harmony.Parse("<|channel|>analysis<|message|>Need it.<|end|><|start|>assistant"+call, true)
	if rep.Reasoning != "Need it." || rep.Calls[0].Name != "get_weather" || rep.Calls[0].Arguments != `{"city": "Oslo"}` {
		t.Errorf("parsed %+v", rep)
	}
}

// lazyTokens is a byte vocabulary (ids 0–255) and, after it, the call
// markers that are control tokens: the mask gives them no bytes, the
// constraint their text (as the engine's does).
var lazyMarkers = []string{"[TOOL_CALLS]", "<|tool_call|>", gemmaOpen, gemmaClose, "<|python_tag|>", pyOpen, pyClose}

// lazyTokenize splits s into the markers' tokens and single bytes.
func lazyTokenize(s string) []uint32 {
	var ids []uint32
outer:
	for i := 0; i < len(s); {
		for j, m := range lazyMarkers {
			if len(s[i:]) >= len(m) && s[i:i+len(m)] == m {
				ids = append(ids, uint32(256+j))
				i += len(m)
				continue outer
			}
		}
		ids = append(ids, uint32(s[i]))
		i++
	}
	return ids
}

// TestLazyGrammar: under tool_choice "auto" with strict tools, each
// format's reply is free until it opens a call the way the parser finds
// one, and the call is then held to its tool's schema; a reply that
// opens none is never held. What the constraint takes parses to calls.
func TestLazyGrammar(t *testing.T) {
	eos := uint32(256 + len(lazyMarkers))
	text := func(id uint32) []byte {
		if id < 256 {
			return []byte{byte(id)}
		}
		if id < eos {
			return []byte(lazyMarkers[id-256])
		}
		return nil
	}
	mask := func(id uint32) []byte {
		if id < 256 {
			return text(id)
		}
		return nil
	}
	v := grammar.NewVocab(int(eos)+1, int(eos), mask, []uint32{eos})
	const weather = `{"name": "get_weather", "arguments": {"city": "Paris"}}`
	analysis := "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant"
	for _, tc := range []struct {
		f        Format
		reply    string
		calls    int  // the calls the reply parses to; 0: no call, never held
		rejected bool // the call leaves its schema
	}{
		{Hermes, "Let me look.\n<tool_call>\n" + weather + "\n</tool_call>", 1, false},
		{Hermes, `<tool_call>{"name":"now","arguments":{}}</tool_call><tool_call>` + weather + `</tool_call>`, 2, false},
		{Hermes, "It is sunny in Paris {today}.", 0, false},
		{Hermes, `<tool_call>{"name": "get_weather", "arguments": {"days": 2}}</tool_call>`, 0, true},
		{Hermes, `<tool_call>{"name": "get_time", "arguments": {}}</tool_call>`, 0, true},
		{Llama3, `{"name": "get_weather", "parameters": {"city": "Oslo", "days": 3}}`, 1, false},
		{Llama3, ` <|python_tag|>{"name":"now","parameters":{}}`, 1, false},
		{Llama3, `Here: {"name": "now"}`, 0, false},
		{Llama3, `{"name": "get_weather", "parameters": {"city": "Oslo", "days": 1.5}}`, 0, true},
		{Mistral, `[TOOL_CALLS][{"name": "now", "arguments": {}}, ` + weather + `]`, 2, false},
		{Mistral, `[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": 3}}]`, 0, true},
		{Granite, `<|tool_call|>[` + weather + `]`, 1, false},
		{Gemma4, `Checking. <|tool_call>call:get_weather{city:<|"|>Paris<|"|>}`, 1, false},
		{LFM2, `Checking. <|tool_call_start|>[get_weather(city='Paris'), now()]`, 2, false},
		{LFM2, `<|tool_call_start|>[ get_weather( city = "Oslo" , days=2 ) ]`, 1, false},
		{LFM2, "It is [sunny] (mostly).", 0, false},
		{LFM2, `<|tool_call_start|>[get_weather(town='Oslo')]`, 0, true},
		{Harmony, analysis + "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}", 1, false},
		{Harmony, analysis + "<|channel|>final<|message|>It is sunny.", 0, false},
		{Harmony, analysis + "<|channel|>commentary to=functions.get_weather json<|message|>{}", 0, true},
		{Generic, `{"tool_calls": [{"name": "now", "arguments": {}}]}`, 1, false},
		{Generic, "\n" + weather, 1, false},
		{Generic, "Hello {there}", 0, false},
		{Generic, `{"answer": 42}`, 0, true},
	} {
		g, err := LazyGrammar(tc.f, grammarTools, true)
		if err != nil {
			t.Fatalf("%v: %v", tc.f, err)
		}
		c, err := grammar.NewConstraint(g, v, text)
		if err != nil {
			t.Fatal(err)
		}
		var failed error
		for _, id := range append(lazyTokenize(tc.reply), eos) {
			if c.Triggered() && !tc.rejected {
				// Held, the reply's tokens are the mask's.
				if m, err := c.Mask(); err != nil || !grammar.Allowed(m, id) {
					t.Fatalf("%v %q: the mask refuses token %d: %v", tc.f, tc.reply, id, err)
				}
			}
			if failed = c.Accept(id); failed != nil {
				break
			}
		}
		if tc.rejected {
			if !errors.Is(failed, grammar.ErrRejected) {
				t.Errorf("%v %q: %v, want the call rejected", tc.f, tc.reply, failed)
			}
			continue
		}
		if failed != nil || c.Triggered() != (tc.calls > 0) {
			t.Errorf("%v %q: %v, triggered %v", tc.f, tc.reply, failed, c.Triggered())
			continue
		}
		var calls int
		if tc.f == Harmony {
			calls = len(harmony.Parse(tc.reply, true).Calls)
		} else {
			_, cs := Parse(tc.f, tc.reply)
			calls = len(cs)
		}
		if calls != tc.calls {
			t.Errorf("%v %q parses to %d calls, want %d", tc.f, tc.reply, calls, tc.calls)
		}
	}
	if _, err := LazyGrammar(Hermes, []Tool{{Name: "f", Parameters: []byte(`{"type": "string", "format": "ipv6"}`)}}, true); !errors.As(err, new(*SchemaError)) {
		t.Errorf("unsupported keyword: %v", err)
	}
}

// TestContentOrCalls: with a response format under auto, each format's
// reply is the content (a JSON value of its schema) or calls as Grammar
// writes them, which parse back to calls; nothing else. Formats whose
// calls open with a control token are refused.
func TestContentOrCalls(t *testing.T) {
	content := func(b *grammar.Builder) (grammar.Expr, error) {
		return b.Schema([]byte(`{"type":"object","properties":{"mood":{"enum":["glad","sad"]}},"required":["mood"],"additionalProperties":false}`))
	}
	analysis := "<|channel|>analysis<|message|>Need it.<|end|><|start|>assistant"
	for _, tc := range []struct {
		f      Format
		calls  []string
		reject []string
	}{
		{Hermes, []string{"<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"}, []string{"Sure. <tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"}},
		{Llama3, []string{`{"name": "get_weather", "parameters": {"city": "Oslo"}}`}, []string{`{"name": "get_weather", "parameters": {"days": 1}}`}},
		{Generic, []string{`{"tool_calls": [{"name": "now", "arguments": {}}]}`}, []string{`{"tool_calls": []}`}},
		{Harmony, []string{analysis + "<|channel|>commentary to=functions.now json<|message|>{}"}, []string{"<|channel|>final<|message|>hi"}},
	} {
		g, err := ContentOrCalls(tc.f, grammarTools, true, content)
		if err != nil {
			t.Fatalf("%v: %v", tc.f, err)
		}
		if !matches(t, g, `{"mood": "glad"}`) || matches(t, g, `{"mood": "meh"}`) || matches(t, g, "Just text.") {
			t.Errorf("%v: the content is not the schema's", tc.f)
		}
		for _, s := range tc.calls {
			var n int
			if tc.f == Harmony {
				n = len(harmony.Parse(s, true).Calls)
			} else {
				_, cs := Parse(tc.f, s)
				n = len(cs)
			}
			if !matches(t, g, s) || n != 1 {
				t.Errorf("%v: call %q: taken %v, parses to %d calls", tc.f, s, matches(t, g, s), n)
			}
		}
		for _, s := range tc.reject {
			if matches(t, g, s) {
				t.Errorf("%v takes %q", tc.f, s)
			}
		}
	}
	for _, f := range []Format{Mistral, Granite, Gemma4, LFM2} {
		if _, err := ContentOrCalls(f, grammarTools, true, content); !errors.Is(err, ErrControlMarker) {
			t.Errorf("%v: %v, want ErrControlMarker", f, err)
		}
	}
}
