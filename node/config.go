package node

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
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
	// Backend is where models run: "auto" (the GPU when a GPU backend can
	// run the model — Metal on Apple Silicon, CUDA elsewhere — else the
	// CPU), "cpu", "cuda" or "metal".
	Backend   string   `toml:"backend"`
	HTTPAddr  string   `toml:"http_addr"`
	QUICAddr  string   `toml:"quic_addr"`
	BindIP    string   `toml:"bind_ip"`
	Join      []string `toml:"join"`
	Discovery string   `toml:"discovery"`
	LANOnly   bool     `toml:"lan_only"`
	MeshID    string   `toml:"mesh_id"`
	APIKey    string   `toml:"api_key"`
	// APIKeyFile holds the API key (its first line), so that the key is
	// in neither the command line (which ps shows every local user) nor
	// the config file.
	APIKeyFile string `toml:"api_key_file"`
	LogLevel   string `toml:"log_level"`
	LogFormat  string `toml:"log_format"`
	// DrainTimeout bounds how long shutdown waits for in-flight requests.
	DrainTimeout Duration `toml:"drain_timeout"`

	// MemoryBudget is the most memory the node's models and the stages
	// it serves for peers may hold (0: no budget beyond the machine's).
	// A configured model that does not fit it is split across peers
	// (ModelConfig.Split; docs/mesh.md, "Split models").
	MemoryBudget ByteSize `toml:"memory_budget"`

	// ServeFiles is whether admitted peers may fetch the model files of
	// the models dir from this node (meshnode-file/1, docs/models.md;
	// default true). Owner control turns it on and off live.
	ServeFiles *bool `toml:"serve_files"`
	// ServeFilesRate paces the bytes this node sends peers' file
	// transfers, all together, per second (default
	// DefaultServeFilesRate).
	ServeFilesRate ByteSize `toml:"serve_files_rate"`

	API     APIConfig     `toml:"api"`
	Stages  StagesConfig  `toml:"stages"`
	Control ControlConfig `toml:"control"`
	Steward StewardConfig `toml:"steward"`
	Energy  EnergyConfig  `toml:"energy"`

	// Files are the config files read into this config, in order
	// (OverlayConfig adds each), so that the node can refuse ones another
	// user could change.
	Files []string `toml:"-"`
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
	// Draft turns on speculative decoding (docs/engine.md): the name of
	// a draft model in the models dir with the same vocabulary (a
	// smaller model of the family, or a more quantised copy), or
	// "lookup" for prompt lookup, which needs no second model. Requests
	// may turn it off ("speculative": false). A split model drafts on
	// its head, the draft model loaded there whole.
	Draft string `toml:"draft"`
	// DraftMax is the most tokens drafted per step; 0: 8.
	DraftMax int `toml:"draft_max"`
	// DraftPrices is what a greedy serve's windows are priced by:
	// "measured" (default: the draft's and a verified row's cost timed on
	// this machine at load, or for a split model on its pipeline once
	// placed, and again when its steps drift) or "files" (the files' sizes and a fixed row cost, as
	// unpriced sampled serves' are: the same decisions on every machine
	// and under any load).
	DraftPrices string `toml:"draft_prices"`
	// Split is whether the model may be split in layer stages across
	// peers: "auto" (default: only when it fits no single node, this one
	// first), "always" or "never".
	Split string `toml:"split"`
	// Pins fix layer ranges on named nodes when the model is split:
	// "NODE:LO-HI", NODE an endpoint id or "self" (which runs layer 0).
	Pins []string `toml:"pins"`
}

