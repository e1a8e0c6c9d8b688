package grammar

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/gguf/grammar/grammartest"
)

// schemaCases: per feature, a schema, documents it must match and
// documents it must not. Each accepted document is also held to the test
// validator, so the table cannot contradict JSON Schema.
var schemaCases = []struct {
	name   string
	schema string
	accept []string
	reject []string
}{
	{"string", `{"type":"string"}`,
		[]string{`""`, `"hi"`, `"a\"b"`, `"\u00e9"`, `"日本"`, `"tab\tx"`},
		[]string{`hi`, `"a`, `"a"b"`, "\"\x01\"", `"\x"`, ` "a"`, `"a" `}},
	{"string length", `{"type":"string","minLength":2,"maxLength":3}`,
		[]string{`"ab"`, `"abc"`, `"é日"`, `"\n\t"`},
		[]string{`"a"`, `"abcd"`, `""`}},
	{"pattern anchored", `{"type":"string","pattern":"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}`,
		[]string{`"2026-12-07"`, `"0000-00-00"`},
		[]string{`"2026-1-07"`, `"x2026-12-07"`, `"2026-12-07 "`, `""`}},
	{"pattern unanchored", `{"type":"string","pattern":"a"}`,
		[]string{`"a"`, `"xxay"`, `"é a \" "`},
		[]string{`"xyz"`, `""`}},
	{"pattern escapes", `{"type":"string","pattern":"^[a-z\"\\\\\\n\\x01]*$"}`,
		[]string{`"ab"`, `"a\"b"`, `"a\\b"`, `"\n"`, `"x\u0001"`, `""`},
		[]string{`"aB"`, `"a1"`, `"日"`}},
	{"pattern case", `{"type":"string","pattern":"^(?i:yes|no)$"}`,
		[]string{`"YES"`, `"yEs"`, `"No"`},
		[]string{`"nope"`, `"maybe"`}},
	{"pattern of a range beyond ASCII", `{"type":"string","pattern":"^[à-ÿ日-月]{1,2}$"}`,
		[]string{`"à"`, `"ÿé"`, `"日"`, `"月日"`},
		[]string{`"a"`, `"ā"`, `"à日à"`, `""`}},
	{"pattern beyond ASCII", `{"type":"string","pattern":"^[^a-z]é?$"}`,
		[]string{`"日"`, `"1é"`, `"\"é"`, `"\n"`},
		[]string{`"a"`, `"aé"`, `""`, `"12"`}},
	{"format date", `{"type":"string","format":"date"}`,
		[]string{`"2026-12-07"`, `"2024-02-29"`, `"2000-02-29"`, `"1999-12-31"`},
		[]string{`"2026-02-29"`, `"1900-02-29"`, `"2026-04-31"`, `"2026-13-01"`, `"2026-1-01"`, `"x2026-12-07"`}},
	{"format date-time", `{"type":"string","format":"date-time"}`,
		[]string{`"2026-12-07T10:04:44Z"`, `"2026-12-07T23:59:59.123+05:30"`},
		[]string{`"2026-12-07 10:04:44Z"`, `"2026-12-07T24:00:00Z"`, `"2026-12-07T10:04:44"`}},
	{"format time and uuid", `{"type":"object","properties":{"t":{"type":"string","format":"time"},"id":{"format":"uuid"}},"required":["t","id"]}`,
		[]string{`{"t":"08:30:00Z","id":"123e4567-e89b-12d3-a456-426614174000"}`},
		[]string{`{"t":"8:30:00Z","id":"123e4567-e89b-12d3-a456-426614174000"}`, `{"t":"08:30:00Z","id":"123e4567e89b12d3a456426614174000"}`}},
	{"integer range", `{"type":"integer","minimum":-3,"maximum":120}`,
		[]string{`-3`, `0`, `7`, `99`, `100`, `120`},
		[]string{`-4`, `121`, `1000`, `-0`, `007`}},
	{"integer exclusive", `{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10.5}`,
		[]string{`1`, `10`},
		[]string{`0`, `11`, `-1`}},
	{"integer draft 4", `{"type":"integer","minimum":1,"exclusiveMinimum":true,"maximum":5.5}`,
		[]string{`2`, `5`},
		[]string{`1`, `6`}},
	{"integer one side", `{"type":"integer","minimum":18}`,
		[]string{`18`, `65`, `1234567890123456`},
		[]string{`17`, `-18`, `0`}},
	{"format email and hostname", `{"type":"object","properties":{"to":{"type":"string","format":"email"},"host":{"type":"string","format":"hostname"}},"required":["to","host"]}`,
		[]string{`{"to":"ada.l@example.com","host":"a-b.example"}`, `{"to":"x+y@h","host":"localhost"}`},
		[]string{`{"to":"ada@","host":"h"}`, `{"to":".a@h","host":"h"}`, `{"to":"a@h","host":"-h"}`, `{"to":"a b@h","host":"h"}`}},
	{"format ipv4 and uri", `{"type":"array","items":{"anyOf":[{"type":"string","format":"ipv4"},{"type":"string","format":"uri"}]},"maxItems":3}`,
		[]string{`["192.168.0.1","https://example.com/a/b","http://h"]`, `["0.0.0.0"]`},
		[]string{`["256.1.1.1"]`, `["01.1.1.1"]`, `["ftp://h"]`, `["https://"]`, `["https://h/%zz"]`}},
	{"tuple", `{"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"minItems":2,"maxItems":2}`,
		[]string{`[1,"a"]`, `[ -3 , "" ]`},
		[]string{`[1]`, `["a",1]`, `[1,"a",2]`, `[]`}},
	{"tuple open", `{"prefixItems":[{"type":"boolean"}],"items":{"type":"integer"}}`,
		[]string{`[]`, `[true]`, `[true,1,2]`},
		[]string{`[1]`, `[true,"x"]`}},
	{"tuple closed", `{"type":"array","prefixItems":[{"const":1},{"const":2},{"const":3}],"items":false,"minItems":1}`,
		[]string{`[1]`, `[1,2]`, `[1,2,3]`},
		[]string{`[]`, `[2]`, `[1,2,3,4]`, `[1,3]`}},
	{"tuple draft 4", `{"type":"array","items":[{"type":"integer"},{"type":"null"}],"additionalItems":{"type":"boolean"},"maxItems":3}`,
		[]string{`[]`, `[5]`, `[5,null]`, `[5,null,true]`},
		[]string{`[5,null,true,false]`, `[null]`, `[5,null,1]`}},
	{"tagged union", `{"oneOf":[{"$ref":"#/$defs/Cat"},{"$ref":"#/$defs/Dog"}],"discriminator":{"propertyName":"pet","mapping":{"cat":"#/$defs/Cat","dog":"#/$defs/Dog"}},` +
		`"$defs":{"Cat":{"type":"object","properties":{"pet":{"const":"cat"},"meows":{"type":"boolean"}},"required":["pet","meows"],"additionalProperties":false},` +
		`"Dog":{"type":"object","properties":{"pet":{"enum":["dog"]},"barks":{"type":"integer"}},"required":["pet","barks"],"additionalProperties":false}}}`,
		[]string{`{"pet":"cat","meows":true}`, `{"pet":"dog","barks":3}`},
		[]string{`{"pet":"cat","barks":3}`, `{"pet":"cow","meows":true}`, `{"meows":true}`}},
	{"integer", `{"type":"integer"}`,
		[]string{`0`, `-1`, `42`, `1234567890123456`},
		[]string{`01`, `1.5`, `-`, `+1`, `1e3`, `12345678901234567`}},
	{"number", `{"type":"number"}`,
		[]string{`0`, `-0.5`, `3.14`, `1e10`, `2E-3`, `6.02e+23`},
		[]string{`.5`, `1.`, `1e`, `--1`, `NaN`}},
	{"boolean and null", `{"type":["boolean","null"]}`,
		[]string{`true`, `false`, `null`},
		[]string{`True`, `0`, `"true"`}},
	{"enum", `{"enum":["red","green",3,null,{"a":[1,true]}]}`,
		[]string{`"red"`, `"green"`, `3`, `null`, `{"a":[1,true]}`},
		[]string{`"blue"`, `"Red"`, `4`, `{"a": [1,true]}`}},
	{"const", `{"const":"x<y"}`, []string{`"x<y"`}, []string{`"x\u003cy"`, `"x"`}},
	{"object strict", `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false}`,
		[]string{`{"name":"Ann","age":3}`, `{ "name": "Ann", "age": 3 }`, "{\n  \"name\": \"Ann\",\n  \"age\": 3\n}"},
		[]string{`{"name":"Ann"}`, `{"age":3,"name":"Ann"}`, `{"name":"Ann","age":3,"x":1}`, `{}`, `{"name":"Ann","age":"3"}`}},
	{"object optional", `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},"required":["b"],"additionalProperties":false}`,
		[]string{`{"b":1}`, `{"a":1,"b":2}`, `{"b":2,"c":3}`, `{"a":1,"b":2,"c":3}`},
		[]string{`{}`, `{"a":1}`, `{"a":1,,"b":2}`, `{,"b":1}`, `{"b":1,}`, `{"c":1,"b":2}`}},
	{"object all optional", `{"properties":{"a":{"type":"integer"},"b":{"type":"boolean"}}}`,
		[]string{`{}`, `{"a":1}`, `{"b":true}`, `{"a":1,"b":false}`, `{ }`},
		[]string{`{,}`, `{"a":1,}`, `{"b":true,"a":1}`}},
	{"map", `{"type":"object","additionalProperties":{"type":"integer"}}`,
		[]string{`{}`, `{"x":1}`, `{"x":1,"y":2}`},
		[]string{`{"x":"1"}`, `{"x":1,}`}},
	{"any object", `{"type":"object"}`,
		[]string{`{}`, `{"a":[1,{"b":null}],"c":"d"}`},
		[]string{`[]`, `{"a"}`}},
	{"array bounds", `{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3}`,
		[]string{`[1]`, `[1,2]`, `[1, 2, 3]`},
		[]string{`[]`, `[1,2,3,4]`, `[1,]`, `["a"]`}},
	{"array any", `{"type":"array"}`,
		[]string{`[]`, `[1,"a",null,[true]]`},
		[]string{`[1,]`, `[`}},
	{"empty array only", `{"type":"array","maxItems":0}`, []string{`[]`, `[ ]`}, []string{`[1]`}},
	{"nesting", `{"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}}},"required":["id","tags"],"additionalProperties":false}}},"required":["items"],"additionalProperties":false}`,
		[]string{`{"items":[]}`, `{"items":[{"id":1,"tags":["a","b"]},{"id":2,"tags":[]}]}`},
		[]string{`{"items":[{"id":1}]}`, `{"items":[{"id":1,"tags":[1]}]}`}},
	{"defs and ref", `{"$defs":{"pt":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},"required":["x","y"],"additionalProperties":false}},"type":"object","properties":{"from":{"$ref":"#/$defs/pt"},"to":{"$ref":"#/$defs/pt"}},"required":["from","to"],"additionalProperties":false}`,
		[]string{`{"from":{"x":1,"y":2},"to":{"x":-1.5,"y":0}}`},
		[]string{`{"from":{"x":1},"to":{"x":1,"y":2}}`}},
	{"recursive ref", `{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v","kids"],"additionalProperties":false}},"$ref":"#/$defs/node"}`,
		[]string{`{"v":1,"kids":[]}`, `{"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[]}]}]}`},
		[]string{`{"v":1}`, `{"v":1,"kids":[{"v":2}]}`}},
	{"anyOf", `{"anyOf":[{"type":"string","maxLength":2},{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}]}`,
		[]string{`"ab"`, `{"n":1}`},
		[]string{`"abc"`, `{"m":1}`, `1`}},
	{"annotations", `{"title":"T","description":"d","$schema":"https://json-schema.org/draft/2020-12/schema","type":"boolean","default":true,"examples":[true]}`,
		[]string{`true`}, []string{`"true"`}},
	{"true schema", `true`, []string{`1`, `"a"`, `{"a":[]}`}, []string{`{`}},
	{"escaped key", `{"type":"object","properties":{"a\"b/c":{"type":"null"}},"required":["a\"b/c"],"additionalProperties":false}`,
		[]string{`{"a\"b/c":null}`}, []string{`{"a"b/c":null}`}},
	{"required undescribed", `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a","z"]}`,
		[]string{`{"a":1,"z":"anything"}`}, []string{`{"a":1}`}},
	{"whitespace bounded", `{"type":"array","items":{"type":"integer"}}`,
		[]string{"[\n" + "                    1]", `[ 1 , 2 ]`},
		[]string{"[\n" + "                     1]", `[  1]`, "[\n\n1]"}},
}

