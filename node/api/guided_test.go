package api

import (
	"errors"
	"strings"
	"testing"
)

// TestGuided: vLLM's guided fields hold the output to their grammar —
// checked here by what the grammar takes — on chat and completions, under
// either name; one at a time, not beside response_format or grammar;
// what cannot be compiled is refused naming the field.
func TestGuided(t *testing.T) {
	takes := func(g *Generation, s string) bool {
		m, err := g.Grammar.NewMatcher()
		if err != nil {
			t.Fatal(err)
		}
		return m.Advance([]byte(s)) == nil && m.Accepting()
	}
	for _, tc := range []struct {
		body       string
		yes, no    []string
		wantFormat string
	}{
		{`"guided_choice":["yes","no"]`, []string{"yes", "no"}, []string{"y", "yesno", ""}, FormatGBNF},
		{`"guided_regex":"[0-9]{3}-[A-Z]+"`, []string{"123-AB"}, []string{"12-AB", "123-ab", "123-"}, FormatGBNF},
		{`"guided_json":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`, []string{`{"n":3}`}, []string{`{}`, `{"n":"3"}`}, FormatJSONSchema},
		{`"guided_json":"{\"type\":\"boolean\"}"`, []string{"true"}, []string{`"true"`}, FormatJSONSchema},
		{`"guided_grammar":"root ::= \"a\" [bc]"`, []string{"ab", "ac"}, []string{"a", "ad"}, FormatGBNF},
		{`"structured_outputs":{"choice":["left","right"]}`, []string{"left"}, []string{"up"}, FormatGBNF},
		{`"structured_outputs":{"regex":"a+b"}`, []string{"aab"}, []string{"b"}, FormatGBNF},
		{`"structured_outputs":{"json":{"type":"string","pattern":"^x$"}}`, []string{`"x"`}, []string{`"y"`}, FormatJSONSchema},
		{`"structured_outputs":{"json_object":true,"disable_fallback":false}`, []string{`{}`}, []string{`[]`}, FormatJSONObject},
		{`"guided_choice":["a"],"guided_decoding_backend":"auto"`, []string{"a"}, []string{"b"}, FormatGBNF},
	} {
		for _, prefix := range []string{`{"messages":[{"role":"user","content":"x"}],`, `{"model":"m","prompt":"x",`} {
			var g *Generation
			var err error
			if strings.Contains(prefix, "messages") {
				g, _, err = parseChat([]byte(prefix + tc.body + `}`))
			} else {
				g, _, err = parseCompletion([]byte(prefix + tc.body + `}`))
			}
			if err != nil || g.Grammar == nil || g.Format != tc.wantFormat {
				t.Fatalf("%s: %v (format %q)", tc.body, err, g.Format)
			}
			for _, s := range tc.yes {
				if !takes(g, s) {
					t.Errorf("%s refuses %q", tc.body, s)
				}
			}
			for _, s := range tc.no {
				if takes(g, s) {
					t.Errorf("%s takes %q", tc.body, s)
				}
			}
		}
	}
	for body, param := range map[string]string{
		`"guided_choice":["a"],"guided_regex":"a"`:                            "guided_choice",
		`"guided_choice":["a"],"grammar":"root ::= \"a\""`:                    "guided_choice",
		`"guided_choice":[]`:                                                  "guided_choice",
		`"guided_regex":"\\bx"`:                                               "guided_regex",
		`"guided_regex":"(x"`:                                                 "guided_regex",
		`"guided_json":{"type":"string","format":"ipv6"}`:                     "guided_json",
		`"guided_grammar":"root ::= [a"`:                                      "guided_grammar",
		`"guided_decoding_backend":"outlines","guided_choice":["a"]`:          "guided_decoding_backend",
		`"guided_whitespace_pattern":" ","guided_json":{}`:                    "guided_whitespace_pattern",
		`"structured_outputs":{}`:                                             "structured_outputs",
		`"structured_outputs":{"regex":"a","choice":["a"]}`:                   "structured_outputs.choice",
		`"structured_outputs":{"choice":["a"],"disable_any_whitespace":true}`: "structured_outputs.disable_any_whitespace",
		`"structured_outputs":{"bogus":1}`:                                    "structured_outputs",
	} {
		_, _, err := parseChat([]byte(`{"messages":[{"role":"user","content":"x"}],` + body + `}`))
		var e *Error
		if !errors.As(err, &e) || e.Param != param {
			t.Errorf("%s: %v, want a refusal naming %s", body, err, param)
		}
	}
}
