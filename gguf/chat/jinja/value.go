package jinja

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// =============================================================================

// Kind represents the type of a template value.
type Kind int

const (
	KindUndefined Kind = iota
	KindNone
	KindBool
	KindInt
	KindFloat
	KindString
	KindList
	KindDict
	KindCallable
)

// =============================================================================

// Value is a tagged union over JSON-like types used throughout the template
// engine. The v field holds one of: bool, int64, float64, string, *List,
// *Dict, or Callable.
type Value struct {
	kind Kind
	v    any
}

// Undefined returns an undefined value.
func Undefined() Value {
	return Value{kind: KindUndefined}
}

// None returns a none value.
func None() Value {
	return Value{kind: KindNone}
}

// NewBool returns a boolean value.
func NewBool(b bool) Value {
	return Value{kind: KindBool, v: b}
}

// NewInt returns an integer value.
func NewInt(n int64) Value {
	return Value{kind: KindInt, v: n}
}

// NewFloat returns a floating-point value.
func NewFloat(f float64) Value {
	return Value{kind: KindFloat, v: f}
}

// NewString returns a string value.
func NewString(s string) Value {
	return Value{kind: KindString, v: s}
}

// NewList returns a list value containing the provided items.
func NewList(items []Value) Value {
	return Value{kind: KindList, v: &List{Items: items}}
}

// NewTuple returns a tuple value: a list that prints as Python's tuples
// do, (a, b), and is never equal to a list.
func NewTuple(items []Value) Value {
	return Value{kind: KindList, v: &List{Items: items, Tuple: true}}
}

// NewDict returns an empty dict value.
func NewDict() Value {
	return Value{kind: KindDict, v: &Dict{Data: make(map[string]Value)}}
}

// NewCallable returns a callable value.
func NewCallable(name string, fn func(args []Value, kwargs map[string]Value) (Value, error)) Value {
	return Value{kind: KindCallable, v: Callable{Name: name, Fn: fn}}
}

// =============================================================================

// IsUndefined reports whether v is undefined.
func (v Value) IsUndefined() bool { return v.kind == KindUndefined }

// IsNone reports whether v is none.
func (v Value) IsNone() bool { return v.kind == KindNone }

// IsBool reports whether v is a boolean.
func (v Value) IsBool() bool { return v.kind == KindBool }

// IsInt reports whether v is an integer.
func (v Value) IsInt() bool { return v.kind == KindInt }

// IsFloat reports whether v is a float.
func (v Value) IsFloat() bool { return v.kind == KindFloat }

// IsNumber reports whether v is an integer or float.
func (v Value) IsNumber() bool { return v.kind == KindInt || v.kind == KindFloat }

// IsString reports whether v is a string.
func (v Value) IsString() bool { return v.kind == KindString }

// IsList reports whether v is a list.
func (v Value) IsList() bool { return v.kind == KindList }

// IsDict reports whether v is a dict.
func (v Value) IsDict() bool { return v.kind == KindDict }

// IsCallable reports whether v is callable.
func (v Value) IsCallable() bool { return v.kind == KindCallable }

// IsTruthy returns the Python-style truthiness of the value.
func (v Value) IsTruthy() bool {
	switch v.kind {
	case KindUndefined:
		return false
	case KindNone:
		return false
	case KindBool:
		return v.v.(bool)
	case KindInt:
		n, ok := v.v.(int64)
		return !ok || n != 0 // a big.Int is past int64: never 0
	case KindFloat:
		return v.v.(float64) != 0.0
	case KindString:
		return len(v.AsString()) > 0
	case KindList:
		return v.v.(*List).Len() > 0
	case KindDict:
		return v.v.(*Dict).Len() > 0
	case KindCallable:
		return true
	}

	return false
}

// =============================================================================

// AsBool returns the bool held by v. It panics if v is not a bool.
func (v Value) AsBool() bool { return v.v.(bool) }

