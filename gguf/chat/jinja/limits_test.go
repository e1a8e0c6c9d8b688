package jinja

import (
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
)

// small are limits a test can exhaust quickly: a hostile template must
// stop at them having allocated about Bytes, not what it asked for.
var small = Limits{Work: 1 << 18, Bytes: 1 << 20, Depth: 32}

// mostAllocated is what a render within small may allocate: what it
// charges, some times over (a builder's growth, a value's box), and the
// garbage of its steps (a loop's counters, a call's scope), which the
// collector takes back as it goes.
const mostAllocated = 8*(1<<20) + 128*(1<<18)

// allocated runs f and returns the bytes the process allocated meanwhile.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestRenderLimits: each way a template can spend without bound (the
// ones docs/security.md names, and the builtins that multiply a string's
// length) stops at the limit it passes with a *LimitError saying which,
// having allocated no more than mostAllocated; before the limits,
// each of these allocated gigabytes, recursed until the stack overflowed
// (a crash no recover catches), or ran for hours.
func TestRenderLimits(t *testing.T) {
	const (
		dag     = `{% set ns = namespace(v='x', w='x') %}{% for i in range(60) %}{% set ns.v = [ns.v, ns.v] %}{% set ns.w = [ns.w, ns.w] %}{% endfor %}`
		cycle   = `{% set l = [1] %}{% set _ = l.append(l) %}`
		shared  = `{% set s = 'x' * 10000 %}{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set _ = ns.l.append(s) %}{% endfor %}`
		nothing = `{% set r = range(100) %}{% for i in r %}{% for j in r %}{% for k in r %}{% endfor %}{% endfor %}{% endfor %}`
	)
	for _, tc := range []struct{ name, src, limit string }{
		{"string repeated", `{{ 'x' * 10000000000 }}`, "bytes"},
		{"list repeated", `{{ [1, 2] * 10000000000 }}`, "bytes"},
		{"string doubled", `{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}`, "bytes"},
		{"string doubled by +", `{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}`, "bytes"},
		{"list doubled", `{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}`, "bytes"},
		{"range", `{{ range(10000000000) | length }}`, "bytes"},
		{"indent", `{{ 'a\nb' | indent(10000000000) }}`, "bytes"},
		{"replace", `{{ ('x' * 1000) | replace('', 'y' * 10000) }}`, "bytes"},
		{"str.replace", `{{ ('x' * 1000).replace('', 'y' * 10000) }}`, "bytes"},
		{"str.format", `{{ ('{0}' * 1000).format('y' * 10000) }}`, "bytes"},
		{"join of one string", shared + `{{ ns.l | join }}`, "bytes"},
		{"printed list of one string", shared + `{{ ns.l }}`, "bytes"},
		{"tojson of one string", shared + `{{ ns.l | tojson }}`, "bytes"},
		{"tojson indented", shared + `{{ ns.l | tojson(indent=4) }}`, "bytes"},
		{"list of a string", `{{ ('x' * 100000) | list | length }}`, "bytes"},
		{"loop over a string", `{% for c in 'x' * 100000 %}{% endfor %}`, "bytes"},
		{"fromjson", `{{ ('[' ~ '1,' * 100000 ~ '1]') | fromjson | length }}`, "bytes"},
		{"printed shared lists", dag + `{{ ns.v }}`, "work"},
		{"shared lists compared", dag + `{{ ns.v == ns.w }}`, "work"},
		{"shared lists in a list", dag + `{{ ns.w in [ns.v] }}`, "work"},
		{"shared lists as JSON", dag + `{{ ns.v | tojson }}`, "work"},
		{"list printed that holds itself", cycle + `{{ l }}`, "nesting"},
		{"list compared that holds itself", cycle + `{{ l == l }}`, "nesting"},
		{"list as JSON that holds itself", cycle + `{{ l | tojson }}`, "nesting"},
		{"list as indented JSON that holds itself", cycle + `{{ l | tojson(indent=2) }}`, "nesting"},
		{"loops that do nothing", nothing + nothing, "work"},
		{"macro calling itself", `{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}`, "depth"},
		{"macro called by another name", `{% macro f() %}{{ g() }}{% endmacro %}{% set g = f %}{{ g() }}`, "depth"},
		{"caller calling itself", `{% macro f() %}{% call f() %}{% endcall %}{% endmacro %}{{ f() }}`, "depth"},
		{"recursive loop into itself", cycle + `{% for x in l recursive %}{{ loop(l) }}{% endfor %}`, "depth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tpl, err := Compile(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			var out string
			spent := allocated(func() { out, err = tpl.RenderLimited(nil, small) })
			var le *LimitError
			if !errors.As(err, &le) || le.Limit != tc.limit {
				t.Fatalf("rendered %d bytes, err %v; want the %s limit", len(out), err, tc.limit)
			}
			if spent > mostAllocated {
				t.Errorf("allocated %d bytes, more than %d", spent, mostAllocated)
			}
		})
	}
}