// APIConfig tunes the HTTP API.
type APIConfig struct {
	MaxBodyBytes int64 `toml:"max_body_bytes"`
	// Concurrency is how many generations of a model run at once (0:
	// the model's slots: for a GGUF model, as many sequences as its KV
	// caches fit in a quarter of memory); QueueDepth how many more wait
	// (0: 512), each at most QueueWait (0: 60s), before 429.
	Concurrency int      `toml:"concurrency"`
	QueueDepth  int      `toml:"queue_depth"`
	QueueWait   Duration `toml:"queue_wait"`
	// MaxTokens is the default output ceiling when a request names none.
	MaxTokens int `toml:"max_tokens"`
	// AllowedHosts are names, besides IP addresses, localhost and the
	// machine's hostname, that requests may carry in Host: the API refuses
	// others so that a web page cannot reach it by rebinding its DNS name.
	AllowedHosts []string `toml:"allowed_hosts"`
	// AllowedOrigins are web origins ("http://localhost:3000") whose
	// pages may use the API (with CORS); pages on other origins are refused.
	AllowedOrigins []string `toml:"allowed_origins"`
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
	// ReceiptLogBytes bounds the receipt log (ReceiptLogPath): past it,
	// its older half is dropped. 0: DefaultReceiptLogBytes.
	ReceiptLogBytes int64 `toml:"receipt_log_bytes"`
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

// ModelConfig.DraftPrices' values.
const (
	DraftPricesMeasured = "measured"
	DraftPricesFiles    = "files"
)

// Defaults.
const (
	DefaultHTTPAddr     = "127.0.0.1:9337"
	DefaultQUICAddr     = ":9338"
	DefaultDrainTimeout = 30 * time.Second
	DefaultFidelity     = 2
	DefaultMaxTokens    = 256
	// DefaultJouleCeilingUJ bounds a request that names no ceiling: 10
	// MJ only stops runaways. The router admits a serve on its estimate
	// of the whole request (uj_per_token × (prompt + max_tokens)), and a
	// model's derived uj_per_token is a nJ per byte of its file: 4.7 J a
	// token for an 8B model at 4 bits, 40 J for a 70B one. 1 kJ, the
	// default before, refused an 8B model's 256-token answer, and a 70B
	// model's whole 32k context is 1.3 MJ. Ten hours at 300 W is 10.8 MJ.
	DefaultJouleCeilingUJ = 10_000_000_000_000
	// DefaultServeFilesRate is 50 MB/s (400 Mbit/s): under half a gigabit
	// LAN, so that a peer fetching a model leaves room for the requests
	// this node serves and relays.
	DefaultServeFilesRate = 50_000_000
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
	b, err := os.ReadFile(staged)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return c, nil
	case err != nil:
		return c, fmt.Errorf("config: %w", err)
	}
	// A file staged before owner control checked what it stages, or put
	// there by hand, is held to the same rules.
	if err := CheckStagedConfig(b); err != nil {
		return c, fmt.Errorf("config %s: %w (remove the key, or the file to drop every staged change)", staged, err)
	}
	if err := decodeConfig(&c, b); err != nil {
		return c, fmt.Errorf("config %s: %w", staged, err)
	}
	c.Files = append(c.Files, staged)
	return c, nil
}

// Staged is c with the config owner control stages (config_toml) read
// over it and resolved, as the node would start with it; an error says
// why the node would refuse to start, or why owner control may not stage
// it.
func (c *Config) Staged(toml []byte) (Config, error) {
	if err := CheckStagedConfig(toml); err != nil {
		return Config{}, err
	}
	next := *c
	next.Models, next.Model, next.Join = slices.Clone(c.Models), slices.Clone(c.Model), slices.Clone(c.Join)
	next.Control.OwnerKeys = slices.Clone(c.Control.OwnerKeys)
	if err := decodeConfig(&next, toml); err != nil {
		return Config{}, err
	}
	return next, next.Resolve()
}

// ErrNotStageable marks a key owner control may not stage.
var ErrNotStageable = errors.New("owner control may not change this")

// CheckStagedConfig checks a config that owner control stages for the
// node's next start (config_toml). It may not move the state dir (the
// node's identity, journal and credentials), the models dir (the only
// files owner control may load), or change who controls the node
// (control.owner_keys, control.ownership); and the models it names must
// be files in the models dir, by name, not paths. Values are checked
// against their bounds by Resolve when the node starts, and by the
// node's validation before it stages them.
func CheckStagedConfig(b []byte) error {
	if err := checkTOMLBounds(b); err != nil {
		return err
	}
	var c Config
	md, err := toml.NewDecoder(bytes.NewReader(b)).Decode(&c)
	if err != nil {
		return err
	}
	var errs []error
	for _, key := range [][]string{{"state_dir"}, {"models_dir"}, {"control", "owner_keys"}, {"control", "ownership"}} {
		if md.IsDefined(key...) {
			errs = append(errs, fmt.Errorf("%s: %w", strings.Join(key, "."), ErrNotStageable))
		}
	}
	for i, m := range c.Models {
		if !IsModelName(m) {
			errs = append(errs, fmt.Errorf("models[%d] %q: name a file in the models dir, not a path: %w", i, m, ErrNotStageable))
		}
	}
	for i, m := range c.Model {
		if !IsModelName(m.Path) {
			errs = append(errs, fmt.Errorf("model[%d].path %q: name a file in the models dir, not a path: %w", i, m.Path, ErrNotStageable))
		}
		if m.Draft != "" && !IsModelName(m.Draft) {
			errs = append(errs, fmt.Errorf("model[%d].draft %q: name a file in the models dir, not a path: %w", i, m.Draft, ErrNotStageable))
		}
	}
	return errors.Join(errs...)
}

