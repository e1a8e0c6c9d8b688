package api

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/meshnode/meshnode/gguf/grammar"
)

// vLLM's guided decoding, which its clients send on chat and completions
// (the OpenAI SDK's extra_body: LangChain's and outlines' vLLM
// integrations, vLLM's own examples): the output held to a JSON Schema
// (guided_json), a regular expression (guided_regex), one of some
// strings (guided_choice) or a grammar (guided_grammar, read as GBNF, as
// vLLM's default backend reads it), or the same under the name newer
// vLLMs give it, structured_outputs ({"json"}, {"regex"}, {"choice"},
// {"grammar"}, {"json_object": true}). Each is compiled as
// response_format and grammar are, so what cannot be enforced is a 400
// naming it.

// guidedFields are vLLM's guided decoding fields.
type guidedFields struct {
	GuidedJSON              json.RawMessage `json:"guided_json"`
	GuidedRegex             *string         `json:"guided_regex"`
	GuidedChoice            []string        `json:"guided_choice"`
	GuidedGrammar           *string         `json:"guided_grammar"`
	GuidedDecodingBackend   *string         `json:"guided_decoding_backend"`
	GuidedWhitespacePattern *string         `json:"guided_whitespace_pattern"`
	StructuredOutputs       json.RawMessage `json:"structured_outputs"`
}

// structuredOutputs is vLLM's structured_outputs object: one of json,
// regex, choice, grammar and json_object; its options that change the
// grammar are refused set.
type structuredOutputs struct {
	JSON                        json.RawMessage `json:"json"`
	Regex                       *string         `json:"regex"`
	Choice                      []string        `json:"choice"`
	Grammar                     *string         `json:"grammar"`
	JSONObject                  *bool           `json:"json_object"`
	DisableFallback             *bool           `json:"disable_fallback"`
	DisableAnyWhitespace        *bool           `json:"disable_any_whitespace"`
	DisableAdditionalProperties *bool           `json:"disable_additional_properties"`
	WhitespacePattern           *string         `json:"whitespace_pattern"`
}

// maxGuidedChoices bounds guided_choice.
const maxGuidedChoices = 1024

// guided is one way of holding the output, and the field that asks it.
type guided struct {
	param  string
	json   json.RawMessage // a schema
	object bool            // any JSON object
	regex  *string
	choice []string
	gbnf   *string
}

// guide compiles the guided decoding f asks into g, whose grammar, if
// it has one (response_format, grammar, tools), is another way of
// holding the output: only one may be sent.
func (f *guidedFields) guide(g *Generation) error {
	if b := f.GuidedDecodingBackend; b != nil && *b != "" && *b != "auto" {
		return badRequest("guided_decoding_backend", "guided_decoding_backend %q is not supported: a node enforces the grammar itself (auto is accepted)", *b)
	}
	if f.GuidedWhitespacePattern != nil {
		return badRequest("guided_whitespace_pattern", "guided_whitespace_pattern is not supported: a node's JSON grammars bound the white space themselves (docs/api.md, Structured outputs)")
	}
	asked := ways(func(way string) string { return "guided_" + way }, f.GuidedJSON, false, f.GuidedRegex, f.GuidedChoice, f.GuidedGrammar)
	if !isAbsent(f.StructuredOutputs) {
		so, err := f.structured()
		if err != nil {
			return err
		}
		asked = append(asked, so...)
	}
	switch {
	case len(asked) == 0:
		return nil
	case len(asked) > 1:
		return badRequest(asked[1].param, "%s and %s both hold the output: send one", asked[0].param, asked[1].param)
	case g.Grammar != nil:
		return badRequest(asked[0].param, "%s and a %s output format (response_format, grammar or tools) both hold the output: send one", asked[0].param, g.Format)
	}
	return asked[0].compile(g)
}

