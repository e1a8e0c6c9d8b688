package jinja

import (
	"cmp"
	"encoding/json"
	"fmt"
	"html"
	"math"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// cachedBuiltins is a read-only scope populated once with all built-in
// globals and filters. It is shared across every render — no code path
// writes to the builtins scope (only chained reads through parent
// links and lookupFilter), so a single shared instance is safe and
// avoids ~20 allocations per render.
var cachedBuiltins = func() *scope {
	s := newScope(nil)
	registerGlobals(s)
	registerFilters(s)
	return s
}()

// =============================================================================
// Global functions
// =============================================================================

func registerGlobals(s *scope) {
	s.set("namespace", newOrderedBuiltin("namespace", builtinNamespace))
	s.set("raise_exception", newBuiltin("raise_exception", builtinRaiseException))
	s.set("range", newBuiltin("range", builtinRange))
	s.set("joiner", newBuiltin("joiner", builtinJoiner))
	s.set("dict", newOrderedBuiltin("dict", builtinNamespace)) // the same dict a namespace is
	s.set("cycler", newBuiltin("cycler", builtinCycler))
	s.set("strftime_now", newBuiltin("strftime_now", builtinStrftimeNow))
}

// builtinFunc is a builtin global or filter: it charges what it spends
// to the render's budget.
type builtinFunc func(b *budget, args []Value, kwargs map[string]Value) (Value, error)

// orderedFunc is a builtinFunc also given the keyword arguments' names in
// the order written (nil, or not naming exactly kwargs' keys, from Go:
// then kwOrder sorts them).
type orderedFunc func(b *budget, args []Value, kwargs map[string]Value, order []string) (Value, error)

// newBuiltin is a callable that the evaluator hands its budget; called
// from outside a render, it spends within DefaultLimits.
func newBuiltin(name string, f builtinFunc) Value {
	return Value{kind: KindCallable, v: Callable{
		Name: name,
		Fn: func(args []Value, kwargs map[string]Value) (v Value, err error) {
			defer recoverLimit(&err)
			return f(newBudget(DefaultLimits()), args, kwargs)
		},
		metered: f,
	}}
}

// newOrderedBuiltin is newBuiltin for an orderedFunc.
func newOrderedBuiltin(name string, f orderedFunc) Value {
	v := newBuiltin(name, func(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
		return f(b, args, kwargs, nil)
	})
	c := v.v.(Callable)
	c.ordered = f
	return Value{kind: KindCallable, v: c}
}

// builtinNamespace is jinja2's namespace(mapping, **kwargs) (and dict's):
// the mapping's entries, then the keyword arguments in the order written.
func builtinNamespace(b *budget, args []Value, kwargs map[string]Value, order []string) (Value, error) {
	d := NewDict()
	dict := d.AsDict()
	if len(args) > 1 || len(args) == 1 && !args[0].IsDict() {
		return Undefined(), fmt.Errorf("namespace: takes one mapping and keyword arguments")
	}
	if len(args) == 1 {
		src := args[0].AsDict()
		b.allocValues(src.Len())
		for _, k := range src.Keys {
			dict.Set(k, src.Data[k])
		}
	}
	b.allocValues(len(kwargs))
	for _, k := range kwOrder(kwargs, order) {
		dict.Set(k, kwargs[k])
	}
	return d, nil
}

func builtinRaiseException(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return Undefined(), fmt.Errorf("raise_exception: missing message")
	}
	return Undefined(), fmt.Errorf("%s", b.print(args[0]))
}

func builtinRange(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	var start, stop, step int64
	switch len(args) {
	case 1:
		start = 0
		stop = toInt64(args[0])
		step = 1
	case 2:
		start = toInt64(args[0])
		stop = toInt64(args[1])
		step = 1
	case 3:
		start = toInt64(args[0])
		stop = toInt64(args[1])
		step = toInt64(args[2])
	default:
		return Undefined(), fmt.Errorf("range: expected 1-3 arguments, got %d", len(args))
	}

	if step == 0 {
		return Undefined(), fmt.Errorf("range: step must not be zero")
	}

	b.allocValues(rangeLen(start, stop, step))
	var items []Value
	if step > 0 {
		for i := start; i < stop; i += step {
			items = append(items, NewInt(i))
			if i > math.MaxInt64-step {
				break // the next would wrap
			}
		}
	} else {
		for i := start; i > stop; i += step {
			items = append(items, NewInt(i))
			if i < math.MinInt64-step {
				break
			}
		}
	}

	return NewList(items), nil
}

// rangeLen is how many values range(start, stop, step) makes, saturated
// at MaxInt32 (more than any budget allows). step is not 0.
func rangeLen(start, stop, step int64) int {
	var span, by uint64
	switch {
	case step > 0 && stop > start:
		span, by = uint64(stop)-uint64(start), uint64(step)
	case step < 0 && stop < start:
		span, by = uint64(start)-uint64(stop), -uint64(step)
	default:
		return 0
	}
	return int(min((span-1)/by+1, math.MaxInt32))
}

func builtinJoiner(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	sep := ""
	if len(args) > 0 {
		sep = b.print(args[0])
	}

	first := true
	return NewCallable("joiner", func(args []Value, kwargs map[string]Value) (Value, error) {
		if first {
			first = false
			return NewString(""), nil
		}
		return NewString(sep), nil
	}), nil
}

func builtinStrftimeNow(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	format := "%Y-%m-%d"
	if len(args) > 0 {
		format = b.print(args[0])
	}

	// Convert Python strftime format to Go time format.
	b.alloc(size(len(format), 4)) // "%B" is "September"
	now := time.Now()
	goFmt := strftimeToGo(format)
	return NewString(now.Format(goFmt)), nil
}

// strftimeToGo converts a Python strftime format string to a Go time format.
func strftimeToGo(format string) string {
	r := strings.NewReplacer(
		"%Y", "2006",
		"%m", "01",
		"%d", "02",
		"%H", "15",
		"%M", "04",
		"%S", "05",
		"%B", "January",
		"%b", "Jan",
		"%A", "Monday",
		"%a", "Mon",
		"%p", "PM",
		"%I", "03",
		"%Z", "MST",
		"%%", "%",
	)
	return r.Replace(format)
}

