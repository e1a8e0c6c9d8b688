package main

import (
	"github.com/urfave/cli/v2"

	"github.com/meshnode/meshnode/node/control"
)

func scanRefreshCommand() *cli.Command {
	return &cli.Command{
		Name:  "scan-refresh",
		Usage: "rescan the node's models dir and list what is on disk",
		Description: "Runs refresh_inventory. Scans do not overlap: a request that arrives during a scan joins it\n" +
			"and gets the same result. A failed scan leaves the node's advertised models as they were.",
		Flags: []cli.Flag{jsonFlag},
		Action: func(c *cli.Context) error {
			return withController(c, func(ctl control.Controller) error {
				inv, err := ctl.RefreshInventory(c.Context)
				if err != nil {
					return err
				}
				w := envOf(c).stdout
				if c.Bool("json") {
					return printProto(w, inv)
				}
				return printInventory(w, inv)
			})
		},
	}
}