func TestSchemaFeatures(t *testing.T) {
	for _, tc := range schemaCases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := FromSchema([]byte(tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			for _, doc := range tc.accept {
				if !accepts(t, g, doc) {
					t.Errorf("rejects %s", doc)
				}
				if err := grammartest.Validate([]byte(tc.schema), []byte(doc)); err != nil {
					t.Errorf("the table is wrong: %s is invalid: %v", doc, err)
				}
			}
			for _, doc := range tc.reject {
				if accepts(t, g, doc) {
					t.Errorf("accepts %s", doc)
				}
			}
		})
	}
}

// TestSchemaSamplesValidate draws random sentences of each schema's
// grammar and holds them to the validator: whatever the grammar lets
// through is schema-valid JSON.
func TestSchemaSamplesValidate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range schemaCases {
		g, err := FromSchema([]byte(tc.schema))
		if err != nil {
			t.Fatal(err)
		}
		ended := 0
		for range 200 {
			s, ok := sample(g, rng, 4000)
			if !ok {
				continue
			}
			ended++
			if err := grammartest.Validate([]byte(tc.schema), []byte(s)); err != nil {
				t.Errorf("%s: sample %q: %v", tc.name, s, err)
			}
		}
		if ended < 20 {
			t.Errorf("%s: only %d of 200 samples ended", tc.name, ended)
		}
	}
}

