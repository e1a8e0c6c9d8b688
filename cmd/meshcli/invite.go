package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func inviteCommand() *cli.Command {
	return &cli.Command{
		Name:  "invite",
		Usage: "print the local node's invite token, for `meshnode --join TOKEN` on another machine",
		Action: func(c *cli.Context) error {
			var inv struct {
				Token string `json:"token"`
			}
			if err := getJSON(c, "/api/invite", &inv); err != nil {
				return err
			}
			if inv.Token == "" {
				return fmt.Errorf("the node has no invite token yet")
			}
			_, err := fmt.Fprintln(envOf(c).stdout, inv.Token)
			return err
		},
	}
}
