package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node"
)

// isolate points every default path at a fresh directory and clears the
// MESHNODE_* variables, so that neither the machine's config nor the
// caller's environment reaches the test.
func isolate(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "config"))
	t.Setenv("XDG_STATE_HOME", filepath.Join(home, "state"))
	t.Setenv("STATE_DIRECTORY", "")
	t.Setenv("CONFIGURATION_DIRECTORY", "")
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "MESHNODE_") {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	return home
}

// check runs `meshnode ARGS... config check` and returns what it resolved,
// keyed by its output's first column.
func check(t *testing.T, args ...string) (map[string]string, error) {
	t.Helper()
	var out bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &out
	err := app.Run(append(append([]string{"meshnode"}, args...), "config", "check"))
	got := map[string]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			got[k] = strings.TrimSpace(v)
		}
	}
	return got, err
}

// TestConfigPrecedence: defaults, then the config file, then MESHNODE_*
// variables, then flags; each layer overrides only what it names.
func TestConfigPrecedence(t *testing.T) {
	home := isolate(t)
	state := filepath.Join(home, "file-state")
	file := filepath.Join(home, "meshnode.toml")
	body := "state_dir = \"" + state + "\"\nhttp_addr = \"127.0.0.1:1001\"\nquic_addr = \":1002\"\ndiscovery = \"none\"\n"
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		env  map[string]string
		args []string
		want map[string]string
	}{
		{"defaults", nil, nil, map[string]string{
			"state_dir": filepath.Join(home, "state", "meshnode"), "http_addr": node.DefaultHTTPAddr,
			"quic_addr": node.DefaultQUICAddr, "discovery": "mdns",
			"models_dir": filepath.Join(home, "state", "meshnode", "models")}},
		{"file", nil, []string{"--config", file}, map[string]string{
			"state_dir": state, "models_dir": filepath.Join(state, "models"),
			"http_addr": "127.0.0.1:1001", "quic_addr": ":1002", "discovery": "none"}},
		{"variables over the file", map[string]string{"MESHNODE_CONFIG": file, "MESHNODE_HTTP_ADDR": "127.0.0.1:2001", "MESHNODE_MODELS_DIR": "/m"},
			nil, map[string]string{"state_dir": state, "models_dir": "/m", "http_addr": "127.0.0.1:2001", "quic_addr": ":1002", "discovery": "none"}},
		{"flags over variables", map[string]string{"MESHNODE_HTTP_ADDR": "127.0.0.1:2001", "MESHNODE_DISCOVERY": "none"},
			[]string{"--config", file, "--http-addr", "127.0.0.1:3001", "--discovery", "mdns", "--state-dir", "/s"},
			map[string]string{"state_dir": "/s", "models_dir": "/s/models", "http_addr": "127.0.0.1:3001", "quic_addr": ":1002", "discovery": "mdns"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			got, err := check(t, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

// TestMeshAccessConfig: api.mesh_access defaults to "owner" when an API
// key is set and "any" when none is, and comes from the file, the
// MESHNODE_MESH_ACCESS variable or --mesh-access, in that order; any
// other value is refused.
func TestMeshAccessConfig(t *testing.T) {
	home := isolate(t)
	file := filepath.Join(home, "meshnode.toml")
	if err := os.WriteFile(file, []byte("[api]\nmesh_access = \"none\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no key", nil, nil, "any"},
		{"a key", nil, []string{"--api-key", "k"}, "owner"},
		{"a key from the environment", map[string]string{"MESHNODE_API_KEY": "k"}, nil, "owner"},
		{"file", nil, []string{"--config", file, "--api-key", "k"}, "none"},
		{"variable over the file", map[string]string{"MESHNODE_MESH_ACCESS": "any"}, []string{"--config", file}, "any"},
		{"flag over the variable", map[string]string{"MESHNODE_MESH_ACCESS": "any"}, []string{"--mesh-access", "owner"}, "owner"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			got, err := check(t, tt.args...)
			if err != nil || got["mesh_access"] != tt.want {
				t.Fatalf("mesh_access %q, %v; want %q", got["mesh_access"], err, tt.want)
			}
		})
	}
	if _, err := check(t, "--mesh-access", "friends"); err == nil || !strings.Contains(err.Error(), "api.mesh_access") {
		t.Fatalf("an unknown policy: %v, want an error naming api.mesh_access", err)
	}
}

// TestDefaultConfigFileRead: with no --config, the file at the default
// path is read when it exists.
func TestDefaultConfigFileRead(t *testing.T) {
	home := isolate(t)
	p := node.DefaultConfigPath()
	if !strings.HasPrefix(p, home) {
		t.Skipf("the default config path %s is not under the test's home on this platform", p)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("http_addr = \"127.0.0.1:4001\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := check(t)
	if err != nil || got["http_addr"] != "127.0.0.1:4001" {
		t.Fatalf("http_addr %q, err %v; want the default file's", got["http_addr"], err)
	}
}

// TestConfigRefusals: a bad value from any layer is one clear error, and
// binding the API beyond loopback needs an API key.
func TestConfigRefusals(t *testing.T) {
	home := isolate(t)
	bad := filepath.Join(home, "bad.toml")
	if err := os.WriteFile(bad, []byte("http_adr = \"x\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"unknown key in the file", nil, []string{"--config", bad}, "http_adr"},
		{"missing file", nil, []string{"--config", filepath.Join(home, "none.toml")}, "none.toml"},
		{"public API without a key", nil, []string{"--http-addr", "0.0.0.0:9337"}, "api_key"},
		{"bad discovery variable", map[string]string{"MESHNODE_DISCOVERY": "dht"}, nil, "discovery"},
		{"bad log level flag", nil, []string{"--log-level", "loud"}, "log_level"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			_, err := check(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tt.want)
			}
		})
	}
	if _, err := check(t, "--http-addr", "0.0.0.0:9337", "--api-key", "k"); err != nil {
		t.Fatalf("public API with a key: %v", err)
	}
}

// TestExampleConfigPrinted: `meshnode config example` prints the example
// the node package holds, which loads as the defaults.
func TestExampleConfigPrinted(t *testing.T) {
	isolate(t)
	var out bytes.Buffer
	app := newApp()
	app.Writer = &out
	if err := app.Run([]string{"meshnode", "config", "example"}); err != nil {
		t.Fatal(err)
	}
	if out.String() != node.ExampleConfig {
		t.Fatal("config example prints something other than node.ExampleConfig")
	}
	p := filepath.Join(t.TempDir(), "example.toml")
	if err := os.WriteFile(p, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := check(t, "--config", p)
	if err != nil || got["http_addr"] != node.DefaultHTTPAddr || got["discovery"] != "mdns" {
		t.Fatalf("the printed example loads as %v, %v", got, err)
	}
}

// TestAPIKeyFile: --api-key-file (or MESHNODE_API_KEY_FILE, or
// api_key_file) supplies the key that binding beyond loopback needs,
// without putting it on the command line; a file other users can read is
// refused.
func TestAPIKeyFile(t *testing.T) {
	home := isolate(t)
	key := filepath.Join(home, "api.key")
	if err := os.WriteFile(key, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := check(t, "--http-addr", "0.0.0.0:9337"); err == nil || !strings.Contains(err.Error(), "api_key") {
		t.Fatalf("beyond loopback with no key: %v", err)
	}
	if got, err := check(t, "--http-addr", "0.0.0.0:9337", "--api-key-file", key); err != nil || got["mesh_access"] != "owner" {
		t.Fatalf("--api-key-file: %v; mesh_access %q, want owner as with a key given directly", err, got["mesh_access"])
	}
	t.Setenv("MESHNODE_API_KEY_FILE", key)
	if _, err := check(t, "--http-addr", "0.0.0.0:9337"); err != nil {
		t.Fatalf("MESHNODE_API_KEY_FILE: %v", err)
	}
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := check(t, "--http-addr", "0.0.0.0:9337"); err == nil || !strings.Contains(err.Error(), "chmod o-rwx") {
		t.Fatalf("a world-readable key file: %v", err)
	}
	if err := os.Chmod(key, 0o600); err != nil {
		t.Fatal(err)
	}
	// A key and a key file, both given as flags or variables, conflict.
	if _, err := check(t, "--http-addr", "0.0.0.0:9337", "--api-key", "other"); err == nil || !strings.Contains(err.Error(), "keep one") {
		t.Fatalf("--api-key and MESHNODE_API_KEY_FILE: %v", err)
	}
	// One given as a flag replaces the other from the config file.
	t.Setenv("MESHNODE_API_KEY_FILE", "")
	os.Unsetenv("MESHNODE_API_KEY_FILE")
	file := filepath.Join(home, "meshnode.toml")
	if err := os.WriteFile(file, []byte("api_key_file = \"/nonexistent\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := check(t, "--config", file, "--http-addr", "0.0.0.0:9337", "--api-key", "other"); err != nil {
		t.Fatalf("--api-key over the file's api_key_file: %v", err)
	}
}

// TestIDFields: meshnode id prints the node's ids, its state dir and where
// it takes its ownership certificate; --field prints one alone, so that
// the README's sign-node line needs no awk.
func TestIDFields(t *testing.T) {
	home := isolate(t)
	state := filepath.Join(home, "state", "meshnode")
	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		app := newApp()
		app.Writer, app.ErrWriter = &out, &errOut
		err := app.Run(append([]string{"meshnode"}, args...))
		return out.String(), err
	}
	all, err := run("id")
	if err != nil {
		t.Fatal(err)
	}
	id, err := run("id", "--field", "endpoint_id")
	if err != nil || len(strings.TrimSpace(id)) != 64 || !strings.Contains(all, "endpoint_id "+strings.TrimSpace(id)+"\n") {
		t.Fatalf("--field endpoint_id %q (%v); id printed\n%s", id, err, all)
	}
	if got, _ := run("id", "--field", "ownership"); got != filepath.Join(state, "node.ownership")+"\n" {
		t.Errorf("--field ownership = %q", got)
	}
	if got, _ := run("--state-dir", filepath.Join(home, "other"), "id", "--field", "state_dir"); got != filepath.Join(home, "other")+"\n" {
		t.Errorf("--field state_dir with --state-dir = %q", got)
	}
	if _, err := run("id", "--field", "nonesuch"); err == nil || !strings.Contains(err.Error(), "want one of endpoint_id, did_key, state_dir, ownership") {
		t.Errorf("an unknown field: %v", err)
	}
}
