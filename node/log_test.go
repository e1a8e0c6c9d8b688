package node

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestNewLogger: text or JSON records at the level asked for, and one clear
// error for a level or format it does not know.
func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	l, err := NewLogger(&buf, "warn", "json")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("hidden")
	l.Warn("shown", "model", "m")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("json log %q: %v", buf.String(), err)
	}
	if rec["msg"] != "shown" || rec["level"] != "WARN" || rec["model"] != "m" {
		t.Fatalf("json record %v", rec)
	}

	buf.Reset()
	if l, err = NewLogger(&buf, "DEBUG", ""); err != nil {
		t.Fatal(err)
	}
	l.Debug("detail", "k", 1)
	if got := buf.String(); !strings.Contains(got, "level=DEBUG") || !strings.Contains(got, "msg=detail k=1") {
		t.Fatalf("text record %q", got)
	}

	for _, tt := range []struct{ level, format, want string }{
		{"loud", "text", "log_level"},
		{"info", "xml", "log_format"},
	} {
		if _, err := NewLogger(&buf, tt.level, tt.format); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewLogger(%q, %q): %v, want an error naming %s", tt.level, tt.format, err, tt.want)
		}
	}
}
