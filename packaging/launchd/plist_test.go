package launchd

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

var update = flag.Bool("update", false, "rewrite the golden property lists")

// decodePlist is a strict reader of XML property lists (Apple's
// PropertyList-1.0 DTD), standing in for plutil -lint, which Linux lacks:
// the XML declaration and DOCTYPE, one <plist version="1.0"> root holding
// one value, dicts of alternating <key> and value, and only the DTD's
// elements. It returns string, bool, int64, []any and map[string]any.
func decodePlist(data []byte) (any, error) {
	d := xml.NewDecoder(bytes.NewReader(data))
	d.Strict = true
	var sawDecl, sawDoctype bool
	for {
		tok, err := d.Token()
		if err != nil {
			return nil, fmt.Errorf("before <plist>: %w", err)
		}
		switch t := tok.(type) {
		case xml.ProcInst:
			if t.Target != "xml" || !strings.Contains(string(t.Inst), `version="1.0"`) || !strings.Contains(string(t.Inst), `encoding="UTF-8"`) {
				return nil, fmt.Errorf("XML declaration %q", t.Inst)
			}
			sawDecl = true
		case xml.Directive:
			want := `DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd"`
			if string(t) != want {
				return nil, fmt.Errorf("DOCTYPE %q, want %q", t, want)
			}
			sawDoctype = true
		case xml.CharData:
			if len(bytes.TrimSpace(t)) > 0 {
				return nil, fmt.Errorf("text %q before <plist>", t)
			}
		case xml.StartElement:
			if !sawDecl || !sawDoctype {
				return nil, errors.New("no XML declaration or DOCTYPE before <plist>")
			}
			if t.Name.Local != "plist" || len(t.Attr) != 1 || t.Attr[0].Name.Local != "version" || t.Attr[0].Value != "1.0" {
				return nil, fmt.Errorf("root <%s %v>, want <plist version=\"1.0\">", t.Name.Local, t.Attr)
			}
			v, err := decodeValue(d, nextElement(d))
			if err != nil {
				return nil, err
			}
			if end, err := nextEnd(d); err != nil || end != "plist" {
				return nil, fmt.Errorf("after the root value: </%s>, %v; want one value then </plist>", end, err)
			}
			for {
				tok, err := d.Token()
				if err == io.EOF {
					return v, nil
				}
				if err != nil {
					return nil, err
				}
				if cd, ok := tok.(xml.CharData); !ok || len(bytes.TrimSpace(cd)) > 0 {
					return nil, fmt.Errorf("%T after </plist>", tok)
				}
			}
		default:
			return nil, fmt.Errorf("%T before <plist>", tok)
		}
	}
}

type elemOrErr struct {
	start xml.StartElement
	end   string // set when the parent closed instead
	err   error
}

// nextElement skips whitespace to the next start (or end) element.
func nextElement(d *xml.Decoder) elemOrErr {
	for {
		tok, err := d.Token()
		if err != nil {
			return elemOrErr{err: err}
		}
		switch t := tok.(type) {
		case xml.StartElement:
			return elemOrErr{start: t}
		case xml.EndElement:
			return elemOrErr{end: t.Name.Local}
		case xml.CharData:
			if len(bytes.TrimSpace(t)) > 0 {
				return elemOrErr{err: fmt.Errorf("stray text %q", t)}
			}
		default:
			return elemOrErr{err: fmt.Errorf("unexpected %T", tok)}
		}
	}
}

func nextEnd(d *xml.Decoder) (string, error) {
	e := nextElement(d)
	if e.err != nil {
		return "", e.err
	}
	if e.end == "" {
		return "", fmt.Errorf("unexpected <%s>", e.start.Name.Local)
	}
	return e.end, nil
}

// text reads the character data of a leaf element up to its end.
func text(d *xml.Decoder, name string) (string, error) {
	var s strings.Builder
	for {
		tok, err := d.Token()
		if err != nil {
			return "", err
		}
		switch t := tok.(type) {
		case xml.CharData:
			s.Write(t)
		case xml.EndElement:
			return s.String(), nil
		default:
			return "", fmt.Errorf("<%s> holds %T, want text", name, tok)
		}
	}
}