// AsInt returns the int64 held by v, saturated for an integer past
// int64's range. It panics if v is not an int.
func (v Value) AsInt() int64 {
	if n, ok := v.v.(int64); ok {
		return n
	}
	if v.v.(*big.Int).Sign() < 0 {
		return math.MinInt64
	}
	return math.MaxInt64
}

// AsFloat returns the float64 held by v. It panics if v is not a float.
func (v Value) AsFloat() float64 { return v.v.(float64) }

// AsString returns the string held by v. It panics if v is not a string.
func (v Value) AsString() string {
	switch s := v.v.(type) {
	case builtString:
		return s.s
	case markup:
		return string(s)
	}
	return v.v.(string)
}

// markup is a string marked safe, markupsafe's Markup: what the safe and
// escape filters return. Added to a plain string it escapes that string
// (Markup.__add__, __radd__), and escaping it again leaves it as it is;
// every other operation treats it as its text, and gives plain strings.
type markup string

// newMarkup is s marked safe.
func newMarkup(s string) Value { return Value{kind: KindString, v: markup(s)} }

// isMarkup says whether v is a string marked safe.
func (v Value) isMarkup() bool {
	_, ok := v.v.(markup)
	return ok
}

// AsList returns the *List held by v. It panics if v is not a list.
func (v Value) AsList() *List { return v.v.(*List) }

// AsDict returns the *Dict held by v. It panics if v is not a dict.
func (v Value) AsDict() *Dict { return v.v.(*Dict) }

// AsCallable returns the *Callable held by v. It panics if v is not callable.
func (v Value) AsCallable() *Callable {
	c := v.v.(Callable)
	return &c
}

// =============================================================================

// String returns a Python-style string representation of the value,
// within DefaultLimits: a value too large or too deeply nested (one that
// holds itself) panics with a *LimitError.
func (v Value) String() string {
	return newBudget(DefaultLimits()).repr(v)
}

// repr is v.String() charged to b.
func (b *budget) repr(v Value) string {
	w := builder{b: b}
	b.writeRepr(&w, v, 0)
	return w.String()
}

func (b *budget) writeRepr(w *builder, v Value, depth int) {
	b.nest(depth)
	switch v.kind {
	case KindNone:
		w.WriteString("None")

	case KindBool:
		if v.v.(bool) {
			w.WriteString("True")
		} else {
			w.WriteString("False")
		}

	case KindInt:
		w.WriteString(intString(v))

	case KindFloat:
		w.WriteString(pyStr(v.v.(float64)))

	case KindString:
		if v.isMarkup() {
			w.WriteString("Markup(")
			writeStringRepr(w, v.AsString())
			w.WriteString(")")
			break
		}
		writeStringRepr(w, v.AsString())

	case KindList:
		list := v.v.(*List)
		open, close := byte('['), byte(']')
		if list.Tuple {
			open, close = '(', ')'
		}
		w.WriteByte(open)
		for i, item := range list.Items {
			if i > 0 {
				w.WriteString(", ")
			}
			b.writeRepr(w, item, depth+1)
		}
		if list.Tuple && len(list.Items) == 1 {
			w.WriteByte(',') // (x,): Python's one-tuple
		}
		w.WriteByte(close)

	case KindDict:
		d := v.v.(*Dict)
		w.WriteByte('{')
		for i, key := range d.Keys {
			if i > 0 {
				w.WriteString(", ")
			}
			writeStringRepr(w, key)
			w.WriteString(": ")
			b.writeRepr(w, d.Data[key], depth+1)
		}
		w.WriteByte('}')

	case KindCallable:
		w.WriteString("<callable ")
		w.WriteString(v.v.(Callable).Name)
		w.WriteByte('>')

	default:
		w.WriteString("Undefined")
	}
}

// Equals reports whether v and other hold the same value, within
// DefaultLimits: values too large or too deeply nested (ones that hold
// themselves) panic with a *LimitError.
func (v Value) Equals(other Value) bool {
	return newBudget(DefaultLimits()).equal(v, other, 0)
}

