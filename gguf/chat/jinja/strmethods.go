package jinja

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// strMethods are the rest of Python's str methods templates call (the
// ones stringMethod has inline are the older ones), each as Python's,
// charged to the render's budget.
var strMethods = map[string]func(b *budget, s string, args []Value) (Value, error){
	"rsplit":     strRsplit,
	"splitlines": strSplitlines,
	"zfill":      strZfill,
	"swapcase":   strSwapcase,
	"removeprefix": func(b *budget, s string, args []Value) (Value, error) {
		return NewString(strings.TrimPrefix(s, argText(b, args))), nil
	},
	"removesuffix": func(b *budget, s string, args []Value) (Value, error) {
		return NewString(strings.TrimSuffix(s, argText(b, args))), nil
	},
	"partition":  func(b *budget, s string, args []Value) (Value, error) { return strPartition(b, s, args, false) },
	"rpartition": func(b *budget, s string, args []Value) (Value, error) { return strPartition(b, s, args, true) },
	"rfind": func(b *budget, s string, args []Value) (Value, error) {
		return strFind(b, s, args, strings.LastIndex, false)
	},
	"index": func(b *budget, s string, args []Value) (Value, error) {
		return strFind(b, s, args, strings.Index, true)
	},
	"rindex": func(b *budget, s string, args []Value) (Value, error) {
		return strFind(b, s, args, strings.LastIndex, true)
	},
	"join":      strJoin,
	"ljust":     func(b *budget, s string, args []Value) (Value, error) { return strJustify(b, s, args, '<') },
	"rjust":     func(b *budget, s string, args []Value) (Value, error) { return strJustify(b, s, args, '>') },
	"center":    func(b *budget, s string, args []Value) (Value, error) { return strJustify(b, s, args, '^') },
	"isalpha":   strIs(unicode.IsLetter),
	"isdigit":   strIs(unicode.IsDigit),
	"isdecimal": strIs(unicode.IsDigit),
	"isnumeric": strIs(unicode.IsNumber),
	"isalnum":   strIs(func(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }),
	"isspace":   strIs(pySpace),
	"isupper":   func(b *budget, s string, args []Value) (Value, error) { return NewBool(pyIsUpper(s)), nil },
	"islower":   func(b *budget, s string, args []Value) (Value, error) { return NewBool(pyIsLower(s)), nil },
}

// argText is the first argument as text ("" without one).
func argText(b *budget, args []Value) string {
	if len(args) == 0 {
		return ""
	}
	return b.print(args[0])
}

// pySpace is Python's str.isspace of one character: Unicode's white
// space and the separators \x1c to \x1f.
func pySpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// strIs is an is… method: true for a non-empty string all of whose
// characters are.
func strIs(is func(rune) bool) func(*budget, string, []Value) (Value, error) {
	return func(b *budget, s string, args []Value) (Value, error) {
		for _, r := range s {
			if !is(r) {
				return NewBool(false), nil
			}
		}
		return NewBool(s != ""), nil
	}
}

// strRsplit is Python's s.rsplit(sep=None, maxsplit=-1): the cuts taken
// from the right.
func strRsplit(b *budget, s string, args []Value) (Value, error) {
	max := int64(-1)
	if len(args) > 1 {
		max = toInt64(args[1])
	}
	var parts []string
	if len(args) == 0 || args[0].IsNone() {
		fields := strings.FieldsFunc(s, pySpace)
		if max >= 0 && int64(len(fields)) > max+1 {
			// The leftmost part keeps its inner spaces: Python cuts only
			// max times, from the right.
			rest := strings.TrimRightFunc(s, pySpace)
			var tail []string
			for range max {
				i := strings.LastIndexFunc(rest, pySpace)
				tail = append([]string{rest[i+1:]}, tail...)
				rest = strings.TrimRightFunc(rest[:i], pySpace)
			}
			fields = append([]string{rest}, tail...)
		}
		parts = fields
	} else {
		sep := b.print(args[0])
		if sep == "" {
			return Undefined(), fmt.Errorf("rsplit: empty separator")
		}
		parts = strings.Split(s, sep)
		if max >= 0 && int64(len(parts)) > max+1 {
			keep := len(parts) - int(max)
			parts = append([]string{strings.Join(parts[:keep], sep)}, parts[keep:]...)
		}
	}
	return stringList(b, parts), nil
}

// stringList is parts as a list of strings.
func stringList(b *budget, parts []string) Value {
	b.allocValues(len(parts))
	items := make([]Value, len(parts))
	for i, p := range parts {
		items[i] = NewString(p)
	}
	return NewList(items)
}

// strSplitlines is Python's s.splitlines(keepends=False): cut at each
// line boundary Python knows (\n, \r, \r\n, \v, \f, \x1c–\x1e, \x85,
// U+2028, U+2029).
func strSplitlines(b *budget, s string, args []Value) (Value, error) {
	keep := len(args) > 0 && args[0].IsTruthy()
	var parts []string
	start := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch r {
		case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			end := i + n
			if r == '\r' && end < len(s) && s[end] == '\n' {
				end++
			}
			line := s[start:i]
			if keep {
				line = s[start:end]
			}
			parts = append(parts, line)
			start, i = end, end
			continue
		}
		i += n
	}
	if start < len(s) {
		parts = append(parts, s[start:])
	}
	return stringList(b, parts), nil
}

