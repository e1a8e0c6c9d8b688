package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// pullCommand is `meshcli pull`: the local node fetches a model file into
// its models dir, and meshcli shows the progress.
func pullCommand() *cli.Command {
	return &cli.Command{
		Name:      "pull",
		Usage:     "fetch a GGUF model into the node's models dir, from the Hugging Face hub or a mesh peer",
		ArgsUsage: "SOURCE",
		Description: "SOURCE is a hub file, OWNER/REPO/FILE.gguf (OWNER/REPO@REVISION/FILE.gguf for a branch, tag\n" +
			"or commit; FILE may sit in folders), its URL (https://huggingface.co/OWNER/REPO/resolve/REV/FILE),\n" +
			"a plain https URL (with --sha256), or a file a mesh peer holds: mesh:NAME or mesh:WEIGHTS_DIGEST.\n" +
			"The node fetches it, resuming a pull that was cut off (run the same pull again), checks the\n" +
			"SHA-256 the hub lists (a peer's: the one it advertises, and its weights digest), and only then\n" +
			"puts it in the models dir, where `meshcli load NAME` loads it. HF_TOKEN (a token for private or\n" +
			"gated repos) and HF_ENDPOINT (another hub) are passed to the node. Local node only (its REST\n" +
			"facade, with its control credential).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "name", Usage: "the file's `NAME` in the models dir (default: the source's file name)"},
			&cli.StringFlag{Name: "sha256", Usage: "the SHA-256 the file must have (`HEX`; required for a URL off the hub)"},
			&cli.StringFlag{Name: "hf-token", Usage: "hub token for private or gated repos", EnvVars: []string{"HF_TOKEN"}},
			&cli.StringFlag{Name: "hf-endpoint", Usage: "the hub (default: the node's HF_ENDPOINT, else https://huggingface.co)", EnvVars: []string{"HF_ENDPOINT"}},
			&cli.BoolFlag{Name: "load", Usage: "load the model once it is pulled"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return errors.New("pull takes one SOURCE (see meshcli pull --help)")
			}
			if c.String("endpoint") != "" {
				// mesh-llm-control/1 has no message for a pull: the
				// command is the REST facade's.
				return errors.New("pull drives the local node only (its REST facade); run meshcli on the node's machine, without --endpoint")
			}
			req := control.PullRequest{Source: c.Args().First(), Name: c.String("name"), SHA256: c.String("sha256"),
				Token: c.String("hf-token"), Endpoint: c.String("hf-endpoint")}
			return withController(c, func(ctl control.Controller) error {
				hc, ok := ctl.(*control.HTTPClient)
				if !ok {
					return errors.New("pull needs the local node's REST facade")
				}
				e := envOf(c)
				bar := newProgressLine(e.stderr, isTerminal(e.stderr), e.now)
				show := bar.show
				if c.Bool("quiet") {
					show = nil
				}
				done, err := hc.Pull(c.Context, req, show)
				bar.end()
				if err != nil && c.Context.Err() != nil {
					return fmt.Errorf("pull interrupted: the node keeps what it fetched, and the same pull resumes from there")
				}
				if err != nil {
					return err
				}
				if c.Bool("load") {
					ack, err := ctl.Lifecycle(c.Context, control.Intent{Kind: control.IntentLoad, Model: &nodev1.OwnerControlModelRef{CanonicalModelRef: done.Model}})
					if err != nil {
						return fmt.Errorf("pulled %s, but loading it: %w", done.File, err)
					}
					fmt.Fprintf(e.stderr, "load %s: %s (intent %s)\n", done.Model, ack.State, ack.IntentID)
				}
				if c.Bool("json") {
					return printJSON(e.stdout, done)
				}
				resumed := ""
				if done.Resumed > 0 {
					resumed = fmt.Sprintf(", %s of it from an earlier pull", humanBytes(uint64(done.Resumed)))
				}
				fmt.Fprintf(e.stdout, "Pulled %s (%s%s) from %s\nSHA-256 %s, weights digest %s\n",
					done.File, humanBytes(uint64(done.Total)), resumed, done.Source, done.SHA256, done.WeightsDigest)
				if !c.Bool("load") {
					fmt.Fprintf(e.stdout, "Load it with: meshcli load %s\n", done.Model)
				}
				return nil
			})
		},
	}
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// plainEvery is how often progress is printed where it cannot be redrawn
// (a log, a pipe).
const plainEvery = 5 * time.Second

// progressLine shows a pull's progress: one line redrawn in place on a
// terminal; elsewhere a plain line at each phase and every plainEvery.
type progressLine struct {
	w     io.Writer
	term  bool
	now   func() time.Time
	last  time.Time
	phase string
	drawn bool
}

func newProgressLine(w io.Writer, term bool, now func() time.Time) *progressLine {
	return &progressLine{w: w, term: term, now: now}
}

func (p *progressLine) show(ev control.PullEvent) {
	line := formatProgress(ev)
	if p.term {
		// \r and clear to the end of the line: a shorter line leaves
		// nothing of the last behind.
		fmt.Fprintf(p.w, "\r%s\x1b[K", line)
		p.drawn = true
		return
	}
	t := p.now()
	if ev.Phase == p.phase && t.Sub(p.last) < plainEvery {
		return
	}
	p.phase, p.last = ev.Phase, t
	fmt.Fprintln(p.w, line)
}

// end finishes a redrawn line.
func (p *progressLine) end() {
	if p.term && p.drawn {
		fmt.Fprintln(p.w)
	}
}

// formatProgress is one event as a line: "m.gguf: download 1.5 MiB / 3.0
// MiB (50%) at 1.0 MiB/s, 2s left".
func formatProgress(ev control.PullEvent) string {
	if ev.Phase == control.PullResolve {
		return fmt.Sprintf("%s: from %s", ev.File, ev.Source)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s %s / %s", ev.File, ev.Phase, humanBytes(uint64(ev.Done)), humanBytes(uint64(ev.Total)))
	if ev.Total > 0 {
		fmt.Fprintf(&b, " (%d%%)", ev.Done*100/ev.Total)
	}
	if ev.Rate > 0 {
		fmt.Fprintf(&b, " at %s/s", humanBytes(uint64(ev.Rate)))
		if ev.ETASeconds > 0 {
			fmt.Fprintf(&b, ", %s left", time.Duration(ev.ETASeconds*float64(time.Second)).Round(time.Second))
		}
	}
	if ev.Resumed > 0 && ev.Phase == "download" {
		fmt.Fprintf(&b, ", resumed at %s", humanBytes(uint64(ev.Resumed)))
	}
	return b.String()
}
