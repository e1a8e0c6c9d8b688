package msl

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// A Problem is one finding of Lint.
type Problem struct {
	File string
	Line int
	Rule string
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Rule, p.Msg) }

// The lint's rules: what the stand-in's C++ build accepts (or silently
// compiles to something else) and Metal's compiler refuses or runs
// differently. There is no MSL compiler on Linux; these are checked
// textually on the sources as this project writes them.
const (
	// RuleAddressSpace: a pointer or reference parameter without an
	// address space (device, constant, threadgroup, thread). C++ has
	// none; MSL requires one.
	RuleAddressSpace = "address-space"
	// RuleKernelParam: a kernel parameter bound the wrong way: a buffer
	// that is not a device or constant pointer or reference, threadgroup
	// memory that is not a threadgroup pointer, a position attribute on a
	// type other than uint/ushort (or their vectors), an index out of
	// range or used twice.
	RuleKernelParam = "kernel-param"
	// RuleGridComponents: position attributes of the grid family
	// ([[thread_position_in_grid]], [[threadgroup_position_in_grid]],
	// [[threads_per_threadgroup]], …) declared with different numbers of
	// components in one kernel, which Metal refuses.
	RuleGridComponents = "grid-components"
	// RuleDouble: double (Apple GPUs have no float64).
	RuleDouble = "double"
	// RuleRecursion: a function that calls itself, directly or through
	// others (MSL has no recursion).
	RuleRecursion = "recursion"
	// RuleLibrary: C or C++ library calls and features MSL lacks: std::,
	// printf, malloc, memcpy, new, delete, exceptions, virtual functions,
	// the compilers' __builtin_ functions.
	RuleLibrary = "library"
	// RuleHexFloat: a hexadecimal float literal (C++17; MSL is C++14).
	RuleHexFloat = "hex-float"
	// RuleGlobal: a program-scope variable that is not `constant` (MSL
	// has no mutable globals; the host build would share one between all
	// threads).
	RuleGlobal = "global"
	// RuleStaticLocal: a static local variable (the host build would
	// share it between all threads of every dispatch).
	RuleStaticLocal = "static-local"
	// RuleThreadgroupLocal: threadgroup memory declared inside a function
	// rather than passed as a [[threadgroup(n)]] parameter: the host
	// build's empty `threadgroup` makes it one per thread, not one per
	// threadgroup.
	RuleThreadgroupLocal = "threadgroup-local"
)

var (
	funcDefRE   = regexp.MustCompile(`([A-Za-z_]\w*)\s*\(`)
	doubleRE    = regexp.MustCompile(`\bdouble\b`)
	hexFloatRE  = regexp.MustCompile(`\b0[xX][0-9a-fA-F]*\.?[0-9a-fA-F]*[pP][+-]?[0-9]+`)
	libraryRE   = regexp.MustCompile(`\bstd\s*::|\b(printf|fprintf|sprintf|malloc|calloc|realloc|free|memcpy|memset|memmove|strlen|abort|exit|assert|new|delete|throw|try|catch|virtual|typeid|dynamic_cast|thread_local)\b|\b__builtin_\w+`)
	staticRE    = regexp.MustCompile(`\bstatic\s+(?:const\s+)?[A-Za-z_][\w:<>]*\s*[*&]?\s*[A-Za-z_]\w*\s*(?:\[[^\]]*\])?\s*(?:=|;)`)
	tgLocalRE   = regexp.MustCompile(`\bthreadgroup\s+[A-Za-z_][\w:<>]*\s+[A-Za-z_]\w*\s*\[`)
	addrSpaceRE = regexp.MustCompile(`\b(device|constant|threadgroup|thread)\b`)
)

var keywords = map[string]bool{
	"if": true, "for": true, "while": true, "switch": true, "return": true, "sizeof": true, "alignof": true,
	"static_assert": true, "decltype": true, "defined": true, "catch": true,
}

