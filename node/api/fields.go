package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// A request field meshnode does not honour is refused with a 400 naming
// it, never dropped: a client that asks for predicted outputs must not
// get an answer that silently lacks them. checkFields does this for every
// generation and embedding body, before any other check.
//
// A field is honoured when the endpoint's request struct has a JSON tag
// for it (its parser then validates its value). The others are refused:
// those OpenAI defines, with the reason in refusedFields (docs/api.md
// lists them all); any other name as unknown. A value that asks for
// nothing (null, and the inert values below) is accepted, since clients
// send such defaults.

// refusal is why a field OpenAI defines is refused, and which of its
// values ask for nothing and so are accepted.
type refusal struct {
	why   string
	inert func(raw []byte) bool
}

// Inert values.
func isNull(raw []byte) bool { return bytes.Equal(raw, []byte("null")) }

func isEmpty(raw []byte) bool {
	return isNull(raw) || bytes.Equal(raw, []byte("{}")) || bytes.Equal(raw, []byte("[]")) || bytes.Equal(raw, []byte(`""`))
}

// holdsSomething reports whether raw, a field's value, is there and not
// empty (not null, {}, [] or "").
func holdsSomething(raw json.RawMessage) bool {
	return !isAbsent(raw) && !isEmpty(compact(raw))
}

func isFalse(raw []byte) bool { return isNull(raw) || bytes.Equal(raw, []byte("false")) }

// oneOf accepts null and the JSON values listed.
func oneOf(vals ...string) func([]byte) bool {
	return func(raw []byte) bool { return isNull(raw) || slices.Contains(vals, string(raw)) }
}

// anyValue accepts every value: the field asks nothing of the answer.
func anyValue([]byte) bool { return true }

const (
	seeTools      = "tool calls are served on /v1/chat/completions and /v1/responses (docs/api.md, Tool calls)"
	seeFunctions  = "the deprecated function-calling API is not supported: send tools and tool_choice (docs/api.md, Tool calls)"
	seeStructured = "structured outputs are taken by /v1/chat/completions (response_format) and /v1/responses (text.format), not by this endpoint (docs/api.md, Structured outputs)"
)

// refusedFields are the fields of OpenAI's request schemas (chat
// completions, completions, embeddings, responses) that meshnode's request
// structs do not take, by name. One table serves every endpoint: a name
// means the same in each schema that has it.
var refusedFields = map[string]refusal{
	"service_tier":           {"service_tier is not supported: a node has one tier (auto and default are accepted)", oneOf(`"auto"`, `"default"`)},
	"store":                  {"store is not supported: meshnode keeps no completions or responses to retrieve (false is accepted)", isFalse},
	"modalities":             {"modalities other than text are not supported: meshnode's models read and write text", oneOf(`["text"]`)},
	"audio":                  {"audio output is not supported: meshnode's models write text", isNull},
	"prediction":             {"prediction (predicted outputs) is taken by /v1/chat/completions", isNull},
	"reasoning_effort":       {"reasoning_effort is taken by /v1/chat/completions (reasoning.effort by /v1/responses), for a model whose chat template reads one", isNull},
	"reasoning":              {"reasoning is taken by /v1/responses (reasoning_effort by /v1/chat/completions), for a model whose chat template reads one", isEmpty},
	"verbosity":              {"verbosity is not supported", isNull},
	"web_search_options":     {"web search is not supported: a node searches nothing", isNull},
	"best_of":                {"best_of is not supported: meshnode returns one completion (1 is accepted)", oneOf("1")},
	"prompt_cache_retention": {"prompt_cache_retention is not supported: the KV cache is kept while its slot is idle, not for a set time (in_memory is accepted)", oneOf(`"in_memory"`)},
	"background":             {"background responses are not supported: meshnode answers while the request is open", isFalse},
	"conversation":           {"conversation is not supported: meshnode keeps no conversations; send the messages", isNull},
	"previous_response_id":   {"previous_response_id is not supported: meshnode keeps no responses; send the whole input", isNull},
	"prompt":                 {"prompt, as /v1/responses defines it (a stored prompt template), is not supported: send input", isNull},
	"truncation":             {"truncation is not supported: a prompt that does not fit the context is refused (disabled is accepted)", oneOf(`"disabled"`)},
	"context_management":     {"context_management is not supported", isNull},
	"include":                {"include is not supported", isEmpty},
	"user":                   {"", anyValue}, // an opaque end-user tag for OpenAI's abuse monitoring
	"safety_identifier":      {"", anyValue}, // the same, under its newer name
	"prompt_cache_key":       {"", anyValue}, // a cache hint: meshnode finds a cached prefix by its tokens
	"tools":                  {seeTools, isEmpty},
	"tool_choice":            {seeTools, oneOf(`"none"`, `"auto"`)},
	"parallel_tool_calls":    {seeTools, oneOf("true", "false")}, // with no tools, nothing to run in parallel
	"functions":              {seeFunctions, isEmpty},
	"function_call":          {seeFunctions, oneOf(`"none"`, `"auto"`)},
	"max_tool_calls":         {"max_tool_calls is not supported: meshnode does not count a reply's calls against a bound (parallel_tool_calls false keeps the first)", isNull},
	"response_format":        {seeStructured, oneOf(`{"type":"text"}`)},
	"text":                   {seeStructured, oneOf(`{"format":{"type":"text"}}`)},
}

