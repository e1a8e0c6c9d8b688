package jinja

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// filterTojson is transformers' tojson: Python's json.dumps(v,
// ensure_ascii=False, indent=indent, separators=separators,
// sort_keys=sort_keys), keys in their order unless sorted, so that a tool's schema reaches the prompt exactly as the
// model's trainers rendered it. Without indent the separators are ", "
// and ": "; with it (an int: Python's spaces, negative ones none) every
// value takes a line and the item separator is ",".
func filterTojson(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewString(""), nil
	}
	e := jsonEncoder{w: builder{b: b}, item: ", ", key: ": "}
	if indent, ok := kwargs["indent"]; ok && !indent.IsNone() && !indent.IsUndefined() {
		if !indent.IsInt() {
			return Undefined(), fmt.Errorf("tojson: indent must be an integer, not %s", b.repr(indent))
		}
		n := max(indent.AsInt(), 0)
		b.alloc(n) // the indent itself, before a template's huge one is made
		e.indent, e.indented, e.item = strings.Repeat(" ", int(n)), true, ","
	}
	if separators, ok := kwargs["separators"]; ok && !separators.IsNone() {
		if !separators.IsList() || separators.AsList().Len() != 2 {
			return Undefined(), fmt.Errorf("tojson: separators must contain two strings")
		}
		items := separators.AsList().Items
		if !items[0].IsString() || !items[1].IsString() {
			return Undefined(), fmt.Errorf("tojson: separators must contain two strings")
		}
		e.item, e.key = items[0].AsString(), items[1].AsString()
	}
	if sortKeys, ok := kwargs["sort_keys"]; ok {
		e.sortKeys = sortKeys.IsTruthy()
	}
	if err := e.value(args[0], 0); err != nil {
		return Undefined(), err
	}
	return NewString(e.w.String()), nil
}

// jsonEncoder writes values as Python's json.dumps does (filterTojson).
type jsonEncoder struct {
	w         builder
	item, key string
	indent    string
	indented  bool
	sortKeys  bool
}

// newline starts a line at nesting level, when indenting.
func (e *jsonEncoder) newline(level int) {
	if !e.indented {
		return
	}
	e.w.b.alloc(size(level, len(e.indent)))
	e.w.sb.WriteByte('\n')
	for range level {
		e.w.sb.WriteString(e.indent)
	}
}

func (e *jsonEncoder) value(v Value, level int) error {
	e.w.b.nest(level)
	switch v.kind {
	case KindBool:
		e.w.WriteString(strconv.FormatBool(v.AsBool()))
	case KindInt:
		e.w.WriteString(intString(v))
	case KindFloat:
		s, err := pyFloat(v.AsFloat())
		if err != nil {
			return err
		}
		e.w.WriteString(s)
	case KindString:
		e.str(v.AsString())
	case KindList:
		items := v.AsList().Items
		if len(items) == 0 {
			e.w.WriteString("[]")
			return nil
		}
		e.w.WriteByte('[')
		for i, item := range items {
			if i > 0 {
				e.w.WriteString(e.item)
			}
			e.newline(level + 1)
			if err := e.value(item, level+1); err != nil {
				return err
			}
		}
		e.newline(level)
		e.w.WriteByte(']')
	case KindDict:
		d := v.AsDict()
		if d.Len() == 0 {
			e.w.WriteString("{}")
			return nil
		}
		keys := d.Keys
		if e.sortKeys {
			e.w.b.allocValues(len(keys))
			keys = slices.Sorted(slices.Values(keys)) // code point order: Python's
		}
		e.w.WriteByte('{')
		for i, key := range keys {
			if i > 0 {
				e.w.WriteString(e.item)
			}
			e.newline(level + 1)
			e.str(key)
			e.w.WriteString(e.key)
			if err := e.value(d.Data[key], level+1); err != nil {
				return err
			}
		}
		e.newline(level)
		e.w.WriteByte('}')
	default: // None, Undefined, a callable
		e.w.WriteString("null")
	}
	return nil
}

// pyFloat is Python's float repr: the shortest digits, fixed notation
// with ".0" for exponents -4 to 15, else scientific with a two-digit
// exponent. JSON has no NaN or infinity (Python writes them past the
// standard; no chat template asks for them).
func pyFloat(f float64) (string, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return "", fmt.Errorf("tojson: cannot encode %v", f)
	}
	s := strconv.FormatFloat(f, 'e', -1, 64)
	exp, _ := strconv.Atoi(s[strings.IndexByte(s, 'e')+1:])
	if exp >= -4 && exp < 16 {
		s = strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
	}
	return s, nil
}

// pyStr is Python's str of a float, as a template prints one: its repr,
// and inf, -inf and nan.
func pyStr(f float64) string {
	if s, ok := pyNonFinite(f); ok {
		return s
	}
	s, _ := pyFloat(f)
	return s
}

// pyNonFinite is how Python writes f if it is nan, inf or -inf.
func pyNonFinite(f float64) (string, bool) {
	switch {
	case math.IsNaN(f):
		return "nan", true
	case math.IsInf(f, 1):
		return "inf", true
	case math.IsInf(f, -1):
		return "-inf", true
	}
	return "", false
}

// str quotes s as json.dumps(ensure_ascii=False) does: only the quote,
// the backslash and control characters are escaped.
func (e *jsonEncoder) str(s string) {
	e.w.b.alloc(size(len(s), 6) + 2) // \u001f: six bytes a byte at most
	w := &e.w.sb
	w.WriteByte('"')
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '"':
			w.WriteString(`\"`)
		case r == '\\':
			w.WriteString(`\\`)
		case r == '\n':
			w.WriteString(`\n`)
		case r == '\r':
			w.WriteString(`\r`)
		case r == '\t':
			w.WriteString(`\t`)
		case r == '\b':
			w.WriteString(`\b`)
		case r == '\f':
			w.WriteString(`\f`)
		case r < 0x20:
			fmt.Fprintf(w, `\u%04x`, r)
		case r == utf8.RuneError && n == 1:
			w.WriteString(`\ufffd`)
		default:
			w.WriteString(s[i : i+n])
		}
		i += n
	}
	w.WriteByte('"')
}