// gridFamily are the position attributes whose component counts must
// agree within a kernel.
var gridFamily = map[string]bool{
	"thread_position_in_grid": true, "threads_per_grid": true, "thread_position_in_threadgroup": true,
	"threads_per_threadgroup": true, "threadgroup_position_in_grid": true, "threadgroups_per_grid": true,
	"dispatch_threads_per_threadgroup": true,
}

// fn is a function definition found in the text.
type fn struct {
	name       string
	at         int // the name's offset
	line       int
	params     string
	body       string // between the braces
	bodyOffset int
}

// functions finds the function definitions of text (comments stripped):
// an identifier, its parenthesised parameters, optional qualifiers, and a
// brace-enclosed body.
func functions(text string) []fn {
	var out []fn
	for _, loc := range funcDefRE.FindAllStringSubmatchIndex(text, -1) {
		name := text[loc[2]:loc[3]]
		if keywords[name] {
			continue
		}
		// Skip macro definitions and calls inside expressions: the
		// definition's name is preceded by a type, on a line that is not
		// a directive.
		lineStart := strings.LastIndexByte(text[:loc[0]], '\n') + 1
		if strings.HasPrefix(strings.TrimSpace(text[lineStart:loc[0]]), "#") {
			continue
		}
		end, err := matching(text, loc[1]-1)
		if err != nil {
			continue
		}
		rest := text[end:]
		i := 0
		for i < len(rest) && (rest[i] == ' ' || rest[i] == '\t' || rest[i] == '\n') {
			i++
		}
		if strings.HasPrefix(rest[i:], "const") {
			i += len("const")
			for i < len(rest) && (rest[i] == ' ' || rest[i] == '\t' || rest[i] == '\n') {
				i++
			}
		}
		if i >= len(rest) || rest[i] != '{' {
			continue
		}
		// A definition: its name follows a type (an identifier, '*' or
		// '&'), not an operator.
		before := strings.TrimRight(text[:loc[0]], " \t\n")
		if before == "" {
			continue
		}
		last := before[len(before)-1]
		if !(last == '_' || last == '*' || last == '&' || last == '>' || (last >= 'a' && last <= 'z') || (last >= 'A' && last <= 'Z') || (last >= '0' && last <= '9')) {
			continue
		}
		if prev := identRE.FindAllString(before, -1); len(prev) > 0 && keywords[prev[len(prev)-1]] {
			continue
		}
		open := end + i
		depth, j := 0, open
		for ; j < len(text); j++ {
			if text[j] == '{' {
				depth++
			} else if text[j] == '}' {
				depth--
				if depth == 0 {
					break
				}
			}
		}
		if j >= len(text) {
			continue
		}
		out = append(out, fn{name: name, at: loc[0], line: lineOf(text, loc[0]), params: text[loc[1] : end-1], body: text[open+1 : j], bodyOffset: open + 1})
	}
	return out
}

