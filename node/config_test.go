package node

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExampleConfigIsValidAndDefault(t *testing.T) {
	c, err := LoadConfig(writeConfig(t, ExampleConfig))
	if err != nil {
		t.Fatal(err)
	}
	c.StateDir = "/s"
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	var d Config
	d.StateDir = "/s"
	if err := d.Resolve(); err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != d.HTTPAddr || c.ModelsDir != d.ModelsDir || c.DrainTimeout != d.DrainTimeout || !reflect.DeepEqual(c.API, d.API) || c.Steward != d.Steward {
		t.Fatalf("example config resolves to %+v, defaults are %+v", c, d)
	}
	// Every key in the example is a real key: uncommenting all of them parses.
	var uncommented []string
	for _, line := range strings.Split(ExampleConfig, "\n") {
		if strings.HasPrefix(line, "#") && strings.Contains(line, " = ") || strings.HasPrefix(line, "#[[") {
			line = strings.TrimPrefix(line, "#")
		}
		uncommented = append(uncommented, line)
	}
	u, err := LoadConfig(writeConfig(t, strings.Join(uncommented, "\n")))
	if err != nil {
		t.Fatalf("uncommented example: %v", err)
	}
	if len(u.Model) != 1 || u.Model[0].Name != "model" || u.DrainTimeout.Duration != 30*time.Second {
		t.Fatalf("uncommented example parsed as %+v", u)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"unknown key", "http_adr = \"x\"\n", "unknown keys: http_adr"},
		{"unknown nested", "[api]\nqueue = 3\n", "api.queue"},
		{"bad toml", "http_addr = \n", "config"},
		{"bad duration", "drain_timeout = \"soon\"\n", "duration"},
	}
	for _, tt := range tests {
		_, err := LoadConfig(writeConfig(t, tt.body))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tt.name, err, tt.want)
		}
	}
	if _, err := LoadConfig(filepath.Join(t.TempDir(), "missing.toml")); err == nil {
		t.Error("missing file accepted")
	}
}

// TestConfigBounds: a config longer or nested deeper than any real one
// is refused before the TOML decoder sees it (1.5 MB of nested arrays
// had overflowed its stack), from a file and staged by owner control;
// brackets in strings and comments are not counted.
func TestConfigBounds(t *testing.T) {
	deep := "models = " + strings.Repeat("[", maxConfigDepth+1) + strings.Repeat("]", maxConfigDepth+1) + "\n"
	for _, tc := range []struct{ name, body, mention string }{
		{"nested arrays", "# a config\n\n" + deep, "nest 33 deep at line 3"},
		{"nested inline tables", "api = " + strings.Repeat("{a = ", maxConfigDepth+1) + "1" + strings.Repeat("}", maxConfigDepth+1), "nest 33 deep at line 1"},
		{"long", "# " + strings.Repeat("x", maxConfigBytes) + "\n", "bytes, more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadConfig(writeConfig(t, tc.body))
			if !errors.Is(err, ErrConfigBounds) || !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("LoadConfig: %v, want ErrConfigBounds mentioning %q", err, tc.mention)
			}
			if err := CheckStagedConfig([]byte(tc.body)); !errors.Is(err, ErrConfigBounds) {
				t.Errorf("CheckStagedConfig: %v, want ErrConfigBounds", err)
			}
		})
	}
	for _, body := range []string{
		`models = ["a[[[[.gguf", 'b{{{{.gguf', """c` + "\n" + `[[[[""", '''d[[[['''] # [[[[[[[[` + "\n",
		"# " + strings.Repeat("[", maxConfigDepth+1) + "\nmodels = [[\"x\"]]\n",
	} {
		if err := checkTOMLBounds([]byte(body)); err != nil {
			t.Errorf("%q: %v", body, err)
		}
	}
}

