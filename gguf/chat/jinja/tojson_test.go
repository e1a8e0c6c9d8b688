package jinja

import (
	"strings"
	"testing"
)

// TestTojson: tojson prints as Python's json.dumps(ensure_ascii=False)
// does, which is what transformers renders a template with; each want is
// Python 3.12's output for the same value and arguments.
func TestTojson(t *testing.T) {
	v := FromGoValue(map[string]any{})
	v.AsDict().Set("z", FromGoValue([]any{1.0, 100.0, 1e16, 1.5e-5, -2, true, nil}))
	v.AsDict().Set("a", NewString("\b\f\u2028<&>\"\\\x01é"))
	v.AsDict().Set("e", FromGoValue([]any{}))
	v.AsDict().Set("m", FromGoValue(map[string]any{}))
	for src, want := range map[string]string{
		// json.dumps(v, ensure_ascii=False)
		`{{ v | tojson }}`: `{"z": [1.0, 100.0, 1e+16, 1.5e-05, -2, true, null], "a": "\b\f` + "\u2028" + `<&>\"\\\u0001é", "e": [], "m": {}}`,
		// json.dumps(v, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
		`{{ v | tojson(sort_keys=true, separators=[",", ":"]) }}`: `{"a":"\b\f` + "\u2028" + `<&>\"\\\u0001é","e":[],"m":{},"z":[1.0,100.0,1e+16,1.5e-05,-2,true,null]}`,
		// json.dumps(v["z"][:2], indent=2), json.dumps(v["z"][:1], indent=0), json.dumps(v["z"][:1], indent=-1)
		`{{ v.z[:2] | tojson(indent=2) }}|{{ v.z[:1] | tojson(indent=0) }}|{{ v.z[:1] | tojson(indent=-1) }}`: "[\n  1.0,\n  100.0\n]|[\n1.0\n]|[\n1.0\n]",
		// json.dumps({"e": [], "m": {}}, indent=4)
		`{{ {"e": [], "m": { } } | tojson(indent=4) }}`: "{\n    \"e\": [],\n    \"m\": {}\n}",
	} {
		tpl, err := Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tpl.RenderLimited(map[string]Value{"v": v}, small)
		if err != nil || got != want {
			t.Errorf("%s:\n got %q, %v\nwant %q", src, got, err, want)
		}
	}
	for src, want := range map[string]string{
		`{{ 1 | tojson(indent='  ') }}`:      "indent must be an integer",
		`{{ 1 | tojson(separators=[","]) }}`: "separators must contain two strings",
	} {
		tpl, err := Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tpl.RenderLimited(nil, small)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", src, err, want)
		}
	}
}
