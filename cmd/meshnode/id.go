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
			dir := c.String("state-dir")
			k, created, err := identity.LoadOrCreateKey(dir)
			if err != nil {
				return err
			}
			if created {
				fmt.Fprintf(c.App.ErrWriter, "created node key in %s\n", dir)
			}
			fmt.Fprintf(c.App.Writer, "endpoint_id %s\ndid_key     %s\n", k.ID(), k.DIDKey())
			return nil
		},
	}
}
