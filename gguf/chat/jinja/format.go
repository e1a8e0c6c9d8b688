package jinja

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Python's two ways of formatting values into text, as templates reach
// them: str.format ("{0:>8}".format(x)) and printf-style % ("%05.2f" % x,
// and Jinja's format filter). Both come down to formatValue, Python's
// format-spec mini-language; what it does not take is refused, as Python
// refuses it.

// spec is a parsed format spec: [[fill]align][sign][#][0][width]
// [grouping][.precision][type].
type spec struct {
	fill      rune
	fillSet   bool // a fill was given: the 0 flag does not replace it
	align     byte // 0, '<', '>', '^' or '='
	sign      byte // 0, '+', '-' or ' '
	alt       bool // '#'
	zero      bool // '0'
	width     int
	group     byte // 0, ',' or '_'
	precision int  // -1: none
	typ       byte // 0 or the type letter
}

// maxWidth bounds a width or precision from a template: Python's are
// bounded by memory only, and this one's by the render's bytes anyway.
const maxWidth = 1 << 20

func parseSpec(s string) (spec, error) {
	sp := spec{fill: ' ', precision: -1}
	bad := func() (spec, error) { return spec{}, fmt.Errorf("invalid format specifier %q", s) }
	i := 0
	// [[fill]align]: a fill is any character followed by an alignment.
	if r, n := utf8.DecodeRuneInString(s); n > 0 && n < len(s) && strings.IndexByte("<>^=", s[n]) >= 0 {
		sp.fill, sp.fillSet, sp.align, i = r, true, s[n], n+1
	} else if s != "" && strings.IndexByte("<>^=", s[0]) >= 0 {
		sp.align, i = s[0], 1
	}
	if i < len(s) && strings.IndexByte("+- ", s[i]) >= 0 {
		sp.sign, i = s[i], i+1
	}
	if i < len(s) && s[i] == '#' {
		sp.alt, i = true, i+1
	}
	if i < len(s) && s[i] == '0' {
		sp.zero, i = true, i+1
	}
	num := func() (int, bool) {
		j := i
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		if j == i {
			return 0, false
		}
		n, err := strconv.Atoi(s[i:j])
		if err != nil || n > maxWidth {
			return 0, false
		}
		i = j
		return n, true
	}
	if n, ok := num(); ok {
		sp.width = n
	}
	if i < len(s) && (s[i] == ',' || s[i] == '_') {
		sp.group, i = s[i], i+1
	}
	if i < len(s) && s[i] == '.' {
		i++
		n, ok := num()
		if !ok {
			return bad()
		}
		sp.precision = n
	}
	if i < len(s) {
		sp.typ, i = s[i], i+1
	}
	if i != len(s) {
		return bad()
	}
	return sp, nil
}

// formatValue is Python's format(v, spec) for the values templates hold.
func formatValue(b *budget, v Value, specText string) (string, error) {
	sp, err := parseSpec(specText)
	if err != nil {
		return "", err
	}
	if sp.width+sp.precision > maxWidth {
		return "", fmt.Errorf("format: width %d and precision %d too large", sp.width, sp.precision)
	}
	b.alloc(int64(sp.width + max(sp.precision, 0)))
	switch {
	case v.IsBool() && specText == "":
		return b.print(v), nil // True; with any spec, the int it is
	case isIntegral(v) && (sp.typ == 0 || strings.IndexByte("bcdoxXn", sp.typ) >= 0):
		return sp.formatInt(intValue(v))
	case v.IsNumber() || v.IsBool():
		if sp.typ != 0 && strings.IndexByte("eEfFgGn%", sp.typ) < 0 {
			return "", fmt.Errorf("unknown format code '%c' for object of type '%s'", sp.typ, typeName(v))
		}
		return sp.formatFloat(toFloat64(v))
	case v.IsString():
		if sp.typ != 0 && sp.typ != 's' || sp.sign != 0 || sp.alt || sp.group != 0 || sp.align == '=' {
			return "", fmt.Errorf("format spec %q is not for a string", specText)
		}
		s := v.AsString()
		if sp.precision >= 0 {
			s = truncateRunes(s, sp.precision)
		}
		return sp.pad(s, false), nil
	}
	if specText != "" {
		return "", fmt.Errorf("unsupported format string passed to %s.__format__", typeName(v))
	}
	return b.print(v), nil
}