// equal is v.Equals(other) charged to b, at nesting depth.
func (b *budget) equal(v, other Value, depth int) bool {
	b.nest(depth)
	if v.kind != other.kind {
		return false
	}

	switch v.kind {
	case KindUndefined, KindNone:
		return true

	case KindBool:
		return v.v.(bool) == other.v.(bool)

	case KindInt:
		return intCmp(v, other) == 0

	case KindFloat:
		return v.v.(float64) == other.v.(float64)

	case KindString:
		b.scan(int64(len(v.AsString())))
		return v.AsString() == other.AsString()

	case KindList:
		x := v.v.(*List)
		y := other.v.(*List)
		if x.Len() != y.Len() || x.Tuple != y.Tuple {
			return false
		}
		for i := range x.Items {
			if !b.equal(x.Items[i], y.Items[i], depth+1) {
				return false
			}
		}
		return true

	case KindDict:
		x := v.v.(*Dict)
		y := other.v.(*Dict)
		if x.Len() != y.Len() {
			return false
		}
		for _, key := range x.Keys {
			yv, ok := y.Get(key)
			if !ok {
				return false
			}
			if !b.equal(x.Data[key], yv, depth+1) {
				return false
			}
		}
		return true

	case KindCallable:
		return false
	}

	return false
}

// =============================================================================

// List holds an ordered sequence of values: a Python list, or, with
// Tuple, a tuple (a literal (a, b), a dict's items).
type List struct {
	Items []Value
	Tuple bool
	// Fields name a named tuple's items (groupby's grouper and list),
	// which attribute access reads.
	Fields []string
}

// Len returns the number of items in the list.
func (l *List) Len() int { return len(l.Items) }

// Get returns the item at position i. It panics if i is out of range.
func (l *List) Get(i int) Value { return l.Items[i] }

// slice is items as a sequence of l's kind: a slice of a tuple is a
// tuple.
func (l *List) slice(items []Value) Value {
	if l.Tuple {
		return NewTuple(items)
	}
	return NewList(items)
}

// Append adds a value to the end of the list.
func (l *List) Append(v Value) { l.Items = append(l.Items, v) }

// =============================================================================

// Dict is an ordered map of string keys to values. Insertion order is
// preserved via the Keys slice.
type Dict struct {
	Keys []string
	Data map[string]Value
}

// Get returns the value for key and reports whether it was found.
func (d *Dict) Get(key string) (Value, bool) {
	v, ok := d.Data[key]
	return v, ok
}

// Set inserts or updates a key-value pair. New keys are appended to the
// insertion-order list.
func (d *Dict) Set(key string, val Value) {
	if _, ok := d.Data[key]; !ok {
		d.Keys = append(d.Keys, key)
	}
	d.Data[key] = val
}

// Has reports whether key exists in the dict.
func (d *Dict) Has(key string) bool {
	_, ok := d.Data[key]
	return ok
}

// Len returns the number of entries in the dict.
func (d *Dict) Len() int { return len(d.Keys) }

// OrderedKeys returns the keys in insertion order.
func (d *Dict) OrderedKeys() []string {
	out := make([]string, len(d.Keys))
	copy(out, d.Keys)
	return out
}

// =============================================================================

// Callable represents a named callable function within the template engine.
type Callable struct {
	Name string
	Fn   func(args []Value, kwargs map[string]Value) (Value, error)
	// metered, on a builtin, is Fn charging the render's budget.
	metered builtinFunc
	// ordered, on dict, namespace and macros, is Fn also told the order
	// the keyword arguments were written in, which Python keeps (dict(b=1,
	// a=2) iterates b first) and a map loses.
	ordered orderedFunc
}

// =============================================================================

