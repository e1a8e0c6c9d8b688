package node

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Config is the node's configuration: the TOML file, then MESHNODE_*
// variables and flags over it. The zero value of a field means "the
// default", which [Config.Resolve] fills in.
type Config struct {
	StateDir  string `toml:"state_dir"`
	ModelsDir string `toml:"models_dir"`
	// Models are GGUF files (or names of files in ModelsDir) to serve, in
	// addition to [[model]] tables.
	Models []string      `toml:"models"`
	Model  []ModelConfig `toml:"model"`
	// Backend is where models run: "auto" (the GPU when CUDA can run the
	// model, else the CPU), "cpu" or "cuda".
	Backend   string   `toml:"backend"`
	HTTPAddr  string   `toml:"http_addr"`
	QUICAddr  string   `toml:"quic_addr"`
	BindIP    string   `toml:"bind_ip"`
	Join      []string `toml:"join"`
	Discovery string   `toml:"discovery"`
	LANOnly   bool     `toml:"lan_only"`
	MeshID    string   `toml:"mesh_id"`
	APIKey    string   `toml:"api_key"`
	LogLevel  string   `toml:"log_level"`
	LogFormat string   `toml:"log_format"`
	// DrainTimeout bounds how long shutdown waits for in-flight requests.
	DrainTimeout Duration `toml:"drain_timeout"`

	API     APIConfig     `toml:"api"`
	Control ControlConfig `toml:"control"`
	Steward StewardConfig `toml:"steward"`
	Energy  EnergyConfig  `toml:"energy"`
}

// ModelConfig is one [[model]] table.
type ModelConfig struct {
	Path string `toml:"path"`
	// Name is what clients ask for; default: the file name without .gguf.
	Name string `toml:"name"`
	// Fidelity is the advertised level F0…F4 (default 2).
	Fidelity *uint8 `toml:"fidelity"`
	// UJPerToken is the modelled energy per token the router's estimate
	// uses; 0 derives one from the model's size.
	UJPerToken uint64 `toml:"uj_per_token"`
	Threads    int    `toml:"threads"`
	// Context is the context length; 0 is the file's, capped by memory.
	Context int `toml:"context"`
}

// APIConfig tunes the HTTP API.
type APIConfig struct {
	MaxBodyBytes int64 `toml:"max_body_bytes"`
	Concurrency  int   `toml:"concurrency"`
	QueueDepth   int   `toml:"queue_depth"`
	// MaxTokens is the default output ceiling when a request names none.
	MaxTokens int `toml:"max_tokens"`
	// MeshAccess says whose requests, tunnelled through the mesh, the node
	// serves: MeshAccessAny, MeshAccessOwner or MeshAccessNone. The API
	// key never applies to them. Default: "owner" when APIKey is set,
	// else "any".
	MeshAccess string `toml:"mesh_access"`
}

// ControlConfig is owner control (docs/control.md).
type ControlConfig struct {
	// OwnerKeys are the owners (did:key) whose certificates this node
	// accepts, besides the owner named by its own certificate.
	OwnerKeys []string `toml:"owner_keys"`
	// Ownership is the node's ownership certificate, relative to the state
	// dir unless absolute (default node.ownership).
	Ownership string `toml:"ownership"`
	// DrainTimeout is how long a drain waits for admitted work before
	// cancelling it (default 30s); DrainTimeoutMax caps what a drain
	// request may ask for (default 5m).
	DrainTimeout    Duration `toml:"drain_timeout"`
	DrainTimeoutMax Duration `toml:"drain_timeout_max"`
}

// StewardConfig holds the mesh/1 defaults a request without its own
// bounds is served under.
type StewardConfig struct {
	FidelityFloor  uint8  `toml:"fidelity_floor"`
	JouleCeilingUJ uint64 `toml:"joule_ceiling_uj"`
}

// EnergyConfig chooses and tunes the energy meter (docs/meters.md).
type EnergyConfig struct {
	// Meter is "auto" (the best live meter), "estimator", a counter
	// (rapl, nvml, ioreport, ina3221) or a "+"-joined set ("rapl+nvml").
	Meter string `toml:"meter"`
	// EstimatorWatts is the estimator's modelled power; 0 calibrates it
	// from the chosen counter, or uses a built-in figure.
	EstimatorWatts float64 `toml:"estimator_watts"`
}

// Duration is a time.Duration written as "30s" in TOML.
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// MarshalText writes the Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Defaults.
const (
	DefaultHTTPAddr     = "127.0.0.1:9337"
	DefaultQUICAddr     = ":9338"
	DefaultDrainTimeout = 30 * time.Second
	DefaultFidelity     = 2
	DefaultMaxTokens    = 256
	// DefaultJouleCeilingUJ bounds a request that names no ceiling: 1 kJ
	// is far above any serve on an edge box, so it only stops runaways.
	DefaultJouleCeilingUJ = 1_000_000_000
)

// LoadConfig reads a TOML file. Unknown keys are an error, naming them, so
// a typo is not silently ignored.
func LoadConfig(path string) (Config, error) {
	var c Config
	err := OverlayConfig(&c, path)
	return c, err
}

// LoadConfigFiles reads the configuration files in the order they apply:
// the config file at path (none when path is empty), then what owner
// control staged in the state dir (stateDir when set, else the file's or
// the default). Flags and variables go over the result.
func LoadConfigFiles(path, stateDir string) (Config, error) {
	var c Config
	if path != "" {
		if err := OverlayConfig(&c, path); err != nil {
			return c, err
		}
	}
	if stateDir == "" {
		stateDir = c.StateDir
	}
	if stateDir == "" {
		stateDir = DefaultStateDir()
	}
	staged := OwnerConfigPath(stateDir)
	if _, err := os.Stat(staged); err == nil {
		if err := OverlayConfig(&c, staged); err != nil {
			return c, err
		}
	}
	return c, nil
}

