package toolcall

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/meshnode/meshnode/gguf/grammar"
)

// LFM2's calls (Liquid's LFM2 and LFM2.5 templates): a Python list of
// calls with keyword arguments between control tokens,
//
//	<|tool_call_start|>[get_weather(location='Paris', unit="celsius")]<|tool_call_end|>
//
// the values Python literals (strings in either quotes with backslash
// escapes, numbers, True, False, None, lists, tuples and dicts) or, as
// the models also write them and llama.cpp accepts, JSON's true, false
// and null. Each call's arguments become a JSON object.

// LFM2's markers.
const (
	pyOpen  = "<|tool_call_start|>"
	pyClose = "<|tool_call_end|>"
)

// maxPyDepth bounds how deeply a call's arguments nest.
const maxPyDepth = 64

// stepPython reads LFM2's list of calls after <|tool_call_start|>, up to
// <|tool_call_end|> (or the stream's end, where a forced call's grammar
// stops before that control token). The calls come whole, each its
// arguments as JSON, once the list is complete; a list that is not calls
// stays content.
func (p *Parser) stepPython(final bool) {
	t := trimSpace(p.buf)
	if t == "" {
		if final {
			p.buf = ""
		}
		return
	}
	if t[0] != '[' {
		p.asText(pyOpen)
		return
	}
	body, rest := t, ""
	if end := strings.Index(t, pyClose); end >= 0 {
		body, rest = t[:end], t[end+len(pyClose):]
	} else if !final {
		return
	}
	calls, ok := pythonCalls(strings.TrimRight(body, " \t\r\n"))
	if !ok {
		p.asText(pyOpen)
		return
	}
	for _, c := range calls {
		p.startCall(c.Name)
		p.args(c.Arguments)
		p.open, p.afterCall = false, true
	}
	p.buf, p.st = rest, stText
}

// pythonCalls reads a Python list of calls, [name(key=value, …), …],
// whole; false where s is not one. Arguments are JSON objects.
func pythonCalls(s string) ([]Call, bool) {
	i := skipWS(s, 0)
	if i >= len(s) || s[i] != '[' {
		return nil, false
	}
	i = skipWS(s, i+1)
	var calls []Call
	if i < len(s) && s[i] == ']' {
		return nil, false // an empty list calls nothing: it stays text
	}
	for {
		name, args, end, ok := pythonCall(s, i)
		if !ok {
			return nil, false
		}
		calls = append(calls, Call{Name: name, Arguments: args})
		i = skipWS(s, end)
		switch {
		case i < len(s) && s[i] == ',':
			i = skipWS(s, i+1)
		case i < len(s) && s[i] == ']':
			return calls, skipWS(s, i+1) == len(s)
		default:
			return nil, false
		}
	}
}

// pythonCall reads name(key=value, …) at s[i]: the name, the arguments as
// a JSON object, and where the call ends.
func pythonCall(s string, i int) (name, args string, end int, ok bool) {
	start := i
	for i < len(s) && isNameByte(s[i]) {
		i++
	}
	if i == start || i-start > maxName || i >= len(s) || s[i] != '(' {
		return "", "", 0, false
	}
	name = s[start:i]
	var b strings.Builder
	b.WriteByte('{')
	i = skipWS(s, i+1)
	for n := 0; ; n++ {
		if i < len(s) && s[i] == ')' {
			b.WriteByte('}')
			return name, b.String(), i + 1, true
		}
		if n > 0 {
			if i >= len(s) || s[i] != ',' {
				return "", "", 0, false
			}
			if i = skipWS(s, i+1); i < len(s) && s[i] == ')' { // a trailing comma
				continue
			}
			b.WriteByte(',')
		}
		k := i
		for i < len(s) && isIdentByte(s[i]) {
			i++
		}
		if k == i {
			return "", "", 0, false // a positional argument has no name to give it
		}
		key := s[k:i]
		if i = skipWS(s, i); i >= len(s) || s[i] != '=' {
			return "", "", 0, false
		}
		b.Write(quoteJSON(key))
		b.WriteByte(':')
		var vok bool
		if i, vok = pythonValue(&b, s, skipWS(s, i+1), 0); !vok {
			return "", "", 0, false
		}
		i = skipWS(s, i)
	}
}

