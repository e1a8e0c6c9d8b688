package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/meshnode/meshnode/node/control"
)

// splitCommand is `meshcli split pin|unpin`: the owner's pins of a split
// model's layer ranges, set while it serves.
func splitCommand() *cli.Command {
	return &cli.Command{
		Name:  "split",
		Usage: "pin the layer ranges of a model served split across nodes",
		Description: "Pins take effect at once: the node plans again, loads the new stages (the last first) and\n" +
			"serves through them, and prints the new plan. Pins the planner cannot honour are refused and\n" +
			"change nothing. Owner pins last until the node restarts; the config's pins (pins = [...] in\n" +
			"[[model]]) apply again then. Local node only (its REST facade, with its control credential).",
		Subcommands: []*cli.Command{
			{
				Name:      "pin",
				Usage:     "place MODEL's layers LO to HI (half-open) on NODE (an endpoint id, or self)",
				ArgsUsage: "MODEL NODE:LO-HI...",
				Flags:     []cli.Flag{jsonFlag},
				Action: func(c *cli.Context) error {
					if c.NArg() < 2 {
						return errors.New("split pin takes MODEL and at least one NODE:LO-HI (see meshcli split pin --help)")
					}
					return setPins(c, c.Args().First(), c.Args().Tail())
				},
			},
			{
				Name:      "unpin",
				Usage:     "clear MODEL's pins: the planner places every stage",
				ArgsUsage: "MODEL",
				Flags:     []cli.Flag{jsonFlag},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return errors.New("split unpin takes one MODEL")
					}
					return setPins(c, c.Args().First(), nil)
				},
			},
		},
	}
}

func setPins(c *cli.Context, model string, pins []string) error {
	if c.String("endpoint") != "" {
		// mesh-llm-control/1 has no message for pins: the command is
		// the REST facade's.
		return errors.New("split pin and unpin drive the local node only (its REST facade); run meshcli on the node's machine, without --endpoint")
	}
	return withController(c, func(ctl control.Controller) error {
		hc, ok := ctl.(*control.HTTPClient)
		if !ok {
			return errors.New("split pins need the local node's REST facade")
		}
		plan, err := hc.SplitPins(c.Context, model, pins)
		if err != nil {
			return err
		}
		w := envOf(c).stdout
		if c.Bool("json") {
			return printJSON(w, plan)
		}
		fmt.Fprintf(w, "Split %s: %s\n", plan.Model, plan.State)
		if len(plan.Pins) > 0 {
			fmt.Fprintf(w, "Pinned: %s\n", strings.Join(plan.Pins, " "))
		}
		t := newTable(w, "STAGE", "NODE", "LAYERS", "MEMORY")
		for i, s := range plan.Stages {
			t.row(strconv.Itoa(i), short(s.Node), s.Layers, humanBytes(uint64(s.MemoryBytes)))
		}
		return t.flush()
	})
}