func builtinCycler(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return Undefined(), fmt.Errorf("cycler: expected at least one argument")
	}

	idx := 0
	items := make([]Value, len(args))
	copy(items, args)

	d := NewDict()
	dict := d.AsDict()
	dict.Set("current", items[0])
	dict.Set("next", NewCallable("cycler.next", func(a []Value, kw map[string]Value) (Value, error) {
		v := items[idx]
		idx = (idx + 1) % len(items)
		dict.Set("current", items[idx])
		return v, nil
	}))
	dict.Set("reset", NewCallable("cycler.reset", func(a []Value, kw map[string]Value) (Value, error) {
		idx = 0
		dict.Set("current", items[0])
		return None(), nil
	}))

	return d, nil
}

// =============================================================================
// Filter functions
// =============================================================================

func registerFilters(s *scope) {
	filters := map[string]builtinFunc{
		"tojson":         filterTojson,
		"from_json":      filterFromjson,
		"fromjson":       filterFromjson,
		"items":          filterItems,
		"join":           filterJoin,
		"default":        filterDefault,
		"d":              filterDefault,
		"trim":           filterTrim,
		"lower":          filterLower,
		"upper":          filterUpper,
		"title":          filterTitle,
		"capitalize":     filterCapitalize,
		"first":          filterFirst,
		"last":           filterLast,
		"length":         filterLength,
		"count":          filterLength,
		"reverse":        filterReverse,
		"sort":           filterSort,
		"unique":         filterUnique,
		"list":           filterList,
		"int":            filterInt,
		"float":          filterFloatConv,
		"string":         filterString,
		"safe":           filterSafe,
		"replace":        filterReplace,
		"round":          filterRound,
		"abs":            filterAbs,
		"map":            filterMap,
		"select":         filterSelect,
		"reject":         filterReject,
		"selectattr":     filterSelectattr,
		"rejectattr":     filterRejectattr,
		"indent":         filterIndent,
		"wordcount":      filterWordcount,
		"escape":         filterEscape,
		"forceescape":    filterForceescape,
		"truncate":       filterTruncate,
		"groupby":        filterGroupby,
		"striptags":      filterStriptags,
		"slice":          filterSlice,
		"e":              filterEscape,
		"dictsort":       filterDictsort,
		"max":            filterMax,
		"min":            filterMin,
		"sum":            filterSum,
		"batch":          filterBatch,
		"center":         filterCenter,
		"format":         filterFormat,
		"filesizeformat": filterFilesizeformat,
		"urlencode":      filterUrlencode,
		"xmlattr":        filterXmlattr,
	}

	for name, fn := range filters {
		if keepsMarkup[name] {
			fn = markupKept(fn)
		}
		s.set("__filter_"+name, newBuiltin(name, fn))
	}
}

// keepsMarkup are the filters whose result is a Markup when their input
// is one (jinja2's soft_str(s).upper() and the like); the others give
// plain strings (title, replace, join, striptags, …).
var keepsMarkup = map[string]bool{"upper": true, "lower": true, "capitalize": true, "trim": true, "center": true,
	"indent": true, "truncate": true, "string": true, "format": true, "reverse": true}

// markupKept is f marking its string result safe where its input was.
func markupKept(f builtinFunc) builtinFunc {
	return func(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
		v, err := f(b, args, kwargs)
		if err == nil && len(args) > 0 && args[0].isMarkup() && v.IsString() {
			return newMarkup(v.AsString()), nil
		}
		return v, err
	}
}

// lookupFilter retrieves a filter callable from the scope chain.
func lookupFilter(s *scope, name string) (Value, bool) {
	return s.get("__filter_" + name)
}

// unsupportedFilters are jinja2's builtin filters this engine lacks, and
// why, so that a template using one is told so rather than that no such
// filter exists. None of the chat templates collected uses them.
var unsupportedFilters = map[string]string{
	"wordwrap": "Python's textwrap line breaking is not reproduced",
	"urlize":   "its URL-finding rules are not reproduced",
	"pprint":   "Python's pprint layout is not reproduced",
	"random":   "it draws at random, and a prompt must render the same every time a request is served or replayed",
}

// unknownFilter is the error for a filter name nothing defines.
func unknownFilter(name string) error {
	if why, ok := unsupportedFilters[name]; ok {
		return fmt.Errorf("filter %q is jinja2's but not supported here: %s", name, why)
	}
	return fmt.Errorf("unknown filter %q", name)
}

// =============================================================================
// Test evaluation
// =============================================================================