// isNameByte: a function name's bytes (a tool's name may hold dots and
// dashes, which Python's would not).
func isNameByte(c byte) bool { return isIdentByte(c) || c == '.' || c == '-' }

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// pythonValue writes as JSON the Python literal at s[i] and returns where
// it ends.
func pythonValue(b *strings.Builder, s string, i, depth int) (int, bool) {
	if depth > maxPyDepth || i >= len(s) {
		return 0, false
	}
	switch c := s[i]; {
	case c == '\'' || c == '"':
		text, end, ok := pythonString(s, i)
		if ok {
			b.Write(quoteJSON(text))
		}
		return end, ok
	case c == '[' || c == '(' || c == '{':
		obj := c == '{'
		closer := map[byte]byte{'[': ']', '(': ')', '{': '}'}[c]
		if obj {
			b.WriteByte('{')
		} else {
			b.WriteByte('[')
		}
		i = skipWS(s, i+1)
		for n := 0; ; n++ {
			if i < len(s) && s[i] == closer {
				if obj {
					b.WriteByte('}')
				} else {
					b.WriteByte(']')
				}
				return i + 1, true
			}
			if n > 0 {
				if i >= len(s) || s[i] != ',' {
					return 0, false
				}
				if i = skipWS(s, i+1); i < len(s) && s[i] == closer {
					continue // a trailing comma
				}
				b.WriteByte(',')
			}
			if obj {
				// JSON keys are strings: a dict's must be.
				if i >= len(s) || s[i] != '\'' && s[i] != '"' {
					return 0, false
				}
				key, end, ok := pythonString(s, i)
				if !ok {
					return 0, false
				}
				if i = skipWS(s, end); i >= len(s) || s[i] != ':' {
					return 0, false
				}
				b.Write(quoteJSON(key))
				b.WriteByte(':')
				i = skipWS(s, i+1)
			}
			var ok bool
			if i, ok = pythonValue(b, s, i, depth+1); !ok {
				return 0, false
			}
			i = skipWS(s, i)
		}
	}
	// A word or a number, up to the next delimiter.
	end := i
	for end < len(s) && !strings.ContainsRune(",)]}: \t\r\n", rune(s[end])) {
		end++
	}
	switch tok := s[i:end]; tok {
	case "True", "true":
		b.WriteString("true")
	case "False", "false":
		b.WriteString("false")
	case "None", "null":
		b.WriteString("null")
	default:
		v, ok := pythonNumber(tok)
		if !ok {
			return 0, false
		}
		b.WriteString(v)
	}
	return end, true
}

// pythonNumber is a Python int or float literal as JSON's number; false
// for anything else (and for inf and nan, which JSON cannot hold).
func pythonNumber(tok string) (string, bool) {
	if strings.ContainsRune(tok, '_') {
		tok = strings.ReplaceAll(tok, "_", "")
	}
	if n, err := strconv.ParseInt(tok, 10, 64); err == nil {
		return strconv.FormatInt(n, 10), true
	}
	lower := strings.ToLower(tok)
	if tok == "" || strings.Contains(lower, "inf") || strings.Contains(lower, "nan") || strings.HasPrefix(lower, "0x") {
		return "", false
	}
	f, err := strconv.ParseFloat(tok, 64)
	if err != nil {
		return "", false
	}
	out, err := json.Marshal(f)
	return string(out), err == nil
}

