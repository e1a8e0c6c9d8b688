package main

import (
	"fmt"

	"github.com/meshnode/meshnode/node"
	"github.com/urfave/cli/v2"
)

func configCommand() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "work with the configuration file",
		Subcommands: []*cli.Command{
			{
				Name:  "example",
				Usage: "print a commented configuration with every key at its default",
				Action: func(c *cli.Context) error {
					_, err := fmt.Fprint(c.App.Writer, node.ExampleConfig)
					return err
				},
			},
			{
				Name:  "check",
				Usage: "load the configuration (file, variables and flags) and print what it resolves to",
				Action: func(c *cli.Context) error {
					cfg, err := loadConfig(c)
					if err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "state_dir  %s\nmodels_dir %s\nhttp_addr  %s\nquic_addr  %s\ndiscovery  %s\nmesh_access %s\n",
						cfg.StateDir, cfg.ModelsDir, cfg.HTTPAddr, cfg.QUICAddr, cfg.Discovery, cfg.API.MeshAccess)
					return nil
				},
			},
		},
	}
}
