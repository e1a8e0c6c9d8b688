package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"os"
	"reflect"
	"strings"
	"testing"
)

var weatherTool = json.RawMessage(`{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}`)

// TestGenericPolyfill: a template without tools (ChatML here, and the
// transcript) gets the tools in its system message, an assistant's calls
// as {"tool_calls": [...]} and results as {"tool_response": ...} user turns.
func TestGenericPolyfill(t *testing.T) {
	conv := []Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "Weather in Oslo?"},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city": "Oslo"}`}}},
		{Role: "tool", ToolCallID: "call_1", Content: "-3 C"},
	}
	tpl, err := Compile("chatml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tpl.TakesTools() {
		t.Fatal("chatml takes tools?")
	}
	got, err := tpl.Render(Input{Messages: conv, Tools: []json.RawMessage{weatherTool}, AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nBe brief.\n\n" + GenericToolPrompt +
		`{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}` + "<|im_end|>\n" +
		"<|im_start|>user\nWeather in Oslo?<|im_end|>\n" +
		"<|im_start|>assistant\n" + `{"tool_calls":[{"name":"get_weather","arguments":{"city":"Oslo"},"id":"call_1"}]}` + "<|im_end|>\n" +
		"<|im_start|>user\n" + `{"tool_response":{"tool_call_id":"call_1","content":"-3 C"}}` + "<|im_end|>\n" +
		"<|im_start|>assistant\n"
	if got != want {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}

	// Without a system message one is added; history alone (no tools:
	// tool_choice none) is polyfilled too.
	tr, _ := Compile("", Options{})
	got, err = tr.Render(Input{Messages: conv[1:], AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	want = "User: Weather in Oslo?\n\nAssistant: " + `{"tool_calls":[{"name":"get_weather","arguments":{"city":"Oslo"},"id":"call_1"}]}` +
		"\n\nUser: " + `{"tool_response":{"tool_call_id":"call_1","content":"-3 C"}}` + "\n\nAssistant:"
	if got != want {
		t.Errorf("transcript: got\n%q\nwant\n%q", got, want)
	}
	got, _ = tr.Render(Input{Messages: conv[1:2], Tools: []json.RawMessage{weatherTool}, AddGenerationPrompt: true})
	if !strings.HasPrefix(got, "System: "+GenericToolPrompt) || !strings.HasSuffix(got, "User: Weather in Oslo?\n\nAssistant:") {
		t.Errorf("transcript with tools: %q", got)
	}
	if _, err := tr.Render(Input{Messages: conv[1:2], Tools: []json.RawMessage{json.RawMessage(`{"type":`)}}); err == nil {
		t.Error("a broken tool rendered")
	}
}

// TestArgumentsValue: arguments that are a JSON object reach the template
// as an object (key order kept); anything else as the text sent.
func TestArgumentsValue(t *testing.T) {
	tpl, err := Compile(`{% if tools %}{% endif %}{% for m in messages %}{% for c in m.tool_calls %}{{ c.function.arguments | tojson }}|{{ c.function.arguments is string }};{% endfor %}{% endfor %}`, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpl.Apply([]Message{{Role: "assistant", ToolCalls: []ToolCall{
		{Name: "a", Arguments: `{"z": 1, "a": [1.5, "x<y&z"], "m": {"k": null}}`},
		{Name: "b", Arguments: `not json`},
		{Name: "c", Arguments: `[1, 2]`},
	}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"z": 1, "a": [1.5, "x<y&z"], "m": {"k": null}}|False;"not json"|True;"[1, 2]"|True;`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// TestJSONValueNumberRange: a number past float64's range is refused (it
// has no JSON a template could print back), integers stay integers.
func TestJSONValueNumberRange(t *testing.T) {
	for _, doc := range []string{`1e1000`, `[-1e400]`, `{"max": 2e308}`} {
		if _, err := JSONValue([]byte(doc)); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("%s: err %v, want out of range", doc, err)
		}
	}
	tpl, err := Compile("{{ tools[0] | tojson }}", Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Integers keep every digit, past int64 and float64 too, as
	// json.loads keeps them.
	huge := "1" + strings.Repeat("0", 400)
	out, err := tpl.Render(Input{Tools: []json.RawMessage{json.RawMessage(`[9007199254740993, 1.5e300, -0.25, 123456789012345678901234567890, -9223372036854775809, ` + huge + `]`)}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `[9007199254740993, 1.5e+300, -0.25, 123456789012345678901234567890, -9223372036854775809, ` + huge + `]`; out != want {
		t.Errorf("rendered %s, want %s", out, want)
	}
	// Past the engine's bound on an integer, refused, not read as
	// something else.
	if _, err := JSONValue([]byte("[" + strings.Repeat("9", 30000) + "]")); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("a 30000-digit integer: err %v, want out of range", err)
	}
}

// TestIndentedJSON: tojson(indent=N) is Python's json.dumps(indent=N,
// ensure_ascii=False), as transformers renders it: Python's layout, key
// order, float repr and characters (the engine had gone through Go maps
// and json.MarshalIndent, sorting keys and escaping <, > and &).
func TestIndentedJSON(t *testing.T) {
	tpl, err := Compile(`{% for t in tools %}{{ t | tojson(indent=2) }}{% endfor %}`, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpl.Render(Input{Tools: []json.RawMessage{json.RawMessage(`{"z": [], "a": {}, "f": [1.0, 1e20, 0.00001, 123456789012.5, -2, true, null, "é\u2028<&>\n\"\\\u0001"]}`)}})
	if err != nil {
		t.Fatal(err)
	}
	// json.dumps({"z": [], "a": {}, "f": [1.0, 1e20, 0.00001, 123456789012.5, -2, True, None, "é\u2028<&>\n\"\\\x01"]}, indent=2, ensure_ascii=False)
	want := "{\n  \"z\": [],\n  \"a\": {},\n  \"f\": [\n    1.0,\n    1e+20,\n    1e-05,\n    123456789012.5,\n    -2,\n    true,\n    null,\n    \"é\u2028<&>\\n\\\"\\\\\\u0001\"\n  ]\n}"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// TestGenericOverride: Input.Generic polyfills a template that takes
// tools (one whose call format cannot be read back).
func TestGenericOverride(t *testing.T) {
	tpl, err := Compile(`{% for t in tools %}[{{ t.function.name }}]{% endfor %}{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}`, Options{})
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Messages: []Message{{Role: "user", Content: "hi"}}, Tools: []json.RawMessage{weatherTool}}
	if got, _ := tpl.Render(in); got != "[get_weather]user:hi;" {
		t.Errorf("native: %q", got)
	}
	in.Generic = true
	got, _ := tpl.Render(in)
	if want := "system:" + GenericToolPrompt + `{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}};user:hi;`; got != want {
		t.Errorf("generic: %q, want %q", got, want)
	}
}

// FuzzJSONValue feeds arbitrary bytes as a client's tool or arguments
// JSON: JSONValue takes exactly the valid JSON (nested at most
// maxJSONDepth), and tojson gives back the same value. Seeded from the
// golden conversations' tools.
func FuzzJSONValue(f *testing.F) {
	var convs []conversation
	b, err := os.ReadFile("testdata/conversations.json")
	if err != nil {
		f.Fatal(err)
	}
	if err := json.Unmarshal(b, &convs); err != nil {
		f.Fatal(err)
	}
	for _, c := range convs {
		for _, tool := range c.Tools {
			f.Add([]byte(tool))
		}
	}
	f.Add([]byte(`[1, -2.5e3, "\u00e9\n", true, null, {"": {}}]`))
	f.Add([]byte(`1e1000`))
	tpl, err := Compile("{{ tools[0] | tojson }}", Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		_, err := JSONValue(doc)
		deep := bytes.Count(doc, []byte("["))+bytes.Count(doc, []byte("{")) > maxJSONDepth
		// Valid JSON whose numbers are in range: a float's in float64's
		// (1e1000 is refused), an integer's any up to the engine's bound.
		probe, perr := decodeNumbers(doc)
		if valid := perr == nil && numbersInRange(probe); valid != (err == nil) && !(valid && deep) {
			t.Fatalf("%q: valid %v, JSONValue error %v", doc, valid, err)
		}
		if err != nil {
			return
		}
		out, err := tpl.Render(Input{Tools: []json.RawMessage{json.RawMessage("[" + string(doc) + "]")}})
		if err != nil {
			if errors.Is(err, ErrTemplate) && deep {
				return
			}
			t.Fatalf("%q: %v", doc, err)
		}
		got, err := decodeNumbers([]byte(out))
		if err != nil {
			t.Fatalf("%q rendered as %q, not JSON", doc, out)
		}
		if want := normalNumbers(probe); !reflect.DeepEqual([]any{want}, normalNumbers(got)) {
			t.Fatalf("%q rendered as %q", doc, out)
		}
	})
}

// decodeNumbers decodes one JSON value with its numbers as written.
func decodeNumbers(doc []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more after the value")
	}
	return v, nil
}

// numbersInRange reports whether every number in v is one JSONValue
// takes: a float in float64's range, an integer of at most 65,536 bits
// (the engine's bound).
func numbersInRange(v any) bool {
	switch v := v.(type) {
	case json.Number:
		if strings.ContainsAny(string(v), ".eE") {
			_, err := v.Float64()
			return err == nil
		}
		n, ok := new(big.Int).SetString(string(v), 10)
		return ok && n.BitLen() <= 1<<16
	case []any:
		for _, x := range v {
			if !numbersInRange(x) {
				return false
			}
		}
	case map[string]any:
		for _, x := range v {
			if !numbersInRange(x) {
				return false
			}
		}
	}
	return true
}

// normalNumbers is v with each number as the value it stands for: an
// integer's digits (-0 is 0), a float's float64.
func normalNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if strings.ContainsAny(string(v), ".eE") {
			f, _ := v.Float64()
			return f
		}
		n, _ := new(big.Int).SetString(string(v), 10)
		return n.String()
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = normalNumbers(x)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = normalNumbers(x)
		}
		return out
	}
	return v
}