// Lint checks files, one program in this order, and returns what it
// finds, in order.
func Lint(files []File) []Problem {
	var probs []Problem
	add := func(file string, line int, rule, format string, args ...any) {
		probs = append(probs, Problem{File: file, Line: line, Rule: rule, Msg: fmt.Sprintf(format, args...)})
	}
	calls := map[string][]string{} // function → functions it calls
	defined := map[string]bool{}
	where := map[string]Problem{}
	macros := map[string]string{}
	for _, f := range files {
		text := stripComments(f.Text)
		for k, v := range Macros(text) {
			macros[k] = v
		}
		code := withoutDirectives(text)
		for _, loc := range doubleRE.FindAllStringIndex(code, -1) {
			add(f.Name, lineOf(code, loc[0]), RuleDouble, "double: Apple GPUs have no float64")
		}
		for _, loc := range hexFloatRE.FindAllStringIndex(code, -1) {
			add(f.Name, lineOf(code, loc[0]), RuleHexFloat, "hexadecimal float %s: MSL is C++14 (write the bits with as_type)", code[loc[0]:loc[1]])
		}
		for _, loc := range libraryRE.FindAllStringIndex(code, -1) {
			add(f.Name, lineOf(code, loc[0]), RuleLibrary, "%s: not in MSL", strings.TrimSpace(code[loc[0]:loc[1]]))
		}
		fns := functions(code)
		for _, d := range fns {
			defined[d.name] = true
			where[d.name] = Problem{File: f.Name, Line: d.line}
			for _, c := range funcDefRE.FindAllStringSubmatch(d.body, -1) {
				if !keywords[c[1]] {
					calls[d.name] = append(calls[d.name], c[1])
				}
			}
			// Parameters: address spaces (kernels are checked below).
			if !isKernel(code, d) {
				for _, p := range splitTop(expand(d.params, macros)) {
					if (strings.Contains(p, "*") || strings.Contains(p, "&")) && !addrSpaceRE.MatchString(p) {
						add(f.Name, d.line, RuleAddressSpace, "%s: parameter %q has no address space", d.name, strings.TrimSpace(p))
					}
				}
			}
			for _, loc := range staticRE.FindAllStringIndex(d.body, -1) {
				add(f.Name, lineOf(code, d.bodyOffset+loc[0]), RuleStaticLocal, "%s: static local %q", d.name, strings.TrimSpace(d.body[loc[0]:loc[1]]))
			}
			for _, loc := range tgLocalRE.FindAllStringIndex(d.body, -1) {
				add(f.Name, lineOf(code, d.bodyOffset+loc[0]), RuleThreadgroupLocal, "%s: threadgroup array declared in a function; pass it as a [[threadgroup(n)]] parameter", d.name)
			}
		}
		for _, g := range globals(code) {
			if !strings.HasPrefix(g.text, "constant ") && !strings.HasPrefix(g.text, "constexpr constant ") {
				add(f.Name, g.line, RuleGlobal, "program-scope variable %q is not constant", g.text)
			}
		}
	}
	// Kernels: their parameters' bindings and types.
	ks, err := Parse(files)
	if err != nil {
		add("", 0, RuleKernelParam, "%v", err)
	}
	for _, k := range ks {
		lintKernel(k, add)
	}
	// Recursion: a cycle in the call graph of defined functions.
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name string, path []string)
	visit = func(name string, path []string) {
		switch state[name] {
		case 1:
			i := slices.Index(path, name)
			w := where[name]
			add(w.File, w.Line, RuleRecursion, "%s calls itself (%s)", name, strings.Join(append(path[i:], name), " → "))
			return
		case 2:
			return
		}
		state[name] = 1
		for _, c := range calls[name] {
			if defined[c] {
				visit(c, append(path, name))
			}
		}
		state[name] = 2
	}
	names := make([]string, 0, len(defined))
	for n := range defined {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		visit(n, nil)
	}
	return probs
}

// isKernel reports whether d is a kernel function.
func isKernel(code string, d fn) bool {
	return strings.HasSuffix(strings.Join(strings.Fields(code[max(0, d.at-64):d.at]), " "), "kernel void")
}