func evalTest(b *budget, name string, val Value, args []Value) (bool, error) {
	switch name {
	case "defined":
		return !val.IsUndefined(), nil
	case "undefined":
		return val.IsUndefined(), nil
	case "none":
		return val.IsNone(), nil
	case "boolean":
		return val.IsBool(), nil
	case "integer":
		return val.IsInt(), nil
	case "float":
		return val.IsFloat(), nil
	case "number":
		return val.IsNumber(), nil
	case "string":
		return val.IsString(), nil
	case "mapping":
		return val.IsDict(), nil
	case "iterable":
		return val.IsList() || val.IsDict() || val.IsString(), nil
	case "sequence": // what has a length and items: Python's dicts and strings too
		return val.IsList() || val.IsDict() || val.IsString(), nil
	case "callable":
		return val.IsCallable(), nil
	case "true":
		return val.IsBool() && val.AsBool(), nil
	case "false":
		return val.IsBool() && !val.AsBool(), nil
	case "eq", "equalto", "==":
		if len(args) < 1 {
			return false, fmt.Errorf("test %q requires an argument", name)
		}
		return b.equal(val, args[0], 0), nil
	case "ne", "!=":
		if len(args) < 1 {
			return false, fmt.Errorf("test %q requires an argument", name)
		}
		return !b.equal(val, args[0], 0), nil
	case "gt", "greaterthan", ">":
		if len(args) < 1 {
			return false, nil
		}
		return compareValues(b, val, args[0]) > 0, nil
	case "ge", ">=":
		if len(args) < 1 {
			return false, nil
		}
		return compareValues(b, val, args[0]) >= 0, nil
	case "lt", "lessthan", "<":
		if len(args) < 1 {
			return false, nil
		}
		return compareValues(b, val, args[0]) < 0, nil
	case "le", "<=":
		if len(args) < 1 {
			return false, nil
		}
		return compareValues(b, val, args[0]) <= 0, nil
	case "in":
		if len(args) < 1 {
			return false, nil
		}
		return containsValue(b, args[0], val), nil
	case "divisibleby":
		if len(args) < 1 || toInt64(args[0]) == 0 {
			return false, nil
		}
		return toInt64(val)%toInt64(args[0]) == 0, nil
	case "odd":
		if val.IsInt() {
			return val.AsInt()%2 != 0, nil
		}
		return false, nil
	case "even":
		if val.IsInt() {
			return val.AsInt()%2 == 0, nil
		}
		return false, nil
	case "upper":
		if val.IsString() {
			s := val.AsString()
			b.scan(int64(len(s)))
			return pyIsUpper(s), nil
		}
		return false, nil
	case "lower":
		if val.IsString() {
			s := val.AsString()
			b.scan(int64(len(s)))
			return pyIsLower(s), nil
		}
		return false, nil
	case "sameas":
		if len(args) < 1 {
			return false, nil
		}
		return b.equal(val, args[0], 0), nil
	}

	return false, fmt.Errorf("unknown test %q", name)
}

// =============================================================================
// Filter implementations
// =============================================================================

func filterFromjson(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 || !args[0].IsString() {
		return Undefined(), nil
	}

	// Decoded JSON takes some times its text: a map entry per key, a
	// boxed value per number.
	b.alloc(size(len(args[0].AsString()), 16))
	var result any
	if err := json.Unmarshal([]byte(args[0].AsString()), &result); err != nil {
		return Undefined(), fmt.Errorf("fromjson: %w", err)
	}

	return FromGoValue(result), nil
}

func filterItems(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 || args[0].IsUndefined() {
		return NewList(nil), nil
	}

	// Python jinja2's |items filter raises TemplateError when applied to
	// anything that isn't a mapping, and several chat templates rely on
	// that error to bail out of an unsupported branch (e.g. when a
	// tool_call's `arguments` is a JSON string instead of an object).
	// Silently returning an empty list here let those templates render
	// invalid prompts. The wording deliberately matches Python jinja2 so
	// templates that surface this string get an identical message.
	if !args[0].IsDict() {
		//lint:ignore ST1005 message text mirrors Python jinja2 verbatim
		return Undefined(), fmt.Errorf("Can only get item pairs from a mapping.")
	}

	return dictItems(b, args[0].AsDict()), nil
}

// dictItems is d's (key, value) pairs in order (the items filter's and
// the items method's).
func dictItems(b *budget, d *Dict) Value {
	b.allocValues(3 * d.Len())
	items := make([]Value, 0, d.Len())
	for _, key := range d.Keys {
		items = append(items, NewTuple([]Value{NewString(key), d.Data[key]}))
	}
	return NewList(items)
}

func filterJoin(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewString(""), nil
	}

	if !args[0].IsList() {
		return NewString(b.print(args[0])), nil
	}

	sep, attr := "", ""
	if v, ok := param(args, kwargs, 1, "d"); ok {
		sep = b.print(v)
	}
	if v, ok := kwargs["attribute"]; ok {
		attr = b.print(v)
	}

	list := args[0].AsList()
	b.allocValues(list.Len())
	parts := make([]string, list.Len())
	total := size(len(sep), list.Len()-1)
	for i, item := range list.Items {
		if attr != "" {
			item = attrPath(item, attr)
		}
		parts[i] = b.print(item)
		total += int64(len(parts[i]))
	}
	b.alloc(total)
	return NewString(strings.Join(parts, sep)), nil
}

func filterDefault(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return Undefined(), nil
	}

	val := args[0]
	defVal := NewString("")
	if len(args) > 1 {
		defVal = args[1]
	}

	boolean := false
	if len(args) > 2 && args[2].IsBool() {
		boolean = args[2].AsBool()
	} else if bv, ok := kwargs["boolean"]; ok && bv.IsBool() {
		boolean = bv.AsBool()
	}

	if val.IsUndefined() {
		return defVal, nil
	}

	if boolean && !val.IsTruthy() {
		return defVal, nil
	}

	return val, nil
}

func filterTrim(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewString(""), nil
	}
	s := b.print(args[0])
	b.scan(int64(len(s)))
	if len(args) > 1 {
		chars := b.print(args[1])
		s = strings.Trim(s, chars)
	} else {
		s = strings.TrimSpace(s)
	}
	return NewString(s), nil
}

func filterLower(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewString(""), nil
	}
	s := b.print(args[0])
	b.allocCased(s)
	return NewString(pyLower(s)), nil
}

func filterUpper(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewString(""), nil
	}
	s := b.print(args[0])
	b.allocCased(s)
	return NewString(pyUpper(s)), nil
}

func filterTitle(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewString(""), nil
	}
	s := b.print(args[0])
	b.allocCased(s)
	return NewString(jinjaTitle(s)), nil
}

func filterCapitalize(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewString(""), nil
	}
	s := b.print(args[0])
	b.allocCased(s)
	return NewString(pyCapitalize(s)), nil
}

func filterFirst(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	return edgeItem(b, args, true), nil
}

func filterLast(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	return edgeItem(b, args, false), nil
}

