package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// The JSON Schema subset Builder.Schema compiles:
//
//   - type: "object", "array", "string", "number", "integer",
//     "boolean", "null", or an array of them; a schema without a type
//     takes it from its keywords (properties: object, items: array,
//     minLength, pattern: string), and one with none of them is any JSON
//     value;
//   - enum and const (the value is written compact, keys in the schema's
//     order);
//   - properties (written in the schema's order), required (the others
//     may be left out), additionalProperties: false; additionalProperties
//     true or a schema makes an object of any keys only where there are no
//     properties (with properties, only those are written, which any
//     additionalProperties accepts);
//   - items, minItems, maxItems; tuples: prefixItems (draft 4's items
//     as an array) with items (additionalItems) for the rest;
//     minLength, maxLength (at most MaxBound);
//   - pattern, a regular expression (Builder.Regex), not beside minLength
//     or maxLength; format date, time, date-time, uuid, hostname,
//     email, ipv4 and uri (formats);
//   - an integer's minimum, maximum, exclusiveMinimum, exclusiveMaximum
//     (intrange.go), not a number's;
//   - anyOf, and oneOf where its branches are told apart by a required
//     property's const (disjoint); $defs and definitions, and $ref to a
//     JSON pointer in the same document ("#", "#/$defs/name"), recursion
//     included;
//   - the annotations title, description, $schema, $id, $comment,
//     examples, default, deprecated, readOnly and writeOnly, which change
//     nothing.
//
// Everything else (other formats, a number's range, multipleOf, any
// other oneOf, allOf, not, if/then/else, uniqueItems, patternProperties,
// minProperties, ...) is refused with an *UnsupportedError naming the
// keyword and where it is, rather than ignored: a schema the output might
// not meet must not be accepted.

// Bounds on a schema document, which comes from outside.
const (
	// MaxSchemaBytes bounds the document.
	MaxSchemaBytes = 256 << 10
	// MaxSchemaDepth bounds its nesting (arrays and objects).
	MaxSchemaDepth = 64
	// MaxBound bounds minLength, maxLength, minItems and maxItems, each
	// of which the grammar spells out.
	MaxBound = 1024
)

// UnsupportedError is a schema keyword this compiler does not enforce.
type UnsupportedError struct {
	Keyword string // the keyword
	Pointer string // where it is, a JSON pointer into the schema
	Reason  string // why, when more than "not supported"
}

func (e *UnsupportedError) Error() string {
	where := e.Pointer
	if where == "" {
		where = "the root"
	}
	if e.Reason != "" {
		return fmt.Sprintf("schema keyword %q at %s: %s", e.Keyword, where, e.Reason)
	}
	return fmt.Sprintf("schema keyword %q at %s is not supported", e.Keyword, where)
}

// SchemaError is a schema that is not valid JSON Schema, or can match
// nothing.
type SchemaError struct {
	Pointer string
	Msg     string
}

func (e *SchemaError) Error() string {
	where := e.Pointer
	if where == "" {
		where = "the root"
	}
	return fmt.Sprintf("schema at %s: %s", where, e.Msg)
}

// ErrSchema is wrapped by the error of a schema too big or too deep to
// read.
var ErrSchema = errors.New("grammar: schema")

// FromSchema builds the grammar of one JSON value matching the schema doc
// (response_format json_schema).
func FromSchema(doc []byte) (*Grammar, error) {
	b := NewBuilder()
	v, err := b.Schema(doc)
	if err != nil {
		return nil, err
	}
	b.Define("root", v)
	g, err := b.Build("root")
	if err != nil {
		return nil, &SchemaError{Msg: err.Error()}
	}
	return g, nil
}

// Schema adds the rules for a JSON value matching the schema doc and
// returns the expression that matches it (see the subset above), for use
// inside a larger grammar.
func (b *Builder) Schema(doc []byte) (Expr, error) {
	if len(doc) > MaxSchemaBytes {
		return Expr{}, fmt.Errorf("%w: %d bytes, at most %d", ErrSchema, len(doc), MaxSchemaBytes)
	}
	root, err := parseJSON(doc)
	if err != nil {
		return Expr{}, err
	}
	b.schemas++
	c := &schemaCompiler{b: b, root: root, prefix: "s" + strconv.Itoa(b.schemas), refs: map[string]string{}}
	return c.compile(root, "")
}