// withoutDirectives blanks preprocessor lines (keeping line numbers) so
// that macro bodies are not linted as code where they are defined; the
// kernels' macros are linted through Parse, expanded.
func withoutDirectives(text string) string {
	lines := strings.Split(text, "\n")
	cont := false
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if cont || strings.HasPrefix(t, "#") {
			cont = strings.HasSuffix(t, `\`)
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

type global struct {
	text string
	line int
}

// globals lists the program-scope declarations that are neither functions
// nor types: statements at brace depth 0 ending in ';' with an identifier
// and no parentheses before any '='.
func globals(code string) []global {
	var out []global
	depth, start := 0, 0
	for i := 0; i < len(code); i++ {
		switch code[i] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				start = i + 1
			}
		case ';':
			if depth != 0 {
				continue
			}
			stmt := strings.Join(strings.Fields(code[start:i]), " ")
			line := lineOf(code, start+len(code[start:i])-len(strings.TrimLeft(code[start:i], " \t\n")))
			start = i + 1
			if stmt == "" {
				continue
			}
			head, _, _ := strings.Cut(stmt, "=")
			first := strings.Fields(head)[0]
			switch {
			case first == "using" || first == "typedef" || first == "struct" || first == "template" || first == "enum" ||
				first == "union" || first == "namespace" || first == "static_assert":
				continue
			case strings.Contains(head, "("):
				continue // a function declaration
			}
			out = append(out, global{text: stmt, line: line})
		}
	}
	return out
}

// lintKernel checks one kernel's parameters.
func lintKernel(k Kernel, add func(file string, line int, rule, format string, args ...any)) {
	seen := map[[2]int]bool{}
	comps := map[int][]string{}
	for _, p := range k.Params {
		fields := strings.Fields(strings.NewReplacer("*", " * ", "&", " & ").Replace(p.Type))
		space := ""
		if len(fields) > 0 && addrSpaceRE.MatchString(fields[0]) {
			space = fields[0]
		}
		switch p.Kind {
		case Buffer, Threadgroup:
			if p.Index < 0 || p.Index > 30 {
				add(k.File, k.Line, RuleKernelParam, "%s: %s bound at index %d (0 … 30)", k.Name, p.Name, p.Index)
			}
			key := [2]int{int(p.Kind), p.Index}
			if seen[key] {
				add(k.File, k.Line, RuleKernelParam, "%s: index %d bound twice", k.Name, p.Index)
			}
			seen[key] = true
			ptr := strings.Contains(p.Type, "*") || p.Ref
			switch {
			case !ptr:
				add(k.File, k.Line, RuleKernelParam, "%s: %s (%s) is bound to a slot but is neither a pointer nor a reference", k.Name, p.Name, p.Type)
			case space == "":
				add(k.File, k.Line, RuleAddressSpace, "%s: parameter %s (%s) has no address space", k.Name, p.Name, p.Type)
			case p.Kind == Buffer && space != "device" && space != "constant":
				add(k.File, k.Line, RuleKernelParam, "%s: buffer %s is in the %s address space (want device or constant)", k.Name, p.Name, space)
			case p.Kind == Threadgroup && space != "threadgroup":
				add(k.File, k.Line, RuleKernelParam, "%s: [[threadgroup(%d)]] %s is not a threadgroup pointer", k.Name, p.Index, p.Name)
			}
		case Position:
			base, n := vectorOf(p.Type)
			if base != "uint" && base != "ushort" {
				add(k.File, k.Line, RuleKernelParam, "%s: [[%s]] %s has type %s (want uint or ushort)", k.Name, p.Attr, p.Name, p.Type)
			}
			if n > Positions[p.Attr] {
				add(k.File, k.Line, RuleKernelParam, "%s: [[%s]] has at most %d components, %s has %d", k.Name, p.Attr, Positions[p.Attr], p.Type, n)
			}
			if gridFamily[p.Attr] {
				comps[n] = append(comps[n], p.Attr)
			}
		}
	}
	if len(comps) > 1 {
		var parts []string
		for n, attrs := range comps {
			parts = append(parts, fmt.Sprintf("%d (%s)", n, strings.Join(attrs, ", ")))
		}
		slices.Sort(parts)
		add(k.File, k.Line, RuleGridComponents, "%s: grid position attributes with different component counts: %s", k.Name, strings.Join(parts, "; "))
	}
}

// vectorOf splits a type such as "uint3" into its scalar and components.
func vectorOf(t string) (string, int) {
	t = strings.TrimSpace(t)
	for _, base := range []string{"ushort", "uint"} {
		if t == base {
			return base, 1
		}
		if strings.HasPrefix(t, base) && len(t) == len(base)+1 && t[len(base)] >= '2' && t[len(base)] <= '4' {
			return base, int(t[len(base)] - '0')
		}
	}
	return t, 1
}