// TestRenderWithinLimits: what the limits stop short of renders as
// before, with the same spending sites charged: Python's results for
// slices with bounds far past the sequence (clamped, not looped over),
// for indexing a string by code point, for repeating a string a negative
// number of times, and the engine's own bounded forms of the cases above.
func TestRenderWithinLimits(t *testing.T) {
	for src, want := range map[string]string{
		`{{ [1, 2, 3, 4, 5][0:10000000000000:2] }}`:                     "[1, 3, 5]",
		`{{ [1, 2, 3, 4, 5][10000000000000:0:-2] }}`:                    "[5, 3]",
		`{{ [1, 2, 3][::-10000000000000] }}`:                            "[3]",
		`{{ 'abcdef'[-10000000000000:10000000000000:4] }}`:              "ae",
		`{{ 'né'[1] }}{{ 'né'[-1] }}{{ 'né'[5] is defined }}`:           "ééFalse",
		`{{ 'ab' * 3 }}|{{ 'ab' * -1 }}|`:                               "ababab||",
		`{{ 'a\nb' | indent(2) }}`:                                      "a\n  b",
		`{{ 'a b' | replace(' ', '--') }}{{ 'x'.replace('x', 'yz') }}`:  "a--byz",
		`{{ '{0}-{0}'.format('y') }}`:                                   "y-y",
		`{{ ['a', 'b'] | join(', ') }}`:                                 "a, b",
		`{{ 'one two  three' | wordcount }}`:                            "3",
		`{{ 'Hé' | length }}`:                                           "2",
		`{{ range(3) | list }}{{ range(5, 0, -2) | list }}`:             "[0, 1, 2][5, 3, 1]",
		`{{ {'a': [1, 'b']} }}`:                                         "{'a': [1, 'b']}",
		"{{ [] * 10000000000 }}|{{ 2 * [1] }}|{{ '%s:%d' % ('a', 7) }}": "[]|[1, 1]|a:7",
		// Python's str of None, which Jinja prints (the engine had printed "").
		`{{ none }}|{{ 'a' ~ None }}|{{ [none, 1] | join(',') }}|{{ [none] }}`: "None|aNone|None,1|[None]",
		// Python's str and repr of floats (Go's %g had printed 1 and 1e+06).
		`{{ 1.0 }} {{ 1000000.0 }} {{ 1.0e16 }} {{ 0.0001 }} {{ [2.5, 0.00001] }}`:      "1.0 1000000.0 1e+16 0.0001 [2.5, 1e-05]",
		`{% macro f(n) %}{% if n %}{{ f(n - 1) }}.{% endif %}{% endmacro %}{{ f(31) }}`: strings.Repeat(".", 31),
	} {
		tpl, err := Compile(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if got, err := tpl.RenderLimited(nil, small); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", src, got, err, want)
		}
	}
}

// TestLimitsPerRender: each render has its own budget, so renders that
// each fit fit any number of times over.
func TestLimitsPerRender(t *testing.T) {
	tpl, err := Compile(`{{ 'x' * 400000 }}`)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if out, err := tpl.RenderLimited(nil, small); err != nil || len(out) != 400000 {
			t.Fatalf("%d bytes, %v", len(out), err)
		}
	}
}

// TestValueWalksBounded: String and Equals, called outside a render on a
// value that holds itself, stop with a *LimitError (as a panic: they have
// no error to return) instead of recursing until the stack overflows.
func TestValueWalksBounded(t *testing.T) {
	l := NewList(nil)
	l.AsList().Append(l)
	for name, walk := range map[string]func(){
		"String": func() { _ = l.String() },
		"Equals": func() { _ = l.Equals(l) },
	} {
		func() {
			defer func() {
				le, ok := recover().(*LimitError)
				if !ok || le.Limit != "nesting" {
					t.Errorf("%s: recovered %v, want the nesting limit", name, le)
				}
			}()
			walk()
		}()
	}
}