// pythonString reads the quoted string at s[i] (either quote, backslash
// escapes as Python's: \n \t \r \\ \' \" \xHH \uHHHH \UHHHHHHHH, others
// kept as written; a code point no UTF-8 can hold becomes U+FFFD) and
// returns its text and where it ends.
func pythonString(s string, i int) (text string, end int, ok bool) {
	q := s[i]
	var b strings.Builder
	for j := i + 1; j < len(s); j++ {
		c := s[j]
		switch {
		case c == q:
			return b.String(), j + 1, true
		case c != '\\':
			b.WriteByte(c)
			continue
		}
		if j+1 >= len(s) {
			return "", 0, false
		}
		j++
		hex := 0
		switch e := s[j]; e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'x':
			hex = 2
		case 'u':
			hex = 4
		case 'U':
			hex = 8
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
		if hex > 0 {
			if j+hex >= len(s) {
				return "", 0, false
			}
			r, err := strconv.ParseUint(s[j+1:j+1+hex], 16, 32)
			if err != nil {
				return "", 0, false
			}
			b.WriteRune(rune(r)) // U+FFFD for a surrogate or past U+10FFFF, as JSON cannot hold them
			j += hex
		}
	}
	return "", 0, false
}

// pythonArgs is a call's keyword arguments in LFM2's notation, for the
// grammars: key=value pairs separated by commas, the keys the names of
// params' properties where it lists them (any identifier where it does
// not), the values Python literals (pythonValue's) whatever the schema
// says, as llama.cpp's grammar for these calls leaves them.
func pythonArgs(b *grammar.Builder, params []byte) grammar.Expr {
	defineAny := !b.Defined("py-value")
	if defineAny {
		var ident, identStart, sq, dq grammar.Class
		ident.Add('0', '9')
		for _, c := range []*grammar.Class{&ident, &identStart} {
			c.Add('a', 'z')
			c.Add('A', 'Z')
			c.Add('_', '_')
		}
		sq.Add(0, '\\'-1)
		sq.Add('\\'+1, 0xff)
		dq = sq
		sq = notByte(sq, '\'')
		dq = notByte(dq, '"')
		// An escape as pythonString reads it: \x, \u and \U with their
		// hex digits, any other byte as itself.
		var plainEsc, hex grammar.Class
		plainEsc.Add(0, 0xff)
		plainEsc = notByte(notByte(notByte(plainEsc, 'x'), 'u'), 'U')
		hex.Add('0', '9')
		hex.Add('a', 'f')
		hex.Add('A', 'F')
		hx := func(n int) grammar.Expr { return grammar.Repeat(grammar.ClassOf(hex), n, n) }
		escape := grammar.Seq(grammar.Lit("\\"), grammar.Alt(grammar.ClassOf(plainEsc),
			grammar.Seq(grammar.Lit("x"), hx(2)), grammar.Seq(grammar.Lit("u"), hx(4)), grammar.Seq(grammar.Lit("U"), hx(8))))
		ws := b.WS()
		number, err := b.Schema([]byte(`{"type": "number"}`))
		if err != nil {
			panic("toolcall: " + err.Error()) // a constant schema
		}
		list := func(open, item, close string) grammar.Expr {
			it := grammar.Ref(item)
			return grammar.Seq(grammar.Lit(open), ws, grammar.Alt(grammar.Lit(close),
				grammar.Seq(it, grammar.Star(grammar.Seq(ws, grammar.Lit(","), ws, it)), ws, grammar.Lit(close))))
		}
		b.Define("py-ident", grammar.Seq(grammar.ClassOf(identStart), grammar.Star(grammar.ClassOf(ident))))
		b.Define("py-string", grammar.Alt(
			grammar.Seq(grammar.Lit("'"), grammar.Star(grammar.Alt(grammar.ClassOf(sq), escape)), grammar.Lit("'")),
			grammar.Seq(grammar.Lit(`"`), grammar.Star(grammar.Alt(grammar.ClassOf(dq), escape)), grammar.Lit(`"`))))
		b.Define("py-member", grammar.Seq(grammar.Ref("py-string"), ws, grammar.Lit(":"), ws, grammar.Ref("py-value")))
		b.Define("py-list", list("[", "py-value", "]"))
		b.Define("py-dict", list("{", "py-member", "}"))
		b.Define("py-value", grammar.Alt(grammar.Ref("py-string"), number, grammar.Ref("py-list"), grammar.Ref("py-dict"),
			grammar.Lit("True"), grammar.Lit("False"), grammar.Lit("None"), grammar.Lit("true"), grammar.Lit("false"), grammar.Lit("null")))
	}
	key := grammar.Ref("py-ident")
	var doc struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(params, &doc) == nil && len(doc.Properties) > 0 {
		names := make([]string, 0, len(doc.Properties))
		for n := range doc.Properties {
			if n != "" && strings.IndexFunc(n, func(r rune) bool { return r >= utf8.RuneSelf || !isIdentByte(byte(r)) }) < 0 {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		if len(names) > 0 {
			alts := make([]grammar.Expr, len(names))
			for i, n := range names {
				alts[i] = grammar.Lit(n)
			}
			key = grammar.Alt(alts...)
		}
	}
	ws := b.WS()
	pair := grammar.Seq(key, ws, grammar.Lit("="), ws, grammar.Ref("py-value"))
	return grammar.Opt(grammar.Seq(pair, grammar.Star(grammar.Seq(ws, grammar.Lit(","), ws, pair))))
}

// notByte is c without the byte x.
func notByte(c grammar.Class, x byte) grammar.Class {
	var out grammar.Class
	for v := 0; v < 256; v++ {
		if byte(v) != x && c.Has(byte(v)) {
			out.Add(byte(v), byte(v))
		}
	}
	return out
}

// Render writes calls as a model of format f writes them, for templates
// that do not render an assistant's calls themselves (LFM2's earlier
// templates show only a message's content, so a conversation's past calls
// would vanish from the prompt); false for a format it cannot write, or
// arguments that are not a JSON object.
func Render(f Format, calls []Call) (string, bool) {
	if f != LFM2 || len(calls) == 0 {
		return "", false
	}
	var b strings.Builder
	b.WriteString(pyOpen + "[")
	for i, c := range calls {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c.Name + "(")
		args := strings.TrimSpace(c.Arguments)
		if args == "" {
			args = "{}"
		}
		dec := json.NewDecoder(strings.NewReader(args))
		dec.UseNumber()
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return "", false
		}
		for n := 0; dec.More(); n++ {
			key, err := dec.Token()
			k, isKey := key.(string)
			if err != nil || !isKey {
				return "", false
			}
			if n > 0 {
				b.WriteString(", ")
			}
			b.WriteString(k + "=")
			if !pythonLiteral(&b, dec, 0) {
				return "", false
			}
		}
		if _, err := dec.Token(); err != nil { // the closing brace
			return "", false
		}
		b.WriteByte(')')
	}
	b.WriteString("]" + pyClose)
	return b.String(), true
}

