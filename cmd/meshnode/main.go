// Command meshnode is the meshnode daemon: it serves GGUF models on an
// OpenAI-compatible endpoint on localhost and joins a mesh of peers over
// QUIC. This file holds flags and wiring only.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/meshnode/meshnode/node"
	"github.com/urfave/cli/v2"
)

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "meshnode:", err)
		os.Exit(1)
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:  "meshnode",
		Usage: "an inference node for a mesh of edge machines",
		Description: "With no command, meshnode serves: it loads its models (the built-in default when none is\n" +
			"configured), answers OpenAI-compatible requests on " + node.DefaultHTTPAddr + ", and joins the mesh.",
		Version:              node.Version,
		Flags:                serveFlags(),
		Action:               serve,
		EnableBashCompletion: true,
		Commands:             []*cli.Command{idCommand(), metersCommand(), configCommand(), runCommand(), serviceCommand(), journalCommand()},
	}
}

// serveFlags are the daemon's flags; each also reads a MESHNODE_*
// variable and overrides the config file.
func serveFlags() []cli.Flag {
	env := func(name string) []string { return []string{"MESHNODE_" + name} }
	return []cli.Flag{
		&cli.StringFlag{Name: "config", Usage: "TOML config file (default " + node.DefaultConfigPath() + " when present)", EnvVars: env("CONFIG")},
		&cli.StringFlag{Name: "state-dir", Usage: "where the node key, journal and tokens live (default " + node.DefaultStateDir() + ")", EnvVars: env("STATE_DIR")},
		&cli.StringFlag{Name: "models-dir", Usage: "where GGUF models are found (default <state-dir>/models)", EnvVars: env("MODELS_DIR")},
		&cli.StringSliceFlag{Name: "model", Usage: "a GGUF file (path, or name in the models dir) to serve; repeatable", EnvVars: env("MODEL")},
		&cli.StringFlag{Name: "backend", Usage: "where models run: auto, cpu, cuda or metal (default auto: Metal on Apple Silicon, CUDA where a GPU can run the model, else the CPU)", EnvVars: env("BACKEND")},
		&cli.StringFlag{Name: "http-addr", Usage: "OpenAI-compatible API address (default " + node.DefaultHTTPAddr + ")", EnvVars: env("HTTP_ADDR")},
		&cli.StringFlag{Name: "api-key", Usage: "require this bearer key on the API (needed to bind beyond loopback); every local user sees it in ps: prefer MESHNODE_API_KEY or --api-key-file", EnvVars: env("API_KEY")},
		&cli.StringFlag{Name: "api-key-file", Usage: "read the API key from this `FILE` (its first line; not readable by other users)", EnvVars: env("API_KEY_FILE")},
		&cli.StringFlag{Name: "mesh-access", Usage: "whose requests tunnelled through the mesh are served: any, owner (peers certified by an owner this node trusts) or none (default owner with an API key, else any)", EnvVars: env("MESH_ACCESS")},
		&cli.StringFlag{Name: "quic-addr", Usage: "mesh QUIC address, UDP (default " + node.DefaultQUICAddr + ")", EnvVars: env("QUIC_ADDR")},
		&cli.StringFlag{Name: "bind-ip", Usage: "bind and advertise only this IP (multi-NIC or container hosts)", EnvVars: env("BIND_IP")},
		&cli.StringSliceFlag{Name: "join", Usage: "invite token of a node to join; repeatable", EnvVars: env("JOIN")},
		&cli.StringFlag{Name: "discovery", Usage: "LAN discovery: mdns or none (default mdns)", EnvVars: env("DISCOVERY")},
		&cli.BoolFlag{Name: "lan-only", Usage: "dial only LAN addresses", EnvVars: env("LAN_ONLY")},
		&cli.StringFlag{Name: "mesh-id", Usage: "join only peers announcing this mesh id", EnvVars: env("MESH_ID")},
		&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error (default info)", EnvVars: env("LOG_LEVEL")},
		&cli.StringFlag{Name: "log-format", Usage: "text or json (default text)", EnvVars: env("LOG_FORMAT")},
	}
}

// loadConfig reads the config file (the one named, or the default one if
// it exists) and lays the flags and MESHNODE_* variables over it.
func loadConfig(c *cli.Context) (node.Config, error) {
	path := c.String("config")
	if path == "" {
		if p := node.DefaultConfigPath(); fileExists(p) {
			path = p
		}
	}
	cfg, err := node.LoadConfigFiles(path, c.String("state-dir"))
	if err != nil {
		return cfg, err
	}
	str := func(name string, dst *string) {
		if c.IsSet(name) {
			*dst = c.String(name)
		}
	}
	str("state-dir", &cfg.StateDir)
	str("models-dir", &cfg.ModelsDir)
	str("backend", &cfg.Backend)
	str("http-addr", &cfg.HTTPAddr)
	str("api-key", &cfg.APIKey)
	str("api-key-file", &cfg.APIKeyFile)
	// A key given here replaces a key file the config names, and the
	// other way round; given both here, Resolve says they conflict.
	if c.IsSet("api-key") && !c.IsSet("api-key-file") {
		cfg.APIKeyFile = ""
	} else if c.IsSet("api-key-file") && !c.IsSet("api-key") {
		cfg.APIKey = ""
	}
	str("mesh-access", &cfg.API.MeshAccess)
	str("quic-addr", &cfg.QUICAddr)
	str("bind-ip", &cfg.BindIP)
	str("discovery", &cfg.Discovery)
	str("mesh-id", &cfg.MeshID)
	str("log-level", &cfg.LogLevel)
	str("log-format", &cfg.LogFormat)
	if c.IsSet("model") {
		cfg.Models = c.StringSlice("model")
		cfg.Model = nil // the command line names exactly what to serve
	}
	if c.IsSet("join") {
		cfg.Join = c.StringSlice("join")
	}
	if c.IsSet("lan-only") {
		cfg.LANOnly = c.Bool("lan-only")
	}
	return cfg, cfg.Resolve()
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func serve(c *cli.Context) error {
	if c.Args().Present() {
		return fmt.Errorf("unknown command %q (see meshnode --help)", c.Args().First())
	}
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	logger, err := node.NewLogger(os.Stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return err
	}
	n, err := node.New(cfg, logger)
	if err != nil {
		return err
	}
	ctx, stop := withSignals(c.Context)
	defer stop()
	return n.Serve(ctx)
}

// withSignals is a context cancelled by SIGINT or SIGTERM.
func withSignals(parent context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
}
