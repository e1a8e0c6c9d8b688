package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"time"

	"github.com/meshnode/meshnode/gguf/chat"
	"github.com/meshnode/meshnode/gguf/sample"
	"github.com/meshnode/meshnode/node/engine/ggufengine"
	"github.com/urfave/cli/v2"
)

// runCommand generates text from a model on this machine, outside the
// daemon: for people trying a model. Text goes to stdout as it is made,
// the rates to stderr.
func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "generate text from a GGUF model on this machine",
		ArgsUsage: "MODEL.gguf",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "prompt", Aliases: []string{"p"}, Usage: "the text to continue (or, with --chat, the user's message)"},
			&cli.BoolFlag{Name: "chat", Usage: "render the prompt through the model's chat template"},
			&cli.IntFlag{Name: "max-tokens", Aliases: []string{"n"}, Value: 128, Usage: "the most tokens to generate"},
			&cli.Float64Flag{Name: "temp", Usage: "sampling temperature; 0 decodes greedily"},
			&cli.IntFlag{Name: "top-k", Usage: "keep the k likeliest tokens (0: all)"},
			&cli.Float64Flag{Name: "top-p", Usage: "nucleus sampling mass (0: off)"},
			&cli.Float64Flag{Name: "min-p", Usage: "drop tokens below this fraction of the likeliest (0: off)"},
			&cli.Float64Flag{Name: "repeat-penalty", Usage: "divide the logits of recent tokens by this (llama.cpp's repeat_penalty; 0 or 1: off)"},
			&cli.Float64Flag{Name: "presence-penalty", Usage: "subtract this from the logits of recent tokens"},
			&cli.Float64Flag{Name: "frequency-penalty", Usage: "subtract this times its count from the logit of each recent token"},
			&cli.IntFlag{Name: "repeat-last-n", Value: 64, Usage: "how many of the latest generated tokens the penalties look at (0: all)"},
			&cli.Uint64Flag{Name: "seed", Usage: "sampling seed (default: random)"},
			&cli.StringSliceFlag{Name: "stop", Usage: "stop at this string (repeatable)"},
			&cli.IntFlag{Name: "threads", Aliases: []string{"t"}, Usage: "CPU threads (0: one per CPU)"},
			&cli.IntFlag{Name: "ctx", Usage: "context length (0: the model's, at most 4096)"},
			&cli.StringFlag{Name: "kv", Value: "f16", Usage: "KV cache type: f16 or f32"},
		},
		// Flags may come after the model file (meshnode run M.gguf -p …),
		// which urfave/cli v2 does not parse: the action parses them.
		SkipFlagParsing: true,
		Action: func(parent *cli.Context) error {
			c, file, err := parseInterspersed(parent)
			if errors.Is(err, flag.ErrHelp) {
				return cli.ShowCommandHelp(parent.Lineage()[1], "run")
			}
			if err != nil {
				return err
			}
			start := time.Now()
			m, err := ggufengine.Load(file, ggufengine.Config{
				Threads: c.Int("threads"), Context: c.Int("ctx"), KV: c.String("kv"), Sessions: 1,
			})
			if err != nil {
				return err
			}
			defer m.Close()
			loaded := time.Since(start)

			text := c.String("prompt")
			parseSpecial := false
			if c.Bool("chat") {
				if text, err = m.ApplyChat([]chat.Message{{Role: "user", Content: text}}); err != nil {
					return err
				}
				parseSpecial = true
			}
			prompt := m.Tokenize(text, true, parseSpecial)
			gen := ggufengine.Generation{
				Sampling: sample.Params{
					Temperature:      c.Float64("temp"),
					TopK:             c.Int("top-k"),
					TopP:             c.Float64("top-p"),
					MinP:             c.Float64("min-p"),
					RepeatPenalty:    c.Float64("repeat-penalty"),
					PresencePenalty:  c.Float64("presence-penalty"),
					FrequencyPenalty: c.Float64("frequency-penalty"),
					PenaltyWindow:    c.Int("repeat-last-n"),
					Seed:             rand.Uint64(),
				},
				Stop:      c.StringSlice("stop"),
				MaxTokens: max(0, c.Int("max-tokens")),
			}
			if c.IsSet("seed") {
				gen.Sampling.Seed = c.Uint64("seed")
			}
			if err := gen.Sampling.Validate(); err != nil { // before any output
				return err
			}

			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt)
			defer stop()
			dec := m.NewDecoder()
			w := c.App.Writer
			if !c.Bool("chat") {
				fmt.Fprint(w, text)
			}
			var first time.Time
			serveStart := time.Now()
			out, err := m.Engine().Generate(ctx, prompt, gen, func(tok uint32) error {
				if first.IsZero() {
					first = time.Now()
				}
				s, err := dec.Next(tok)
				fmt.Fprint(w, s)
				return err
			})
			fmt.Fprintln(w, dec.Flush())
			end := time.Now()
			if err != nil && !errors.Is(err, context.Canceled) {
				return err
			}

			info := c.App.ErrWriter
			mc := m.Config()
			fmt.Fprintf(info, "\n%s: %s %s, %d layers, %d threads, loaded in %v\n", m.Name(), mc.Arch, m.Facts().QuantizationType, mc.Layers, m.Threads(), loaded.Round(time.Millisecond))
			if !first.IsZero() {
				pre := first.Sub(serveStart)
				fmt.Fprintf(info, "prompt: %d tokens in %v (%.1f tok/s)\n", out.TokensIn, pre.Round(time.Millisecond), float64(out.TokensIn)/pre.Seconds())
				if out.TokensOut > 1 {
					dt := end.Sub(first)
					fmt.Fprintf(info, "output: %d tokens, %.1f tok/s after the first\n", out.TokensOut, float64(out.TokensOut-1)/dt.Seconds())
				}
			}
			return nil
		},
	}
}

// parseInterspersed parses the run command's flags wherever they stand
// among its arguments and returns the one positional argument, the model.
func parseInterspersed(parent *cli.Context) (*cli.Context, string, error) {
	set := flag.NewFlagSet("run", flag.ContinueOnError)
	set.SetOutput(io.Discard)
	for _, f := range parent.Command.Flags {
		if err := f.Apply(set); err != nil {
			return nil, "", err
		}
	}
	var pos []string
	args := parent.Args().Slice()
	for {
		if err := set.Parse(args); err != nil {
			return nil, "", fmt.Errorf("run: %w", err)
		}
		if set.NArg() == 0 {
			break
		}
		pos = append(pos, set.Arg(0))
		args = set.Args()[1:]
	}
	if set.Lookup("help") != nil && set.Lookup("help").Value.String() == "true" {
		return nil, "", flag.ErrHelp
	}
	// An alias is its own variable in a flag.FlagSet (cli links them when
	// it parses): give every name of a flag the value that was set.
	visited := map[string]bool{}
	set.Visit(func(f *flag.Flag) { visited[f.Name] = true })
	for _, f := range parent.Command.Flags {
		names := f.Names()
		for _, n := range names {
			if !visited[n] {
				continue
			}
			v := set.Lookup(n).Value.String()
			for _, other := range names {
				if other != n {
					if err := set.Set(other, v); err != nil {
						return nil, "", fmt.Errorf("run: -%s: %w", other, err)
					}
				}
			}
		}
	}
	if len(pos) != 1 {
		return nil, "", fmt.Errorf("run: give one model file (meshnode run MODEL.gguf -p TEXT), got %d arguments", len(pos))
	}
	return cli.NewContext(parent.App, set, parent), pos[0], nil
}