// strZfill is Python's s.zfill(width): zeros after a leading sign up to
// width characters.
func strZfill(b *budget, s string, args []Value) (Value, error) {
	width := int(min(max(toInt64(argOr(args, NewInt(0))), 0), maxWidth))
	n := width - utf8.RuneCountInString(s)
	if n <= 0 {
		return NewString(s), nil
	}
	b.alloc(int64(len(s) + n))
	sign := ""
	if s != "" && (s[0] == '+' || s[0] == '-') {
		sign, s = s[:1], s[1:]
	}
	return NewString(sign + strings.Repeat("0", n) + s), nil
}

func argOr(args []Value, def Value) Value {
	if len(args) == 0 {
		return def
	}
	return args[0]
}

// strSwapcase is Python's s.swapcase(): each upper case character
// lowered and each lower case one upper cased, by the full mappings.
func strSwapcase(b *budget, s string, args []Value) (Value, error) {
	b.allocCased(s)
	var out strings.Builder
	for _, r := range s {
		switch {
		case isUpperPy(r):
			out.WriteString(pyLower(string(r)))
		case isLowerPy(r):
			out.WriteString(pyUpper(string(r)))
		default:
			out.WriteRune(r)
		}
	}
	return NewString(out.String()), nil
}

// strPartition is Python's s.partition(sep), or from the right
// rpartition: a tuple (before, sep, after); where sep is absent, s
// before (partition) or after (rpartition) two empty strings.
func strPartition(b *budget, s string, args []Value, right bool) (Value, error) {
	sep := argText(b, args)
	if sep == "" {
		return Undefined(), fmt.Errorf("partition: empty separator")
	}
	b.allocValues(3)
	i := strings.Index(s, sep)
	if right {
		i = strings.LastIndex(s, sep)
	}
	switch {
	case i >= 0:
		return NewTuple([]Value{NewString(s[:i]), NewString(sep), NewString(s[i+len(sep):])}), nil
	case right:
		return NewTuple([]Value{NewString(""), NewString(""), NewString(s)}), nil
	}
	return NewTuple([]Value{NewString(s), NewString(""), NewString("")}), nil
}

// strFind is Python's rfind (-1 where sub is absent), index and rindex
// (refused there): an index in characters.
func strFind(b *budget, s string, args []Value, find func(s, sub string) int, strict bool) (Value, error) {
	i := find(s, argText(b, args))
	if i < 0 {
		if strict {
			return Undefined(), fmt.Errorf("substring not found")
		}
		return NewInt(-1), nil
	}
	return NewInt(int64(utf8.RuneCountInString(s[:i]))), nil
}

// strJoin is Python's s.join(items): strings only, as Python takes them.
func strJoin(b *budget, s string, args []Value) (Value, error) {
	if len(args) == 0 || !args[0].IsList() {
		return Undefined(), fmt.Errorf("join: wants a list of strings")
	}
	var out strings.Builder
	for i, item := range args[0].AsList().Items {
		if !item.IsString() {
			return Undefined(), fmt.Errorf("sequence item %d: expected str instance, %s found", i, typeName(item))
		}
		if i > 0 {
			b.alloc(int64(len(s)))
			out.WriteString(s)
		}
		b.alloc(int64(len(item.AsString())))
		out.WriteString(item.AsString())
	}
	return NewString(out.String()), nil
}

// strJustify is Python's ljust, rjust and center(width, fillchar=' ')
// (align '<', '>', '^'): center's odd character of padding goes where
// Python's str.center puts it.
func strJustify(b *budget, s string, args []Value, align byte) (Value, error) {
	width := int(min(max(toInt64(argOr(args, NewInt(0))), 0), maxWidth))
	fill := ' '
	if len(args) > 1 {
		f := b.print(args[1])
		if utf8.RuneCountInString(f) != 1 {
			return Undefined(), fmt.Errorf("the fill character must be exactly one character long")
		}
		fill, _ = utf8.DecodeRuneInString(f)
	}
	return NewString(justify(b, s, int64(width), fill, align)), nil
}

// justify pads s with fill to width characters: on the right (align
// '<'), the left ('>'), or both ('^'), the odd one where Python's
// str.center puts it. The padding is charged to b before it is made.
func justify(b *budget, s string, width int64, fill rune, align byte) string {
	n := width - int64(utf8.RuneCountInString(s))
	if n <= 0 {
		return s
	}
	b.alloc(int64(len(s)) + n*int64(utf8.RuneLen(fill)))
	f := string(fill)
	switch align {
	case '<':
		return s + strings.Repeat(f, int(n))
	case '>':
		return strings.Repeat(f, int(n)) + s
	}
	left := n/2 + (n & width & 1)
	return strings.Repeat(f, int(left)) + s + strings.Repeat(f, int(n-left))
}
