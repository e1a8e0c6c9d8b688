package main

import (
	"encoding/json"

	"github.com/meshnode/meshnode/hw/meters"
	"github.com/urfave/cli/v2"
)

func metersCommand() *cli.Command {
	return &cli.Command{
		Name:  "meters",
		Usage: "probe the machine's energy counters and say which meter grades receipts, and why",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"}},
		Action: func(c *cli.Context) error {
			cfg, err := loadConfig(c)
			if err != nil {
				return err
			}
			ctx, stop := withSignals(c.Context)
			defer stop()
			r, err := meters.Inspect(ctx, meters.Config{Meter: cfg.Energy.Meter, EstimatorWatts: cfg.Energy.EstimatorWatts}, nil)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			return r.WriteText(c.App.Writer)
		},
	}
}
