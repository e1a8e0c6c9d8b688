package chat

import "strings"

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