// edgeItem is first's or last's item of args[0]: a list's, a string's
// character (as a plain string) or a dict's key; undefined when there is
// none.
func edgeItem(b *budget, args []Value, first bool) Value {
	if len(args) == 0 {
		return Undefined()
	}
	v := args[0]
	switch {
	case v.IsList():
		l := v.AsList()
		if l.Len() == 0 {
			return Undefined()
		}
		if first {
			return l.Get(0)
		}
		return l.Get(l.Len() - 1)
	case v.IsString():
		s := v.AsString()
		if s == "" {
			return Undefined()
		}
		if first {
			_, n := utf8.DecodeRuneInString(s)
			return NewString(s[:n])
		}
		_, n := utf8.DecodeLastRuneInString(s)
		return NewString(s[len(s)-n:])
	case v.IsDict():
		keys := v.AsDict().Keys
		if len(keys) == 0 {
			return Undefined()
		}
		if first {
			return NewString(keys[0])
		}
		return NewString(keys[len(keys)-1])
	}
	return Undefined()
}

func filterLength(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewInt(0), nil
	}

	v := args[0]
	switch {
	case v.IsList():
		return NewInt(int64(v.AsList().Len())), nil
	case v.IsDict():
		return NewInt(int64(v.AsDict().Len())), nil
	case v.IsString():
		b.scan(int64(len(v.AsString())))
		return NewInt(int64(utf8.RuneCountInString(v.AsString()))), nil
	}

	return NewInt(0), nil
}

func filterReverse(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewList(nil), nil
	}

	v := args[0]
	if v.IsString() {
		b.allocRunes(v.AsString())
		runes := []rune(v.AsString())
		for i, j := 0, len(runes)-1; i < j; i, j = i+1, j-1 {
			runes[i], runes[j] = runes[j], runes[i]
		}
		return NewString(string(runes)), nil
	}

	if v.IsList() {
		src := v.AsList().Items
		b.allocValues(len(src))
		items := make([]Value, len(src))
		for i, item := range src {
			items[len(src)-1-i] = item
		}
		return NewList(items), nil
	}

	return v, nil
}

func filterSort(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 || !args[0].IsList() {
		return NewList(nil), nil
	}

	// Jinja's sort(reverse, case_sensitive, attribute): strings compare
	// case-folded unless case_sensitive, by an item's attribute when
	// one is named.
	items := args[0].AsList().Items
	b.allocValues(len(items))
	v, _ := param(args, kwargs, 1, "reverse")
	reverse := v.IsTruthy()
	v, _ = param(args, kwargs, 2, "case_sensitive")
	caseSensitive, attr := v.IsTruthy(), ""
	if v, ok := param(args, kwargs, 3, "attribute"); ok {
		attr = b.print(v)
	}
	key := orderKey(b, caseSensitive, attr)
	keys := make([]Value, len(items))
	for i, item := range items {
		keys[i] = key(item)
	}
	sorted := make([]Value, len(items))
	for i, o := range sortedOrder(b, keys, reverse) {
		sorted[i] = items[o]
	}
	return NewList(sorted), nil
}

func filterUnique(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 || !args[0].IsList() {
		return NewList(nil), nil
	}

	src := args[0].AsList().Items
	b.allocValues(2 * len(src)) // the seen set and the result
	seen := make(map[string]bool)
	var items []Value
	for _, item := range src {
		key := b.print(item)
		if !seen[key] {
			seen[key] = true
			items = append(items, item)
		}
	}

	return NewList(items), nil
}

func filterList(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewList(nil), nil
	}

	v := args[0]
	switch {
	case v.IsList():
		if !v.AsList().Tuple {
			return v, nil
		}
		b.allocValues(v.AsList().Len())
		return NewList(slices.Clone(v.AsList().Items)), nil
	case v.IsString():
		b.alloc(size(len(v.AsString()), 4))
		b.allocValues(utf8.RuneCountInString(v.AsString()))
		runes := []rune(v.AsString())
		items := make([]Value, len(runes))
		for i, r := range runes {
			items[i] = NewString(string(r))
		}
		return NewList(items), nil
	case v.IsDict():
		// Python's list(d) is d's keys.
		b.allocValues(v.AsDict().Len())
		items := make([]Value, 0, v.AsDict().Len())
		for _, k := range v.AsDict().Keys {
			items = append(items, NewString(k))
		}
		return NewList(items), nil
	case v.IsUndefined():
		return NewList(nil), nil
	}
	return Undefined(), fmt.Errorf("list: %s object is not iterable", typeName(v))
}

// filterInt is Jinja's int(default=0, base=10): a string as Python's
// int(s, base) reads it (sign, underscores between digits, the base's
// prefix, base 0 taking it from the prefix), else as a float truncated
// ("3.9" is 3), else default; a number truncated; anything else default.
func filterInt(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewInt(0), nil
	}
	def, base := NewInt(0), int64(10)
	if v, ok := param(args, kwargs, 1, "default"); ok {
		def = v
	}
	if v, ok := param(args, kwargs, 2, "base"); ok {
		base = toInt64(v)
	}
	if base != 0 && (base < 2 || base > 36) {
		return Undefined(), fmt.Errorf("int: base must be 0 or 2 to 36, not %d", base)
	}
	switch v := args[0]; {
	case v.IsString():
		if n, ok := pyParseInt(v.AsString(), int(base)); ok {
			return n, nil
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(numberPrefix(v.AsString())), 64); err == nil {
			if n, ok := floatInt(f); ok {
				return n, nil
			}
		}
		return def, nil
	case v.IsInt():
		return v, nil
	case v.IsBool():
		return intValue(v), nil
	case v.IsFloat():
		if n, ok := floatInt(v.AsFloat()); ok {
			return n, nil
		}
	}
	return def, nil
}

func filterFloatConv(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewFloat(0), nil
	}
	return NewFloat(toFloat64(args[0])), nil
}

func filterString(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewString(""), nil
	}
	return NewString(b.print(args[0])), nil
}

// filterSafe is safe: its argument's text marked safe (markup).
func filterSafe(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return newMarkup(""), nil
	}
	if args[0].isMarkup() {
		return args[0], nil
	}
	return newMarkup(b.print(args[0])), nil
}

func filterReplace(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) < 3 {
		return NewString(""), fmt.Errorf("replace: expected at least 3 arguments")
	}
	s := b.print(args[0])
	old := b.print(args[1])
	newStr := b.print(args[2])

	count := -1
	if len(args) > 3 {
		count = int(toInt64(args[3]))
	}
	if c, ok := kwargs["count"]; ok {
		count = int(toInt64(c))
	}

	b.alloc(replacedSize(s, old, newStr, count))
	return NewString(strings.Replace(s, old, newStr, count)), nil
}

