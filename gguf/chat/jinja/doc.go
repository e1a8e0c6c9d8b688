// Package jinja is the Jinja engine that renders a model's chat template.
//
// It is github.com/ardanlabs/jinja v1.8.0 (Apache License 2.0, LICENSE
// here; copyright 2026 Ardan Labs), carried in this tree so that a render
// is bounded: a chat template comes from a GGUF file, which is outside
// input, and the engine as published bounds neither the memory nor the
// time nor the stack a template may spend. What changed from it:
//
//   - limits.go: what a render may spend (Limits) and how it stops
//     (LimitError); every spending site of the engine charges the render's
//     budget before it spends, builtins through the budget they are
//     handed, callables from outside through NewMeteredCallable.
//   - tojson.go: tojson prints as Python's json.dumps does in every form
//     (it had printed floats and some escapes as Go does, and gone through
//     Go maps for indent), and floats and None print as Python's str
//     (1.0, not 1; None, not "").
//   - Where it differed from Python's jinja2 on what chat templates use
//     (TestParity, against jinja2's own output): // and % floor as Python
//     does, an int to an int power is an int, a filter takes a signed
//     value (-3 | abs), a test takes one argument without parentheses
//     (x is in [...]), {{ }} closes only outside brackets, find counts
//     code points, split takes maxsplit, round halves to even, map takes
//     a filter's name, sort folds case and takes attribute, int reads the
//     whole string, startswith takes a tuple, lists repeat, a string %
//     args formats, selectattr with no test does not panic, center and
//     divisibleby exist, and string literals decode Python's escapes
//     (\x, \u, octal, and a backslash that continues the line).
//   - ints.go: integers are Python's, exact past int64 (a *big.Int beyond
//     it, to maxIntBits), where they had wrapped, turned into floats or
//     clamped (12345678901234567890 read as 9223372036854775807).
//   - Arithmetic takes the operands Python takes and refuses the rest
//     (1 + "a" had been "1a", "a" + none "aNone", -"abc" 0) and division
//     by zero (it had been 0); an undefined operand alone is still let
//     through, empty or 0 (checkArith says why).
//   - format.go: str.format and printf-style % are Python's: fields by
//     position, keyword, attribute and index, !r and !s, the format-spec
//     mini-language (fill, alignment, sign, #, 0, width, grouping,
//     precision, every type), and printf's flags, widths, precisions and
//     conversions, % a dict's %(key)s fields; Jinja's format filter too.
//     str.format had replaced {0} and {} only (leaving {x} and {:>4} as
//     written), and % had taken %s %r %d and %f alone.
//   - strmethods.go: the rest of the str methods templates call (rsplit,
//     splitlines, partition, zfill, join, ljust, the is… tests and
//     others), and the truncate, slice, groupby, striptags and
//     forceescape filters; a string's repr escapes as Python's (quotes,
//     \n, what is not printable), where it had written the text as it
//     was.
//   - Macros take extra arguments as varargs and kwargs where their body
//     names them and refuse them otherwise; loops have changed() and
//     depth, and a recursive loop's loop(items) recurses (the keyword
//     had been parsed and ignored); namespace and dict take a mapping;
//     keyword arguments keep the order written, in dict, namespace and a
//     macro's kwargs (they had been sorted by name), and a repeated
//     keyword or a positional argument after one is refused;
//     attribute= arguments follow dotted paths ("a.b", "a.0"); ~ binds
//     between * and +, as jinja2 parses it.
//   - Comparisons chain as Python's (3 > 2 > 1 had been (3 > 2) > 1,
//     false), and a test binds as a filter does, tighter than any
//     operator (a == b is defined is a == (b is defined), as jinja2 reads
//     it); int takes default and base, sum attribute and start, dictsort
//     case_sensitive, by and reverse (each had been ignored).
//   - Ordering is Python's: strings by code point (they had compared by
//     a number they began with: "10" < "9" was false), lists and tuples
//     item by item, integers exactly; min and max fold case and take an
//     attribute, as sort does.
//   - Tuples are tuples: (a, b) and a bare a, b print as Python's, slice,
//     add and repeat to tuples and equal no list, and a dict's items are
//     (key, value) pairs; set and for unpack into any number of names
//     and refuse a count that differs, as Python does (for k, v had bound
//     an item's index where the item did not unpack, and a two-name
//     loop's if clause saw the whole pair); list of a dict is its keys;
//     ** reads left to right and 1e3 and 1_000 are numbers, as jinja2's
//     lexer and parser have them.
//   - casing.go: upper, lower, title and capitalize (filters and methods)
//     and the upper and lower tests change case as Python does, by
//     Unicode's full mappings (casing_table.go, generated from Python's
//     unicodedata) and the final sigma, where they had mapped rune to
//     rune (straße upper was STRAßE), the title and capitalize methods
//     had left the rest of a word as it was, and the title filter had
//     begun words where jinja2 does not ("they're" is "They're").
//   - webfilters.go and format.go: urlencode, xmlattr (refusing the
//     attribute names jinja2 3.1.3 refuses) and filesizeformat, with
//     Python's float() of its argument; attr(name) gives a method, never
//     a dict's item; lists and tuples have count and index; first and
//     last take a string's characters and a dict's keys too; escape writes
//     " as &#34;, markupsafe's, where it had written &quot;. Still refused,
//     with the reason (unsupportedFilters): wordwrap, urlize, pprint and
//     random.
//   - safe and escape return Markup (value.go's markup): added to a plain
//     string it escapes that string, escaping it again leaves it, % and
//     format on it escape their arguments (replace its new text, join its
//     items, the justifiers their fill), and its str methods and the
//     filters that keep it (upper, lower, capitalize, trim, center, indent,
//     truncate, string, format, reverse) keep it, as markupsafe 3 and
//     jinja2 have it (functionary's template adds tojson's text to a safe string,
//     which transformers renders escaped).
//   - concat.go: a string built by ~ or + grows its buffer in place, so
//     output accumulated in a loop ({% set ns.out = ns.out ~ part %}, as
//     Reka's template does) costs linear bytes and work, where a copy a
//     step had made long conversations quadratic and, past a few hundred
//     turns, over the render's limits.
//   - Slices clamp their bounds as Python does before looping over them,
//     indexing a string by code point walks it rather than converting it,
//     and a string repeated a negative number of times is "" (each had
//     looped, allocated or panicked on a template's numbers).
//
// BenchmarkRender compares it with the engine as published.
package jinja