// jnode is a parsed JSON value that keeps its objects' key order.
type jnode struct {
	kind  byte // 'o', 'a', 's', 'n', 't' (true), 'f' (false), 'z' (null)
	keys  []string
	vals  []*jnode
	items []*jnode
	str   string // a string's value, a number's text
}

func (n *jnode) get(k string) (*jnode, bool) {
	for i, key := range n.keys {
		if key == k {
			return n.vals[i], true
		}
	}
	return nil, false
}

// parseJSON reads one JSON value, bounded in depth.
func parseJSON(doc []byte) (*jnode, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	n, err := parseValue(dec, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSchema, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: more than one JSON value", ErrSchema)
	}
	return n, nil
}

func parseValue(dec *json.Decoder, depth int) (*jnode, error) {
	if depth > MaxSchemaDepth {
		return nil, fmt.Errorf("nested deeper than %d", MaxSchemaDepth)
	}
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '{':
			n := &jnode{kind: 'o'}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				if _, dup := n.get(k); dup {
					return nil, fmt.Errorf("key %q twice in one object", k)
				}
				v, err := parseValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				n.keys, n.vals = append(n.keys, k), append(n.vals, v)
			}
			_, err := dec.Token()
			return n, err
		case '[':
			n := &jnode{kind: 'a'}
			for dec.More() {
				v, err := parseValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				n.items = append(n.items, v)
			}
			_, err := dec.Token()
			return n, err
		}
	case string:
		return &jnode{kind: 's', str: t}, nil
	case json.Number:
		return &jnode{kind: 'n', str: t.String()}, nil
	case bool:
		if t {
			return &jnode{kind: 't'}, nil
		}
		return &jnode{kind: 'f'}, nil
	case nil:
		return &jnode{kind: 'z'}, nil
	}
	return nil, fmt.Errorf("unexpected token %v", t)
}

// compact appends n as compact JSON, keys in order.
func (n *jnode) compact(dst []byte) []byte {
	switch n.kind {
	case 'o':
		dst = append(dst, '{')
		for i, k := range n.keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
			dst = append(dst, ':')
			dst = n.vals[i].compact(dst)
		}
		return append(dst, '}')
	case 'a':
		dst = append(dst, '[')
		for i, v := range n.items {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = v.compact(dst)
		}
		return append(dst, ']')
	case 's':
		return appendString(dst, n.str)
	case 'n':
		return append(dst, n.str...)
	case 't':
		return append(dst, "true"...)
	case 'f':
		return append(dst, "false"...)
	}
	return append(dst, "null"...)
}