func TestSchemaRefused(t *testing.T) {
	for _, tc := range []struct {
		schema  string
		keyword string
		pointer string
	}{
		{`{"type":"string","pattern":"\\ba"}`, "pattern", "/pattern"},
		{`{"type":"string","pattern":"a^b"}`, "pattern", "/pattern"},
		{`{"type":"string","pattern":"^a$","maxLength":3}`, "pattern", "/pattern"},
		{`{"type":"string","format":"ipv6"}`, "format", "/format"},
		{`{"type":"integer","format":"int32"}`, "format", "/format"},
		{`{"type":["number","null"],"format":"float"}`, "format", "/format"},
		{`{"type":"string","format":"date","maxLength":10}`, "format", "/format"},
		{`{"type":"string","format":"uuid","pattern":"^a"}`, "format", "/format"},
		{`{"type":"object","properties":{"n":{"type":"number","minimum":0}}}`, "minimum", "/properties/n/minimum"},
		{`{"maximum":3}`, "maximum", "/maximum"},
		{`{"type":["integer","number"],"exclusiveMaximum":3}`, "exclusiveMaximum", "/exclusiveMaximum"},
		{`{"oneOf":[{"type":"string"}]}`, "oneOf", "/oneOf"},
		{`{"oneOf":[{"type":"object","properties":{"k":{"const":"a"}},"required":["k"]},{"type":"object","properties":{"k":{"const":"a"}},"required":["k"]}]}`, "oneOf", "/oneOf"},
		{`{"oneOf":[{"type":"object","properties":{"k":{"const":"a"}}},{"type":"object","properties":{"k":{"const":"b"}}}]}`, "oneOf", "/oneOf"},
		{`{"allOf":[{"type":"string"}]}`, "allOf", "/allOf"},
		{`{"type":"array","uniqueItems":true}`, "uniqueItems", "/uniqueItems"},
		{`{"type":"array","additionalItems":false}`, "additionalItems", "/additionalItems"},
		{`{"type":"array","prefixItems":[{"type":"string","format":"ipv6"}]}`, "format", "/prefixItems/0/format"},
		{`{"$defs":{"a/b":{"type":"string","nullable":true}},"$ref":"#/$defs/a~1b"}`, "nullable", "/$defs/a~1b/nullable"},
		{`{"$ref":"https://example.com/s.json"}`, "$ref", "/$ref"},
		{`{"$ref":"#/$defs/x","type":"string","$defs":{"x":{}}}`, "type", "/type"},
		{`{"type":"string","maxLength":100000}`, "maxLength", "/maxLength"},
	} {
		_, err := FromSchema([]byte(tc.schema))
		var ue *UnsupportedError
		if !errors.As(err, &ue) {
			t.Errorf("%s: got %v, want an UnsupportedError", tc.schema, err)
			continue
		}
		if ue.Keyword != tc.keyword || ue.Pointer != tc.pointer {
			t.Errorf("%s: got %q at %q, want %q at %q (%v)", tc.schema, ue.Keyword, ue.Pointer, tc.keyword, tc.pointer, err)
		}
	}
}