// truncateRunes is s's first n characters.
func truncateRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}

// pad aligns s in sp's width with its fill: left for text, right for
// numbers by default; '=' (numeric, and the 0 flag's way) pads after the
// sign and prefix, which lead s by prefixLen bytes.
func (sp spec) pad(s string, numeric bool) string {
	return sp.padAfter(s, 0, numeric)
}

func (sp spec) padAfter(s string, prefixLen int, numeric bool) string {
	n := sp.width - utf8.RuneCountInString(s)
	if n <= 0 {
		return s
	}
	align, fill := sp.align, sp.fill
	if sp.zero && !sp.fillSet {
		fill = '0'
	}
	if align == 0 {
		align = '<'
		if numeric {
			align = '>'
		}
		if sp.zero && numeric {
			align = '='
		}
	}
	f := strings.Repeat(string(fill), n)
	switch align {
	case '>':
		return f + s
	case '^':
		left := strings.Repeat(string(fill), n/2)
		return left + s + strings.Repeat(string(fill), n-n/2)
	case '=':
		return s[:prefixLen] + f + s[prefixLen:]
	}
	return s + f
}

// signOf is the sign a number is written with.
func (sp spec) signOf(neg bool) string {
	switch {
	case neg:
		return "-"
	case sp.sign == '+':
		return "+"
	case sp.sign == ' ':
		return " "
	}
	return ""
}

// group puts sep between each run of every digits of digits, from the
// right.
func group(digits string, sep byte, every int) string {
	if sep == 0 || len(digits) <= every {
		return digits
	}
	var b strings.Builder
	first := len(digits) % every
	if first > 0 {
		b.WriteString(digits[:first])
	}
	for i := first; i < len(digits); i += every {
		if b.Len() > 0 {
			b.WriteByte(sep)
		}
		b.WriteString(digits[i : i+every])
	}
	return b.String()
}

func (sp spec) formatInt(v Value) (string, error) {
	if sp.precision >= 0 {
		return "", fmt.Errorf("precision not allowed in integer format specifier")
	}
	x := intBig(v)
	if sp.typ == 'c' {
		if !x.IsInt64() || x.Int64() < 0 || x.Int64() > utf8.MaxRune {
			return "", fmt.Errorf("%%c arg not in range(0x110000)")
		}
		return sp.pad(string(rune(x.Int64())), false), nil
	}
	base, prefix, every := 10, "", 3
	switch sp.typ {
	case 'b':
		base, prefix, every = 2, "0b", 4
	case 'o':
		base, prefix, every = 8, "0o", 4
	case 'x', 'X':
		base, prefix, every = 16, "0x", 4
	}
	if sp.group == ',' && base != 10 {
		return "", fmt.Errorf("cannot specify ',' with '%c'", sp.typ)
	}
	neg := x.Sign() < 0
	digits := new(big.Int).Abs(x).Text(base)
	if sp.typ == 'X' {
		digits, prefix = strings.ToUpper(digits), "0X"
	}
	if !sp.alt {
		prefix = ""
	}
	head := sp.signOf(neg) + prefix
	return sp.padAfter(head+group(digits, sp.group, every), len(head), true), nil
}