// appendString appends s as a JSON string, without the HTML escapes.
func appendString(dst []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return append(dst, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}

type schemaCompiler struct {
	b      *Builder
	root   *jnode
	prefix string
	n      int
	refs   map[string]string // pointer → rule
}

// fresh names a new rule of this schema.
func (c *schemaCompiler) fresh(what string) string {
	c.n++
	return c.prefix + "-" + what + strconv.Itoa(c.n)
}

// annotations change nothing a value must be.
var annotations = map[string]bool{
	"title": true, "description": true, "$schema": true, "$id": true, "$comment": true,
	"examples": true, "default": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"discriminator": true, // OpenAPI's, beside oneOf: the branches' const tells them apart
}

// keywords are the ones compiled.
var keywords = map[string]bool{
	"type": true, "enum": true, "const": true, "properties": true, "required": true,
	"additionalProperties": true, "items": true, "minItems": true, "maxItems": true, "prefixItems": true, "additionalItems": true,
	"minLength": true, "maxLength": true, "pattern": true, "format": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
	"oneOf": true, "anyOf": true, "$ref": true, "$defs": true, "definitions": true,
}

// unsupportedWhy says more about the keywords people send most.
var unsupportedWhy = map[string]string{
	"allOf":      "schemas are not merged; write the combined schema",
	"multipleOf": "numeric constraints are not enforced",
}

func ptrJoin(ptr, k string) string {
	return ptr + "/" + strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

func (c *schemaCompiler) compile(n *jnode, ptr string) (Expr, error) {
	switch n.kind {
	case 't':
		return c.b.JSONValue(), nil
	case 'f':
		return Expr{}, &SchemaError{Pointer: ptr, Msg: "the schema false matches nothing"}
	case 'o':
	default:
		return Expr{}, &SchemaError{Pointer: ptr, Msg: "a schema is an object or a boolean"}
	}
	for _, k := range n.keys {
		if !keywords[k] && !annotations[k] {
			return Expr{}, &UnsupportedError{Keyword: k, Pointer: ptrJoin(ptr, k), Reason: unsupportedWhy[k]}
		}
	}
	if ref, ok := n.get("$ref"); ok {
		for _, k := range n.keys {
			if k != "$ref" && k != "$defs" && k != "definitions" && !annotations[k] {
				return Expr{}, &UnsupportedError{Keyword: k, Pointer: ptrJoin(ptr, k), Reason: "keywords beside $ref are not merged with its target"}
			}
		}
		return c.ref(ref, ptrJoin(ptr, "$ref"))
	}
	// Check the definitions, though only those referred to become rules.
	for _, k := range []string{"$defs", "definitions"} {
		if d, ok := n.get(k); ok && d.kind != 'o' {
			return Expr{}, &SchemaError{Pointer: ptrJoin(ptr, k), Msg: k + " must be an object"}
		}
	}
	if v, ok := n.get("const"); ok {
		return Lit(string(v.compact(nil))), nil
	}
	if v, ok := n.get("enum"); ok {
		if v.kind != 'a' || len(v.items) == 0 {
			return Expr{}, &SchemaError{Pointer: ptrJoin(ptr, "enum"), Msg: "enum must be a non-empty array"}
		}
		alts := make([]Expr, len(v.items))
		for i, it := range v.items {
			alts[i] = Lit(string(it.compact(nil)))
		}
		return Alt(alts...), nil
	}
	for _, of := range []string{"anyOf", "oneOf"} {
		v, ok := n.get(of)
		if !ok {
			continue
		}
		p := ptrJoin(ptr, of)
		if v.kind != 'a' || len(v.items) == 0 {
			return Expr{}, &SchemaError{Pointer: p, Msg: of + " must be a non-empty array"}
		}
		for _, k := range n.keys {
			if k != of && k != "$defs" && k != "definitions" && !annotations[k] {
				return Expr{}, &UnsupportedError{Keyword: k, Pointer: ptrJoin(ptr, k), Reason: "keywords beside " + of + " are not merged into its branches"}
			}
		}
		if of == "oneOf" && !c.disjoint(v.items) {
			return Expr{}, &UnsupportedError{Keyword: "oneOf", Pointer: p, Reason: "exactly one of its branches is enforced only where they are told apart by a property each requires with a const of its own (a discriminator, as Pydantic writes tagged unions); these are not: use anyOf"}
		}
		alts := make([]Expr, len(v.items))
		for i, it := range v.items {
			e, err := c.compile(it, ptrJoin(p, strconv.Itoa(i)))
			if err != nil {
				return Expr{}, err
			}
			alts[i] = e
		}
		return Alt(alts...), nil
	}
	types, err := c.types(n, ptr)
	if err != nil {
		return Expr{}, err
	}
	if len(types) == 0 {
		return c.b.JSONValue(), nil
	}
	alts := make([]Expr, 0, len(types))
	for _, t := range types {
		if _, ok := n.get("format"); ok && (t == "number" || t == "integer") {
			// OpenAPI's numeric formats (int32, float …) would go
			// unenforced: a format is compiled for strings only.
			return Expr{}, &UnsupportedError{Keyword: "format", Pointer: ptrJoin(ptr, "format"), Reason: "a format on a " + t + " is not enforced (formats are, on strings)"}
		}
		var e Expr
		switch t {
		case "object":
			e, err = c.object(n, ptr)
		case "array":
			e, err = c.array(n, ptr)
		case "string":
			lo, hi, err2 := c.bounds(n, ptr, "minLength", "maxLength")
			if err2 != nil {
				return Expr{}, err2
			}
			if f, ok := n.get("format"); ok {
				e, err = c.format(n, f, ptrJoin(ptr, "format"), lo, hi)
			} else if p, ok := n.get("pattern"); ok {
				e, err = c.pattern(p, ptrJoin(ptr, "pattern"), lo, hi)
			} else if lo == 0 && hi < 0 {
				e = c.b.JSONString()
			} else {
				e = c.b.stringOf(lo, hi)
			}
		case "number":
			if k := rangeKeyword(n); k != "" {
				return Expr{}, &UnsupportedError{Keyword: k, Pointer: ptrJoin(ptr, k), Reason: "a range on numbers is not enforced (on integers, type integer, it is)"}
			}
			e = c.b.jsonNumber()
		case "integer":
			if rangeKeyword(n) != "" {
				e, err = c.intBounds(n, ptr)
			} else {
				e = c.b.jsonInteger()
			}
		case "boolean":
			e = c.b.jsonBool()
		case "null":
			e = c.b.jsonNull()
		}
		if err != nil {
			return Expr{}, err
		}
		alts = append(alts, e)
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return Alt(alts...), nil
}

var jsonTypes = map[string]bool{"object": true, "array": true, "string": true, "number": true, "integer": true, "boolean": true, "null": true}

// types is the schema's types: its type keyword, or what its keywords
// imply; none is any value.
func (c *schemaCompiler) types(n *jnode, ptr string) ([]string, error) {
	t, ok := n.get("type")
	if !ok {
		for _, k := range n.keys {
			switch k {
			case "properties", "required", "additionalProperties":
				return []string{"object"}, nil
			case "items", "minItems", "maxItems", "prefixItems":
				return []string{"array"}, nil
			case "minLength", "maxLength", "pattern", "format":
				return []string{"string"}, nil
			case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
				return []string{"number"}, nil
			}
		}
		return nil, nil
	}
	p := ptrJoin(ptr, "type")
	var out []string
	switch t.kind {
	case 's':
		out = []string{t.str}
	case 'a':
		for _, it := range t.items {
			if it.kind != 's' {
				return nil, &SchemaError{Pointer: p, Msg: "type must be a string or an array of strings"}
			}
			out = append(out, it.str)
		}
		if len(out) == 0 {
			return nil, &SchemaError{Pointer: p, Msg: "type must name at least one type"}
		}
	default:
		return nil, &SchemaError{Pointer: p, Msg: "type must be a string or an array of strings"}
	}
	for i, s := range out {
		if !jsonTypes[s] {
			return nil, &SchemaError{Pointer: p, Msg: fmt.Sprintf("%q is not a JSON Schema type", s)}
		}
		for _, prev := range out[:i] {
			if prev == s {
				return nil, &SchemaError{Pointer: p, Msg: fmt.Sprintf("type %q twice", s)}
			}
		}
	}
	return out, nil
}

// bounds reads a pair of count bounds (hi < 0: none).
// rangeKeyword is the first of a schema's numeric range keywords, "" for
// none.
func rangeKeyword(n *jnode) string {
	for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
		if _, ok := n.get(k); ok {
			return k
		}
	}
	return ""
}

// intBounds is an integer held to the schema's range: minimum and
// maximum, and exclusiveMinimum and exclusiveMaximum as numbers (JSON
// Schema's since draft 6) or as booleans beside them (draft 4's), each
// bound rounded inward to an integer and held within what JSON's
// integers here are written with (16 digits).
func (c *schemaCompiler) intBounds(n *jnode, ptr string) (Expr, error) {
	lo, hi := float64(-maxJSONInteger), float64(maxJSONInteger)
	bound := func(k string) (float64, bool, error) {
		v, ok := n.get(k)
		if !ok {
			return 0, false, nil
		}
		if v.kind == 't' || v.kind == 'f' {
			return 0, false, nil // draft 4's exclusive flag, read beside its bound
		}
		if v.kind != 'n' {
			return 0, false, &SchemaError{Pointer: ptrJoin(ptr, k), Msg: k + " must be a number"}
		}
		f, err := strconv.ParseFloat(v.str, 64)
		if err != nil || math.IsInf(f, 0) {
			return 0, false, &SchemaError{Pointer: ptrJoin(ptr, k), Msg: k + " must be a finite number"}
		}
		return f, true, nil
	}
	flag := func(k string) bool {
		v, ok := n.get(k)
		return ok && v.kind == 't'
	}
	if f, ok, err := bound("minimum"); err != nil {
		return Expr{}, err
	} else if ok {
		if flag("exclusiveMinimum") && f == math.Floor(f) {
			f++
		}
		lo = max(lo, math.Ceil(f))
	}
	if f, ok, err := bound("exclusiveMinimum"); err != nil {
		return Expr{}, err
	} else if ok {
		lo = max(lo, math.Floor(f)+1)
	}
	if f, ok, err := bound("maximum"); err != nil {
		return Expr{}, err
	} else if ok {
		if flag("exclusiveMaximum") && f == math.Floor(f) {
			f--
		}
		hi = min(hi, math.Floor(f))
	}
	if f, ok, err := bound("exclusiveMaximum"); err != nil {
		return Expr{}, err
	} else if ok {
		hi = min(hi, math.Ceil(f)-1)
	}
	if lo > hi {
		return Expr{}, &SchemaError{Pointer: ptr, Msg: "the integer range holds no integer (that 16 digits write)"}
	}
	return intRange(int64(lo), int64(hi)), nil
}

// formats are the string formats compiled, each a regular expression
// whose every match is valid in the format (RFC 3339's dates and times,
// the day bounded by its month and February's 29th by the leap years;
// a leap second and the lower-case T and Z, which RFC 3339 allows, are
// not written), as Pydantic's date, datetime, time, UUID, EmailStr and
// HttpUrl fields ask: a subset where the format is wider.
var formats = map[string]string{
	"date":      dateRegex,
	"time":      timeRegex,
	"date-time": dateRegex + "T" + timeRegex,
	"uuid":      `[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`,
	// A dot-atom local part (of at most 62 characters) at a host name:
	// RFC 5321's common form.
	"email":    "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]{1,20}(?:\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]{1,20}){0,2}@" + hostnameRegex,
	"hostname": hostnameRegex,
	"ipv4":     `(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])`,
	// An http or https URL of a host name and a path of unreserved and
	// sub-delimiter characters (no percent-encoding, query or fragment).
	"uri": `https?://` + hostnameRegex + `(?:/[A-Za-z0-9._~!$&'()*+,;=:@-]*)*`,
}

// hostnameRegex is RFC 1123's host name: up to four labels of letters,
// digits and inner hyphens, of 1 to 62 characters (so at most 251 in
// all, within its 253).
const hostnameRegex = `[A-Za-z0-9](?:[A-Za-z0-9-]{0,60}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,60}[A-Za-z0-9])?){0,3}`

const (
	dateRegex = `(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))` +
		`|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)`
	timeRegex = `(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])`
)

// format is a string in one of formats; beside a pattern, minLength or
// maxLength it is refused (the grammar of both is not built).
func (c *schemaCompiler) format(n, f *jnode, ptr string, lo, hi int) (Expr, error) {
	re, ok := formats[f.str]
	switch {
	case f.kind != 's':
		return Expr{}, &SchemaError{Pointer: ptr, Msg: "format must be a string"}
	case !ok:
		return Expr{}, &UnsupportedError{Keyword: "format", Pointer: ptr, Reason: fmt.Sprintf("format %q is not enforced (date, time, date-time, uuid, email, hostname, ipv4 and uri are)", f.str)}
	case lo != 0 || hi >= 0:
		return Expr{}, &UnsupportedError{Keyword: "format", Pointer: ptr, Reason: "a format beside minLength or maxLength is not compiled"}
	}
	if _, ok := n.get("pattern"); ok {
		return Expr{}, &UnsupportedError{Keyword: "format", Pointer: ptr, Reason: "a format beside a pattern is not compiled"}
	}
	e, err := c.b.Regex("^"+re+"$", true)
	if err != nil {
		return Expr{}, err // the formats' own expressions compile
	}
	return Seq(Lit(`"`), e, Lit(`"`)), nil
}

// pattern is a string held to a regular expression (Builder.Regex, its
// characters as JSON writes them). Beside minLength or maxLength it is
// refused: the grammar of both at once is not built.
func (c *schemaCompiler) pattern(p *jnode, ptr string, lo, hi int) (Expr, error) {
	if p.kind != 's' {
		return Expr{}, &SchemaError{Pointer: ptr, Msg: "pattern must be a string"}
	}
	if lo != 0 || hi >= 0 {
		return Expr{}, &UnsupportedError{Keyword: "pattern", Pointer: ptr, Reason: "a pattern beside minLength or maxLength is not compiled: write the length into the pattern ({n,m})"}
	}
	e, err := c.b.Regex(p.str, true)
	if err != nil {
		var re *RegexError
		if errors.As(err, &re) {
			return Expr{}, &UnsupportedError{Keyword: "pattern", Pointer: ptr, Reason: "not compiled: " + re.Why}
		}
		return Expr{}, &SchemaError{Pointer: ptr, Msg: err.Error()}
	}
	return Seq(Lit(`"`), e, Lit(`"`)), nil
}

func (c *schemaCompiler) bounds(n *jnode, ptr, loKey, hiKey string) (lo, hi int, err error) {
	read := func(k string) (int, bool, error) {
		v, ok := n.get(k)
		if !ok {
			return 0, false, nil
		}
		x, perr := strconv.ParseUint(v.str, 10, 32)
		if v.kind != 'n' || perr != nil {
			return 0, false, &SchemaError{Pointer: ptrJoin(ptr, k), Msg: k + " must be a non-negative integer"}
		}
		if x > MaxBound {
			return 0, false, &UnsupportedError{Keyword: k, Pointer: ptrJoin(ptr, k), Reason: fmt.Sprintf("%d is above the most supported, %d", x, MaxBound)}
		}
		return int(x), true, nil
	}
	lo, _, err = read(loKey)
	if err != nil {
		return 0, 0, err
	}
	hi, ok, err := read(hiKey)
	if err != nil {
		return 0, 0, err
	}
	if !ok {
		hi = -1
	} else if hi < lo {
		return 0, 0, &SchemaError{Pointer: ptrJoin(ptr, hiKey), Msg: fmt.Sprintf("%s %d is below %s %d", hiKey, hi, loKey, lo)}
	}
	return lo, hi, nil
}

func (c *schemaCompiler) array(n *jnode, ptr string) (Expr, error) {
	lo, hi, err := c.bounds(n, ptr, "minItems", "maxItems")
	if err != nil {
		return Expr{}, err
	}
	// A tuple: prefixItems (or draft 4's items as an array), then the
	// rest under items (draft 4's additionalItems).
	prefixKey, restKey := "prefixItems", "items"
	prefix, tuple := n.get("prefixItems")
	if it, ok := n.get("items"); ok && it.kind == 'a' {
		if tuple {
			return Expr{}, &SchemaError{Pointer: ptrJoin(ptr, "items"), Msg: "items is an array beside prefixItems"}
		}
		prefix, tuple, prefixKey, restKey = it, true, "items", "additionalItems"
	} else if _, ok := n.get("additionalItems"); ok {
		return Expr{}, &UnsupportedError{Keyword: "additionalItems", Pointer: ptrJoin(ptr, "additionalItems"), Reason: "additionalItems goes with items as an array"}
	}
	rest, closed := c.b.JSONValue(), false
	if r, ok := n.get(restKey); ok {
		switch r.kind {
		case 'f':
			closed = true
		case 't':
		default:
			e, err := c.compile(r, ptrJoin(ptr, restKey))
			if err != nil {
				return Expr{}, err
			}
			// The item is one rule, so that the bounds repeat a reference.
			name := c.fresh("item")
			c.b.Define(name, e)
			rest = Ref(name)
		}
	}
	if !tuple {
		if closed {
			hi = 0
		}
		return c.b.arrayOf(rest, lo, hi), nil
	}
	pp := ptrJoin(ptr, prefixKey)
	if prefix.kind != 'a' || len(prefix.items) == 0 {
		return Expr{}, &SchemaError{Pointer: pp, Msg: prefixKey + " must be a non-empty array of schemas"}
	}
	items := make([]Expr, len(prefix.items))
	for i, v := range prefix.items {
		if items[i], err = c.compile(v, ptrJoin(pp, strconv.Itoa(i))); err != nil {
			return Expr{}, err
		}
	}
	k := len(items)
	if closed && (hi < 0 || hi > k) {
		hi = k
	}
	if lo > k && closed || hi >= 0 && lo > hi {
		return Expr{}, &SchemaError{Pointer: ptr, Msg: "the tuple's bounds hold no array"}
	}
	return c.b.tupleOf(items, rest, lo, hi), nil
}

func (c *schemaCompiler) object(n *jnode, ptr string) (Expr, error) {
	var names []string
	var vals []Expr
	if props, ok := n.get("properties"); ok {
		pp := ptrJoin(ptr, "properties")
		if props.kind != 'o' {
			return Expr{}, &SchemaError{Pointer: pp, Msg: "properties must be an object"}
		}
		for i, k := range props.keys {
			e, err := c.compile(props.vals[i], ptrJoin(pp, k))
			if err != nil {
				return Expr{}, err
			}
			names, vals = append(names, k), append(vals, e)
		}
	}
	required := map[string]bool{}
	if req, ok := n.get("required"); ok {
		rp := ptrJoin(ptr, "required")
		if req.kind != 'a' {
			return Expr{}, &SchemaError{Pointer: rp, Msg: "required must be an array of strings"}
		}
		for _, it := range req.items {
			if it.kind != 's' {
				return Expr{}, &SchemaError{Pointer: rp, Msg: "required must be an array of strings"}
			}
			required[it.str] = true
		}
	}
	var extra Expr // what additional properties' values are; unset: none allowed
	closed := false
	if ap, ok := n.get("additionalProperties"); ok {
		app := ptrJoin(ptr, "additionalProperties")
		switch ap.kind {
		case 'f':
			closed = true
		case 't':
			extra = c.b.JSONValue()
		case 'o':
			e, err := c.compile(ap, app)
			if err != nil {
				return Expr{}, err
			}
			name := c.fresh("extra")
			c.b.Define(name, e)
			extra = Ref(name)
		default:
			return Expr{}, &SchemaError{Pointer: app, Msg: "additionalProperties must be a boolean or a schema"}
		}
	} else {
		extra = c.b.JSONValue()
	}
	if len(names) == 0 && len(required) == 0 && !closed {
		return c.b.mapOf(extra), nil
	}
	// Required properties the schema does not describe take any value
	// additionalProperties allows, after the described ones.
	if req, ok := n.get("required"); ok {
		for _, it := range req.items {
			if contains(names, it.str) {
				continue
			}
			if closed {
				return Expr{}, &SchemaError{Pointer: ptrJoin(ptr, "required"), Msg: fmt.Sprintf("%q is required, but additionalProperties is false and properties does not list it", it.str)}
			}
			names, vals = append(names, it.str), append(vals, extra)
		}
	}
	return c.members(names, vals, required), nil
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// members is an object of the named properties in order, the required
// ones always present. rest(i) is what follows once a property before i
// was written (each next one preceded by a comma); first(i) is a
// non-empty run from i on when none was: linear in the properties.
func (c *schemaCompiler) members(names []string, vals []Expr, required map[string]bool) Expr {
	b := c.b
	ws := b.ws()
	kv := make([]Expr, len(names))
	for i, k := range names {
		kv[i] = Seq(Lit(string(appendString(nil, k))), ws, Lit(":"), ws, vals[i])
	}
	base := c.fresh("obj")
	restName := func(i int) string { return base + "-rest" + strconv.Itoa(i) }
	firstName := func(i int) string { return base + "-first" + strconv.Itoa(i) }
	nn := len(names)
	b.Define(restName(nn), Seq())
	for i := nn - 1; i >= 0; i-- {
		next := Seq(ws, Lit(","), ws, kv[i])
		if required[names[i]] {
			b.Define(restName(i), Seq(next, Ref(restName(i+1))))
		} else {
			b.Define(restName(i), Seq(Opt(next), Ref(restName(i+1))))
		}
	}
	// first(i) exists for i < nn; it is non-empty.
	anyRequired := false
	for i := nn - 1; i >= 0; i-- {
		take := Seq(kv[i], Ref(restName(i+1)))
		switch {
		case required[names[i]]:
			anyRequired = true
			b.Define(firstName(i), take)
		case i == nn-1 || !b.Defined(firstName(i+1)):
			b.Define(firstName(i), take)
		default:
			b.Define(firstName(i), Alt(take, Ref(firstName(i+1))))
		}
	}
	if nn == 0 {
		return Seq(Lit("{"), ws, Lit("}"))
	}
	if anyRequired {
		return Seq(Lit("{"), ws, Ref(firstName(0)), ws, Lit("}"))
	}
	return Seq(Lit("{"), ws, Opt(Seq(Ref(firstName(0)), ws)), Lit("}"))
}

// ref compiles a $ref to a JSON pointer in this document into a rule
// (once per target, so recursion refers back to it).
func (c *schemaCompiler) ref(v *jnode, ptr string) (Expr, error) {
	if v.kind != 's' {
		return Expr{}, &SchemaError{Pointer: ptr, Msg: "$ref must be a string"}
	}
	target := v.str
	if !strings.HasPrefix(target, "#") {
		return Expr{}, &UnsupportedError{Keyword: "$ref", Pointer: ptr, Reason: fmt.Sprintf("%q: only references inside the schema (#/...) are supported", target)}
	}
	if name, ok := c.refs[target]; ok {
		return Ref(name), nil
	}
	node, err := c.resolve(target[1:])
	if err != nil {
		return Expr{}, &SchemaError{Pointer: ptr, Msg: fmt.Sprintf("$ref %q: %v", target, err)}
	}
	name := c.fresh("ref")
	c.refs[target] = name
	c.b.reserve(name)
	e, err := c.compile(node, target[1:])
	if err != nil {
		return Expr{}, err
	}
	c.b.Define(name, e)
	return Ref(name), nil
}

// disjoint reports whether no value can match two of the branches: each
// (through its $ref) is an object that requires a property they all
// name, with a const (or an enum of one value) of its own. Then oneOf
// is anyOf.
func (c *schemaCompiler) disjoint(branches []*jnode) bool {
	consts := make([]map[string]string, len(branches))
	for i, b := range branches {
		for b != nil {
			r, ok := b.get("$ref")
			if !ok || r.kind != 's' || !strings.HasPrefix(r.str, "#") {
				break
			}
			target, err := c.resolve(r.str[1:])
			if err != nil {
				return false
			}
			b = target
		}
		props, ok := b.get("properties")
		req, rok := b.get("required")
		if !ok || !rok || props.kind != 'o' || req.kind != 'a' {
			return false
		}
		consts[i] = map[string]string{}
		for _, r := range req.items {
			p, ok := props.get(r.str)
			if r.kind != 's' || !ok {
				continue
			}
			if v, ok := p.get("const"); ok {
				consts[i][r.str] = string(v.compact(nil))
			} else if e, ok := p.get("enum"); ok && e.kind == 'a' && len(e.items) == 1 {
				consts[i][r.str] = string(e.items[0].compact(nil))
			}
		}
	}
	// A property every branch pins, to values that all differ.
	for name := range consts[0] {
		seen := map[string]bool{}
		ok := true
		for _, cs := range consts {
			v, has := cs[name]
			if !has || seen[v] {
				ok = false
				break
			}
			seen[v] = true
		}
		if ok {
			return true
		}
	}
	return false
}

// resolve walks a JSON pointer from the root.
func (c *schemaCompiler) resolve(p string) (*jnode, error) {
	n := c.root
	if p == "" {
		return n, nil
	}
	if !strings.HasPrefix(p, "/") {
		return nil, errors.New("not a JSON pointer")
	}
	for _, tok := range strings.Split(p[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch n.kind {
		case 'o':
			v, ok := n.get(tok)
			if !ok {
				return nil, fmt.Errorf("no %q", tok)
			}
			n = v
		case 'a':
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n.items) {
				return nil, fmt.Errorf("no item %q", tok)
			}
			n = n.items[i]
		default:
			return nil, fmt.Errorf("%q goes into a scalar", tok)
		}
	}
	return n, nil
}
