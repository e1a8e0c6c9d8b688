package toolcall

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf/chat"
)

type wantCall struct{ name, args string }

// cases are outputs as the models write them (the shapes their templates
// render for an assistant's calls), with the content and calls expected.
var cases = []struct {
	name    string
	f       Format
	text    string
	content string
	calls   []wantCall
}{
	{"llama3 call", Llama3, `{"name": "get_weather", "parameters": {"location": "Paris", "unit": "celsius"}}`,
		"", []wantCall{{"get_weather", `{"location": "Paris", "unit": "celsius"}`}}},
	{"llama3 python_tag and type", Llama3, "<|python_tag|>{\"type\": \"function\", \"name\": \"get_time\", \"parameters\": {\"city\": \"Rome\"}}",
		"", []wantCall{{"get_time", `{"city": "Rome"}`}}},
	{"llama3 two calls", Llama3, "\n{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": {\"x\": [1, {\"y\": \"}\"}]}}\n",
		"", []wantCall{{"a", `{}`}, {"b", `{"x": [1, {"y": "}"}]}`}}},
	{"llama3 plain answer", Llama3, "The weather in Paris is {mild}.  ", "The weather in Paris is {mild}.  ", nil},
	{"llama3 JSON answer", Llama3, `{"location": "Paris"} is what I found`, `{"location": "Paris"} is what I found`, nil},
	{"llama3 object without name", Llama3, `{"type": "x"} ok`, `{"type": "x"} ok`, nil},
	{"llama3 call cut short", Llama3, `{"name": "get_weather", "parameters": {"location": "Par`,
		"", []wantCall{{"get_weather", `{"location": "Par`}}},
	{"hermes call", Hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>",
		"", []wantCall{{"get_weather", `{"location": "Paris"}`}}},
	{"qwen content and two calls", Hermes, "Let me check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>",
		"Let me check both.", []wantCall{{"get_weather", `{"location": "Paris"}`}, {"get_time", `{"city": "Rome"}`}}},
	{"hermes string arguments", Hermes, `<tool_call>{"name": "f", "arguments": "{\"a\": 1}"}</tool_call>`,
		"", []wantCall{{"f", `{"a": 1}`}}},
	{"hermes no arguments, no closing tag", Hermes, `<tool_call>{"name": "now"}`, "", []wantCall{{"now", `{}`}}},
	{"hermes not a call", Hermes, "I use <tool_call> tags: <tool_call>oops", "I use <tool_call> tags: <tool_call>oops", nil},
	{"hermes plain", Hermes, "Hello <tool world\n", "Hello <tool world\n", nil},
	{"hermes arguments first", Hermes, `<tool_call>{"arguments": {"q": "x"}, "name": "search"}</tool_call>`,
		"", []wantCall{{"search", `{"q": "x"}`}}},
	{"qwen3-coder xml", Hermes, "I'll look.\n<tool_call>\n<function=get_weather>\n<parameter=location>\nSão Paulo\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=hourly>\nTrue\n</parameter>\n<parameter=note>\nline one\nline \"two\"\n</parameter>\n</function>\n</tool_call>",
		"I'll look.", []wantCall{{"get_weather", `{"location":"São Paulo","days":3,"hourly":true,"note":"line one\nline \"two\""}`}}},
	{"qwen3-coder xml, no parameters, cut short", Hermes, "<tool_call>\n<function=now>\n</function>\n</tool_call><tool_call>\n<function=get_weather>\n<parameter=location>\nPa",
		"", []wantCall{{"now", `{}`}, {"get_weather", `{}`}}},
	{"mistral array", Mistral, `[TOOL_CALLS] [{"name": "get_weather", "arguments": {"location": "Paris"}, "id": "a1B2c3D4e"}, {"name": "get_time", "arguments": {"city": "Rome"}}]`,
		"", []wantCall{{"get_weather", `{"location": "Paris"}`}, {"get_time", `{"city": "Rome"}`}}},
	{"mistral name[ARGS]", Mistral, `[TOOL_CALLS]get_weather[ARGS]{"location": "Paris"}[TOOL_CALLS]get_time[CALL_ID]x1y2z3w4v[ARGS]{"city": "Rome"}`,
		"", []wantCall{{"get_weather", `{"location": "Paris"}`}, {"get_time", `{"city": "Rome"}`}}},
	{"mistral plain", Mistral, "No tools [TOOL needed.", "No tools [TOOL needed.", nil},
	{"granite", Granite, `Let me look.<|tool_call|>[{"name": "get_weather", "arguments": {"location": "Paris"}}, {"name": "get_time", "arguments": {"city": "Rome"}}]`,
		"Let me look.", []wantCall{{"get_weather", `{"location": "Paris"}`}, {"get_time", `{"city": "Rome"}`}}},
	{"granite not a list", Granite, "<|tool_call|>get_weather", "<|tool_call|>get_weather", nil},
	{"generic wrapper", Generic, `{"tool_calls": [{"name": "get_weather", "arguments": {"location": "Oslo"}}, {"name": "get_time", "arguments": {"city": "Oslo"}}]}`,
		"", []wantCall{{"get_weather", `{"location": "Oslo"}`}, {"get_time", `{"city": "Oslo"}`}}},
	{"generic single", Generic, ` {"name": "get_weather", "arguments": {"location": "Oslo"}}`,
		"", []wantCall{{"get_weather", `{"location": "Oslo"}`}}},
	{"generic plain", Generic, "It is cold in Oslo.", "It is cold in Oslo.", nil},
	{"gemma4 call", Gemma4, `<|tool_call>call:get_weather{location:<|"|>Paris<|"|>,unit:<|"|>celsius<|"|>}<tool_call|>`,
		"", []wantCall{{"get_weather", `{"location":"Paris","unit":"celsius"}`}}},
	{"gemma4 content, nesting and two calls", Gemma4, "Let me check.<|tool_call>call:f{a:1,b:-2.5e3,c:true,d:null,e:[1,<|\"|>x \"y\"\n\\<|\"|>],g:{<|\"|>k k<|\"|>:{z:[]}}}<tool_call|><|tool_call>call:now{}<tool_call|>",
		"Let me check.", []wantCall{{"f", `{"a":1,"b":-2.5e3,"c":true,"d":null,"e":[1,"x \"y\"\n\\"],"g":{"k k":{"z":[]}}}`}, {"now", `{}`}}},
	{"gemma4 forced, no closing token", Gemma4, `<|tool_call>call:get_time{city:<|"|>Rome<|"|>}`,
		"", []wantCall{{"get_time", `{"city":"Rome"}`}}},
	{"gemma4 malformed arguments", Gemma4, `<|tool_call>call:f{a:}<tool_call|>`, `<|tool_call>call:f{a:}<tool_call|>`, nil},
	{"gemma4 not a call", Gemma4, "A <|tool_call>note", "A <|tool_call>note", nil},
	{"gemma4 plain", Gemma4, "Sunny, 21 degrees.", "Sunny, 21 degrees.", nil},
	{"lfm2 call", LFM2, `<|tool_call_start|>[get_weather(location='Paris', unit="celsius")]<|tool_call_end|>`,
		"", []wantCall{{"get_weather", `{"location":"Paris","unit":"celsius"}`}}},
	{"lfm2 content, parallel calls, literals", LFM2, "Let me check.<|tool_call_start|>[f(a=1, b=-2.5e3, c=True, d=None, e=[1, 'x \\'y\\'\\n\\\\', (2, 3)], g={'k k': {\"z\": []}}, h=false, i=null, j=1_000,), now()]<|tool_call_end|>Done.",
		"Let me check.Done.", []wantCall{{"f", `{"a":1,"b":-2500,"c":true,"d":null,"e":[1,"x 'y'\n\\",[2,3]],"g":{"k k":{"z":[]}},"h":false,"i":null,"j":1000}`}, {"now", `{}`}}},
	{"lfm2 escapes", LFM2, `<|tool_call_start|>[say(text="caf\xe9 \u2603 \U0001F600 \q \ud800")]<|tool_call_end|>`,
		"", []wantCall{{"say", `{"text":"café ☃ 😀 \\q ` + "\uFFFD" + `"}`}}},
	{"lfm2 forced, no closing token", LFM2, `<|tool_call_start|>[get_time(city='Rome')]`,
		"", []wantCall{{"get_time", `{"city":"Rome"}`}}},
	{"lfm2 positional argument", LFM2, `<|tool_call_start|>[f('x')]<|tool_call_end|>`, `<|tool_call_start|>[f('x')]<|tool_call_end|>`, nil},
	{"lfm2 not a list", LFM2, "A <|tool_call_start|>note", "A <|tool_call_start|>note", nil},
	{"lfm2 empty list", LFM2, "<|tool_call_start|>[]<|tool_call_end|>", "<|tool_call_start|>[]<|tool_call_end|>", nil},
	{"lfm2 infinity", LFM2, "<|tool_call_start|>[f(x=inf)]<|tool_call_end|>", "<|tool_call_start|>[f(x=inf)]<|tool_call_end|>", nil},
	{"lfm2 plain", LFM2, "Sunny, 21 degrees.", "Sunny, 21 degrees.", nil},
}

func check(t *testing.T, label string, content string, calls []Call, wantContent string, want []wantCall) {
	t.Helper()
	if content != wantContent {
		t.Errorf("%s: content %q, want %q", label, content, wantContent)
	}
	if len(calls) != len(want) {
		t.Fatalf("%s: %d calls %+v, want %d", label, len(calls), calls, len(want))
	}
	for i, c := range calls {
		if c.Name != want[i].name || c.Arguments != want[i].args {
			t.Errorf("%s: call %d = %s(%s), want %s(%s)", label, i, c.Name, c.Arguments, want[i].name, want[i].args)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range cases {
		content, calls := Parse(tc.f, tc.text)
		check(t, tc.name, content, calls, tc.content, tc.calls)
		seen := map[string]bool{}
		for _, c := range calls {
			if seen[c.ID] {
				t.Errorf("%s: id %s twice", tc.name, c.ID)
			}
			seen[c.ID] = true
			if tc.f == Mistral && len(c.ID) != 9 || tc.f != Mistral && (!strings.HasPrefix(c.ID, "call_") || len(c.ID) != 29) {
				t.Errorf("%s: id %q", tc.name, c.ID)
			}
		}
	}
}

// accumulate is what an OpenAI SDK builds from a stream's deltas: content
// concatenated, each call by index, its id, type and name from its first
// delta and its arguments appended. It checks the deltas' shape: indexes
// in order from 0, and id and name on a call's first delta only.
func accumulate(t *testing.T, evs []Event) (string, []Call) {
	t.Helper()
	var b strings.Builder
	var calls []Call
	for _, e := range evs {
		if e.Call == nil {
			if e.Content == "" {
				t.Errorf("empty content event")
			}
			b.WriteString(e.Content)
			continue
		}
		d := e.Call
		switch {
		case d.Index == len(calls):
			if d.ID == "" || d.Name == "" {
				t.Fatalf("call %d's first delta has id %q, name %q", d.Index, d.ID, d.Name)
			}
			calls = append(calls, Call{ID: d.ID, Name: d.Name})
		case d.Index == len(calls)-1:
			if d.ID != "" || d.Name != "" || d.Arguments == "" {
				t.Fatalf("call %d's later delta %+v", d.Index, d)
			}
		default:
			t.Fatalf("delta for call %d while %d are open", d.Index, len(calls))
		}
		calls[d.Index].Arguments += d.Arguments
	}
	return b.String(), calls
}

func feedChunks(p *Parser, text string, cuts []int) []Event {
	var evs []Event
	last := 0
	for _, c := range cuts {
		evs = append(evs, p.Feed(text[last:c])...)
		last = c
	}
	evs = append(evs, p.Feed(text[last:])...)
	return append(evs, p.Finish()...)
}

func randomCuts(r *rand.Rand, n int) []int {
	if n == 0 {
		return nil
	}
	k := r.IntN(n + 1)
	cuts := make([]int, k)
	for i := range cuts {
		cuts[i] = r.IntN(n + 1)
	}
	for i := 1; i < len(cuts); i++ {
		for j := i; j > 0 && cuts[j] < cuts[j-1]; j-- {
			cuts[j], cuts[j-1] = cuts[j-1], cuts[j]
		}
	}
	return cuts
}

// TestStream feeds every case byte by byte and in random pieces: the
// deltas reassemble, as an SDK does, to exactly what Parse returns, and
// a call's arguments start streaming before the call is complete.
func TestStream(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range cases {
		every := make([]int, len(tc.text))
		for i := range every {
			every[i] = i
		}
		evs := feedChunks(NewParser(tc.f, nil), tc.text, every)
		content, calls := accumulate(t, evs)
		check(t, tc.name+" (byte by byte)", content, calls, tc.content, tc.calls)
		// JSON arguments stream as written; the XML form's, Gemma 4's and
		// LFM2's are built, so they come whole at the call's end.
		if len(tc.calls) > 0 && strings.Contains(tc.calls[0].args, ",") && !strings.Contains(tc.text, "<function=") && tc.f != Gemma4 && tc.f != LFM2 {
			pieces := 0
			for _, e := range evs {
				if e.Call != nil && e.Call.Index == 0 && e.Call.Arguments != "" {
					pieces++
				}
			}
			if pieces < 2 {
				t.Errorf("%s: call 0's arguments came in %d piece(s), want them streamed", tc.name, pieces)
			}
		}
		for range 50 {
			content, calls := accumulate(t, feedChunks(NewParser(tc.f, nil), tc.text, randomCuts(r, len(tc.text))))
			check(t, tc.name+" (random pieces)", content, calls, tc.content, tc.calls)
		}
	}
}

// TestHoldBack: text that may open a call is held back, and released as
// soon as it cannot.
func TestHoldBack(t *testing.T) {
	p := NewParser(Hermes, nil)
	if evs := p.Feed("Sure. <tool_"); len(evs) != 1 || evs[0].Content != "Sure." {
		t.Fatalf("events %+v", evs)
	}
	if evs := p.Feed("box> x"); len(evs) != 1 || evs[0].Content != " <tool_box> x" {
		t.Fatalf("events %+v", evs)
	}
	p = NewParser(Llama3, nil)
	if evs := p.Feed("  \n"); len(evs) != 0 {
		t.Fatalf("leading space: %+v", evs)
	}
	if evs := p.Feed(`{"na`); len(evs) != 0 {
		t.Fatalf("undecided object: %+v", evs)
	}
	evs := p.Feed(`me": "f", "parameters": {"a": `)
	if len(evs) != 2 || evs[0].Call == nil || evs[0].Call.Name != "f" || evs[1].Call == nil || evs[1].Call.Arguments != `{"a": ` {
		t.Fatalf("events %+v", evs)
	}
}

// TestDetect: each template under chat's testdata that takes tools gets
// the format its assistant tool-call turns are written in.
func TestDetect(t *testing.T) {
	want := map[string]Format{
		"llama-3.1.jinja": Llama3, "llama-3.2.jinja": Llama3,
		"qwen2.5.jinja": Hermes, "qwen3.jinja": Hermes, "hermes-2-pro-tool-use.jinja": Hermes,
		"mistral-nemo.jinja": Mistral, "mistral-small-3.1.jinja": Mistral,
		"granite-3.3.jinja": Granite, "gpt-oss.jinja": Harmony, "gemma-4.jinja": Gemma4,
		"LFM2-8B-A1B.jinja": LFM2, "LFM2.5-8B-A1B.jinja": LFM2, "LFM2.5-Instruct.jinja": LFM2,
		"chatml-qwen2.jinja": Generic, "gemma-2.jinja": Generic, "phi-3.jinja": Generic, "llama-3.jinja": Generic,
	}
	for name, f := range want {
		src, err := os.ReadFile(filepath.Join("../testdata/templates", name))
		if err != nil {
			t.Fatal(err)
		}
		tpl, err := chat.Compile(string(src), chat.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := Detect(tpl); got != f {
			t.Errorf("%s: %v, want %v", name, got, f)
		}
	}
	tr, _ := chat.Compile("", chat.Options{})
	if Detect(tr) != Generic {
		t.Error("transcript is not generic")
	}
}

// TestRoundTrip renders an assistant's calls with each real template and
// parses the text the template wrote for them back: what a model trained
// on the template writes is what the parser reads.
// roundTripCalls are the calls rendered by renderedTurns.
var roundTripCalls = []chat.ToolCall{
	{ID: "a1B2c3D4e", Name: "get_weather", Arguments: `{"location": "Paris", "unit": "celsius"}`},
	{ID: "q1W2e3R4t", Name: "get_time", Arguments: `{"city": "Rome"}`},
}

// renderedTurn is an assistant turn of calls as a real template writes it.
type renderedTurn struct {
	template string
	f        Format
	calls    int
	text     string
}

// renderedTurns renders an assistant's calls with each real template that
// takes tools (two calls, one where the template takes one) and cuts out
// the assistant's turn: what a model trained on the template writes.
func renderedTurns(tb testing.TB) []renderedTurn {
	tool := json.RawMessage(`{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}`)
	var out []renderedTurn
	for _, tc := range []struct{ name, open string }{
		{"llama-3.1.jinja", "<|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"llama-3.2.jinja", "<|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"qwen2.5.jinja", "<|im_start|>assistant"},
		{"qwen3.jinja", "<|im_start|>assistant\n"},
		{"hermes-2-pro-tool-use.jinja", "<|im_start|>assistant"},
		{"mistral-nemo.jinja", "[/INST]"},
		{"mistral-small-3.1.jinja", "[/INST]"},
		{"gemma-4.jinja", "<|turn>model\n"},
		{"google-gemma-4-31B-it.jinja", "<|turn>model\n"},
		{"google-gemma-4-31B-it-interleaved.jinja", "<|turn>model\n"},
		{"Qwen3.5-4B.jinja", "<|im_start|>assistant\n"},
		{"Qwen3-Coder.jinja", "<|im_start|>assistant\n"},
		{"Mistral-Small-3.2-24B-Instruct-2506.jinja", "[/INST]"},
		{"meta-llama-Llama-3.3-70B-Instruct.jinja", "<|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"LFM2.5-8B-A1B.jinja", "<|im_start|>assistant\n"},
	} {
		src, err := os.ReadFile(filepath.Join("../testdata/templates", tc.name))
		if err != nil {
			tb.Fatal(err)
		}
		tpl, err := chat.Compile(string(src), chat.Options{BOS: "<s>", EOS: "</s>", Now: func() time.Time { return time.Unix(0, 0) }})
		if err != nil {
			tb.Fatal(err)
		}
		n := 2
		if strings.HasPrefix(tc.name, "llama") || strings.HasPrefix(tc.name, "meta-llama") {
			n = 1 // "This model only supports single tool-calls at once!"
		}
		rendered, err := tpl.Render(chat.Input{Tools: []json.RawMessage{tool}, Messages: []chat.Message{
			{Role: "user", Content: "Weather in Paris, time in Rome?"},
			{Role: "assistant", ToolCalls: roundTripCalls[:n]},
		}})
		if err != nil {
			tb.Fatalf("%s: %v", tc.name, err)
		}
		i := strings.LastIndex(rendered, tc.open)
		if i < 0 {
			tb.Fatalf("%s: no %q in %q", tc.name, tc.open, rendered)
		}
		turn := rendered[i+len(tc.open):]
		for _, end := range []string{"<|eot_id|>", "<|im_end|>", "</s>", "<|tool_response>", "<turn|>"} {
			turn = strings.TrimSuffix(strings.TrimSuffix(turn, "\n"), end)
		}
		if _, after, ok := strings.Cut(turn, "</think>"); ok {
			turn = after // Qwen3 shows the last turn's (empty) reasoning
		}
		out = append(out, renderedTurn{tc.name, Detect(tpl), n, turn})
	}
	return out
}

// TestRoundTrip parses the calls each real template writes back: what a
// model trained on the template writes is what the parser reads.
func TestRoundTrip(t *testing.T) {
	for _, rt := range renderedTurns(t) {
		content, got := Parse(rt.f, rt.text)
		if content != "" || len(got) != rt.calls {
			t.Fatalf("%s (%v): %q parsed to content %q, calls %+v", rt.template, rt.f, rt.text, content, got)
		}
		for j, c := range got {
			var a, b any
			_ = json.Unmarshal([]byte(c.Arguments), &a)
			_ = json.Unmarshal([]byte(roundTripCalls[j].Arguments), &b)
			if c.Name != roundTripCalls[j].Name || fmt.Sprint(a) != fmt.Sprint(b) {
				t.Errorf("%s: call %d = %s(%s), want %s", rt.template, j, c.Name, c.Arguments, roundTripCalls[j].Name)
			}
		}
	}
}

// TestXMLParamTypes: the tool's schema decides whether a parameter's text
// is a string or the JSON it spells.
func TestXMLParamTypes(t *testing.T) {
	text := "<tool_call>\n<function=ship>\n<parameter=zip>\n01234\n</parameter>\n<parameter=count>\n2\n</parameter>\n<parameter=tags>\n[\"a\"]\n</parameter>\n</function>\n</tool_call>"
	types := map[string]string{"zip": "string", "count": "integer"}
	for _, cuts := range [][]int{nil, {5, 40, 41, 90}} {
		p := NewParser(Hermes, nil)
		p.ParamType = func(tool, param string) string {
			if tool != "ship" {
				t.Errorf("ParamType asked about tool %q", tool)
			}
			return types[param]
		}
		content, calls := accumulate(t, feedChunks(p, text, cuts))
		if content != "" || len(calls) != 1 || calls[0].Arguments != `{"zip":"01234","count":2,"tags":["a"]}` {
			t.Errorf("cuts %v: %q %+v", cuts, content, calls)
		}
	}
}

// TestLongNameIsText: a Mistral call name, or a Qwen3-Coder <function=
// name, is looked for within maxName bytes; one longer is text, whether
// the output comes whole (Parse) or in pieces of any size — where a
// stream once gave up after maxName bytes and the whole text made a call
// of it (found by FuzzParser) — and one of maxName bytes is a call.
func TestLongNameIsText(t *testing.T) {
	long := strings.Repeat("n", maxName+10)
	fits := strings.Repeat("n", maxName-len("<function="))
	for _, tc := range []struct {
		f    Format
		text string
		call bool
	}{
		{Mistral, "[TOOL_CALLS]" + long + `[ARGS]{"a":1}`, false},
		{Mistral, "[TOOL_CALLS]" + long[:maxName] + `[ARGS]{"a":1}`, true},
		{Hermes, "<tool_call><function=" + long + "></function></tool_call>", false},
		{Hermes, "<tool_call><function=" + fits + "></function></tool_call>", true},
	} {
		content, calls := Parse(tc.f, tc.text)
		if (len(calls) == 1) != tc.call || !tc.call && content != tc.text {
			t.Errorf("%v, name of %d: Parse %q %+v, want a call %v", tc.f, len(tc.text), content, calls, tc.call)
		}
		for _, piece := range []int{1, 7, 64, maxName, len(tc.text)} {
			var cuts []int
			for at := piece; at < len(tc.text); at += piece {
				cuts = append(cuts, at)
			}
			c, k := accumulate(t, feedChunks(NewParser(tc.f, nil), tc.text, cuts))
			if c != content || len(k) != len(calls) {
				t.Errorf("%v, name of %d, pieces of %d: stream %q %d calls, Parse %q %d", tc.f, len(tc.text), piece, c, len(k), content, len(calls))
			}
		}
	}
}

// FuzzParser feeds arbitrary output in arbitrary pieces: the stream's
// deltas are well formed and reassemble to what Parse returns for the
// whole text, in every format. The seeds are the cases' outputs and the
// calls the real templates write (renderedTurns).
func FuzzParser(f *testing.F) {
	// The formats this package's Parser reads (harmony's are package
	// harmony's), by the fuzzer's byte.
	formats := []Format{Generic, Llama3, Hermes, Mistral, Granite, Gemma4, LFM2}
	index := func(fm Format) uint8 { return uint8(max(slices.Index(formats, fm), 0)) }
	for _, tc := range cases {
		f.Add(tc.text, uint64(len(tc.text)), index(tc.f))
	}
	for _, rt := range renderedTurns(f) {
		f.Add(rt.text, uint64(len(rt.text)), index(rt.f))
	}
	f.Fuzz(func(t *testing.T, text string, seed uint64, format uint8) {
		fm := formats[int(format)%len(formats)]
		wantContent, wantCalls := Parse(fm, text)
		r := rand.New(rand.NewPCG(seed, 7))
		content, calls := accumulate(t, feedChunks(NewParser(fm, nil), text, randomCuts(r, len(text))))
		if content != wantContent || len(calls) != len(wantCalls) {
			t.Fatalf("%v %q: stream gave %q %+v, Parse %q %+v", fm, text, content, calls, wantContent, wantCalls)
		}
		for i := range calls {
			if calls[i].Name != wantCalls[i].Name || calls[i].Arguments != wantCalls[i].Arguments {
				t.Fatalf("%v %q: call %d: stream %+v, Parse %+v", fm, text, i, calls[i], wantCalls[i])
			}
		}
	})
}

// xmlTemplate writes an assistant's calls as Qwen3-Coder's and Qwen3.5's
// templates do (their tool-call loop: <function=...>, a <parameter=...>
// per argument, mappings and lists as JSON, anything else through
// `| string`).
const xmlTemplate = `{%- if tools %}{%- endif %}{%- for message in messages %}{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{{- '<tool_call>\n<function=' + tool_call.name + '>\n' }}
{%- for args_name, args_value in tool_call.arguments|items %}
{{- '<parameter=' + args_name + '>\n' }}
{%- set args_value = args_value | tojson | safe if args_value is mapping or (args_value is sequence and args_value is not string) else args_value | string %}
{{- args_value }}
{{- '\n</parameter>\n' }}
{%- endfor %}
{{- '</function>\n</tool_call>' }}
{%- endfor %}{%- endfor %}`

// TestXMLRoundTrip renders calls in the XML form and parses them back to
// the same arguments.
func TestXMLRoundTrip(t *testing.T) {
	tpl, err := chat.Compile(xmlTemplate, chat.Options{})
	if err != nil {
		t.Fatal(err)
	}
	args := `{"city": "São Paulo", "days": 3, "hourly": true, "ratio": 0.5, "opts": {"a": [1, "x"]}, "tags": ["a", "b"], "note": "two\nlines"}`
	out, err := tpl.Render(chat.Input{Messages: []chat.Message{{Role: "assistant", ToolCalls: []chat.ToolCall{{ID: "c1", Name: "get_weather", Arguments: args}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "<parameter=hourly>\nTrue\n</parameter>") {
		t.Fatalf("rendered %q", out)
	}
	content, calls := Parse(Hermes, out)
	if content != "" || len(calls) != 1 {
		t.Fatalf("%q parsed to %q %+v", out, content, calls)
	}
	var got, want any
	if err := json.Unmarshal([]byte(calls[0].Arguments), &got); err != nil {
		t.Fatalf("arguments %s: %v", calls[0].Arguments, err)
	}
	_ = json.Unmarshal([]byte(args), &want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("arguments %s, want %s", calls[0].Arguments, args)
	}
}

// TestRender: LFM2's calls written as the model writes them read back to
// the same calls, whatever their arguments hold; other formats, and
// arguments that are not an object, are not written.
func TestRender(t *testing.T) {
	calls := []Call{
		{Name: "get_weather", Arguments: `{"city": "O'slo \\ \"x\"\n\u0001é", "days": 3, "deep": {"a": [1.5e-3, true, false, null, "t"]}}`},
		{Name: "now"},
	}
	text, ok := Render(LFM2, calls)
	if !ok {
		t.Fatal("not written")
	}
	content, got := Parse(LFM2, text)
	if content != "" || len(got) != 2 || got[0].Name != "get_weather" || got[1].Name != "now" || got[1].Arguments != "{}" {
		t.Fatalf("%q parses to %q %+v", text, content, got)
	}
	var want, have any
	if json.Unmarshal([]byte(calls[0].Arguments), &want) != nil || json.Unmarshal([]byte(got[0].Arguments), &have) != nil || !reflect.DeepEqual(want, have) {
		t.Errorf("%q: arguments %s, want %s", text, got[0].Arguments, calls[0].Arguments)
	}
	if _, ok := Render(Hermes, calls); ok {
		t.Error("Hermes written")
	}
	if _, ok := Render(LFM2, []Call{{Name: "f", Arguments: `[1]`}}); ok {
		t.Error("an array of arguments written")
	}
}