// OverlayConfig reads the TOML file at path over c: the keys the file sets
// replace c's, the others stay.
func OverlayConfig(c *Config, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := decodeConfig(c, b); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// ParseConfig reads a config from TOML text.
func ParseConfig(b []byte) (Config, error) {
	var c Config
	err := decodeConfig(&c, b)
	return c, err
}

func decodeConfig(c *Config, b []byte) error {
	md, err := toml.NewDecoder(bytes.NewReader(b)).Decode(c)
	if err != nil {
		return err
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return fmt.Errorf("unknown keys: %s", strings.Join(keys, ", "))
	}
	return nil
}

// OwnerConfigPath is where owner control stages a config for the node's
// next start (config_toml of an applied NodeConfigSnapshot). It is read
// over the config file, under flags and MESHNODE_* variables.
func OwnerConfigPath(stateDir string) string { return filepath.Join(stateDir, ownerConfigFile) }

// DefaultConfigPath is where the node looks for its config when none is
// named: systemd's $CONFIGURATION_DIRECTORY for the service,
// ~/Library/Application Support/meshnode on macOS, $XDG_CONFIG_HOME/meshnode
// (~/.config/meshnode) elsewhere.
func DefaultConfigPath() string {
	if d := os.Getenv("CONFIGURATION_DIRECTORY"); d != "" {
		d, _, _ = strings.Cut(d, ":")
		return filepath.Join(d, "config.toml")
	}
	if isServiceUser() {
		return filepath.Join(serviceConfigDir, "config.toml")
	}
	home, _ := os.UserHomeDir()
	if runtime.GOOS == "darwin" && home != "" {
		return filepath.Join(home, "Library", "Application Support", "meshnode", "config.toml")
	}
	if d := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "meshnode", "config.toml")
	}
	return filepath.Join(home, ".config", "meshnode", "config.toml")
}

// Resolve fills defaults and checks the configuration as a whole.
func (c *Config) Resolve() error {
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir()
	}
	if c.ModelsDir == "" {
		c.ModelsDir = filepath.Join(c.StateDir, "models")
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.QUICAddr == "" {
		c.QUICAddr = DefaultQUICAddr
	}
	if c.Backend == "" {
		c.Backend = "auto"
	}
	if c.Discovery == "" {
		c.Discovery = "mdns"
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.LogFormat == "" {
		c.LogFormat = "text"
	}
	if c.DrainTimeout.Duration <= 0 {
		c.DrainTimeout.Duration = DefaultDrainTimeout
	}
	if c.API.MaxTokens <= 0 {
		c.API.MaxTokens = DefaultMaxTokens
	}
	if c.API.MeshAccess == "" {
		// A node that asks a key of its own clients must not serve every
		// stranger the mesh admits.
		c.API.MeshAccess = MeshAccessAny
		if c.APIKey != "" {
			c.API.MeshAccess = MeshAccessOwner
		}
	}
	if c.Control.Ownership == "" {
		c.Control.Ownership = "node.ownership"
	}
	if c.Control.DrainTimeout.Duration <= 0 {
		c.Control.DrainTimeout.Duration = DefaultDrainTimeout
	}
	if c.Control.DrainTimeoutMax.Duration <= 0 {
		c.Control.DrainTimeoutMax.Duration = 5 * time.Minute
	}
	if c.Steward.JouleCeilingUJ == 0 {
		c.Steward.JouleCeilingUJ = DefaultJouleCeilingUJ
	}
	var errs []error
	switch c.Backend {
	case "auto", "cpu", "cuda":
	default:
		errs = append(errs, fmt.Errorf("backend %q: want auto, cpu or cuda", c.Backend))
	}
	switch c.Discovery {
	case "mdns", "none":
	default:
		errs = append(errs, fmt.Errorf("discovery %q: want mdns or none", c.Discovery))
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("log_format %q: want text or json", c.LogFormat))
	}
	if _, err := ParseLogLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	switch c.API.MeshAccess {
	case MeshAccessAny, MeshAccessOwner, MeshAccessNone:
	default:
		errs = append(errs, fmt.Errorf("api.mesh_access %q: want any, owner or none", c.API.MeshAccess))
	}
	if c.Steward.FidelityFloor > 4 {
		errs = append(errs, fmt.Errorf("steward.fidelity_floor %d: want 0…4", c.Steward.FidelityFloor))
	}
	host, _, err := net.SplitHostPort(c.HTTPAddr)
	if err != nil {
		errs = append(errs, fmt.Errorf("http_addr %q: %v", c.HTTPAddr, err))
	} else if !isLoopbackHost(host) && c.APIKey == "" {
		errs = append(errs, fmt.Errorf("http_addr %q is reachable beyond this machine: set api_key (or MESHNODE_API_KEY) so strangers cannot use the node", c.HTTPAddr))
	}
	if _, _, err := net.SplitHostPort(c.QUICAddr); err != nil {
		errs = append(errs, fmt.Errorf("quic_addr %q: %v", c.QUICAddr, err))
	}
	if c.BindIP != "" {
		if _, err := netip.ParseAddr(c.BindIP); err != nil {
			errs = append(errs, fmt.Errorf("bind_ip %q: %v", c.BindIP, err))
		}
	}
	for i, m := range c.Model {
		if m.Path == "" {
			errs = append(errs, fmt.Errorf("model %d: path is required", i+1))
		}
		if m.Fidelity != nil && *m.Fidelity > 4 {
			errs = append(errs, fmt.Errorf("model %d: fidelity %d: want 0…4", i+1, *m.Fidelity))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("config: %w", errors.Join(errs...))
	}
	return nil
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
