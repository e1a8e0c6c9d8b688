// Command meshnode is the meshnode daemon: it serves GGUF models on an
// OpenAI-compatible endpoint on localhost and joins a mesh of peers over
// QUIC. This file holds flags and wiring only.
package main

import (
	"fmt"
	"os"

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
		Name:    "meshnode",
		Usage:   "an inference node for a mesh of edge machines",
		Version: node.Version,
		Flags: []cli.Flag{
			&cli.StringFlag{
				Name:    "state-dir",
				Usage:   "where the node key, journal and tokens live",
				EnvVars: []string{"MESHNODE_STATE_DIR"},
				Value:   node.DefaultStateDir(),
			},
		},
		Commands: []*cli.Command{idCommand()},
	}
}