// FromGoValue converts a plain Go value to a Value. Supported source types
// are nil, bool, int, int64, float64, string, []any, map[string]any, and
// []Value. For map[string]any the keys are sorted for deterministic order.
// Unrecognized types produce Undefined.
func FromGoValue(v any) Value {
	switch val := v.(type) {
	case nil:
		return None()

	case bool:
		return NewBool(val)

	case int:
		return NewInt(int64(val))

	case int64:
		return NewInt(val)

	case float64:
		return NewFloat(val)

	case *big.Int:
		return newIntBig(new(big.Int).Set(val))

	case json.Number:
		// json.Number preserves whether the source JSON used a decimal
		// point or exponent. Integers (no '.', 'e', 'E') become Int so
		// that downstream tojson emits them as integers — matching
		// Python json.dumps, which keeps int and float distinct. Without
		// this, a value like 9007199254740991 round-trips as
		// 9.007199254740991e+15 and breaks chat-template tokenization.
		s := string(val)
		if !strings.ContainsAny(s, ".eE") {
			if i, ok := parseInt(s); ok {
				return i // past int64 too, as json.loads keeps it
			}
		}
		if f, err := val.Float64(); err == nil {
			return NewFloat(f)
		}
		return NewString(s)

	case string:
		return NewString(val)

	case []Value:
		items := make([]Value, len(val))
		copy(items, val)
		return NewList(items)

	case []any:
		items := make([]Value, len(val))
		for i, item := range val {
			items[i] = FromGoValue(item)
		}
		return NewList(items)

	case map[string]any:
		d := NewDict()
		dict := d.AsDict()

		keys := make([]string, 0, len(val))
		for k := range val {
			keys = append(keys, k)
		}
		sort.Strings(keys)

		for _, k := range keys {
			dict.Set(k, FromGoValue(val[k]))
		}
		return d
	}

	// Reflection fallback for named types (e.g., []model.D where D is
	// map[string]any). Go's type switch won't match named types against
	// their underlying type, so we use reflect to handle slices and maps
	// whose elements are convertible to any or map[string]any.
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice:
		items := make([]Value, rv.Len())
		for i := range rv.Len() {
			items[i] = FromGoValue(rv.Index(i).Interface())
		}
		return NewList(items)

	case reflect.Map:
		if rv.Type().Key().Kind() == reflect.String {
			d := NewDict()
			dict := d.AsDict()
			iter := rv.MapRange()
			keys := make([]string, 0, rv.Len())
			vals := make(map[string]any, rv.Len())
			for iter.Next() {
				k := iter.Key().String()
				keys = append(keys, k)
				vals[k] = iter.Value().Interface()
			}
			sort.Strings(keys)
			for _, k := range keys {
				dict.Set(k, FromGoValue(vals[k]))
			}
			return d
		}
	}

	return Undefined()
}

// typeName is Python's name for v's type, for errors.
func typeName(v Value) string {
	switch v.kind {
	case KindUndefined:
		return "Undefined"
	case KindNone:
		return "NoneType"
	case KindBool:
		return "bool"
	case KindInt:
		return "int"
	case KindFloat:
		return "float"
	case KindString:
		return "str"
	case KindList:
		if v.AsList().Tuple {
			return "tuple"
		}
		return "list"
	case KindDict:
		return "dict"
	}
	return "function"
}

// writeStringRepr writes Python's repr of s: in single quotes, or double
// where s holds a single quote and no double one; the quote and the
// backslash escaped, \t \n \r, and what Python does not print as \xNN,
// \uNNNN or \UNNNNNNNN.
func writeStringRepr(w *builder, s string) {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	w.WriteByte(quote)
	start := 0 // the run of characters written as they are
	for i, r := range s {
		var esc string
		switch {
		case r == rune(quote) || r == '\\':
			esc = `\` + string(r)
		case r == '\t':
			esc = `\t`
		case r == '\n':
			esc = `\n`
		case r == '\r':
			esc = `\r`
		case unicode.IsPrint(r):
			continue
		case r < 0x100:
			esc = fmt.Sprintf(`\x%02x`, r)
		case r < 0x10000:
			esc = fmt.Sprintf(`\u%04x`, r)
		default:
			esc = fmt.Sprintf(`\U%08x`, r)
		}
		w.WriteString(s[start:i])
		w.WriteString(esc)
		_, n := utf8.DecodeRuneInString(s[i:])
		start = i + n
	}
	w.WriteString(s[start:])
	w.WriteByte(quote)
}
