// Package grammartest holds a small JSON Schema validator for tests of
// grammar-constrained output: written from the JSON Schema rules for the
// subset gguf/grammar compiles, independent of the compiler, so that a
// test can hold what a grammar lets through to the schema itself.
package grammartest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/mail"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Validate checks a JSON document against a schema of the subset the
// compiler takes: the document must be one valid JSON value in valid
// UTF-8, and meet the schema.
func Validate(schema, doc []byte) error {
	var s any
	if err := json.Unmarshal(schema, &s); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("more than one value, or data after it")
	}
	if !utf8.Valid(doc) {
		return fmt.Errorf("invalid UTF-8")
	}
	return validateAt(s, s, v, "")
}

func validateAt(root, s, v any, at string) error {
	switch s := s.(type) {
	case bool:
		if !s {
			return fmt.Errorf("%s: false schema", at)
		}
		return nil
	case map[string]any:
		if ref, ok := s["$ref"].(string); ok {
			t := root
			for _, tok := range strings.Split(strings.TrimPrefix(ref, "#"), "/")[1:] {
				t = t.(map[string]any)[tok]
			}
			return validateAt(root, t, v, at)
		}
		if c, ok := s["const"]; ok && !jsonEqual(c, v) {
			return fmt.Errorf("%s: %v is not the const %v", at, v, c)
		}
		if e, ok := s["enum"].([]any); ok {
			found := false
			for _, x := range e {
				found = found || jsonEqual(x, v)
			}
			if !found {
				return fmt.Errorf("%s: %v is not in the enum", at, v)
			}
		}
		if any, ok := s["anyOf"].([]any); ok {
			var errs []string
			for _, sub := range any {
				err := validateAt(root, sub, v, at)
				if err == nil {
					errs = nil
					break
				}
				errs = append(errs, err.Error())
			}
			if errs != nil {
				return fmt.Errorf("%s: no anyOf branch: %s", at, strings.Join(errs, "; "))
			}
		}
		if one, ok := s["oneOf"].([]any); ok {
			matched := 0
			for _, sub := range one {
				if validateAt(root, sub, v, at) == nil {
					matched++
				}
			}
			if matched != 1 {
				return fmt.Errorf("%s: %d oneOf branches match, not one", at, matched)
			}
		}
		if t, ok := s["type"]; ok {
			var types []string
			switch t := t.(type) {
			case string:
				types = []string{t}
			case []any:
				for _, x := range t {
					types = append(types, x.(string))
				}
			}
			ok := false
			for _, ty := range types {
				ok = ok || hasType(v, ty)
			}
			if !ok {
				return fmt.Errorf("%s: %v is not of type %v", at, v, types)
			}
		}
		switch v := v.(type) {
		case map[string]any:
			props, _ := s["properties"].(map[string]any)
			for _, r := range asList(s["required"]) {
				if _, ok := v[r.(string)]; !ok {
					return fmt.Errorf("%s: required %q missing", at, r)
				}
			}
			for k, x := range v {
				if ps, ok := props[k]; ok {
					if err := validateAt(root, ps, x, at+"/"+k); err != nil {
						return err
					}
					continue
				}
				if ap, ok := s["additionalProperties"]; ok {
					if err := validateAt(root, ap, x, at+"/"+k); err != nil {
						return fmt.Errorf("%s: additional property %q: %v", at, k, err)
					}
				}
			}
		case []any:
			if n, ok := s["minItems"].(float64); ok && len(v) < int(n) {
				return fmt.Errorf("%s: %d items < %v", at, len(v), n)
			}
			if n, ok := s["maxItems"].(float64); ok && len(v) > int(n) {
				return fmt.Errorf("%s: %d items > %v", at, len(v), n)
			}
			// A tuple: prefixItems (or draft 4's items as an array) for
			// the first items, then items (additionalItems) for the rest.
			prefix, _ := s["prefixItems"].([]any)
			rest, hasRest := s["items"]
			if a, ok := rest.([]any); ok {
				prefix = a
				rest, hasRest = s["additionalItems"]
			}
			for i, x := range v {
				sch, ok := rest, hasRest
				if i < len(prefix) {
					sch, ok = prefix[i], true
				}
				if !ok {
					continue
				}
				if err := validateAt(root, sch, x, at+"/"+strconv.Itoa(i)); err != nil {
					return err
				}
			}
		case json.Number:
			_, lo := s["minimum"]
			_, hi := s["maximum"]
			exMin, exMax := s["exclusiveMinimum"], s["exclusiveMaximum"]
			if !lo && !hi && exMin == nil && exMax == nil {
				break
			}
			f, err := v.Float64()
			if err != nil {
				return fmt.Errorf("%s: %v", at, err)
			}
			if m, ok := s["minimum"].(float64); ok && (f < m || exMin == true && f == m) {
				return fmt.Errorf("%s: %v below the minimum %v", at, f, m)
			}
			if m, ok := s["maximum"].(float64); ok && (f > m || exMax == true && f == m) {
				return fmt.Errorf("%s: %v above the maximum %v", at, f, m)
			}
			if m, ok := exMin.(float64); ok && f <= m {
				return fmt.Errorf("%s: %v not above %v", at, f, m)
			}
			if m, ok := exMax.(float64); ok && f >= m {
				return fmt.Errorf("%s: %v not below %v", at, f, m)
			}
		case string:
			n := utf8.RuneCountInString(v)
			if m, ok := s["minLength"].(float64); ok && n < int(m) {
				return fmt.Errorf("%s: length %d < %v", at, n, m)
			}
			if m, ok := s["maxLength"].(float64); ok && n > int(m) {
				return fmt.Errorf("%s: length %d > %v", at, n, m)
			}
			if f, ok := s["format"].(string); ok {
				if err := checkFormat(f, v); err != nil {
					return fmt.Errorf("%s: %q is not a %s: %v", at, v, f, err)
				}
			}
			// pattern: a match anywhere in the string (RE2's syntax,
			// which the compiler reads; JSON Schema's is ECMA 262's).
			if p, ok := s["pattern"].(string); ok {
				re, err := regexp.Compile(p)
				if err != nil {
					return fmt.Errorf("%s: pattern %q: %v", at, p, err)
				}
				if !re.MatchString(v) {
					return fmt.Errorf("%s: %q does not match %q", at, v, p)
				}
			}
		}
		return nil
	}
	return fmt.Errorf("%s: bad schema %T", at, s)
}