// pythonLiteral writes the decoder's next JSON value as a Python literal.
func pythonLiteral(b *strings.Builder, dec *json.Decoder, depth int) bool {
	tok, err := dec.Token()
	if err != nil || depth > maxPyDepth {
		return false
	}
	switch v := tok.(type) {
	case json.Delim:
		obj := v == '{'
		if obj {
			b.WriteByte('{')
		} else {
			b.WriteByte('[')
		}
		for n := 0; dec.More(); n++ {
			if n > 0 {
				b.WriteString(", ")
			}
			if obj {
				key, err := dec.Token()
				k, ok := key.(string)
				if err != nil || !ok {
					return false
				}
				b.WriteString(pythonQuote(k) + ": ")
			}
			if !pythonLiteral(b, dec, depth+1) {
				return false
			}
		}
		if _, err := dec.Token(); err != nil {
			return false
		}
		if obj {
			b.WriteByte('}')
		} else {
			b.WriteByte(']')
		}
	case string:
		b.WriteString(pythonQuote(v))
	case json.Number:
		b.WriteString(v.String())
	case bool:
		if v {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case nil:
		b.WriteString("None")
	}
	return true
}

// pythonQuote is s as a single-quoted Python string (pythonString reads
// it back).
func pythonQuote(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for _, r := range s {
		switch {
		case r == '\\' || r == '\'':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatInt(int64(r)+0x100, 16)[1:])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('\'')
	return b.String()
}