func (sp spec) formatFloat(f float64) (string, error) {
	neg := math.Signbit(f) && !math.IsNaN(f)
	a := math.Abs(f)
	prec := sp.precision
	var body string
	switch {
	case math.IsInf(a, 0):
		body = "inf"
	case math.IsNaN(a):
		body = "nan"
	default:
		switch sp.typ {
		case 'f', 'F':
			body = strconv.FormatFloat(a, 'f', precOr(prec, 6), 64)
		case 'e', 'E':
			body = strconv.FormatFloat(a, 'e', precOr(prec, 6), 64)
		case '%':
			body = strconv.FormatFloat(a*100, 'f', precOr(prec, 6), 64) + "%"
		case 'g', 'G', 'n':
			body = pyGeneral(a, max(precOr(prec, 6), 1), sp.alt)
		default: // none: repr, or general with at least a digit past the point
			if prec < 0 {
				body = pyStr(a)
			} else {
				body = pyGeneral(a, max(prec, 1), sp.alt)
				if !strings.ContainsAny(body, ".e") {
					body += ".0"
				}
			}
		}
	}
	if sp.typ == 'E' || sp.typ == 'F' || sp.typ == 'G' {
		body = strings.ToUpper(body)
	}
	if sp.group != 0 && !math.IsInf(a, 0) && !math.IsNaN(a) {
		intEnd := strings.IndexAny(body, ".e%")
		if intEnd < 0 {
			intEnd = len(body)
		}
		body = group(body[:intEnd], sp.group, 3) + body[intEnd:]
	}
	if sp.alt && !strings.Contains(body, ".") && (sp.typ == 'f' || sp.typ == 'F' || sp.typ == 'e' || sp.typ == 'E' || sp.typ == '%') {
		if i := strings.IndexAny(body, "eE%"); i >= 0 {
			body = body[:i] + "." + body[i:]
		} else {
			body += "."
		}
	}
	head := sp.signOf(neg)
	return sp.padAfter(head+body, len(head), true), nil
}

func precOr(p, def int) int {
	if p < 0 {
		return def
	}
	return p
}

// pyGeneral is Python's 'g' of a non-negative finite a at precision p:
// scientific where the exponent is below -4 or at least p, fixed
// otherwise, trailing zeros dropped unless alt.
func pyGeneral(a float64, p int, alt bool) string {
	e := strconv.FormatFloat(a, 'e', p-1, 64)
	exp, _ := strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
	var s string
	if exp < -4 || exp >= p {
		s = e
	} else {
		s = strconv.FormatFloat(a, 'f', p-1-exp, 64)
	}
	if alt {
		if !strings.Contains(s, ".") {
			if i := strings.IndexByte(s, 'e'); i >= 0 {
				s = s[:i] + "." + s[i:]
			} else {
				s += "."
			}
		}
		return s
	}
	mant, rest := s, ""
	if i := strings.IndexByte(s, 'e'); i >= 0 {
		mant, rest = s[:i], s[i:]
	}
	if strings.Contains(mant, ".") {
		mant = strings.TrimRight(strings.TrimRight(mant, "0"), ".")
	}
	return mant + rest
}