func filterRound(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewFloat(0), nil
	}

	precision, method := int64(0), "common"
	if v, ok := param(args, kwargs, 1, "precision"); ok {
		precision = toInt64(v)
	}
	if v, ok := param(args, kwargs, 2, "method"); ok {
		method = b.print(v)
	}
	// Jinja's methods: common is Python's round, half to even
	// (round(2.5) is 2.0); ceil and floor always go their way.
	round := math.RoundToEven
	switch method {
	case "common":
	case "ceil":
		round = math.Ceil
	case "floor":
		round = math.Floor
	default:
		return Undefined(), fmt.Errorf("round: method must be common, ceil or floor, not %q", method)
	}
	if args[0].IsInt() && method == "common" {
		return roundInt(args[0], precision), nil
	}
	f := toFloat64(args[0])
	if method == "common" && precision >= 0 && precision <= 17 {
		// Python rounds the float's exact value to that many decimals
		// (round(2.675, 2) is 2.67: 2.675 is a little under), as
		// formatting it does; scaling first would round 267.49999...
		// up.
		r, err := strconv.ParseFloat(strconv.FormatFloat(f, 'f', int(precision), 64), 64)
		if err == nil {
			return NewFloat(r), nil
		}
	}
	pow := math.Pow(10, float64(precision))
	return NewFloat(round(f*pow) / pow), nil
}

// roundInt is Python's round(n, digits) of an int: n itself for digits
// ≥ 0, else n to the nearest multiple of 10^−digits, ties to even, an
// int.
func roundInt(n Value, digits int64) Value {
	if digits >= 0 {
		return n
	}
	if digits < -maxIntBits/3 {
		return NewInt(0) // 10^−digits is past any integer maxIntBits holds
	}
	m := new(big.Int).Exp(big.NewInt(10), big.NewInt(-digits), nil)
	q, r := new(big.Int).DivMod(intBig(n), m, new(big.Int)) // floor: 0 ≤ r < m
	switch c := new(big.Int).Lsh(r, 1).Cmp(m); {
	case c > 0, c == 0 && q.Bit(0) == 1:
		q.Add(q, big.NewInt(1))
	}
	return newIntBig(q.Mul(q, m))
}

// filterTruncate is Jinja's truncate(length=255, killwords=False,
// end='...', leeway=5): a string longer than length + leeway cut to
// length with end, at the last space before the cut unless killwords.
func filterTruncate(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewString(""), nil
	}
	s := b.print(args[0])
	length, end, leeway := int64(255), "...", int64(5)
	if v, ok := param(args, kwargs, 1, "length"); ok {
		length = toInt64(v)
	}
	v, _ := param(args, kwargs, 2, "killwords")
	killwords := v.IsTruthy()
	if v, ok := param(args, kwargs, 3, "end"); ok {
		end = b.print(v)
	}
	if v, ok := param(args, kwargs, 4, "leeway"); ok {
		leeway = toInt64(v)
	}
	endLen := int64(utf8.RuneCountInString(end))
	if length < endLen || leeway < 0 {
		return Undefined(), fmt.Errorf("truncate: length %d shorter than end %q, or leeway %d below 0", length, end, leeway)
	}
	runes := []rune(s)
	if int64(len(runes)) <= length+leeway {
		return NewString(s), nil
	}
	cut := string(runes[:length-endLen])
	if !killwords {
		if i := strings.LastIndexByte(cut, ' '); i >= 0 {
			cut = cut[:i]
		}
	}
	b.alloc(int64(len(cut) + len(end)))
	return NewString(cut + end), nil
}

// filterGroupby is Jinja's groupby(attribute, default=None,
// case_sensitive=False): the items sorted by their attribute (attrPath,
// default where they lack it, case-folded unless case_sensitive) and
// grouped where it is equal, each group a tuple (grouper, list) whose
// items are also .grouper and .list; the grouper is the first item's own
// value.
func filterGroupby(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	a, ok := param(args, kwargs, 1, "attribute")
	if !ok {
		return Undefined(), fmt.Errorf("groupby: wants an attribute")
	}
	if !args[0].IsList() {
		return Undefined(), fmt.Errorf("groupby: wants a list, not %s", typeName(args[0]))
	}
	attr := b.print(a)
	def, _ := param(args, kwargs, 2, "default")
	cs, _ := param(args, kwargs, 3, "case_sensitive")
	caseSensitive := cs.IsTruthy()
	value := func(item Value) Value {
		if v := attrPath(item, attr); !v.IsUndefined() {
			return v
		}
		return def
	}
	fold := orderKey(b, caseSensitive, "")
	items := args[0].AsList().Items
	b.allocValues(3 * len(items))
	keys := make([]Value, len(items))
	for i, item := range items {
		keys[i] = fold(value(item))
	}
	order := sortedOrder(b, keys, false)
	var groups []Value
	for start := 0; start < len(order); {
		end := start + 1
		for end < len(order) && b.equal(keys[order[end]], keys[order[start]], 0) {
			end++
		}
		members := make([]Value, 0, end-start)
		for _, o := range order[start:end] {
			members = append(members, items[o])
		}
		g := NewTuple([]Value{value(items[order[start]]), NewList(members)})
		g.AsList().Fields = []string{"grouper", "list"}
		groups = append(groups, g)
		start = end
	}
	return NewList(groups), nil
}

// filterStriptags is Jinja's striptags, markupsafe's: comments, then
// tags, cut out (an unclosed one left), runs of white space made one
// space, and HTML's character references read.
func filterStriptags(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewString(""), nil
	}
	s := b.print(args[0])
	b.alloc(int64(2 * len(s)))
	cut := func(s, open, close string) string {
		var out strings.Builder
		for {
			start := strings.Index(s, open)
			if start < 0 {
				break
			}
			end := strings.Index(s[start:], close)
			if end < 0 {
				break
			}
			out.WriteString(s[:start])
			s = s[start+end+len(close):]
		}
		out.WriteString(s)
		return out.String()
	}
	s = cut(cut(s, "<!--", "-->"), "<", ">")
	return NewString(html.UnescapeString(strings.Join(strings.FieldsFunc(s, pySpace), " "))), nil
}