// structured reads structured_outputs: the one way it asks for.
func (f *guidedFields) structured() ([]guided, error) {
	var so structuredOutputs
	if err := strictJSON(f.StructuredOutputs, &so); err != nil {
		return nil, badRequest("structured_outputs", "structured_outputs: %v", err)
	}
	for _, o := range []struct {
		set   bool
		param string
	}{
		{so.DisableFallback != nil && *so.DisableFallback, "disable_fallback"},
		{so.DisableAnyWhitespace != nil && *so.DisableAnyWhitespace, "disable_any_whitespace"},
		{so.DisableAdditionalProperties != nil && *so.DisableAdditionalProperties, "disable_additional_properties"},
		{so.WhitespacePattern != nil, "whitespace_pattern"},
	} {
		if o.set {
			return nil, badRequest("structured_outputs."+o.param, "structured_outputs.%s is not supported: a node compiles the grammar one way (false is accepted)", o.param)
		}
	}
	asked := ways(func(way string) string { return "structured_outputs." + way },
		so.JSON, so.JSONObject != nil && *so.JSONObject, so.Regex, so.Choice, so.Grammar)
	if len(asked) == 0 {
		return nil, badRequest("structured_outputs", "structured_outputs asks for nothing: give json, regex, choice, grammar or json_object")
	}
	return asked, nil
}

// ways are the ways of holding the output a request sets, in this
// order, each under the field param names: a schema, any JSON object, a
// regular expression, a choice of strings, a GBNF grammar.
func ways(param func(way string) string, schema json.RawMessage, object bool, regex *string, choice []string, gbnf *string) []guided {
	var asked []guided
	if !isAbsent(schema) {
		asked = append(asked, guided{param: param("json"), json: schema})
	}
	if object {
		asked = append(asked, guided{param: param("json_object"), object: true})
	}
	if regex != nil {
		asked = append(asked, guided{param: param("regex"), regex: regex})
	}
	if choice != nil {
		asked = append(asked, guided{param: param("choice"), choice: choice})
	}
	if gbnf != nil {
		asked = append(asked, guided{param: param("grammar"), gbnf: gbnf})
	}
	return asked
}

// compile sets g's grammar to what u asks.
func (u guided) compile(g *Generation) error {
	switch {
	case u.object:
		return applyFormat(FormatJSONObject, nil, u.param, u.param, g)
	case u.json != nil:
		schema := bytes.TrimSpace(u.json)
		if schema[0] == '"' {
			// vLLM takes the schema as a JSON text too.
			var text string
			if err := json.Unmarshal(schema, &text); err != nil {
				return badRequest(u.param, "%s: %v", u.param, err)
			}
			schema = []byte(text)
		}
		gr, err := grammar.FromSchema(schema)
		if err != nil {
			return schemaError(u.param, err)
		}
		g.Grammar, g.Format, g.content = gr, FormatJSONSchema, &jsonContent{schema: schema}
		return nil
	case u.gbnf != nil:
		return parseGBNFAs(u.gbnf, u.param, g)
	}
	b := grammar.NewBuilder()
	var root grammar.Expr
	if u.regex != nil {
		e, err := b.Regex(*u.regex, false)
		if err != nil {
			e := badRequest(u.param, "%s: %v", u.param, err)
			var re *grammar.RegexError
			if errors.As(err, &re) {
				e.Code = "unsupported_pattern"
			}
			return e
		}
		root = e
	} else {
		if len(u.choice) == 0 || len(u.choice) > maxGuidedChoices {
			return badRequest(u.param, "%s must list 1 to %d strings, got %d", u.param, maxGuidedChoices, len(u.choice))
		}
		alts := make([]grammar.Expr, len(u.choice))
		for i, c := range u.choice {
			alts[i] = grammar.Lit(c)
		}
		root = grammar.Alt(alts...)
	}
	b.Define("root", root)
	gr, err := b.Build("root")
	if err != nil {
		return badRequest(u.param, "%s: %v", u.param, err)
	}
	g.Grammar, g.Format = gr, FormatGBNF
	return nil
}
