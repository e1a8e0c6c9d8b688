package chat

import (
	"regexp"
	"strings"
)

// rewriteLineContinuations drops a backslash-newline inside a string
// literal of a template's tags, as Python's string escapes (which Jinja's
// lexer applies) do and the Go engine does not: Mistral Small 3.1's
// template continues its long system prompts that way. Text outside tags,
// and {% raw %} blocks, are left alone.
func rewriteLineContinuations(src string) string {
	if !strings.Contains(src, "\\\n") {
		return src
	}
	var b strings.Builder
	for i := 0; i < len(src); {
		switch {
		case strings.HasPrefix(src[i:], "{#"):
			end := strings.Index(src[i:], "#}")
			if end < 0 {
				b.WriteString(src[i:])
				return b.String()
			}
			b.WriteString(src[i : i+end+2])
			i += end + 2
		case strings.HasPrefix(src[i:], "{{") || strings.HasPrefix(src[i:], "{%"):
			closer := "}}"
			if src[i+1] == '%' {
				closer = "%}"
				if raw := rawBlock.FindStringIndex(src[i:]); raw != nil && raw[0] == 0 {
					end := endRawBlock.FindStringIndex(src[i:])
					if end == nil {
						b.WriteString(src[i:])
						return b.String()
					}
					b.WriteString(src[i : i+end[1]])
					i += end[1]
					continue
				}
			}
			b.WriteString(src[i : i+2])
			i += 2
			var quote byte
			for i < len(src) {
				c := src[i]
				if quote == 0 {
					if strings.HasPrefix(src[i:], closer) {
						b.WriteString(closer)
						i += 2
						break
					}
					if c == '\'' || c == '"' {
						quote = c
					}
					b.WriteByte(c)
					i++
					continue
				}
				switch {
				case c == '\\' && i+1 < len(src) && src[i+1] == '\n':
					i += 2
				case c == '\\' && i+1 < len(src):
					b.WriteString(src[i : i+2])
					i += 2
				default:
					if c == quote {
						quote = 0
					}
					b.WriteByte(c)
					i++
				}
			}
		default:
			b.WriteByte(src[i])
			i++
		}
	}
	return b.String()
}

var (
	rawBlock    = regexp.MustCompile(`^\{%-?\s*raw\s*-?%\}`)
	endRawBlock = regexp.MustCompile(`\{%-?\s*endraw\s*-?%\}`)
)
