package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

func loadCommand() *cli.Command {
	return lifecycleCommand(control.IntentLoad, "load a model once (the node answers at once; the load runs on)",
		&cli.StringFlag{Name: "profile", Usage: "load profile the node applies"})
}

func unloadCommand() *cli.Command {
	return lifecycleCommand(control.IntentUnload, "unload a model now", instanceFlag)
}

func ensureCommand() *cli.Command {
	return lifecycleCommand(control.IntentEnsure, "keep a model loaded for the node's session, retrying failed loads",
		&cli.StringFlag{Name: "profile", Usage: "load profile the node applies"})
}

func drainCommand() *cli.Command {
	return lifecycleCommand(control.IntentDrain, "stop new work for a model, let admitted work finish, then unload it",
		instanceFlag,
		&cli.DurationFlag{Name: "timeout", Usage: "cancel work still running after this long (default: the node's, 30s)"})
}

var instanceFlag = &cli.BoolFlag{Name: "instance", Usage: "MODEL is an instance id, not a canonical model ref"}

// lifecycleCommand is one of load, unload, ensure and drain: session
// intents on the node's reconciler, never durable config.
func lifecycleCommand(kind control.IntentKind, usage string, flags ...cli.Flag) *cli.Command {
	return &cli.Command{
		Name:      kind.String(),
		Usage:     usage,
		ArgsUsage: "MODEL",
		Flags:     append(flags, jsonFlag),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return fmt.Errorf("%s takes one MODEL (see meshcli %s --help)", kind, kind)
			}
			ref := &nodev1.OwnerControlModelRef{CanonicalModelRef: c.Args().First()}
			if c.Bool("instance") {
				ref = &nodev1.OwnerControlModelRef{InstanceId: proto.String(c.Args().First())}
			}
			in := control.Intent{Kind: kind, Model: ref, Profile: c.String("profile"), DrainTimeout: c.Duration("timeout")}
			if in.DrainTimeout < 0 || in.DrainTimeout > 0 && in.DrainTimeout < time.Second {
				return fmt.Errorf("--timeout %v: want at least 1s", in.DrainTimeout)
			}
			return withController(c, func(ctl control.Controller) error {
				ack, err := ctl.Lifecycle(c.Context, in)
				if err != nil {
					return err
				}
				w := envOf(c).stdout
				if c.Bool("json") {
					return printJSON(w, map[string]any{
						"intent_id": ack.IntentID, "state": ack.State,
						"canonical_model_ref": ack.Target.GetCanonicalModelRef(), "instance_id": ack.Target.GetInstanceId(),
					})
				}
				target := ack.Target.GetCanonicalModelRef()
				if inst := ack.Target.GetInstanceId(); inst != "" {
					target += " (instance " + inst + ")"
				}
				_, err = fmt.Fprintf(w, "%s %s: %s (intent %s)\n", kind, target, ack.State, ack.IntentID)
				return err
			})
		},
	}
}
