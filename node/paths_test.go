package node

import (
	"errors"
	"path/filepath"
	"testing"
)

func TestDefaultStateDir(t *testing.T) {
	home := func() (string, error) { return "/home/u", nil }
	noHome := func() (string, error) { return "", errors.New("no home") }
	tests := []struct {
		name string
		env  map[string]string
		goos string
		home func() (string, error)
		want string
	}{
		{"systemd", map[string]string{"STATE_DIRECTORY": "/var/lib/meshnode"}, "linux", home, "/var/lib/meshnode"},
		{"systemd several", map[string]string{"STATE_DIRECTORY": "/var/lib/meshnode:/var/lib/other"}, "linux", home, "/var/lib/meshnode"},
		{"xdg", map[string]string{"XDG_STATE_HOME": "/x/state"}, "linux", home, "/x/state/meshnode"},
		{"xdg relative ignored", map[string]string{"XDG_STATE_HOME": "rel"}, "linux", home, "/home/u/.local/state/meshnode"},
		{"linux default", nil, "linux", home, "/home/u/.local/state/meshnode"},
		{"darwin", map[string]string{"XDG_STATE_HOME": "/x/state"}, "darwin", home, "/home/u/Library/Application Support/meshnode"},
	}
	for _, tt := range tests {
		got := defaultStateDir(func(k string) string { return tt.env[k] }, tt.goos, tt.home, false)
		if got != tt.want {
			t.Errorf("%s: got %s, want %s", tt.name, got, tt.want)
		}
	}
	if got := defaultStateDir(func(string) string { return "" }, "linux", home, true); got != "/var/lib/meshnode" {
		t.Errorf("as the service user: got %s", got)
	}
	if got := defaultStateDir(func(k string) string { return map[string]string{"STATE_DIRECTORY": "/s"}[k] }, "linux", home, true); got != "/s" {
		t.Errorf("systemd's STATE_DIRECTORY wins: got %s", got)
	}
	if got := defaultStateDir(func(string) string { return "" }, "linux", noHome, false); filepath.Base(got) != "meshnode" {
		t.Errorf("no home: got %s", got)
	}
}