// strFormat is Python's format_string.format(*args, **kwargs): replacement
// fields {name!conv:spec} (a name is an index, a keyword, or nothing for
// the next argument, then .attribute and [key] parts), {{ and }} for
// braces, and a spec's own {fields}.
func strFormat(b *budget, format string, args []Value, kwargs map[string]Value) (string, error) {
	auto := 0 // the next automatic field; -1 once a field was numbered
	var field func(body string, depth int) (string, error)
	field = func(body string, depth int) (string, error) {
		name, specText, _ := strings.Cut(body, ":")
		name, conv, hasConv := strings.Cut(name, "!")
		if depth > 0 && strings.Contains(specText, "{") {
			return "", fmt.Errorf("format: max string recursion exceeded")
		}
		if strings.Contains(specText, "{") {
			var err error
			if specText, err = expand(b, specText, func(inner string) (string, error) { return field(inner, depth+1) }); err != nil {
				return "", err
			}
		}
		// The argument: its first part, then .attr and [key] parts.
		end := strings.IndexAny(name, ".[")
		if end < 0 {
			end = len(name)
		}
		first, parts := name[:end], name[end:]
		var v Value
		switch {
		case first == "":
			if auto < 0 {
				return "", fmt.Errorf("format: cannot switch from manual field numbering to automatic")
			}
			if auto >= len(args) {
				return "", fmt.Errorf("format: replacement index %d out of range for %d arguments", auto, len(args))
			}
			v, auto = args[auto], auto+1
		case isDigit(first[0]):
			if auto > 0 {
				return "", fmt.Errorf("format: cannot switch from automatic field numbering to manual")
			}
			auto = -1
			i, err := strconv.Atoi(first)
			if err != nil || i >= len(args) {
				return "", fmt.Errorf("format: replacement index %s out of range for %d arguments", first, len(args))
			}
			v = args[i]
		default:
			var ok bool
			if v, ok = kwargs[first]; !ok {
				return "", fmt.Errorf("format: no keyword argument %q", first)
			}
		}
		for parts != "" {
			var key string
			if parts[0] == '.' {
				end := strings.IndexAny(parts[1:], ".[")
				if end < 0 {
					end = len(parts) - 1
				}
				key, parts = parts[1:1+end], parts[1+end:]
			} else {
				end := strings.IndexByte(parts, ']')
				if end < 0 {
					return "", fmt.Errorf("format: missing ']' in %q", name)
				}
				key, parts = parts[1:end], parts[end+1:]
			}
			switch {
			case v.IsDict():
				v, _ = v.AsDict().Get(key)
			case v.IsList():
				i, err := strconv.Atoi(key)
				if err != nil || i < 0 || i >= v.AsList().Len() {
					return "", fmt.Errorf("format: index %q out of range", key)
				}
				v = v.AsList().Items[i]
			default:
				return "", fmt.Errorf("format: %s has no item %q", typeName(v), key)
			}
		}
		if hasConv {
			switch conv {
			case "s":
				v = NewString(b.print(v))
			case "r", "a":
				v = NewString(b.repr(v))
			default:
				return "", fmt.Errorf("format: unknown conversion specifier %q", conv)
			}
		}
		return formatValue(b, v, specText)
	}
	return expand(b, format, func(body string) (string, error) { return field(body, 0) })
}

// expand replaces each {field} of s by fn(field), {{ and }} by braces,
// charging b for what it writes.
func expand(b *budget, s string, fn func(string) (string, error)) (string, error) {
	out := builder{b: b}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '{' && i+1 < len(s) && s[i+1] == '{', c == '}' && i+1 < len(s) && s[i+1] == '}':
			out.WriteByte(c)
			i++
		case c == '{':
			// The field runs to its matching brace (a spec may hold one
			// field of its own).
			depth, j := 1, i+1
			for ; j < len(s) && depth > 0; j++ {
				switch s[j] {
				case '{':
					depth++
				case '}':
					depth--
				}
			}
			if depth > 0 {
				return "", fmt.Errorf("format: single '{' encountered in format string")
			}
			r, err := fn(s[i+1 : j-1])
			if err != nil {
				return "", err
			}
			out.WriteString(r)
			i = j - 1
		case c == '}':
			return "", fmt.Errorf("format: single '}' encountered in format string")
		default:
			out.WriteByte(c)
		}
	}
	return out.String(), nil
}

