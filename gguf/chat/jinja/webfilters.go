package jinja

import (
	"fmt"
	"strings"
)

// The filters that write URLs and markup: urlencode and xmlattr, as
// jinja2 3.1 writes them.

// filterUrlencode is urlencode(value): a string (or anything not
// iterable, as its str) percent-encoded as urllib's quote with "/" safe; a
// dict, or a list of pairs, as a query string, each key and value quoted
// with nothing safe and spaces as "+", joined key=value by "&".
func filterUrlencode(b *budget, args []Value, _ map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewString(""), nil
	}
	v := args[0]
	var pairs [][2]Value
	switch {
	case v.IsDict():
		d := v.AsDict()
		for _, k := range d.Keys {
			pairs = append(pairs, [2]Value{NewString(k), d.Data[k]})
		}
	case v.IsList():
		for i, it := range v.AsList().Items {
			if !it.IsList() || it.AsList().Len() != 2 {
				return Undefined(), fmt.Errorf("urlencode: item %d is %s, not a (key, value) pair", i, b.repr(it))
			}
			pairs = append(pairs, [2]Value{it.AsList().Get(0), it.AsList().Get(1)})
		}
	default:
		return NewString(urlQuote(b, b.print(v), false)), nil
	}
	parts := make([]string, len(pairs))
	for i, p := range pairs {
		parts[i] = urlQuote(b, b.print(p[0]), true) + "=" + urlQuote(b, b.print(p[1]), true)
	}
	return NewString(strings.Join(parts, "&")), nil
}

// urlQuote is jinja2's url_quote: s's UTF-8 bytes percent-encoded but for
// letters, digits and "_.-~" (and "/" unless forQuery, where a space is
// "+").
func urlQuote(b *budget, s string, forQuery bool) string {
	b.alloc(size(len(s), 3))
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.IndexByte("_.-~", c) >= 0, c == '/' && !forQuery:
			sb.WriteByte(c)
		case c == ' ' && forQuery:
			sb.WriteByte('+')
		default:
			fmt.Fprintf(&sb, "%%%02X", c)
		}
	}
	return sb.String()
}

// filterXmlattr is xmlattr(d, autospace=True): d's items as XML
// attributes, key="value" escaped and joined by spaces, leaving out None
// and undefined values, with a leading space where autospace; a key with
// white space, "/", ">" or "=" is refused (jinja2 3.1.3's fix for
// attribute injection).
func filterXmlattr(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 || !args[0].IsDict() {
		var what string
		if len(args) > 0 {
			what = b.repr(args[0])
		}
		return Undefined(), fmt.Errorf("xmlattr: takes a mapping, not %s", what)
	}
	autospace := true
	if v, ok := param(args, kwargs, 1, "autospace"); ok {
		autospace = v.IsTruthy()
	}
	d := args[0].AsDict()
	var items []string
	for _, k := range d.Keys {
		v := d.Data[k]
		if v.IsNone() || v.IsUndefined() {
			continue
		}
		if strings.ContainsAny(k, " \t\n\r\f\v/>=") {
			return Undefined(), fmt.Errorf("xmlattr: invalid character in attribute name: %s", b.repr(NewString(k)))
		}
		items = append(items, htmlEscape(b, k)+`="`+htmlEscape(b, b.print(v))+`"`)
	}
	rv := strings.Join(items, " ")
	if autospace && rv != "" {
		rv = " " + rv
	}
	return NewString(rv), nil
}
