package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

func configCommand() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "read, watch and apply the node's owner-managed configuration",
		Subcommands: []*cli.Command{
			{
				Name:   "get",
				Usage:  "print the configuration, its revision and hash",
				Flags:  []cli.Flag{jsonFlag},
				Action: configGet,
			},
			{
				Name:  "watch",
				Usage: "print each new revision as it is applied, until interrupted",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "snapshot", Usage: "start with the current configuration"},
					&cli.IntFlag{Name: "count", Usage: "stop after printing this many revisions, the --snapshot one included (0: never)"},
					&cli.BoolFlag{Name: "json", Usage: "print each event as a line of JSON"},
				},
				Action: configWatch,
			},
			{
				Name:      "apply",
				Usage:     "replace the configuration with FILE (a NodeConfigSnapshot in JSON; - for stdin)",
				ArgsUsage: "FILE",
				Flags: []cli.Flag{
					&cli.Uint64Flag{Name: "revision", Usage: "apply only if the node is still at this revision (default: the one it reports now)"},
				},
				Action: configApply,
			},
		},
	}
}

func configGet(c *cli.Context) error {
	return withController(c, func(ctl control.Controller) error {
		snap, err := ctl.GetConfig(c.Context)
		if err != nil {
			return err
		}
		w := envOf(c).stdout
		if c.Bool("json") {
			return printProto(w, snap)
		}
		printRevision(w, snap.GetNodeId(), snap.GetHostname(), snap.GetRevision(), snap.GetConfigHash())
		return printProto(w, snap.GetConfig())
	})
}

func printRevision(w io.Writer, node []byte, hostname string, rev uint64, hash []byte) {
	t := newTable(w, "Node", short(hex.EncodeToString(node))+" "+hostname)
	t.row("Revision", fmt.Sprint(rev))
	t.row("Hash", "sha256:"+hex.EncodeToString(hash))
	t.flush()
}

func configWatch(c *cli.Context) error {
	return withController(c, func(ctl control.Controller) error {
		w, err := ctl.WatchConfig(c.Context, c.Bool("snapshot"))
		if err != nil {
			return err
		}
		defer w.Close()
		out := envOf(c).stdout
		for updates, limit := 0, c.Int("count"); limit == 0 || updates < limit; {
			ev, err := w.Next(c.Context)
			if err != nil {
				if errors.Is(err, context.Canceled) {
					return nil // interrupted: the normal end of a watch
				}
				return err
			}
			if ev.GetUpdate() != nil || ev.GetSnapshot() != nil {
				updates++ // a revision printed: the current one, or one applied
			}
			if c.Bool("json") {
				b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(ev)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "%s\n", compactJSON(b))
				continue
			}
			switch {
			case ev.GetAccepted() != nil:
				fmt.Fprintf(out, "watching node %s\n", short(hex.EncodeToString(ev.GetAccepted().GetTargetNodeId())))
			case ev.GetSnapshot() != nil:
				s := ev.GetSnapshot()
				fmt.Fprintf(out, "revision %d  sha256:%s  (current)\n", s.GetRevision(), hex.EncodeToString(s.GetConfigHash()))
			default:
				u := ev.GetUpdate()
				fmt.Fprintf(out, "revision %d  sha256:%s  (applied)\n", u.GetRevision(), hex.EncodeToString(u.GetConfigHash()))
			}
		}
		return nil
	})
}

func configApply(c *cli.Context) error {
	if c.NArg() != 1 {
		return errors.New("config apply takes one FILE (see meshcli config apply --help)")
	}
	cfg, err := readConfigFile(c.Args().First())
	if err != nil {
		return err
	}
	return withController(c, func(ctl control.Controller) error {
		rev := c.Uint64("revision")
		if !c.IsSet("revision") {
			snap, err := ctl.GetConfig(c.Context)
			if err != nil {
				return err
			}
			rev = snap.GetRevision()
		}
		res, err := ctl.ApplyConfig(c.Context, rev, cfg)
		var e *control.Error
		if errors.As(err, &e) && e.Code == control.ErrRevisionConflict.Code {
			return fmt.Errorf("the node's config is at revision %d, not %d: someone else applied a change (get it with `meshcli config get`)",
				e.CurrentRevision, rev)
		}
		if err != nil {
			return err
		}
		w := envOf(c).stdout
		for _, d := range res.GetDiagnostics() {
			fmt.Fprintln(w, diagnosticLine(d))
		}
		if !res.GetSuccess() {
			if res.GetError() != "" {
				return errors.New(res.GetError())
			}
			return errors.New("the node rejected the configuration")
		}
		mode := strings.ToLower(strings.TrimPrefix(res.GetApplyMode().String(), "CONFIG_APPLY_MODE_"))
		_, err = fmt.Fprintf(w, "revision %d  sha256:%s  (%s)\n", res.GetCurrentRevision(), hex.EncodeToString(res.GetConfigHash()), mode)
		return err
	})
}

// readConfigFile reads a NodeConfigSnapshot in protojson, strictly: an
// unknown field is a typo until proven otherwise.
func readConfigFile(path string) (*nodev1.NodeConfigSnapshot, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, wire.MaxControlFrameBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > wire.MaxControlFrameBytes {
		return nil, fmt.Errorf("%s: larger than the %d-byte control frame limit", path, wire.MaxControlFrameBytes)
	}
	cfg := new(nodev1.NodeConfigSnapshot)
	if err := protojson.Unmarshal(b, cfg); err != nil {
		return nil, fmt.Errorf("%s is not a NodeConfigSnapshot in JSON: %w", path, err)
	}
	return cfg, nil
}

func diagnosticLine(d *nodev1.ConfigDiagnostic) string {
	sev := strings.ToLower(strings.TrimPrefix(d.GetSeverity().String(), "CONFIG_DIAGNOSTIC_SEVERITY_"))
	var b strings.Builder
	b.WriteString(sev + ": ")
	if p := d.GetPath(); p != "" {
		b.WriteString(p + ": ")
	}
	b.WriteString(d.GetMessage())
	if h := d.GetHelp(); h != "" {
		b.WriteString(" (" + h + ")")
	}
	return b.String()
}