// pyPercent is Python's printf-style format % args (a tuple spreads over
// the format, a dict fills %(key)s fields; anything else, a list too, is
// one argument): flags (- 0 + space #), width and precision (* takes
// them from the arguments) and the conversions d i u o x X e E f F g G c
// s r a and %%.
func pyPercent(b *budget, format string, args Value) (string, error) {
	vals := []Value{args}
	tuple := args.IsList() && args.AsList().Tuple
	if tuple {
		vals = args.AsList().Items
	}
	w := builder{b: b}
	next := 0
	arg := func() (Value, error) {
		if next == len(vals) {
			return Undefined(), fmt.Errorf("%%: not enough arguments for format string")
		}
		next++
		return vals[next-1], nil
	}
	keyed := false
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			w.WriteByte(c)
			continue
		}
		i++
		var v Value
		haveV := false
		if i < len(format) && format[i] == '(' {
			end := strings.IndexByte(format[i:], ')')
			if end < 0 || !args.IsDict() {
				return "", fmt.Errorf("%%: a %%(key) field needs a dict and a closing ')'")
			}
			v, _ = args.AsDict().Get(format[i+1 : i+end])
			haveV, keyed, i = true, true, i+end+1
		}
		sp := spec{fill: ' ', precision: -1, align: '>'}
		for ; i < len(format) && strings.IndexByte("-0+ #", format[i]) >= 0; i++ {
			switch format[i] {
			case '-':
				sp.align = '<'
			case '0':
				sp.zero = true
			case '+':
				sp.sign = '+'
			case ' ':
				if sp.sign == 0 {
					sp.sign = ' '
				}
			case '#':
				sp.alt = true
			}
		}
		number := func() (int, error) {
			if i < len(format) && format[i] == '*' {
				i++
				n, err := arg()
				if err != nil || !n.IsInt() {
					return 0, fmt.Errorf("%%: * wants an int")
				}
				return int(min(max(n.AsInt(), -maxWidth), maxWidth)), nil
			}
			j := i
			for i < len(format) && isDigit(format[i]) {
				i++
			}
			if j == i {
				return -1, nil
			}
			n, err := strconv.Atoi(format[j:i])
			if err != nil || n > maxWidth {
				return 0, fmt.Errorf("%%: width too large")
			}
			return n, nil
		}
		width, err := number()
		if err != nil {
			return "", err
		}
		if width < -1 { // a negative * width left-aligns
			sp.align, width = '<', -width
		}
		sp.width = max(width, 0)
		if i < len(format) && format[i] == '.' {
			i++
			p, err := number()
			if err != nil {
				return "", err
			}
			sp.precision = max(p, 0)
		}
		for i < len(format) && strings.IndexByte("hlL", format[i]) >= 0 {
			i++ // length modifiers: Python ignores them
		}
		if i == len(format) {
			return "", fmt.Errorf("%%: incomplete format")
		}
		verb := format[i]
		if verb == '%' {
			w.WriteByte('%')
			continue
		}
		if sp.align == '<' {
			sp.zero = false // - overrides 0
		}
		if !haveV {
			if v, err = arg(); err != nil {
				return "", err
			}
		}
		var out string
		switch verb {
		case 's', 'r', 'a':
			text := b.print(v)
			if verb != 's' {
				text = b.repr(v)
			}
			if sp.precision >= 0 {
				text = truncateRunes(text, sp.precision)
			}
			sp.zero, sp.sign, sp.alt = false, 0, false
			out = sp.pad(text, false)
		case 'c':
			switch {
			case v.IsString() && utf8.RuneCountInString(v.AsString()) == 1:
				out = sp.pad(v.AsString(), false)
			case isIntegral(v):
				sp.typ, sp.zero = 'c', false
				if out, err = sp.formatInt(v); err != nil {
					return "", err
				}
			default:
				return "", fmt.Errorf("%%c requires an int or a character, not %s", typeName(v))
			}
		case 'd', 'i', 'u', 'o', 'x', 'X':
			n := v
			switch {
			case v.IsFloat():
				var ok bool
				if n, ok = floatInt(v.AsFloat()); !ok {
					return "", fmt.Errorf("%%%c: cannot convert float %v to integer", verb, v.AsFloat())
				}
			case !isIntegral(v):
				return "", fmt.Errorf("%%%c format: a real number is required, not %s", verb, typeName(v))
			}
			sp.typ = map[byte]byte{'d': 'd', 'i': 'd', 'u': 'd', 'o': 'o', 'x': 'x', 'X': 'X'}[verb]
			digits := sp.precision // printf's precision on an int is its least digits
			sp.precision = -1
			if out, err = sp.formatInt(intValue(n)); err != nil {
				return "", err
			}
			if digits > 0 {
				out = zeroExtend(out, digits)
			}
		case 'e', 'E', 'f', 'F', 'g', 'G':
			if !v.IsNumber() && !v.IsBool() {
				return "", fmt.Errorf("%%%c format: a real number is required, not %s", verb, typeName(v))
			}
			sp.typ = verb
			if sp.precision < 0 {
				sp.precision = 6
			}
			if out, err = sp.formatFloat(toFloat64(v)); err != nil {
				return "", err
			}
		default:
			return "", fmt.Errorf("%%: unsupported format character %q", verb)
		}
		w.WriteString(out)
	}
	if next < len(vals) && tuple && !keyed {
		return "", fmt.Errorf("%%: not all arguments converted during string formatting")
	}
	return w.String(), nil
}

