// Package msl reads the Metal Shading Language this project writes, with
// no MSL compiler at hand (there is none on Linux): it finds the kernels
// and their bindings ([[buffer(n)]], [[threadgroup(n)]], the position
// attributes), rewrites the sources for the host C++ build of
// metal/metalemu, and lints them for what that build accepts but Metal's
// compiler refuses (lint.go).
//
// It is not a C++ parser. It handles the subset the kernels keep to:
// object-like macros (which may stand for whole parameter lists), kernels
// declared as `kernel void name(...)` at file scope, one attribute per
// kernel parameter, no templates on kernels.
package msl

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// File is one source file.
type File struct {
	Name string
	Text string
}

// Kind is where a kernel parameter's value comes from.
type Kind int

// Parameter kinds.
const (
	// Buffer: [[buffer(n)]], a device or constant pointer or reference.
	Buffer Kind = iota
	// Threadgroup: [[threadgroup(n)]], threadgroup memory whose length
	// the encoder sets.
	Threadgroup
	// Position: a thread, threadgroup or SIMD-group index or count.
	Position
)

// Param is one kernel parameter.
type Param struct {
	Type  string // as written, address space included: "device const float *"
	Name  string
	Kind  Kind
	Index int    // Buffer, Threadgroup
	Attr  string // Position: the attribute, e.g. "thread_index_in_simdgroup"
	// Ref is a reference parameter (constant T &): the stand-in binds the
	// bytes at the index as one T.
	Ref bool
}

// Kernel is one kernel function.
type Kernel struct {
	Name   string
	File   string
	Line   int
	Params []Param
}

// Buffers returns the kernel's buffer indices in increasing order.
func (k *Kernel) Buffers() []int {
	var out []int
	for _, p := range k.Params {
		if p.Kind == Buffer {
			out = append(out, p.Index)
		}
	}
	slices.Sort(out)
	return out
}

// Threadgroups returns the kernel's threadgroup memory indices.
func (k *Kernel) Threadgroups() []int {
	var out []int
	for _, p := range k.Params {
		if p.Kind == Threadgroup {
			out = append(out, p.Index)
		}
	}
	slices.Sort(out)
	return out
}

// Param returns the buffer parameter at index, if there is one.
func (k *Kernel) Param(kind Kind, index int) (Param, bool) {
	for _, p := range k.Params {
		if p.Kind == kind && p.Index == index {
			return p, true
		}
	}
	return Param{}, false
}

// Positions are the position attributes a kernel parameter may carry, and
// how many components each has at most.
var Positions = map[string]int{
	"thread_position_in_grid":          3,
	"thread_position_in_threadgroup":   3,
	"threadgroup_position_in_grid":     3,
	"threads_per_threadgroup":          3,
	"threadgroups_per_grid":            3,
	"threads_per_grid":                 3,
	"thread_index_in_threadgroup":      1,
	"thread_index_in_simdgroup":        1,
	"simdgroup_index_in_threadgroup":   1,
	"simdgroups_per_threadgroup":       1,
	"threads_per_simdgroup":            1,
	"dispatch_threads_per_threadgroup": 3,
}

// stripComments blanks // and /* */ comments, keeping newlines so that
// offsets and line numbers stay those of the source.
func stripComments(s string) string {
	b := []byte(s)
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == '/' && i+1 < len(b) && b[i+1] == '/':
			for ; i < len(b) && b[i] != '\n'; i++ {
				b[i] = ' '
			}
		case b[i] == '/' && i+1 < len(b) && b[i+1] == '*':
			j := i
			for ; j < len(b) && !(b[j] == '*' && j+1 < len(b) && b[j+1] == '/'); j++ {
				if b[j] != '\n' {
					b[j] = ' '
				}
			}
			for k := j; k < len(b) && k < j+2; k++ {
				b[k] = ' '
			}
			i = j + 1
		}
	}
	return string(b)
}

var (
	defineRE = regexp.MustCompile(`(?m)^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(\(?)`)
	kernelRE = regexp.MustCompile(`\bkernel\s+(\w+)\s+(\w+)\s*\(`)
	identRE  = regexp.MustCompile(`[A-Za-z_]\w*`)
	attrRE   = regexp.MustCompile(`\[\[\s*([A-Za-z_]\w*)\s*(?:\(\s*(\d+)\s*\))?\s*\]\]`)
)

