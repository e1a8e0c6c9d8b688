package chat

import (
	"fmt"
	"strings"

	"github.com/meshnode/meshnode/gguf/chat/jinja"
)

// The Jinja engine calls a macro by recursion with no bound of its own,
// so a template whose macro calls itself without end overflowed the
// goroutine's stack at its first render: a crash no recover catches.
// Real templates recurse only as deep as the tools' JSON nests (gpt-oss's
// render_typescript_type, hermes's json_to_python_type; at most
// maxJSONDepth). guardMacros rewrites every macro to take a depth, which
// each call of a macro passes on through macroDeeper, and macroDeeper
// refuses a call past maxMacroDepth. The rewrite adds only arguments
// within tags, so it changes no text the template writes.

// maxMacroDepth bounds how deep macro calls nest.
const maxMacroDepth = 4 * maxJSONDepth

// The parameter and the function the rewrite adds.
const (
	macroDepthName  = "__meshnode_macro_depth"
	macroDeeperName = "__meshnode_macro_deeper"
)

// macroDeeper is depth + 1 (an undefined depth, outside any macro, 0),
// or an error past maxMacroDepth.
func macroDeeper(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	d := int64(0)
	if len(args) > 0 && args[0].IsInt() {
		d = args[0].AsInt()
	}
	if d >= maxMacroDepth {
		return jinja.Undefined(), fmt.Errorf("macro calls nest deeper than %d", maxMacroDepth)
	}
	return jinja.NewInt(d + 1), nil
}

// guardMacros returns src with its macros guarded (above): each
// {% macro NAME(…) %} takes macroDepthName, 0 by default, and each call
// NAME(…) of a macro it defines passes macroDeeperName(macroDepthName).
// A template without macros is returned as it is.
func guardMacros(src string) string {
	macros := map[string]bool{}
	eachTag(src, func(_ int, body string, block bool) string {
		if word, rest := tagWord(body); block && word == "macro" {
			if name := identAt(strings.TrimLeft(rest, " \t\r\n"), 0); name != "" {
				macros[name] = true
			}
		}
		return body
	})
	if len(macros) == 0 {
		return src
	}
	return eachTag(src, func(_ int, body string, block bool) string {
		return guardCalls(body, macros, block)
	})
}

// eachTag returns src with the body of each {{ … }} and {% … %} tag
// (between its delimiters, whitespace controls included) replaced by
// what edit returns for it; at is where the body starts in src, and
// block says which kind of tag it is. Text, comments and {% raw %}
// blocks are kept as they are. An unterminated tag ends the scan (the
// engine reports it).
func eachTag(src string, edit func(at int, body string, block bool) string) string {
	var out strings.Builder
	i := 0
	for i < len(src) {
		open := strings.Index(src[i:], "{")
		if open < 0 || i+open+1 >= len(src) {
			break
		}
		at := i + open
		var end string
		switch src[at+1] {
		case '{':
			end = "}}"
		case '%':
			end = "%}"
		case '#':
			close := strings.Index(src[at+2:], "#}")
			if close < 0 {
				out.WriteString(src[i:]) // unterminated: the engine's error
				return out.String()
			}
			out.WriteString(src[i : at+2+close+2])
			i = at + 2 + close + 2
			continue
		default:
			out.WriteString(src[i : at+1])
			i = at + 1
			continue
		}
		j := tagEnd(src, at+2, end)
		if j < 0 {
			break
		}
		body := src[at+2 : j]
		out.WriteString(src[i : at+2])
		out.WriteString(edit(at+2, body, end == "%}"))
		out.WriteString(end)
		i = j + len(end)
		if word, _ := tagWord(body); end == "%}" && word == "raw" {
			if k := strings.Index(src[i:], "endraw"); k >= 0 {
				if o := strings.LastIndex(src[i:i+k], "{%"); o >= 0 {
					out.WriteString(src[i : i+o])
					i += o
				}
			}
		}
	}
	out.WriteString(src[i:])
	return out.String()
}

// tagEnd is the index of end closing the tag whose body starts at j,
// outside strings, or -1.
func tagEnd(src string, j int, end string) int {
	for ; j < len(src); j++ {
		switch {
		case src[j] == '\'' || src[j] == '"':
			j = stringEnd(src, j)
		case strings.HasPrefix(src[j:], end):
			return j
		}
	}
	return -1
}

// stringEnd is the index of the quote closing the string literal that
// opens at s[i] (its escapes skipped), or len(s) when none does.
func stringEnd(s string, i int) int {
	quote := s[i]
	for i++; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case quote:
			return i
		}
	}
	return len(s)
}

// identAt is the identifier starting at s[i], if one does.
func identAt(s string, i int) string {
	j := i
	for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || j > i && s[j] >= '0' && s[j] <= '9') {
		j++
	}
	return s[i:j]
}

// guardCalls rewrites one tag's body: a macro definition's parameters
// gain macroDepthName=0, and each call of a macro (not an attribute's or
// a filter's of the same name) gains
// macroDepthName=macroDeeperName(macroDepthName), its arguments rewritten
// likewise.
func guardCalls(body string, macros map[string]bool, block bool) string {
	word, _ := tagWord(body)
	defining := block && word == "macro" // its first call is the definition
	var out strings.Builder
	prev := byte(0) // the last byte written outside spaces
	write := func(s string) {
		out.WriteString(s)
		if t := strings.TrimRight(s, " \t\r\n"); t != "" {
			prev = t[len(t)-1]
		}
	}
	for i := 0; i < len(body); {
		if c := body[i]; c == '\'' || c == '"' {
			end := min(stringEnd(body, i)+1, len(body))
			write(body[i:end])
			i = end
			continue
		}
		name := identAt(body, i)
		if name == "" {
			write(body[i : i+1])
			i++
			continue
		}
		k := i + len(name)
		for k < len(body) && strings.IndexByte(" \t\r\n", body[k]) >= 0 {
			k++
		}
		close := -1
		if macros[name] && k < len(body) && body[k] == '(' && prev != '.' && prev != '|' {
			close = matchParen(body, k)
		}
		if close < 0 {
			write(name)
			i += len(name)
			continue
		}
		args := body[k+1 : close]
		write(body[i : k+1])
		extra := macroDepthName + "=" + macroDeeperName + "(" + macroDepthName + ")"
		if defining {
			defining = false
			extra = macroDepthName + "=0"
			write(args)
		} else {
			write(guardCalls(args, macros, false))
		}
		if strings.TrimSpace(args) != "" {
			write(", ")
		}
		write(extra + ")")
		i = close + 1
	}
	return out.String()
}

// matchParen is the index of the ')' closing the '(' at s[i], outside
// strings, or -1.
func matchParen(s string, i int) int {
	depth := 0
	for ; i < len(s); i++ {
		switch s[i] {
		case '\'', '"':
			i = stringEnd(s, i)
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			if depth--; depth == 0 {
				return i
			}
		}
	}
	return -1
}