func asList(x any) []any { l, _ := x.([]any); return l }

func hasType(v any, t string) bool {
	switch v := v.(type) {
	case map[string]any:
		return t == "object"
	case []any:
		return t == "array"
	case string:
		return t == "string"
	case json.Number:
		if t == "number" {
			return true
		}
		if t == "integer" {
			_, err := strconv.ParseInt(v.String(), 10, 64)
			return err == nil
		}
	case bool:
		return t == "boolean"
	case nil:
		return t == "null"
	}
	return false
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(normal(a))
	jb, _ := json.Marshal(normal(b))
	return bytes.Equal(ja, jb)
}

// normal makes numbers comparable whatever decoded them.
func normal(x any) any {
	switch x := x.(type) {
	case json.Number:
		f, _ := x.Float64()
		return f
	case map[string]any:
		m := map[string]any{}
		for k, v := range x {
			m[k] = normal(v)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, v := range x {
			l[i] = normal(v)
		}
		return l
	}
	return x
}

// checkFormat checks a string format the compiler takes, by the time
// package's RFC 3339 parsing (the calendar's days and leap years its
// own) and the UUID's text.
func checkFormat(format, v string) error {
	switch format {
	case "date":
		_, err := time.Parse("2006-01-02", v)
		return err
	case "time":
		_, err := time.Parse("15:04:05.999999999Z07:00", v)
		return err
	case "date-time":
		_, err := time.Parse(time.RFC3339Nano, v)
		return err
	case "uuid":
		if !uuidText.MatchString(v) {
			return fmt.Errorf("not 8-4-4-4-12 hexadecimal digits")
		}
		return nil
	case "email":
		a, err := mail.ParseAddress(v)
		if err != nil {
			return err
		}
		local, host, _ := strings.Cut(a.Address, "@")
		if a.Address != v || a.Name != "" || len(local) > 64 {
			return fmt.Errorf("not a bare address of a local part up to 64 characters")
		}
		return checkHostname(host)
	case "hostname":
		return checkHostname(v)
	case "ipv4":
		if ip := net.ParseIP(v); ip == nil || ip.To4() == nil || strings.Contains(v, ":") {
			return fmt.Errorf("not a dotted IPv4 address")
		}
		return nil
	case "uri":
		u, err := url.Parse(v)
		if err != nil {
			return err
		}
		if !u.IsAbs() || u.Host == "" {
			return fmt.Errorf("not an absolute URI with a host")
		}
		return checkHostname(u.Hostname())
	}
	return fmt.Errorf("format %q is not known here", format)
}

var uuidText = regexp.MustCompile(`^[[:xdigit:]]{8}(-[[:xdigit:]]{4}){3}-[[:xdigit:]]{12}$`)

// checkHostname is RFC 1123's rule: at most 253 characters, labels of 1
// to 63 letters, digits and hyphens, none at a label's ends.
func checkHostname(h string) error {
	if len(h) == 0 || len(h) > 253 {
		return fmt.Errorf("a host name of %d characters", len(h))
	}
	for _, l := range strings.Split(h, ".") {
		if !hostLabel.MatchString(l) {
			return fmt.Errorf("label %q", l)
		}
	}
	return nil
}

var hostLabel = regexp.MustCompile(`^[[:alnum:]]([[:alnum:]-]{0,61}[[:alnum:]])?$`)