func TestSchemaInvalid(t *testing.T) {
	for _, s := range []string{
		`{"type":"strng"}`, `{"type":[]}`, `{"enum":[]}`, `false`, `{"properties":{"a":false},"required":["a"]}`,
		`{"type":"array","minItems":3,"maxItems":2}`, `{"type":"string","minLength":-1}`, `{"$ref":"#/$defs/none"}`,
		`{"type":"object","required":["a"],"additionalProperties":false}`, `{"$ref":"#"}`, `[1]`, `{"a":1,"a":2}`,
	} {
		_, err := FromSchema([]byte(s))
		var se *SchemaError
		if !errors.As(err, &se) && !errors.Is(err, ErrSchema) {
			t.Errorf("%s: got %v, want a SchemaError", s, err)
		}
	}
	_, err := FromSchema([]byte(`{"items":` + repeatStr(`{"items":`, 70) + `{}` + repeatStr("}", 71)))
	if !errors.Is(err, ErrSchema) {
		t.Errorf("deep schema: %v", err)
	}
}

func repeatStr(s string, n int) string {
	out := ""
	for range n {
		out += s
	}
	return out
}

func TestAnyJSONObject(t *testing.T) {
	g, err := AnyJSONObject()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`{}`, `{"a":1}`, `{"a":{"b":[1,2,{"c":null}]},"d":"e"}`} {
		if !accepts(t, g, s) {
			t.Errorf("rejects %s", s)
		}
	}
	for _, s := range []string{`[]`, `"a"`, `1`, `{"a":1} `, ` {}`, `{"a":1}{}`} {
		if accepts(t, g, s) {
			t.Errorf("accepts %s", s)
		}
	}
}