func decodeValue(d *xml.Decoder, e elemOrErr) (any, error) {
	if e.err != nil {
		return nil, e.err
	}
	if e.end != "" {
		return nil, fmt.Errorf("</%s> where a value belongs", e.end)
	}
	if len(e.start.Attr) != 0 {
		return nil, fmt.Errorf("<%s> has attributes", e.start.Name.Local)
	}
	switch name := e.start.Name.Local; name {
	case "string":
		return text(d, name)
	case "integer":
		s, err := text(d, name)
		if err != nil {
			return nil, err
		}
		return strconv.ParseInt(s, 10, 64)
	case "true", "false":
		if end, err := nextEnd(d); err != nil || end != name {
			return nil, fmt.Errorf("<%s/> is not empty", name)
		}
		return name == "true", nil
	case "array":
		a := []any{}
		for {
			e := nextElement(d)
			if e.err == nil && e.end == name {
				return a, nil
			}
			v, err := decodeValue(d, e)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
	case "dict":
		m := map[string]any{}
		for {
			e := nextElement(d)
			if e.err != nil {
				return nil, e.err
			}
			if e.end == name {
				return m, nil
			}
			if e.end != "" || e.start.Name.Local != "key" {
				return nil, fmt.Errorf("<dict> holds <%s>%s where a <key> belongs", e.start.Name.Local, e.end)
			}
			k, err := text(d, "key")
			if err != nil {
				return nil, err
			}
			if _, dup := m[k]; dup {
				return nil, fmt.Errorf("key %q twice", k)
			}
			if m[k], err = decodeValue(d, nextElement(d)); err != nil {
				return nil, fmt.Errorf("key %q: %w", k, err)
			}
		}
	default:
		return nil, fmt.Errorf("<%s> is not a property list element this job uses", name)
	}
}

func TestDecodePlistRejects(t *testing.T) {
	const head = `<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
		`<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">` + "\n"
	for name, doc := range map[string]string{
		"no declaration":    `<plist version="1.0"><dict/></plist>`,
		"wrong version":     head + `<plist version="2.0"><dict></dict></plist>`,
		"two roots":         head + `<plist version="1.0"><dict></dict><dict></dict></plist>`,
		"key without value": head + `<plist version="1.0"><dict><key>a</key></dict></plist>`,
		"value without key": head + `<plist version="1.0"><dict><string>a</string></dict></plist>`,
		"duplicate key":     head + `<plist version="1.0"><dict><key>a</key><true/><key>a</key><true/></dict></plist>`,
		"bad integer":       head + `<plist version="1.0"><integer>ten</integer></plist>`,
		"unknown element":   head + `<plist version="1.0"><thing/></plist>`,
		"unclosed":          head + `<plist version="1.0"><dict>`,
		"stray text":        head + `<plist version="1.0"><dict>x</dict></plist>`,
	} {
		if v, err := decodePlist([]byte(doc)); err == nil {
			t.Errorf("%s: decoded %v, want an error", name, v)
		}
	}
}

var testAccount = Account{Name: "alice", UID: 501, GID: 20, Home: "/Users/alice"}

func TestRender(t *testing.T) {
	const exe = "/usr/local/bin/meshnode"
	state := "/Users/alice/Library/Application Support/meshnode"
	log := "/Users/alice/Library/Logs/meshnode/meshnode.log"
	common := map[string]any{
		"Label":                Label,
		"ProgramArguments":     []any{exe, "--state-dir", state},
		"EnvironmentVariables": map[string]any{"HOME": "/Users/alice"},
		"WorkingDirectory":     state,
		"RunAtLoad":            true,
		"KeepAlive":            map[string]any{"Crashed": true, "SuccessfulExit": false},
		"ThrottleInterval":     int64(10),
		"ExitTimeOut":          int64(45),
		"ProcessType":          "Standard",
		"Umask":                int64(0o077),
		"StandardOutPath":      log,
		"StandardErrorPath":    log,
	}
	daemon := map[string]any{"UserName": "alice"}
	for k, v := range common {
		daemon[k] = v
	}
	for _, tc := range []struct {
		scope  Scope
		golden string
		want   map[string]any
	}{
		{UserAgent, "agent.plist", common},
		{SystemDaemon, "daemon.plist", daemon},
	} {
		t.Run(tc.scope.String(), func(t *testing.T) {
			got, err := NewLayout(tc.scope, testAccount).Render(exe)
			if err != nil {
				t.Fatal(err)
			}
			v, err := decodePlist(got)
			if err != nil {
				t.Fatalf("not a valid XML property list: %v\n%s", err, got)
			}
			if !reflect.DeepEqual(v, tc.want) {
				t.Errorf("decoded\n%#v\nwant\n%#v", v, tc.want)
			}
			golden(t, filepath.Join("testdata", tc.golden), got)
		})
	}
}

// TestShippedExample holds the example in the macOS release tarball to what
// `meshnode service install` writes for a user agent.
func TestShippedExample(t *testing.T) {
	got, err := NewLayout(UserAgent, Account{Name: "you", UID: 501, GID: 20, Home: "/Users/you"}).Render("/usr/local/bin/meshnode")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, filepath.Join("..", "darwin", Label+".plist"), got)
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("rendered property list differs from %s (go test -update rewrites it):\n%s", path, got)
	}
}

func TestStringsRoundTrip(t *testing.T) {
	for _, s := range []string{
		"", "plain", `a&b<c>d"e'f`, "tab\tnew\nline", "cr\r\nlf", "ünïcödé 日本", "\uFFFD", "]]>", "&amp;",
		"/Users/o'brien/Library/Application Support/meshnode",
	} {
		roundTrip(t, s)
	}
	for _, s := range []string{"nul\x00", "bell\x07", "\xff\xfe", "half\xe2\x82", "\uFFFE", "\uFFFF"} {
		if _, err := encodePlist(dict{{"k", s}}); !errors.Is(err, ErrUnencodable) {
			t.Errorf("%q: err = %v, want ErrUnencodable", s, err)
		}
		if _, err := encodePlist(dict{{s, "v"}}); !errors.Is(err, ErrUnencodable) {
			t.Errorf("key %q: err = %v, want ErrUnencodable", s, err)
		}
	}
}

func roundTrip(t *testing.T, s string) {
	t.Helper()
	doc, err := encodePlist(dict{{"key " + s, s}, {"list", []string{s}}, {"env", map[string]string{s: s}}})
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	v, err := decodePlist(doc)
	if err != nil {
		t.Fatalf("%q: %v\n%s", s, err, doc)
	}
	want := map[string]any{"key " + s: s, "list": []any{s}, "env": map[string]any{s: s}}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("%q came back as %#v", s, v)
	}
}

// FuzzPlistString: every string is either carried exactly or refused with
// ErrUnencodable, never altered.
func FuzzPlistString(f *testing.F) {
	for _, s := range []string{"", "/Users/alice", "a&b<c>", "x\r\ny", "\x00", "\xff", "\uFFFE"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, err := encodePlist(dict{{"k", s}})
		encodable := utf8.ValidString(s)
		for _, r := range s {
			encodable = encodable && xmlChar(r)
		}
		if !encodable {
			if !errors.Is(err, ErrUnencodable) {
				t.Fatalf("%q: err = %v, want ErrUnencodable", s, err)
			}
			return
		}
		roundTrip(t, s)
	})
}
