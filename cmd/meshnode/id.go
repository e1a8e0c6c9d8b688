package main

import (
	"fmt"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/urfave/cli/v2"
)

func idCommand() *cli.Command {
	return &cli.Command{
		Name:  "id",
		Usage: "print this node's endpoint id and did:key, creating the node key on first use",
		Action: func(c *cli.Context) error {
			cfg, err := loadConfig(c)
			if err != nil {
				return err
			}
			k, created, err := identity.LoadOrCreateKey(cfg.StateDir)
			if err != nil {
				return err
			}
			if created {
				fmt.Fprintf(c.App.ErrWriter, "created node key in %s\n", cfg.StateDir)
			}
			fmt.Fprintf(c.App.Writer, "endpoint_id %s\ndid_key     %s\n", k.ID(), k.DIDKey())
			return nil
		},
	}
}