// FuzzParseConfig: no text makes ParseConfig or CheckStagedConfig panic
// or overflow its stack (the fuzzer's process would die); seeded from the
// example config and the bounds' cases.
func FuzzParseConfig(f *testing.F) {
	example, err := os.ReadFile("config.example.toml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	f.Add([]byte("models = [[[\"a\"]]]\n[api]\nmax_body_bytes = 1\n"))
	f.Add([]byte("a = " + strings.Repeat("[", maxConfigDepth) + strings.Repeat("]", maxConfigDepth)))
	f.Add([]byte("a = " + strings.Repeat("{b = ", maxConfigDepth+1)))
	f.Fuzz(func(t *testing.T, b []byte) {
		ParseConfig(b)
		CheckStagedConfig(b)
	})
}

func TestResolveErrors(t *testing.T) {
	five := uint8(5)
	tests := []struct {
		name string
		c    Config
		want string
	}{
		{"public http without key", Config{HTTPAddr: "0.0.0.0:9337"}, "api_key"},
		{"bad http addr", Config{HTTPAddr: "nonsense"}, "http_addr"},
		{"bad discovery", Config{Discovery: "dht"}, "discovery"},
		{"bad backend", Config{Backend: "tpu"}, "backend"},
		{"bad log level", Config{LogLevel: "loud"}, "log_level"},
		{"bad log format", Config{LogFormat: "xml"}, "log_format"},
		{"bad bind ip", Config{BindIP: "300.1.1.1"}, "bind_ip"},
		{"model without path", Config{Model: []ModelConfig{{Name: "x"}}}, "path is required"},
		{"model fidelity", Config{Model: []ModelConfig{{Path: "x", Fidelity: &five}}}, "fidelity 5"},
		{"floor", Config{Steward: StewardConfig{FidelityFloor: 7}}, "fidelity_floor"},
		{"mesh access", Config{API: APIConfig{MeshAccess: "friends"}}, `api.mesh_access "friends": want any, owner or none`},
		{"file rate", Config{ServeFilesRate: 1000}, "serve_files_rate 1000: want at least 1MiB"},
		{"negative file rate", Config{ServeFilesRate: -1}, "serve_files_rate -1"},
	}
	for _, tt := range tests {
		tt.c.StateDir = "/s"
		err := tt.c.Resolve()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tt.name, err, tt.want)
		}
	}
	ok := Config{StateDir: "/s", HTTPAddr: "0.0.0.0:9337", APIKey: "k"}
	if err := ok.Resolve(); err != nil {
		t.Errorf("public http with key: %v", err)
	}
	if !*ok.ServeFiles || ok.ServeFilesRate != DefaultServeFilesRate {
		t.Errorf("file serving defaults: %v, %d", *ok.ServeFiles, ok.ServeFilesRate)
	}
}

// TestMeshAccessDefault: a node with an API key serves, by default, only
// mesh peers certified by an owner it trusts; one without, every peer;
// an explicit policy stands either way.
func TestMeshAccessDefault(t *testing.T) {
	for _, tt := range []struct {
		key, set, want string
	}{
		{"", "", MeshAccessAny},
		{"k", "", MeshAccessOwner},
		{"k", MeshAccessAny, MeshAccessAny},
		{"", MeshAccessNone, MeshAccessNone},
	} {
		c := Config{StateDir: "/s", APIKey: tt.key, API: APIConfig{MeshAccess: tt.set}}
		if err := c.Resolve(); err != nil || c.API.MeshAccess != tt.want {
			t.Errorf("api_key %q, mesh_access %q: resolved to %q, %v; want %q", tt.key, tt.set, c.API.MeshAccess, err, tt.want)
		}
	}
}

func TestLoadConfigFilesLayers(t *testing.T) {
	state := t.TempDir()
	file := writeConfig(t, "http_addr = \"127.0.0.1:1000\"\nlog_level = \"debug\"\nstate_dir = \""+state+"\"\n")
	if err := os.WriteFile(OwnerConfigPath(state), []byte("log_level = \"warn\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfigFiles(file, "")
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != "127.0.0.1:1000" || c.LogLevel != "warn" {
		t.Fatalf("layered config = http %s, log %s; want the file's address and the owner's level", c.HTTPAddr, c.LogLevel)
	}
	// The node checks who can change the files it read.
	if want := []string{file, OwnerConfigPath(state)}; !slices.Equal(c.Files, want) {
		t.Fatalf("files read %v, want %v", c.Files, want)
	}
	// A state dir given on the command line is where the staged file is read.
	other := t.TempDir()
	if c, err = LoadConfigFiles(file, other); err != nil || c.LogLevel != "debug" {
		t.Fatalf("with another state dir: %v, log %s", err, c.LogLevel)
	}
	if err := os.WriteFile(OwnerConfigPath(other), []byte("bogus = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfigFiles("", other); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("a staged file with an unknown key: %v", err)
	}
}