// filterSlice is Jinja's slice(slices, fill_with=None): the items in
// slices lists, the first length % slices of them one longer, the others
// padded with fill_with where it is given.
func filterSlice(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) < 2 || !args[0].IsList() {
		return Undefined(), fmt.Errorf("slice: wants a list and a count")
	}
	items := args[0].AsList().Items
	n := toInt64(args[1])
	if n <= 0 || n > int64(max(len(items), 1))*16 {
		return Undefined(), fmt.Errorf("slice: %d slices of %d items", n, len(items))
	}
	fill, filled := param(args, kwargs, 2, "fill_with")
	filled = filled && !fill.IsNone()
	slices := int(n)
	b.allocValues(len(items) + 2*slices)
	per, extra := len(items)/slices, len(items)%slices
	out := make([]Value, 0, slices)
	offset := 0
	for i := range slices {
		start := offset + i*per
		if i < extra {
			offset++
		}
		part := append([]Value(nil), items[start:offset+(i+1)*per]...)
		if filled && i >= extra {
			part = append(part, fill)
		}
		out = append(out, NewList(part))
	}
	return NewList(out), nil
}

// filterFormat is Jinja's format filter: the value, as text, % its
// arguments (a tuple of them) or its keyword arguments (a dict), not
// both.
func filterFormat(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewString(""), nil
	}
	if len(args) > 1 && len(kwargs) > 0 {
		return Undefined(), fmt.Errorf("format: can't handle positional and keyword arguments at the same time")
	}
	with := NewTuple(args[1:])
	if len(kwargs) > 0 {
		d := NewDict()
		for k, v := range kwargs {
			d.AsDict().Set(k, v)
		}
		with = d
	}
	out, err := pyPercent(b, b.print(args[0]), with)
	if err != nil {
		return Undefined(), err
	}
	return NewString(out), nil
}

// filterCenter is Python's str.center(width) (Jinja's default width 80):
// the padding split as Python splits it.
func filterCenter(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewString(""), nil
	}
	s := b.print(args[0])
	width := int64(80)
	if v, ok := param(args, kwargs, 1, "width"); ok {
		width = toInt64(v)
	}
	return NewString(justify(b, s, width, ' ', '^')), nil
}

func filterAbs(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewInt(0), nil
	}

	v := args[0]
	if v.IsInt() {
		return intAbs(v), nil
	}
	if v.IsFloat() {
		return NewFloat(math.Abs(v.AsFloat())), nil
	}

	return NewInt(0), nil
}

func filterMap(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 || !args[0].IsList() {
		return NewList(nil), nil
	}

	list := args[0].AsList()

	// map(attribute="name") form
	if attr, ok := kwargs["attribute"]; ok {
		attrName := b.print(attr)
		defVal := Undefined()
		if d, ok := kwargs["default"]; ok {
			defVal = d
		}

		b.allocValues(list.Len())
		items := make([]Value, list.Len())
		for i, item := range list.Items {
			if v := attrPath(item, attrName); !v.IsUndefined() {
				items[i] = v
			} else if item.IsDict() {
				items[i] = defVal
			} else {
				items[i] = defVal
			}
		}
		return NewList(items), nil
	}

	b.allocValues(list.Len())
	return NewList(list.Items), nil
}

func filterSelect(b *budget, args []Value, _ map[string]Value) (Value, error) {
	return filterTested(b, args, false, true)
}

func filterReject(b *budget, args []Value, _ map[string]Value) (Value, error) {
	return filterTested(b, args, false, false)
}

func filterSelectattr(b *budget, args []Value, _ map[string]Value) (Value, error) {
	return filterTested(b, args, true, true)
}

func filterRejectattr(b *budget, args []Value, _ map[string]Value) (Value, error) {
	return filterTested(b, args, true, false)
}

// filterTested is select and reject (attr false: list, test, test args)
// and selectattr and rejectattr (attr true: list, attribute, test, test
// args): the items whose value — the item, or its attribute — passes the
// test (keep) or fails it. Without a test, truthiness decides: select's
// test name absent or not a string, selectattr's absent or "truthy".
func filterTested(b *budget, args []Value, attr, keep bool) (Value, error) {
	at := 1 // the test name's index
	if attr {
		at = 2
	}
	if len(args) < at || !args[0].IsList() {
		return NewList(nil), nil
	}

	list := args[0].AsList()
	var attrName, testName, truthy string
	if attr {
		attrName = b.print(args[1])
		testName, truthy = "truthy", "truthy"
		if len(args) > 2 {
			testName = b.print(args[2])
		}
	} else if len(args) > 1 && args[1].IsString() {
		testName = args[1].AsString()
	}

	testArgs := args[min(at+1, len(args)):]

	b.allocValues(list.Len())
	var items []Value
	for _, item := range list.Items {
		v := item
		if attr {
			v = attrPath(item, attrName)
		}
		var pass bool
		if testName == truthy {
			pass = v.IsTruthy()
		} else {
			var err error
			if pass, err = evalTest(b, testName, v, testArgs); err != nil {
				return Undefined(), err
			}
		}
		if pass == keep {
			items = append(items, item)
		}
	}

	return NewList(items), nil
}

func filterIndent(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewString(""), nil
	}

	s := b.print(args[0])
	width := 4
	if len(args) > 1 {
		width = int(toInt64(args[1]))
	}
	if w, ok := kwargs["width"]; ok {
		width = int(toInt64(w))
	}

	indentFirst := false
	if len(args) > 2 {
		indentFirst = args[2].IsTruthy()
	}
	if f, ok := kwargs["first"]; ok {
		indentFirst = f.IsTruthy()
	}

	// Every line but the first may gain the pad; the lines are sliced
	// from s, and joined again.
	nl := strings.Count(s, "\n")
	b.allocValues(nl + 1)
	b.alloc(int64(len(s)) + size(nl+1, width))
	pad := strings.Repeat(" ", max(width, 0))
	lines := strings.Split(s, "\n")
	for i, line := range lines {
		if i == 0 && !indentFirst {
			continue
		}
		if line != "" {
			lines[i] = pad + line
		}
	}

	return NewString(strings.Join(lines, "\n")), nil
}