// TestBudgetSaturated: a charge of a size that saturated at MaxInt64
// (size, for a count or width from a template) stops the render, after
// other charges too; added first, it had wrapped the count negative and
// passed.
func TestBudgetSaturated(t *testing.T) {
	for _, charge := range []func(b *budget){
		func(b *budget) { b.alloc(size(3, math.MaxInt64/2)) },
		func(b *budget) { b.scan(math.MaxInt64) },
		func(b *budget) { b.steps(math.MaxInt64) },
	} {
		func() {
			defer func() {
				if _, ok := recover().(*LimitError); !ok {
					t.Error("a saturated charge passed")
				}
			}()
			b := newBudget(small)
			b.alloc(1)
			b.step()
			charge(b)
		}()
	}
}

// TestIntegerBound: integers are exact past int64 (parity.json holds
// Python's digits), up to maxIntBits; a product, power or literal past
// that stops with errIntTooLarge at once, where Python would go on
// computing (10 ** (10 ** 10) is ten gigabytes of digits).
func TestIntegerBound(t *testing.T) {
	tpl, err := Compile(`{{ (2 ** 65535) | string | length }}|{{ 2 ** 65535 // 2 ** 65534 }}`)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := tpl.RenderLimited(nil, small); err != nil || out != "19729|2" {
		t.Errorf("2 ** 65535: %q, %v; want 19729 digits", out, err)
	}
	for _, src := range []string{
		`{{ 2 ** 65536 }}`,
		`{{ 10 ** (10 ** 10) }}`,
		`{{ 3 ** 18446744073709551616 }}`,
		`{{ (2 ** 40000) * (2 ** 40000) }}`,
		`{% set ns = namespace(n=2) %}{% for i in range(20) %}{% set ns.n = ns.n * ns.n %}{% endfor %}`,
	} {
		tpl, err := Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := tpl.RenderLimited(nil, small); !errors.Is(err, errIntTooLarge) {
			t.Errorf("%s: rendered %d bytes, err %v; want %v", src, len(out), err, errIntTooLarge)
		}
	}
	// 1 and -1 to any power, and 0, stay small.
	tpl, err = Compile(`{{ 1 ** 18446744073709551616 }}|{{ (-1) ** 18446744073709551617 }}|{{ 0 ** 18446744073709551616 }}`)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := tpl.RenderLimited(nil, small); err != nil || out != "1|-1|0" {
		t.Errorf("powers of 1, -1 and 0: %q, %v", out, err)
	}
	if _, err := Compile("{{ " + strings.Repeat("9", 30000) + " }}"); !errors.Is(err, errIntTooLarge) {
		t.Errorf("a 30000-digit literal: %v, want %v", err, errIntTooLarge)
	}
	// By zero: refused, small or not, as Python refuses it.
	for _, src := range []string{`{{ 1 // 0 }}`, `{{ 10 ** 20 % 0 }}`, `{{ 1 / 0.0 }}`, `{{ 2.5 // false }}`} {
		tpl, err := Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := tpl.Render(nil); !errors.Is(err, errZeroDivision) {
			t.Errorf("%s: %q, %v; want %v", src, out, err, errZeroDivision)
		}
	}
}

// TestAccumulateLinear: output accumulated a part at a time ({% set
// ns.out = ns.out ~ part %}, + alike) costs bytes in proportion to its
// length, not its square: two strings of 20,000 parts of 100 bytes, 2 MB
// each, render within a 64 MB byte limit (their buffers, doubling, and the
// parts; copying the whole each time would make 40 GB). Strings grown from a shared prefix keep their own text.
func TestAccumulateLinear(t *testing.T) {
	src := `{% set ns = namespace(out="", plus="") %}{% for i in range(20000) %}` +
		`{% set ns.out = ns.out ~ part %}{% set ns.plus = ns.plus + part %}{% endfor %}` +
		`{{ ns.out | length }} {{ ns.plus | length }} {{ ns.out == ns.plus }}`
	tpl, err := Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	lim := Limits{Work: 1 << 30, Bytes: 64 << 20, Depth: 64}
	got, err := tpl.RenderLimited(map[string]Value{"part": NewString(strings.Repeat("x", 100))}, lim)
	if err != nil || got != "2000000 2000000 True" {
		t.Fatalf("%q, %v", got, err)
	}
	for src, want := range map[string]string{
		`{% set a = "x" ~ "y" %}{% set b = a ~ "1" %}{% set c = a ~ "2" %}{{ a }} {{ b }} {{ c }} {{ b ~ "3" }} {{ a ~ "4" }} {{ b }}`: "xy xy1 xy2 xy13 xy4 xy1",
		`{% set s = "" %}{% for w in ["a", "b", "c"] %}{% set s = s ~ w %}{{ s }},{% endfor %}`:                                        "a,ab,abc,",
	} {
		tpl, err := Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := tpl.RenderLimited(nil, small); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", src, got, err, want)
		}
	}
}