// zeroExtend gives a formatted integer at least n digits, zeros after its
// sign and prefix (printf's precision: "%.3d" % 5 is 005).
func zeroExtend(s string, n int) string {
	start := strings.IndexFunc(s, func(r rune) bool { return r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F' })
	if start < 0 {
		return s
	}
	// Past a 0x, 0o or 0X prefix.
	if start+1 < len(s) && s[start] == '0' && strings.IndexByte("xXo", s[start+1]) >= 0 {
		start += 2
	}
	end := start
	for end < len(s) && s[end] != ' ' {
		end++
	}
	if d := end - start; d < n {
		return s[:start] + strings.Repeat("0", n-d) + s[start:]
	}
	return s
}

// filterFilesizeformat is filesizeformat(value, binary=False): float(value)
// bytes as "1 Byte", "N Bytes" below the base (1000, or 1024 where
// binary), else with one decimal in the first unit it is under (kB, MB, …
// YB; KiB, MiB, … YiB), or in YB past them all.
func filterFilesizeformat(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewString(""), nil
	}
	n, err := pyFloatOf(b, args[0])
	if err != nil {
		return Undefined(), fmt.Errorf("filesizeformat: %w", err)
	}
	base, prefixes := 1000.0, []string{"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"}
	if v, ok := param(args, kwargs, 1, "binary"); ok && v.IsTruthy() {
		base, prefixes = 1024, []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"}
	}
	switch {
	case n == 1:
		return NewString("1 Byte"), nil
	case n < base:
		iv, _ := floatInt(n) // n < base: finite or −Inf, which floatInt refuses as Python's int() does
		if !iv.IsInt() {
			return Undefined(), fmt.Errorf("filesizeformat: cannot convert float %s to integer", pyFixed(n, 0))
		}
		return NewString(b.print(iv) + " Bytes"), nil
	}
	unit := base
	for i, p := range prefixes {
		unit *= base // base^(i+2)
		if n < unit || i == len(prefixes)-1 {
			return NewString(pyFixed(base*n/unit, 1) + " " + p), nil
		}
	}
	panic("unreachable")
}

// pyFloatOf is Python's float(v): a number, a bool, or a string of a
// decimal float (white space around it, digits grouped by single
// underscores, "inf", "infinity" and "nan" in any case); anything else is
// refused with Python's message.
func pyFloatOf(b *budget, v Value) (float64, error) {
	switch {
	case v.IsFloat():
		return v.AsFloat(), nil
	case v.IsInt():
		f := intFloat(v)
		if math.IsInf(f, 0) {
			return 0, fmt.Errorf("int too large to convert to float")
		}
		return f, nil
	case v.IsBool():
		if v.AsBool() {
			return 1, nil
		}
		return 0, nil
	case v.IsString():
		s := strings.TrimSpace(v.AsString())
		if f, ok := parsePyFloat(s); ok {
			return f, nil
		}
		return 0, fmt.Errorf("could not convert string to float: %s", b.repr(v))
	}
	return 0, fmt.Errorf("float() argument must be a string or a real number, not '%s'", typeName(v))
}

// parsePyFloat parses Python's float literal syntax: ParseFloat's decimal
// forms (inf, infinity and nan in any case among them), with underscores
// only between digits, and no hexadecimal.
func parsePyFloat(s string) (float64, bool) {
	if s == "" || strings.ContainsAny(s, "xX") {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '_' && (i == 0 || i == len(s)-1 || !isDigit(s[i-1]) || !isDigit(s[i+1])) {
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return f, true
}

// pyFixed is Python's "{:.Nf}" of f: nan, inf and -inf spelt as Python
// spells them.
func pyFixed(f float64, prec int) string {
	if s, ok := pyNonFinite(f); ok {
		return s
	}
	return strconv.FormatFloat(f, 'f', prec, 64)
}