// Macros returns the object-like macros of the (comment-stripped) text:
// name → body, continuation lines joined.
func Macros(text string) map[string]string {
	m := map[string]string{}
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		loc := defineRE.FindStringSubmatchIndex(line)
		if loc == nil {
			continue
		}
		name := line[loc[2]:loc[3]]
		fn := loc[5] > loc[4]
		body := line[loc[1]:]
		for strings.HasSuffix(strings.TrimRight(body, " \t"), `\`) && i+1 < len(lines) {
			body = strings.TrimSuffix(strings.TrimRight(body, " \t"), `\`) + " "
			i++
			body += lines[i]
		}
		if !fn {
			m[name] = strings.TrimSpace(body)
		}
	}
	return m
}

// expand replaces object-like macros in s until none is left (at most ten
// rounds: the kernels' macros nest two deep).
func expand(s string, macros map[string]string) string {
	for range 10 {
		changed := false
		s = identRE.ReplaceAllStringFunc(s, func(id string) string {
			if body, ok := macros[id]; ok {
				changed = true
				return body
			}
			return id
		})
		if !changed {
			break
		}
	}
	return s
}

// matching returns the index just past the parenthesis that closes the
// one at open.
func matching(s string, open int) (int, error) {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i + 1, nil
			}
		}
	}
	return 0, fmt.Errorf("unbalanced parentheses")
}

// splitTop splits s at commas outside (), [], <> and {}.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(', '[', '<', '{':
			depth++
		case ')', ']', '>', '}':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if strings.TrimSpace(s[start:]) != "" {
		out = append(out, s[start:])
	}
	return out
}

// lineOf is the 1-based line of offset off in s.
func lineOf(s string, off int) int { return strings.Count(s[:off], "\n") + 1 }

// Parse finds the kernels of files, which are one program in this order
// (macros of earlier files apply to later ones).
func Parse(files []File) ([]Kernel, error) {
	macros := map[string]string{}
	var out []Kernel
	for _, f := range files {
		text := stripComments(f.Text)
		for k, v := range Macros(text) {
			macros[k] = v
		}
		for _, loc := range kernelRE.FindAllStringSubmatchIndex(text, -1) {
			if lineStart := strings.LastIndexByte(text[:loc[0]], '\n') + 1; strings.HasPrefix(strings.TrimSpace(text[lineStart:loc[0]]), "#") {
				continue // inside a macro definition
			}
			line := lineOf(text, loc[0])
			ret, name := text[loc[2]:loc[3]], text[loc[4]:loc[5]]
			if ret != "void" {
				return nil, fmt.Errorf("%s:%d: kernel %s returns %s, not void", f.Name, line, name, ret)
			}
			end, err := matching(text, loc[1]-1)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: kernel %s: %w", f.Name, line, name, err)
			}
			params := expand(text[loc[1]:end-1], macros)
			k := Kernel{Name: name, File: f.Name, Line: line}
			for _, raw := range splitTop(params) {
				p, err := parseParam(raw)
				if err != nil {
					return nil, fmt.Errorf("%s:%d: kernel %s: %w", f.Name, line, name, err)
				}
				k.Params = append(k.Params, p)
			}
			out = append(out, k)
		}
	}
	seen := map[string]bool{}
	for _, k := range out {
		if seen[k.Name] {
			return nil, fmt.Errorf("%s:%d: kernel %s declared twice", k.File, k.Line, k.Name)
		}
		seen[k.Name] = true
	}
	return out, nil
}

// parseParam reads one kernel parameter: its declaration and attribute.
func parseParam(raw string) (Param, error) {
	raw = strings.Join(strings.Fields(raw), " ")
	attrs := attrRE.FindAllStringSubmatchIndex(raw, -1)
	if len(attrs) != 1 {
		return Param{}, fmt.Errorf("parameter %q: want exactly one [[attribute]], found %d", raw, len(attrs))
	}
	a := attrs[0]
	attr := raw[a[2]:a[3]]
	decl := strings.TrimSpace(raw[:a[0]] + raw[a[1]:])
	ids := identRE.FindAllStringIndex(decl, -1)
	if len(ids) < 2 {
		return Param{}, fmt.Errorf("parameter %q has no type", raw)
	}
	last := ids[len(ids)-1]
	if strings.TrimSpace(decl[last[1]:]) != "" {
		return Param{}, fmt.Errorf("parameter %q: the name must end the declaration", raw)
	}
	p := Param{Name: decl[last[0]:last[1]], Type: strings.TrimSpace(decl[:last[0]])}
	p.Ref = strings.HasSuffix(p.Type, "&")
	switch attr {
	case "buffer", "threadgroup":
		if a[4] < 0 {
			return Param{}, fmt.Errorf("parameter %q: [[%s]] without an index", raw, attr)
		}
		p.Index, _ = strconv.Atoi(raw[a[4]:a[5]])
		p.Kind = Buffer
		if attr == "threadgroup" {
			p.Kind = Threadgroup
		}
	default:
		if _, ok := Positions[attr]; !ok {
			return Param{}, fmt.Errorf("parameter %q: attribute [[%s]] is not one this project's kernels use", raw, attr)
		}
		if a[4] >= 0 {
			return Param{}, fmt.Errorf("parameter %q: [[%s]] takes no index", raw, attr)
		}
		p.Kind, p.Attr = Position, attr
	}
	return p, nil
}

// HostSource is files as one host C++ translation unit for the stand-in:
// each file after a #line directive, and every [[attribute]] blanked, since
// the shim's empty address-space macros would break some
// ([[threadgroup(0)]] would read [[(0)]]) and C++ ignores the rest. The
// kernels' bindings come from Parse, not from the attributes.
func HostSource(files []File) string {
	var b strings.Builder
	for _, f := range files {
		fmt.Fprintf(&b, "#line 1 %q\n", f.Name)
		b.WriteString(blankAttrs(f.Text))
		if !strings.HasSuffix(f.Text, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func blankAttrs(s string) string {
	return attrRE.ReplaceAllStringFunc(s, func(a string) string { return strings.Repeat(" ", len(a)) })
}

// Concat is files as one MSL source for Metal's compiler, each after a
// comment naming it.
func Concat(files []File) string {
	var b strings.Builder
	for _, f := range files {
		fmt.Fprintf(&b, "// ---- %s ----\n", f.Name)
		b.WriteString(f.Text)
		if !strings.HasSuffix(f.Text, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String()
}
