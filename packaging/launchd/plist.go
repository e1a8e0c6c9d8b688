// Package launchd runs meshnode as a launchd service on macOS: it renders the
// job's property list, knows where a per-user agent and a system daemon live,
// and installs, loads, unloads and removes them with launchctl.
package launchd

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"
)

// A property list is built from these: string, bool, int, []string,
// map[string]string and dict.
type dict []entry

type entry struct {
	key string
	val any
}

// ErrUnencodable is returned for a string a property list cannot carry: XML
// 1.0 has no way to write NUL and most other control characters.
var ErrUnencodable = errors.New("launchd: string cannot be written in an XML property list")

const plistHeader = `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
`

// encodePlist writes root as an XML property list, indented with tabs as
// plutil writes them.
func encodePlist(root dict) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(plistHeader)
	if err := encodeValue(&b, root, 0); err != nil {
		return nil, err
	}
	b.WriteString("</plist>\n")
	return b.Bytes(), nil
}

func encodeValue(b *bytes.Buffer, v any, depth int) error {
	if m, ok := v.(map[string]string); ok {
		d := make(dict, 0, len(m))
		for _, k := range slices.Sorted(maps.Keys(m)) {
			d = append(d, entry{k, m[k]})
		}
		v = d
	}
	indent := func(d int) {
		for range d {
			b.WriteByte('\t')
		}
	}
	indent(depth)
	switch v := v.(type) {
	case string:
		b.WriteString("<string>")
		if err := escape(b, v); err != nil {
			return err
		}
		b.WriteString("</string>\n")
	case bool:
		if v {
			b.WriteString("<true/>\n")
		} else {
			b.WriteString("<false/>\n")
		}
	case int:
		b.WriteString("<integer>" + strconv.Itoa(v) + "</integer>\n")
	case []string:
		b.WriteString("<array>\n")
		for _, s := range v {
			if err := encodeValue(b, s, depth+1); err != nil {
				return err
			}
		}
		indent(depth)
		b.WriteString("</array>\n")
	case dict:
		b.WriteString("<dict>\n")
		for _, e := range v {
			indent(depth + 1)
			b.WriteString("<key>")
			if err := escape(b, e.key); err != nil {
				return err
			}
			b.WriteString("</key>\n")
			if err := encodeValue(b, e.val, depth+1); err != nil {
				return err
			}
		}
		indent(depth)
		b.WriteString("</dict>\n")
	default:
		return fmt.Errorf("launchd: no property list type for %T", v)
	}
	return nil
}

// escape writes s as XML character data. Unlike xml.EscapeText it refuses,
// rather than replaces, what XML cannot carry: a path must not silently
// become another path.
func escape(b *bytes.Buffer, s string) error {
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !validAt(s, i):
			return fmt.Errorf("%w: invalid UTF-8 at byte %d of %q", ErrUnencodable, i, s)
		case !xmlChar(r):
			return fmt.Errorf("%w: character %U at byte %d of %q", ErrUnencodable, r, i, s)
		case r == '&':
			b.WriteString("&amp;")
		case r == '<':
			b.WriteString("&lt;")
		case r == '>':
			b.WriteString("&gt;")
		case r == '\r':
			// A literal CR would be normalised away by any XML reader.
			b.WriteString("&#xD;")
		default:
			b.WriteRune(r)
		}
	}
	return nil
}

func validAt(s string, i int) bool {
	r, size := utf8.DecodeRuneInString(s[i:])
	return r != utf8.RuneError || size == 3 // a literal U+FFFD is fine
}

// xmlChar reports whether r is in XML 1.0's Char production.
func xmlChar(r rune) bool {
	return r == '\t' || r == '\n' || r == '\r' ||
		r >= 0x20 && r <= 0xD7FF ||
		r >= 0xE000 && r <= 0xFFFD ||
		r >= 0x10000 && r <= 0x10FFFF
}
