package api

import (
	"errors"
	"strings"
	"testing"
)

func TestResponseFormat(t *testing.T) {
	const msgs = `"model":"m","messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		body   string
		format string // "" for none
	}{
		{`{` + msgs + `}`, ""},
		{`{` + msgs + `,"response_format":null}`, ""},
		{`{` + msgs + `,"response_format":{"type":"text"}}`, ""},
		{`{` + msgs + `,"response_format":{"type":"json_object"}}`, FormatJSONObject},
		{`{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"a_b-1","strict":true,"description":"d","schema":{"type":"integer"}}}}`, FormatJSONSchema},
	} {
		g, _, err := parseChat([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if g.Format != tc.format || (g.Grammar != nil) != (tc.format != "") {
			t.Errorf("%s: format %q, grammar %v", tc.body, g.Format, g.Grammar != nil)
		}
	}
	const input = `"model":"m","input":"hi"`
	for _, tc := range []struct {
		body   string
		format string
	}{
		{`{` + input + `,"text":{"format":{"type":"text"}}}`, ""},
		{`{` + input + `,"text":{"format":{"type":"json_object"}}}`, FormatJSONObject},
		{`{` + input + `,"text":{"format":{"type":"json_schema","name":"x","schema":{"enum":[1]}}}}`, FormatJSONSchema},
	} {
		g, _, err := parseResponses([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if g.Format != tc.format || (g.Grammar != nil) != (tc.format != "") {
			t.Errorf("%s: format %q", tc.body, g.Format)
		}
	}
}

func TestResponseFormatRefused(t *testing.T) {
	const msgs = `"model":"m","messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		body, code, param, says string
	}{
		{`{` + msgs + `,"response_format":"json"}`, "invalid_request", "response_format", "response_format"},
		{`{` + msgs + `,"response_format":{}}`, "invalid_request", "response_format.type", "required"},
		{`{` + msgs + `,"response_format":{"type":"grammar"}}`, "invalid_request", "response_format.type", "grammar"},
		{`{` + msgs + `,"response_format":{"type":"json_schema"}}`, "invalid_request", "response_format.json_schema", "name, schema"},
		{`{` + msgs + `,"response_format":{"type":"json_object","json_schema":{"name":"x"}}}`, "invalid_request", "response_format.json_schema", "goes with"},
		{`{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"a b","schema":{}}}}`, "invalid_request", "response_format.json_schema.name", "letters"},
		{`{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x"}}}`, "invalid_request", "response_format.json_schema.schema", "required"},
		{`{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{},"extra":1}}}`, "invalid_request", "response_format", "extra"},
		{`{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","format":"ipv6"}}}}`,
			"unsupported_schema", "response_format.json_schema.schema", `"format" at /format`},
		{`{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"text"}}}}`,
			"invalid_schema", "response_format.json_schema.schema", "text"},
		{`{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"x","schema":{"allOf":[]}}}}`,
			"unsupported_schema", "text.format.schema", "allOf"},
		{`{"model":"m","input":"hi","text":{"format":{"type":"json_object","schema":{}}}}`, "invalid_request", "text.format", "json_schema"},
		{`{"model":"m","input":"hi","text":{"verbosity":"low"}}`, "invalid_request", "text.verbosity", "verbosity"},
	} {
		var err error
		if strings.Contains(tc.body, `"input"`) {
			_, _, err = parseResponses([]byte(tc.body))
		} else {
			_, _, err = parseChat([]byte(tc.body))
		}
		var e *Error
		if !errors.As(err, &e) || e.Status != 400 || e.Code != tc.code || e.Param != tc.param || !strings.Contains(e.Message, tc.says) {
			t.Errorf("%s: %v, want 400 %s %s saying %q", tc.body, err, tc.code, tc.param, tc.says)
		}
	}
}