func filterWordcount(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return NewInt(0), nil
	}
	// Counted as strings.Fields splits, without making the fields.
	s := b.print(args[0])
	b.scan(int64(len(s)))
	words, in := 0, false
	for _, r := range s {
		if unicode.IsSpace(r) {
			in = false
		} else if !in {
			in, words = true, words+1
		}
	}
	return NewInt(int64(words)), nil
}

func filterEscape(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return newMarkup(""), nil
	}
	if args[0].isMarkup() {
		return args[0], nil // already safe: escaped once, not again
	}
	return newMarkup(htmlEscape(b, b.print(args[0]))), nil
}

// filterForceescape is forceescape: escape of the text even where it is
// marked safe.
func filterForceescape(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 {
		return newMarkup(""), nil
	}
	return newMarkup(htmlEscape(b, b.print(args[0]))), nil
}

// htmlEscape is markupsafe's escape, as jinja2's: & < > " ' as &amp;
// &lt; &gt; &#34; &#39;.
func htmlEscape(b *budget, s string) string {
	// Five passes, each at most six times the input ("&#39;" for "'").
	b.alloc(size(len(s), 5*6))
	s = strings.ReplaceAll(s, "&", "&amp;")
	s = strings.ReplaceAll(s, "<", "&lt;")
	s = strings.ReplaceAll(s, ">", "&gt;")
	s = strings.ReplaceAll(s, `"`, "&#34;")
	return strings.ReplaceAll(s, "'", "&#39;")
}

// filterDictsort is Jinja's dictsort(case_sensitive=False, by='key',
// reverse=False): the (key, value) pairs ordered by key or value, a
// string case-folded unless case_sensitive.
func filterDictsort(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 || !args[0].IsDict() {
		return NewList(nil), nil
	}
	cs, _ := param(args, kwargs, 1, "case_sensitive")
	by := "key"
	if v, ok := param(args, kwargs, 2, "by"); ok {
		by = b.print(v)
	}
	rev, _ := param(args, kwargs, 3, "reverse")
	caseSensitive, reverse := cs.IsTruthy(), rev.IsTruthy()
	if by != "key" && by != "value" {
		return Undefined(), fmt.Errorf(`dictsort: you can only sort by either "key" or "value", not %q`, by)
	}
	d := args[0].AsDict()
	b.allocValues(4 * len(d.Keys)) // the keys, and a pair for each
	key := orderKey(b, caseSensitive, "")
	items := make([]Value, len(d.Keys))
	keys := make([]Value, len(d.Keys))
	for i, k := range d.Keys {
		items[i] = NewTuple([]Value{NewString(k), d.Data[k]})
		if by == "key" {
			keys[i] = key(NewString(k))
		} else {
			keys[i] = key(d.Data[k])
		}
	}
	sorted := make([]Value, len(items))
	for i, o := range sortedOrder(b, keys, reverse) {
		sorted[i] = items[o]
	}
	return NewList(sorted), nil
}

// param is a filter's parameter as jinja2 passes it: at position i of
// args (args[0] is the value filtered) or by keyword name, the keyword
// winning; false where it is neither.
func param(args []Value, kwargs map[string]Value, i int, name string) (Value, bool) {
	if v, ok := kwargs[name]; ok {
		return v, true
	}
	if i < len(args) {
		return args[i], true
	}
	return Undefined(), false
}

// sortedOrder is the indices of keys in the order Python's sorted gives
// them (compareValues; reverse descending), equal keys in their order.
func sortedOrder(b *budget, keys []Value, reverse bool) []int {
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool {
		c := compareValues(b, keys[order[i]], keys[order[j]])
		if reverse {
			return c > 0
		}
		return c < 0
	})
	return order
}

// orderKey is what Jinja's sort, min and max order an item by: its
// attribute attr where one is named (attrPath), a string case-folded
// unless caseSensitive.
func orderKey(b *budget, caseSensitive bool, attr string) func(Value) Value {
	return func(v Value) Value {
		if attr != "" {
			v = attrPath(v, attr)
		}
		if !caseSensitive && v.IsString() {
			b.allocCased(v.AsString())
			v = NewString(pyLower(v.AsString()))
		}
		return v
	}
}

func filterMax(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	return extreme(b, args, kwargs, 1)
}

func filterMin(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	return extreme(b, args, kwargs, -1)
}

// extreme is Jinja's max (sign 1) or min (-1) filter, (case_sensitive,
// attribute) as sort takes them: the first item whose key orders past
// every other's, undefined for an empty list.
func extreme(b *budget, args []Value, kwargs map[string]Value, sign int) (Value, error) {
	if len(args) == 0 || !args[0].IsList() || args[0].AsList().Len() == 0 {
		return Undefined(), nil
	}
	cs, _ := param(args, kwargs, 1, "case_sensitive")
	attr := ""
	if v, ok := param(args, kwargs, 2, "attribute"); ok {
		attr = b.print(v)
	}
	key := orderKey(b, cs.IsTruthy(), attr)
	items := args[0].AsList().Items
	best, bestKey := items[0], key(items[0])
	for _, item := range items[1:] {
		if k := key(item); sign*compareValues(b, k, bestKey) > 0 {
			best, bestKey = item, k
		}
	}
	return best, nil
}

