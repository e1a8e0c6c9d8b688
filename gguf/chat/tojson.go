package chat

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/meshnode/meshnode/gguf/chat/jinja"
)

// The Jinja engine's tojson(indent=N) goes through Go maps and
// json.MarshalIndent, so it sorts object keys and escapes <, > and &;
// Python's json.dumps keeps the order and the characters. Llama 3.x and
// Granite print every tool's schema that way, so a template's
// `name | tojson(indent=N)` is rewritten, before compiling, into a call of
// indentedJSON, which prints as json.dumps(indent=N, ensure_ascii=False)
// does. Only a plain (dotted) name as the operand is rewritten: anything
// else keeps the engine's filter.
const indentedJSONName = "__meshnode_tojson_indent"

var indentedToJSON = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*\|\s*tojson\(\s*indent\s*=\s*([0-9]{1,2})\s*\)`)

func rewriteIndentedJSON(src string) string {
	var b strings.Builder
	last := 0
	for _, m := range indentedToJSON.FindAllStringSubmatchIndex(src, -1) {
		// An operand that is itself a filter's output ("a | b | tojson")
		// is not a plain name.
		if prev := strings.TrimRight(src[:m[0]], " \t\n"); strings.HasSuffix(prev, "|") || strings.HasSuffix(prev, ".") {
			continue
		}
		b.WriteString(src[last:m[0]])
		fmt.Fprintf(&b, "%s(%s, %s)", indentedJSONName, src[m[2]:m[3]], src[m[4]:m[5]])
		last = m[1]
	}
	b.WriteString(src[last:])
	return b.String()
}

func indentedJSON(m jinja.Meter, args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 2 || !args[1].IsInt() || args[1].AsInt() < 0 || args[1].AsInt() > 99 {
		return jinja.Undefined(), fmt.Errorf("tojson(indent): want a value and an indent of 0 to 99")
	}
	var b strings.Builder
	if err := writePyJSON(m, &b, args[0], strings.Repeat(" ", int(args[1].AsInt())), 0); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(b.String()), nil
}

// writePyJSON writes v as Python's json.dumps(v, indent=len(ind),
// ensure_ascii=False), charging m for each value before it writes it: a
// template's values may share one another, so the text can be far longer
// than the values are.
func writePyJSON(m jinja.Meter, b *strings.Builder, v jinja.Value, ind string, level int) error {
	if level > maxJSONDepth {
		return fmt.Errorf("tojson: nested deeper than %d", maxJSONDepth)
	}
	// Its line (a newline, the indent, punctuation, a number's digits),
	// and a string's text, six bytes a byte at most (\u001f).
	m.Alloc(32 + int64(level+1)*int64(len(ind)))
	if v.IsString() {
		m.Alloc(6 * int64(len(v.AsString())))
	}
	newline := func(l int) {
		b.WriteByte('\n')
		for range l {
			b.WriteString(ind)
		}
	}
	switch {
	case v.IsNone() || v.IsUndefined() || v.IsCallable():
		b.WriteString("null")
	case v.IsBool():
		b.WriteString(strconv.FormatBool(v.AsBool()))
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		s, err := pyFloat(v.AsFloat())
		if err != nil {
			return err
		}
		b.WriteString(s)
	case v.IsString():
		writePyString(b, v.AsString())
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, it := range items {
			if i > 0 {
				b.WriteByte(',')
			}
			newline(level + 1)
			if err := writePyJSON(m, b, it, ind, level+1); err != nil {
				return err
			}
		}
		newline(level)
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		if d.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		b.WriteByte('{')
		for i, k := range d.OrderedKeys() {
			if i > 0 {
				b.WriteByte(',')
			}
			newline(level + 1)
			m.Alloc(6 * int64(len(k)))
			writePyString(b, k)
			b.WriteString(": ")
			val, _ := d.Get(k)
			if err := writePyJSON(m, b, val, ind, level+1); err != nil {
				return err
			}
		}
		newline(level)
		b.WriteByte('}')
	default:
		b.WriteString("null")
	}
	return nil
}

// pyFloat is Python's float repr: the shortest digits, fixed notation
// with ".0" for exponents -4 to 15, else scientific with a two-digit
// exponent.
func pyFloat(f float64) (string, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return "", fmt.Errorf("tojson: cannot encode %v", f)
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	exp, _ := strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
	if exp >= -4 && exp < 16 {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.ContainsAny(s, ".") {
			s += ".0"
		}
		return s, nil
	}
	return e, nil
}

// writePyString quotes s as json.dumps(ensure_ascii=False) does: only the
// quote, the backslash and control characters are escaped.
func writePyString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20:
			fmt.Fprintf(b, `\u%04x`, r)
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\ufffd`)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	b.WriteByte('"')
}

// rewriteLineContinuations drops a backslash-newline inside a string
// literal of a template's tags, as Python's string escapes (which Jinja's
// lexer applies) do and the Go engine does not: Mistral Small 3.1's
// template continues its long system prompts that way. Text outside tags,
// and {% raw %} blocks, are left alone.
func rewriteLineContinuations(src string) string {
	if !strings.Contains(src, "\\\n") {
		return src
	}
	var b strings.Builder
	for i := 0; i < len(src); {
		switch {
		case strings.HasPrefix(src[i:], "{#"):
			end := strings.Index(src[i:], "#}")
			if end < 0 {
				b.WriteString(src[i:])
				return b.String()
			}
			b.WriteString(src[i : i+end+2])
			i += end + 2
		case strings.HasPrefix(src[i:], "{{") || strings.HasPrefix(src[i:], "{%"):
			closer := "}}"
			if src[i+1] == '%' {
				closer = "%}"
				if raw := rawBlock.FindStringIndex(src[i:]); raw != nil && raw[0] == 0 {
					end := endRawBlock.FindStringIndex(src[i:])
					if end == nil {
						b.WriteString(src[i:])
						return b.String()
					}
					b.WriteString(src[i : i+end[1]])
					i += end[1]
					continue
				}
			}
			b.WriteString(src[i : i+2])
			i += 2
			var quote byte
			for i < len(src) {
				c := src[i]
				if quote == 0 {
					if strings.HasPrefix(src[i:], closer) {
						b.WriteString(closer)
						i += 2
						break
					}
					if c == '\'' || c == '"' {
						quote = c
					}
					b.WriteByte(c)
					i++
					continue
				}
				switch {
				case c == '\\' && i+1 < len(src) && src[i+1] == '\n':
					i += 2
				case c == '\\' && i+1 < len(src):
					b.WriteString(src[i : i+2])
					i += 2
				default:
					if c == quote {
						quote = 0
					}
					b.WriteByte(c)
					i++
				}
			}
		default:
			b.WriteByte(src[i])
			i++
		}
	}
	return b.String()
}

var (
	rawBlock    = regexp.MustCompile(`^\{%-?\s*raw\s*-?%\}`)
	endRawBlock = regexp.MustCompile(`\{%-?\s*endraw\s*-?%\}`)
)
