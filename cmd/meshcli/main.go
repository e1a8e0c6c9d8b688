// Command meshcli is the owner's tool for meshnode: it inspects the local
// node through its API and drives the owner's nodes over owner control,
// the local one through its loopback REST facade and any other with
// --endpoint over mesh-llm-control/1. This file holds the app's skeleton;
// each command group has a file of its own.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/meshnode/meshnode/node"
	"github.com/meshnode/meshnode/node/control"
)

func main() {
	// An interrupt ends a running command (config watch) cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, newEnv(os.Stdout, os.Stderr))
	stop()
	os.Exit(code)
}

// run runs meshcli and returns its exit status: errors are one line on
// stderr and status 1.
func run(ctx context.Context, args []string, e *env) int {
	app := newApp(e)
	args, err := flagsFirst(app, args)
	if err == nil {
		err = app.RunContext(ctx, args)
	}
	if err == nil {
		return 0
	}
	fmt.Fprintln(e.stderr, "meshcli:", oneLine(err))
	var coded cli.ExitCoder
	if errors.As(err, &coded) && coded.ExitCode() != 0 {
		return coded.ExitCode()
	}
	return 1
}

// env is what the commands touch outside themselves; tests replace it.
type env struct {
	stdout, stderr io.Writer
	now            func() time.Time
	rand           io.Reader // nil: crypto/rand
	http           *http.Client
	timeouts       control.ClientTimeouts
}

func newEnv(stdout, stderr io.Writer) *env {
	return &env{stdout: stdout, stderr: stderr, now: time.Now, http: &http.Client{}}
}

const defaultAPI = "http://" + node.DefaultHTTPAddr

func newApp(e *env) *cli.App {
	return &cli.App{
		Name:  "meshcli",
		Usage: "manage your meshnode nodes",
		Description: "Reads the local node's API (--api) and drives owner control: the local node through its\n" +
			"loopback REST facade, with the credential the node keeps in control.secret in its state dir (run\n" +
			"meshcli as the node's user or root), and any node you own with --endpoint TOKEN (the control\n" +
			"endpoint token the node keeps in control.token in its state dir, and prints once it has an\n" +
			"owner). Commands that read a node's API (status, peers, models, invite) take --api, not\n" +
			"--endpoint. Run `meshcli auth init` once to create your owner key.",
		Version:              node.Version,
		EnableBashCompletion: true,
		Writer:               e.stdout,
		ErrWriter:            e.stderr,
		Metadata:             map[string]any{envKey: e},
		// run reports every error; urfave/cli must not print or exit.
		ExitErrHandler: func(*cli.Context, error) {},
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "api", Value: defaultAPI, Usage: "the local node's API", EnvVars: []string{"MESHCLI_API"}},
			&cli.StringFlag{Name: "api-key", Usage: "bearer key, if the node's API requires one", EnvVars: []string{"MESHCLI_API_KEY"}},
			&cli.StringFlag{Name: "endpoint", Usage: "control endpoint `TOKEN` of the node to drive over owner control, for owner-control commands (default: the local node)",
				EnvVars: []string{"MESHCLI_ENDPOINT"}},
			&cli.StringFlag{Name: "control-secret", Usage: "the local node's control credential `FILE` (default: control.secret in the node's state dir)",
				EnvVars: []string{"MESHCLI_CONTROL_SECRET"}},
			&cli.StringFlag{Name: "config-dir", Usage: "where the owner key and client identity live (default " + defaultConfigDir() + ")",
				EnvVars: []string{"MESHCLI_CONFIG_DIR"}},
		},
		Commands: []*cli.Command{
			statusCommand(),
			peersCommand(),
			modelsCommand(),
			pullCommand(),
			loadCommand(),
			unloadCommand(),
			ensureCommand(),
			drainCommand(),
			configCommand(),
			splitCommand(),
			scanRefreshCommand(),
			inviteCommand(),
			authCommand(),
			receiptCommand(),
			grantCommand(),
			completionCommand(),
		},
	}
}

// oneLine flattens a multi-line error (errors.Join) into one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}
