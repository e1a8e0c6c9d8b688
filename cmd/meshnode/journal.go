package main

import (
	"errors"
	"fmt"

	"github.com/meshnode/meshnode/node"
	"github.com/meshnode/meshnode/node/steward/journal"
	"github.com/urfave/cli/v2"
)

func journalCommand() *cli.Command {
	return &cli.Command{
		Name:  "journal",
		Usage: "work with the steward's decision journal",
		Subcommands: []*cli.Command{{
			Name:  "accept-rollback",
			Usage: "serve from the journal as it stands, after the node refused it as shorter than, or different from, what it had written",
			Description: "The node keeps a checkpoint of how far its journal reached (journal/steward.head) and refuses to start\n" +
				"when the journal falls short of it or differs from it: records were cut, or the file was emptied,\n" +
				"deleted or replaced. Restore the journal if you can. If you cannot, this command re-anchors the\n" +
				"checkpoint to the journal as it stands, and the node will start from it. Whatever the lost records\n" +
				"held is forgotten: the receipt sequences they sealed will be issued again (a second receipt with a\n" +
				"sequence and prev already used, a fork anyone holding both can see), and grant presentations spent\n" +
				"only in them, and the budget they spent, can be used again. A caller who shows the node a receipt\n" +
				"from the lost records makes it refuse every grant from then on.\n\n" +
				"Run it with the node stopped, as the user the node runs as (sudo -u meshnode for the service).",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "state-dir", Usage: "the node's state dir (default: as the node finds it)", EnvVars: []string{"MESHNODE_STATE_DIR"}},
			},
			Action: acceptRollback,
		}},
	}
}

func acceptRollback(c *cli.Context) error {
	dir := c.String("state-dir")
	if !c.IsSet("state-dir") {
		// The daemon's own flags (meshnode --state-dir DIR journal …) and
		// config: looked up from the parent command, since this command's
		// own --state-dir would shadow the daemon's.
		cfg, err := loadConfig(c.Lineage()[1])
		if err != nil {
			return err
		}
		dir = cfg.StateDir
	}
	path := node.JournalPath(dir)
	acc, err := journal.AcceptRollback(path, journal.Options{})
	if errors.Is(err, journal.ErrLocked) {
		return fmt.Errorf("%w: stop the node first", err)
	}
	if err != nil {
		return err
	}
	out := c.App.Writer
	fmt.Fprintf(out, "journal     %s: %v\n", path, acc.Journal)
	switch {
	case acc.Was != nil:
		fmt.Fprintf(out, "checkpoint  %s: was %v\n", journal.HeadPath(path), *acc.Was)
	case acc.WasErr != nil:
		fmt.Fprintf(out, "checkpoint  %s: was unreadable (%v)\n", journal.HeadPath(path), acc.WasErr)
	default:
		fmt.Fprintf(out, "checkpoint  %s: there was none\n", journal.HeadPath(path))
	}
	if !acc.Changed {
		fmt.Fprintln(out, "Nothing to accept: the journal reaches its checkpoint, and the node starts from it as it is.")
		return nil
	}
	fmt.Fprintf(out, "Accepted: the checkpoint now names the journal's last record, and the node will serve from its %d records.\n", acc.Journal.Records)
	if acc.Was != nil || acc.WasErr != nil {
		fmt.Fprintln(out, "Receipt sequences and spent grant presentations recorded only in records the journal no longer holds may now be used again.")
	}
	return nil
}
