package chat

import (
	"fmt"
	"strings"
)

// A template comes from a model file, which is outside input, and the
// Jinja engine parses and renders it by recursion with no bound of its
// own: a 900 KB template of nested parentheses overflowed the goroutine's
// stack, which no recover catches, and 2.4 MB of nested {% if %} took 42 s
// to compile. Compile therefore refuses a template longer, or nested
// deeper, than any real one before the engine sees it.
const (
	// maxTemplateBytes bounds a template's source. The largest here
	// (gemma-4's and gpt-oss's, testdata/templates) are under 17 KB.
	maxTemplateBytes = 256 << 10
	// maxTemplateDepth bounds the nesting of blocks ({% if %}, {% for %},
	// {% macro %} and the others that take an {% end… %}) and, within a
	// tag, of brackets. Real templates nest under ten deep.
	maxTemplateDepth = 64
)

// blockOpeners are the tags that open a block closed by an {% end… %}
// tag ("set" only without "=": {% set x %}…{% endset %}).
var blockOpeners = map[string]bool{
	"if": true, "for": true, "macro": true, "call": true, "filter": true,
	"with": true, "block": true, "set": true, "raw": true, "generation": true,
}

// checkBounds refuses src where it is longer than maxTemplateBytes or
// nests deeper than maxTemplateDepth, saying where. It reads tags as the
// engine's scanner does (eachTag: {{ … }}, {% … %}, {# … #}, with their
// whitespace controls, strings within tags, and {% raw %} left unread)
// closely enough to bound what the parser will recurse through.
func checkBounds(src string) error {
	if len(src) > maxTemplateBytes {
		return fmt.Errorf("%d bytes, more than %d", len(src), maxTemplateBytes)
	}
	var err error
	blocks := 0
	deep := func(at int, what string, depth int) error {
		return fmt.Errorf("%s nest %d deep at line %d, more than %d", what, depth, 1+strings.Count(src[:at], "\n"), maxTemplateDepth)
	}
	eachTag(src, func(at int, body string, block bool) string {
		if err != nil {
			return body
		}
		depth := 0
		for j := 0; j < len(body); j++ {
			switch c := body[j]; c {
			case '\'', '"':
				j = stringEnd(body, j)
			case '(', '[', '{':
				if depth++; depth > maxTemplateDepth {
					err = deep(at+j, "brackets", depth)
					return body
				}
			case ')', ']', '}':
				depth--
			}
		}
		if !block {
			return body
		}
		switch word, rest := tagWord(body); {
		case strings.HasPrefix(word, "end"):
			blocks--
		case blockOpeners[word] && !(word == "set" && strings.Contains(rest, "=")):
			if blocks++; blocks > maxTemplateDepth {
				err = deep(at, "blocks", blocks)
			}
		}
		return body
	})
	return err
}

// tagWord is a {% … %} tag's first word (its whitespace controls and
// spaces trimmed) and what follows it.
func tagWord(body string) (word, rest string) {
	body = strings.TrimLeft(body, "-+ \t\r\n")
	n := 0
	for n < len(body) && (body[n] == '_' || body[n] >= 'a' && body[n] <= 'z' || body[n] >= 'A' && body[n] <= 'Z') {
		n++
	}
	return body[:n], body[n:]
}
