package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/meshnode/meshnode/packaging/launchd"
	"github.com/urfave/cli/v2"
)

func serviceCommand() *cli.Command {
	userFlag := &cli.StringFlag{Name: "user", Usage: "with sudo: the account the system daemon runs as (default: the one sudo was run from; never root)"}
	return &cli.Command{
		Name:  "service",
		Usage: "install or remove meshnode as a launchd service (macOS)",
		Description: "Run as yourself, it manages a user agent that runs while you are logged in. Run with sudo,\n" +
			"it manages a system daemon that starts at boot, running as your account. Either keeps the\n" +
			"node's state in ~/Library/Application Support/meshnode. On Linux, install the .deb or .rpm.",
		Subcommands: []*cli.Command{
			{
				Name:  "install",
				Usage: "write the launchd job for this binary and start it (replaces an installed one)",
				Flags: []cli.Flag{userFlag},
				Action: func(c *cli.Context) error {
					in, err := serviceInstaller(c)
					if err != nil {
						return err
					}
					if err := in.Install(c.Context); err != nil {
						return err
					}
					l := in.Layout
					fmt.Fprintf(c.App.Writer, "installed the meshnode %s %s\n  job:   %s\n  runs:  %s (as %s)\n  state: %s\n  log:   %s\n",
						l.Scope, launchd.Label, l.Plist, in.Exe, l.Account.Name, l.StateDir, l.LogFile)
					return nil
				},
			},
			{
				Name:  "uninstall",
				Usage: "stop the launchd job and remove it (the node's state and log stay)",
				Flags: []cli.Flag{userFlag},
				Action: func(c *cli.Context) error {
					in, err := serviceInstaller(c)
					if err != nil {
						return err
					}
					removed, err := in.Uninstall(c.Context)
					if err != nil {
						return err
					}
					l := in.Layout
					if !removed {
						fmt.Fprintf(c.App.Writer, "no meshnode %s is installed (%s)\n", l.Scope, l.Plist)
						return nil
					}
					fmt.Fprintf(c.App.Writer, "removed the meshnode %s; the node's state is still in %s\n", l.Scope, l.StateDir)
					return nil
				},
			},
			{
				Name:  "plist",
				Usage: "print the launchd job install would write",
				Flags: []cli.Flag{userFlag},
				Action: func(c *cli.Context) error {
					in, err := serviceInstaller(c)
					if err != nil {
						return err
					}
					b, err := in.Layout.Render(in.Exe)
					if err != nil {
						return err
					}
					_, err = c.App.Writer.Write(b)
					return err
				},
			},
		},
	}
}

func serviceInstaller(c *cli.Context) (*launchd.Installer, error) {
	if runtime.GOOS != "darwin" {
		return nil, errors.New("meshnode service manages launchd, on macOS; on Linux the .deb and .rpm packages install the systemd service (docs/install.md)")
	}
	scope, acct, err := launchd.ChooseScope(os.Geteuid(), c.String("user"), os.Getenv("SUDO_USER"), launchd.SystemLookup)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot tell where this binary is: %w", err)
	}
	if exe, err = filepath.Abs(exe); err != nil {
		return nil, err
	}
	if strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return nil, fmt.Errorf("%s is a temporary binary (go run): install the built one (make build, or a release)", exe)
	}
	return launchd.NewInstaller(scope, acct, exe), nil
}
