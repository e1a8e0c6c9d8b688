package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/urfave/cli/v2"
)

// idFields are what `meshnode id` prints, in order.
var idFields = []string{"endpoint_id", "did_key", "state_dir", "ownership"}

func idCommand() *cli.Command {
	return &cli.Command{
		Name:  "id",
		Usage: "print this node's endpoint id, did:key, state dir and where it takes its ownership certificate, creating the node key on first use",
		Description: "--field NAME prints one of them alone, for scripts:\n" +
			"  meshcli auth sign-node \"$(meshnode id --field endpoint_id)\" -o \"$(meshnode id --field ownership)\"",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "field", Usage: "print only this `NAME`: " + strings.Join(idFields, ", ")},
		},
		Action: func(c *cli.Context) error {
			field := c.String("field")
			if field != "" && !contains(idFields, field) {
				return fmt.Errorf("id: --field %q: want one of %s", field, strings.Join(idFields, ", "))
			}
			if c.Args().Present() {
				return fmt.Errorf("id takes no arguments (got %q)", c.Args().First())
			}
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
			ownership := cfg.Control.Ownership
			if !filepath.IsAbs(ownership) {
				ownership = filepath.Join(cfg.StateDir, ownership)
			}
			values := map[string]string{"endpoint_id": k.ID().String(), "did_key": k.DIDKey(), "state_dir": cfg.StateDir, "ownership": ownership}
			if field != "" {
				_, err := fmt.Fprintln(c.App.Writer, values[field])
				return err
			}
			for _, f := range idFields {
				fmt.Fprintf(c.App.Writer, "%-12s%s\n", f, values[f])
			}
			return nil
		},
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
