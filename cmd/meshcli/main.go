// Command meshcli is the owner's tool for meshnode: it inspects and drives
// the owner's nodes over the mesh-llm-control/1 lane. This file holds flags
// and wiring only.
package main

import (
	"fmt"
	"os"

	"github.com/meshnode/meshnode/node"
	"github.com/urfave/cli/v2"
)

func main() {
	app := &cli.App{
		Name:    "meshcli",
		Usage:   "manage your meshnode nodes",
		Version: node.Version,
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "meshcli:", err)
		os.Exit(1)
	}
}