// IsModelName reports whether s names a file in the models dir by its
// name alone: no directory, no parent, nothing hidden, no control
// characters.
func IsModelName(s string) bool {
	if s == "" || len(s) > 255 || s[0] == '.' || strings.ContainsAny(s, `/\`) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
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
	c.Files = append(c.Files, path)
	return nil
}

// ParseConfig reads a config from TOML text.
func ParseConfig(b []byte) (Config, error) {
	var c Config
	err := decodeConfig(&c, b)
	return c, err
}

func decodeConfig(c *Config, b []byte) error {
	if err := checkTOMLBounds(b); err != nil {
		return err
	}
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
	// The key file first: whether there is a key decides defaults below.
	var keyErr error
	if c.APIKeyFile != "" {
		// Resolving again (a resolved config has both) is no conflict.
		switch k, err := readKeyFile(c.APIKeyFile); {
		case err != nil:
			keyErr = err
		case c.APIKey != "" && c.APIKey != k:
			keyErr = errors.New("api_key and api_key_file are both set: keep one")
		default:
			c.APIKey = k
		}
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
	if c.Steward.ReceiptLogBytes == 0 {
		c.Steward.ReceiptLogBytes = DefaultReceiptLogBytes
	}
	c.resolveSplit()
	if c.ServeFiles == nil {
		on := true
		c.ServeFiles = &on
	}
	var errs []error
	switch {
	case c.ServeFilesRate == 0:
		c.ServeFilesRate = DefaultServeFilesRate
	case c.ServeFilesRate < 1<<20:
		errs = append(errs, fmt.Errorf("serve_files_rate %d: want at least 1MiB (a second), or leave it unset for %d", c.ServeFilesRate, DefaultServeFilesRate))
	}
	if keyErr != nil {
		errs = append(errs, keyErr)
	}
	switch c.Backend {
	case "auto", "cpu", "cuda", "metal":
	default:
		errs = append(errs, fmt.Errorf("backend %q: want auto, cpu, cuda or metal", c.Backend))
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
	errs = append(errs, c.checkBounds()...)
	errs = append(errs, c.checkSplit()...)
	for i, m := range c.Model {
		switch m.DraftPrices {
		case "", DraftPricesMeasured, DraftPricesFiles:
		default:
			errs = append(errs, fmt.Errorf("model %d: draft_prices %q: want %s or %s", i+1, m.DraftPrices, DraftPricesMeasured, DraftPricesFiles))
		}
	}
	switch c.API.MeshAccess {
	case MeshAccessAny, MeshAccessOwner, MeshAccessNone:
	default:
		errs = append(errs, fmt.Errorf("api.mesh_access %q: want any, owner or none", c.API.MeshAccess))
	}
	if c.Steward.FidelityFloor > 4 {
		errs = append(errs, fmt.Errorf("steward.fidelity_floor %d: want 0…4", c.Steward.FidelityFloor))
	}
	for _, o := range c.API.AllowedOrigins {
		if u, err := url.Parse(o); o != "*" && (err != nil || u.Scheme == "" || u.Host == "" || u.Path != "" && u.Path != "/") {
			errs = append(errs, fmt.Errorf("api.allowed_origins %q: want an origin such as http://localhost:3000, or *", o))
		}
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

// Bounds on values, so that no config — a typo, or one staged through
// owner control — can set the node up to exhaust its machine.
const (
	MaxBodyBytesLimit = 64 << 20
	MaxConcurrency    = 256
	MaxQueueDepth     = 4096
	MaxOutputTokens   = 1 << 20
	MaxContext        = 1 << 24
	MaxThreads        = 1024
	MaxTimeout        = time.Hour
	MaxEstimatorWatts = 10_000
	MaxJoin           = 64
)

func (c *Config) checkBounds() []error {
	var errs []error
	between := func(name string, v, lo, hi int64) {
		if v < lo || v > hi {
			errs = append(errs, fmt.Errorf("%s %d: want %d…%d", name, v, lo, hi))
		}
	}
	between("api.max_body_bytes", c.API.MaxBodyBytes, 0, MaxBodyBytesLimit)
	between("api.concurrency", int64(c.API.Concurrency), 0, MaxConcurrency)
	between("api.queue_depth", int64(c.API.QueueDepth), -1, MaxQueueDepth)
	between("api.max_tokens", int64(c.API.MaxTokens), 0, MaxOutputTokens)
	between("steward.receipt_log_bytes", c.Steward.ReceiptLogBytes, 0, MaxReceiptLogBytes)
	if b := c.Steward.ReceiptLogBytes; b > 0 && b < MinReceiptLogBytes {
		errs = append(errs, fmt.Errorf("steward.receipt_log_bytes %d: want at least %d (1 MiB)", b, MinReceiptLogBytes))
	}
	for i, m := range c.Model {
		between(fmt.Sprintf("model %d: context", i+1), int64(m.Context), 0, MaxContext)
		between(fmt.Sprintf("model %d: threads", i+1), int64(m.Threads), 0, MaxThreads)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"drain_timeout", c.DrainTimeout.Duration},
		{"api.queue_wait", c.API.QueueWait.Duration},
		{"control.drain_timeout", c.Control.DrainTimeout.Duration},
		{"control.drain_timeout_max", c.Control.DrainTimeoutMax.Duration},
	} {
		if d.v > MaxTimeout {
			errs = append(errs, fmt.Errorf("%s %v: want at most %v", d.name, d.v, MaxTimeout))
		}
	}
	if w := c.Energy.EstimatorWatts; math.IsNaN(w) || w < 0 || w > MaxEstimatorWatts {
		errs = append(errs, fmt.Errorf("energy.estimator_watts %v: want 0…%d", w, MaxEstimatorWatts))
	}
	if len(c.Join) > MaxJoin {
		errs = append(errs, fmt.Errorf("join: %d tokens, want at most %d", len(c.Join), MaxJoin))
	}
	return errs
}

// readKeyFile reads an API key file: its first line, from a file other
// users cannot read.
func readKeyFile(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("api_key_file: %w", err)
	}
	if perm := st.Mode().Perm(); perm&0o007 != 0 {
		return "", fmt.Errorf("api_key_file %s has mode %04o, which lets every local user read the key: run `chmod o-rwx %s`", path, perm, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("api_key_file: %w", err)
	}
	k, _, _ := strings.Cut(string(b), "\n")
	if k = strings.TrimSpace(k); k == "" {
		return "", fmt.Errorf("api_key_file %s is empty", path)
	}
	return k, nil
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// A config can come from a remote owner (config_toml, up to a frame's
// 8 MiB), and the TOML decoder parses arrays and inline tables by
// recursion with no bound of its own: 1.5 MB of "a = [[[[…" overflowed
// its goroutine's stack, which no recover catches. So a config longer
// or nested deeper than any real one is refused before it is decoded.
const (
	maxConfigBytes = 1 << 20 // the example config is under 16 KB
	maxConfigDepth = 32      // this schema's values nest at most 3 deep
)

// ErrConfigBounds is a config past maxConfigBytes or maxConfigDepth.
var ErrConfigBounds = errors.New("config: past its bounds")

// checkTOMLBounds refuses a config longer than maxConfigBytes, or whose
// arrays and inline tables nest deeper than maxConfigDepth, saying where.
// It reads strings (basic, literal and multi-line) and comments as TOML
// does, closely enough that brackets within them are not counted.
func checkTOMLBounds(b []byte) error {
	if len(b) > maxConfigBytes {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrConfigBounds, len(b), maxConfigBytes)
	}
	depth, line := 0, 1
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '\n':
			line++
		case '#':
			for i+1 < len(b) && b[i+1] != '\n' {
				i++
			}
		case '"', '\'':
			delim := []byte{c}
			if i+2 < len(b) && b[i+1] == c && b[i+2] == c {
				delim = []byte{c, c, c}
			}
			j := i + len(delim)
			for j < len(b) && !bytes.HasPrefix(b[j:], delim) {
				switch {
				case b[j] == '\\' && c == '"':
					j++
				case b[j] == '\n':
					line++
				}
				j++
			}
			i = j + len(delim) - 1
		case '[', '{':
			if depth++; depth > maxConfigDepth {
				return fmt.Errorf("%w: arrays and tables nest %d deep at line %d, more than %d", ErrConfigBounds, depth, line, maxConfigDepth)
			}
		case ']', '}':
			depth--
		}
	}
	return nil
}