// checkFields refuses each top-level field of body that req (a pointer to
// the endpoint's request struct) does not take and that asks for
// something, in the order of their names. endpoint names the endpoint in
// the error.
func checkFields(body []byte, req any, endpoint string) error {
	return checkFieldsWith(body, req, endpoint, nil)
}

// checkFieldsWith is checkFields for an endpoint that refuses fields of
// its own (own, looked up before refusedFields): llama.cpp's options.
func checkFieldsWith(body []byte, req any, endpoint string, own map[string]refusal) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil // decodeBody reports the body's errors
	}
	known := jsonFields(reflect.TypeOf(req))
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if known[name] {
			continue
		}
		raw := compact(fields[name])
		r, ok := own[name]
		if !ok {
			r, ok = refusedFields[name]
		}
		switch {
		case !ok:
			return badRequest(name, "unknown field %q: %s takes no such field (docs/api.md lists the fields meshnode honours)", name, endpoint)
		case r.inert(raw):
			continue
		}
		return badRequest(name, "%s", r.why)
	}
	return nil
}

func compact(raw json.RawMessage) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}

var fieldSets sync.Map // reflect.Type → map[string]bool

// bodyPath is a wrong-typed field's path (json.UnmarshalTypeError.Field,
// from t, the type decoded into) as the body names it: json names a field
// of an embedded struct after the embedded type ("sampling.temperature",
// /infill's "llamaCompletionRequest.top_k"), which is no key of the body.
func bodyPath(t reflect.Type, path string) string {
	var keep []string
	for _, seg := range strings.Split(path, ".") {
		for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map) {
			t = t.Elem()
		}
		if t == nil || t.Kind() != reflect.Struct {
			keep, t = append(keep, seg), nil
			continue
		}
		if f, ok := t.FieldByName(seg); ok && f.Anonymous {
			t = f.Type // an embedded struct's name: its fields are the body's
			continue
		}
		keep = append(keep, seg)
		var next reflect.Type
		for _, f := range reflect.VisibleFields(t) {
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name == seg || name == "" && f.Name == seg {
				next = f.Type
				break
			}
		}
		t = next
	}
	return strings.Join(keep, ".")
}

// jsonFields is the set of JSON names a struct type (or pointer to one)
// decodes, its embedded structs' included.
func jsonFields(t reflect.Type) map[string]bool {
	if s, ok := fieldSets.Load(t); ok {
		return s.(map[string]bool)
	}
	set := map[string]bool{}
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return
		}
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			name, _, _ := strings.Cut(tag, ",")
			switch {
			case name == "-":
			case f.Anonymous && name == "":
				walk(f.Type)
			case name != "":
				set[name] = true
			case f.IsExported():
				set[f.Name] = true
			}
		}
	}
	walk(t)
	fieldSets.Store(t, set)
	return set
}