// filterSum is Jinja's sum(attribute=None, start=0): Python's sum of
// the items (or their attribute), from start, integers exactly until a
// float comes; what Python cannot add is refused.
func filterSum(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) == 0 || !args[0].IsList() {
		return NewInt(0), nil
	}
	attr, sum := "", NewInt(0)
	if v, ok := param(args, kwargs, 1, "attribute"); ok {
		attr = b.print(v)
	}
	if v, ok := param(args, kwargs, 2, "start"); ok {
		sum = v
	}
	list := args[0].AsList()
	b.scan(size(list.Len(), valueBytes))
	for _, item := range list.Items {
		if attr != "" {
			item = attrPath(item, attr)
		}
		if item.IsString() || sum.IsString() {
			return Undefined(), fmt.Errorf("sum: unsupported operand type(s) for +: '%s' and '%s'", typeName(sum), typeName(item))
		}
		err := checkArith("+", sum, item)
		if err == nil {
			sum, err = addValues(b, sum, item)
		}
		if err != nil {
			return Undefined(), fmt.Errorf("sum: %w", err)
		}
	}
	return sum, nil
}

func filterBatch(b *budget, args []Value, kwargs map[string]Value) (Value, error) {
	if len(args) < 2 || !args[0].IsList() {
		return NewList(nil), nil
	}

	list := args[0].AsList()
	linecount := int(toInt64(args[1]))
	if linecount <= 0 {
		return NewList(nil), nil
	}

	b.allocValues(list.Len() + list.Len()/linecount + 1)
	var batches []Value
	for i := 0; i < list.Len(); i += linecount {
		end := min(i+linecount, list.Len())
		batch := make([]Value, end-i)
		copy(batch, list.Items[i:end])
		batches = append(batches, NewList(batch))
	}

	return NewList(batches), nil
}

// =============================================================================
// Helpers
// =============================================================================

func toInt64(v Value) int64 {
	switch {
	case v.IsInt():
		return v.AsInt()
	case v.IsFloat():
		f := v.AsFloat()
		switch {
		case f != f:
			return 0
		case f <= math.MinInt64:
			return math.MinInt64
		case f >= math.MaxInt64:
			return math.MaxInt64
		}
		return int64(f)
	case v.IsBool():
		if v.AsBool() {
			return 1
		}
		return 0
	case v.IsString():
		var n int64
		fmt.Sscanf(numberPrefix(v.AsString()), "%d", &n)
		return n
	}
	return 0
}

func toFloat64(v Value) float64 {
	switch {
	case v.IsFloat():
		return v.AsFloat()
	case v.IsInt():
		return intFloat(v)
	case v.IsBool():
		if v.AsBool() {
			return 1
		}
		return 0
	case v.IsString():
		var f float64
		fmt.Sscanf(numberPrefix(v.AsString()), "%f", &f)
		return f
	}
	return 0
}

// numberPrefix is the part of s a number is scanned from. Sscanf reads
// as many digits as there are, and the callers of toInt64 and toFloat64
// charge no budget (they read slice bounds, counts, widths); no number
// that fits an int64 or a float64's precision is longer than this, so a
// long string costs what a short one does.
func numberPrefix(s string) string {
	if len(s) > 400 {
		return s[:400]
	}
	return s
}

func compareValues(bud *budget, a, b Value) int { return bud.compare(a, b, 0) }

// compare orders a and b as Python does: integers exactly, strings by
// code point (not by a number they start with: "10" < "9"), lists and
// tuples item by item then by length; any other pair as numbers (the
// engine's way with what Python would refuse to order).
func (bud *budget) compare(a, b Value, depth int) int {
	bud.nest(depth)
	switch {
	case isIntegral(a) && isIntegral(b):
		return intCmp(a, b) // exactly, past float64's 53 bits
	case a.IsString() && b.IsString():
		bud.scan(stringLen(a) + stringLen(b))
		return strings.Compare(a.AsString(), b.AsString()) // UTF-8's byte order is code point order
	case a.IsList() && b.IsList():
		x, y := a.AsList().Items, b.AsList().Items
		for i := 0; i < len(x) && i < len(y); i++ {
			if c := bud.compare(x[i], y[i], depth+1); c != 0 {
				return c
			}
		}
		return cmp.Compare(len(x), len(y))
	}
	bud.scan(stringLen(a) + stringLen(b))
	af, bf := toFloat64(a), toFloat64(b)
	switch {
	case af < bf:
		return -1
	case af > bf:
		return 1
	}
	return 0
}

// stringLen is len(v) for a string, and 0 for anything else.
func stringLen(v Value) int64 {
	if v.IsString() {
		return int64(len(v.AsString()))
	}
	return 0
}

func containsValue(b *budget, container, item Value) bool {
	b.scan(stringLen(container) + stringLen(item))
	if container.IsList() {
		for _, v := range container.AsList().Items {
			if b.equal(v, item, 0) {
				return true
			}
		}
		return false
	}
	if container.IsDict() && item.IsString() {
		return container.AsDict().Has(item.AsString())
	}
	if container.IsString() && item.IsString() {
		return strings.Contains(container.AsString(), item.AsString())
	}
	return false
}

// print converts a Value to its template output string. Unlike
// String() which returns a Python-style repr, print returns the
// raw text for template rendering (no quotes around strings, empty
// string for None/Undefined). A list or dict is charged as it is written.
func (b *budget) print(v Value) string {
	switch v.kind {
	case KindUndefined:
		return ""
	case KindNone:
		return "None"
	case KindBool:
		if v.AsBool() {
			return "True"
		}
		return "False"
	case KindInt:
		return intString(v)
	case KindFloat:
		return pyStr(v.AsFloat())
	case KindString:
		return v.AsString()
	case KindList, KindDict:
		return b.repr(v)
	case KindCallable:
		return ""
	}
	return ""
}

// attrPath is what Jinja's attribute= arguments name in an item: a dotted
// path of keys, a part that is a number indexing a list ("a.0.b"); an
// item without it gives Undefined, as jinja2's attribute getter does.
func attrPath(v Value, path string) Value {
	for part := range strings.SplitSeq(path, ".") {
		switch {
		case v.IsDict():
			var ok bool
			if v, ok = v.AsDict().Get(part); !ok {
				return Undefined()
			}
		case v.IsList():
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= v.AsList().Len() {
				return Undefined()
			}
			v = v.AsList().Items[i]
		default:
			return Undefined()
		}
	}
	return v
}
