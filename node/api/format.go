package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/meshnode/meshnode/gguf/grammar"
)

// Structured outputs: response_format (chat completions) and text.format
// (responses) hold the output to a grammar, compiled here so that a
// schema that cannot be enforced is refused with a 400 that names the
// keyword, before the request waits for a slot.

// responseFormat is chat's response_format; format is the responses
// API's text.format, the same with json_schema's fields inline.
type responseFormat struct {
	Type       string          `json:"type"`
	JSONSchema *jsonSchemaSpec `json:"json_schema"`
}

type jsonSchemaSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Strict      *bool           `json:"strict"`
}

type textFormat struct {
	Format *struct {
		Type string `json:"type"`
		jsonSchemaSpec
	} `json:"format"`
	Verbosity *string `json:"verbosity"`
}

// schemaName is OpenAI's rule for a json_schema's name.
var schemaName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// FormatJSONObject and FormatJSONSchema name a constrained generation's
// format (Generation.Format).
const (
	FormatJSONObject = "json_object"
	FormatJSONSchema = "json_schema"
	// FormatGBNF is a grammar in llama.cpp's GBNF, the request's
	// "grammar" (llama-server's extension of the OpenAI API).
	FormatGBNF = "grammar"
)

// parseResponseFormat reads chat's response_format into g.
func parseResponseFormat(raw json.RawMessage, g *Generation) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	var rf responseFormat
	if err := strictJSON(raw, &rf); err != nil {
		return badRequest("response_format", "response_format: %v", err)
	}
	var spec *jsonSchemaSpec
	if rf.Type == FormatJSONSchema {
		if rf.JSONSchema == nil {
			return badRequest("response_format.json_schema", "response_format of type json_schema needs json_schema: {name, schema, strict}")
		}
		spec = rf.JSONSchema
	} else if rf.JSONSchema != nil {
		return badRequest("response_format.json_schema", "response_format.json_schema goes with type json_schema, not %q", rf.Type)
	}
	return applyFormat(rf.Type, spec, "response_format", "response_format.json_schema", g)
}

// parseTextFormat reads the responses API's text.format into g.
func parseTextFormat(raw json.RawMessage, g *Generation) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	var tf textFormat
	if err := strictJSON(raw, &tf); err != nil {
		return badRequest("text", "text: %v", err)
	}
	if tf.Verbosity != nil && *tf.Verbosity != "medium" {
		return badRequest("text.verbosity", "text.verbosity %q is not supported; meshnode's models have no verbosity control", *tf.Verbosity)
	}
	if tf.Format == nil {
		return nil
	}
	var spec *jsonSchemaSpec
	if tf.Format.Type == FormatJSONSchema {
		spec = &tf.Format.jsonSchemaSpec
	} else if tf.Format.Schema != nil || tf.Format.Name != "" || tf.Format.Strict != nil {
		return badRequest("text.format", "text.format's name, schema and strict go with type json_schema, not %q", tf.Format.Type)
	}
	return applyFormat(tf.Format.Type, spec, "text.format", "text.format", g)
}

// applyFormat compiles a format's grammar into g.
func applyFormat(typ string, spec *jsonSchemaSpec, param, schemaParam string, g *Generation) error {
	switch typ {
	case "text":
		return nil
	case FormatJSONObject:
		gr, err := grammar.AnyJSONObject()
		if err != nil {
			return err
		}
		g.Grammar, g.Format, g.content = gr, FormatJSONObject, &jsonContent{}
		return nil
	case FormatJSONSchema:
	case "":
		return badRequest(param+".type", "%s.type is required: text, json_object or json_schema", param)
	default:
		return badRequest(param+".type", "%s.type %q is not one of text, json_object, json_schema", param, typ)
	}
	if !schemaName.MatchString(spec.Name) {
		return badRequest(schemaParam+".name", "%s.name must be 1 to 64 letters, digits, underscores or dashes, got %q", schemaParam, spec.Name)
	}
	schema := bytes.TrimSpace(spec.Schema)
	if len(schema) == 0 || bytes.Equal(schema, []byte("null")) {
		return badRequest(schemaParam+".schema", "%s.schema is required: the JSON Schema the output must meet", schemaParam)
	}
	gr, err := grammar.FromSchema(schema)
	if err != nil {
		return schemaError(schemaParam+".schema", err)
	}
	g.Grammar, g.Format, g.content = gr, FormatJSONSchema, &jsonContent{schema: schema}
	return nil
}

// jsonContent is a response format's content: a JSON value of schema, or
// (no schema) any JSON object.
type jsonContent struct {
	schema json.RawMessage
}

// expr defines the content in b, as grammar.FromSchema and
// grammar.AnyJSONObject do on their own.
func (c *jsonContent) expr(b *grammar.Builder) (grammar.Expr, error) {
	if c.schema == nil {
		return b.JSONObject(), nil
	}
	return b.Schema(c.schema)
}

// schemaError is the 400 a schema the compiler refuses gets.
func schemaError(param string, err error) error {
	var ue *grammar.UnsupportedError
	if errors.As(err, &ue) {
		e := badRequest(param, "%s: %v (meshnode enforces the schema while generating, and refuses what it cannot enforce; docs/api.md lists what it supports)", param, ue)
		e.Code = "unsupported_schema"
		e.Details = map[string]string{"keyword": ue.Keyword, "pointer": ue.Pointer}
		return e
	}
	e := badRequest(param, "%s: %v", param, err)
	e.Code = "invalid_schema"
	return e
}

// strictJSON decodes raw into v, refusing fields v does not have: a
// format option that is not honoured must not pass unnoticed.
func strictJSON(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w", err)
	}
	return nil
}

// parseGBNF reads llama-server's "grammar" field, a GBNF grammar the
// output must match, into g. It holds the whole output, so it does not
// go with a response format.
func parseGBNF(src *string, g *Generation) error {
	if src == nil || *src == "" {
		return nil // llama-server's default: no grammar
	}
	return parseGBNFAs(src, "grammar", g)
}

// parseGBNFAs is parseGBNF for a grammar sent as param.
func parseGBNFAs(src *string, param string, g *Generation) error {
	if g.Grammar != nil {
		return badRequest(param, "%s and response_format both hold the output to a grammar; send one", param)
	}
	gr, err := grammar.ParseGBNF(*src)
	if err != nil {
		e := badRequest(param, "%s: %v", param, err)
		e.Code = "invalid_grammar"
		var ge *grammar.GBNFError
		if errors.As(err, &ge) {
			e.Message = fmt.Sprintf("%s: line %d, column %d: %s", param, ge.Line, ge.Col, ge.Msg)
			e.Details = map[string]int{"line": ge.Line, "column": ge.Col}
		}
		return e
	}
	g.Grammar, g.Format = gr, FormatGBNF
	return nil
}
