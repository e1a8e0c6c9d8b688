package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshnode/meshnode/gguf/chat"
	"github.com/meshnode/meshnode/gguf/sample"
	"github.com/meshnode/meshnode/node"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/engine/ggufengine"
	"github.com/urfave/cli/v2"
)

// runCommand generates text from a model on this machine, outside the
// daemon: for people trying a model. Text goes to stdout as it is made,
// the rates to stderr.
func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "generate text from a GGUF model on this machine: once (-p, or text piped on stdin), or interactively",
		ArgsUsage: "MODEL",
		Description: "MODEL is what --model takes: a GGUF file's path, the name of a file in the models dir (with\n" +
			"or without .gguf), or the built-in model's name (" + node.BuiltinModelName + ").\n" +
			"The prompt is -p TEXT, or else the text piped on stdin. With neither, on a terminal (or with -i),\n" +
			"meshnode run reads one message a line and answers each (a conversation, through the model's\n" +
			"chat template, when it has one or with --chat; else each line is continued on its own);\n" +
			"/clear forgets the conversation, /bye or Ctrl-D leaves, Ctrl-C stops an answer.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "prompt", Aliases: []string{"p"}, Usage: "the text to continue (or, with --chat, the user's message)"},
			&cli.BoolFlag{Name: "interactive", Aliases: []string{"i"}, Usage: "read a message a line from stdin and answer each (the default on a terminal without -p)"},
			&cli.BoolFlag{Name: "chat", Usage: "render the prompt through the model's chat template"},
			&cli.IntFlag{Name: "max-tokens", Aliases: []string{"n"}, Value: 128, Usage: "the most tokens to generate"},
			&cli.Float64Flag{Name: "temp", Usage: "sampling temperature; 0 decodes greedily"},
			&cli.IntFlag{Name: "top-k", Usage: "keep the k likeliest tokens (0: all)"},
			&cli.Float64Flag{Name: "top-p", Usage: "nucleus sampling mass (0: off)"},
			&cli.Float64Flag{Name: "min-p", Usage: "drop tokens below this fraction of the likeliest (0: off)"},
			&cli.Float64Flag{Name: "repeat-penalty", Usage: "divide the logits of recent tokens by this (llama.cpp's repeat_penalty; 0 or 1: off)"},
			&cli.Float64Flag{Name: "presence-penalty", Usage: "subtract this from the logits of recent tokens"},
			&cli.Float64Flag{Name: "frequency-penalty", Usage: "subtract this times its count from the logit of each recent token"},
			&cli.IntFlag{Name: "repeat-last-n", Value: 64, Usage: "how many of the latest tokens of prompt and output the penalties look at, as llama.cpp's (-1: all, 0: no penalties)"},
			&cli.Float64Flag{Name: "typical", Value: 1, Usage: "locally typical sampling's mass (llama.cpp's --typical; 1: off)"},
			&cli.Float64Flag{Name: "top-nsigma", Value: -1, Usage: "keep tokens within N standard deviations of the likeliest's logit (-1: off)"},
			&cli.Float64Flag{Name: "xtc-probability", Usage: "how often XTC drops the likeliest tokens (0: off)"},
			&cli.Float64Flag{Name: "xtc-threshold", Value: 0.1, Usage: "how likely a token XTC drops is"},
			&cli.Float64Flag{Name: "dynatemp-range", Usage: "dynamic temperature: temp ± this by the entropy (0: off)"},
			&cli.Float64Flag{Name: "dynatemp-exp", Value: 1, Usage: "dynamic temperature's exponent"},
			&cli.IntFlag{Name: "min-keep", Usage: "the fewest tokens top-p, min-p, typical and XTC leave"},
			&cli.Float64Flag{Name: "dry-multiplier", Usage: "DRY's penalty multiplier (0: off)"},
			&cli.Float64Flag{Name: "dry-base", Value: 1.75, Usage: "DRY's penalty base"},
			&cli.IntFlag{Name: "dry-allowed-length", Value: 2, Usage: "the longest repeat DRY leaves unpenalised"},
			&cli.IntFlag{Name: "dry-penalty-last-n", Value: -1, Usage: "how many of the latest tokens DRY scans (-1: all, 0: off)"},
			&cli.StringSliceFlag{Name: "dry-sequence-breaker", Usage: "a DRY sequence breaker (repeatable; default \\n : \" *)"},
			&cli.IntFlag{Name: "mirostat", Usage: "mirostat sampling, version 1 or 2, in place of the filters and penalties (0: off)"},
			&cli.Float64Flag{Name: "mirostat-ent", Value: 5, Usage: "mirostat's target surprise, in bits (llama.cpp's tau)"},
			&cli.Float64Flag{Name: "mirostat-lr", Value: 0.1, Usage: "mirostat's learning rate (llama.cpp's eta)"},
			&cli.Float64Flag{Name: "adaptive-target", Value: -1, Usage: "adaptive-p: draw last toward tokens of this probability, 0 … 1 (negative: off)"},
			&cli.Float64Flag{Name: "adaptive-decay", Value: 0.9, Usage: "adaptive-p's moving average's decay per token, 0 … 0.99"},
			&cli.BoolFlag{Name: "ignore-eos", Usage: "hold the model's end-of-generation tokens back: write to --max-tokens (or a --stop)"},
			&cli.Uint64Flag{Name: "seed", Usage: "sampling seed (default: random)"},
			&cli.StringSliceFlag{Name: "stop", Usage: "stop at this string (repeatable)"},
			&cli.StringSliceFlag{Name: "logit-bias", Usage: "add BIAS (-100 … 100) to token ID's logit, as ID+BIAS or ID-BIAS (repeatable; llama.cpp's --logit-bias)"},
			&cli.IntFlag{Name: "threads", Aliases: []string{"t"}, Usage: "CPU threads (0: one per CPU)"},
			&cli.IntFlag{Name: "ctx", Usage: "context length (0: the model's, at most 4096)"},
			&cli.StringFlag{Name: "kv", Value: "f16", Usage: "KV cache type: f16 or f32"},
			&cli.StringFlag{Name: "draft", Usage: "decode speculatively with this draft model (a GGUF file or a model's name, with the same vocabulary) or \"lookup\" (prompt lookup)"},
		},
		// Flags may come after the model file (meshnode run M.gguf -p …),
		// which urfave/cli v2 does not parse: the action parses them.
		SkipFlagParsing: true,
		Action: func(parent *cli.Context) error {
			c, ref, err := parseInterspersed(parent)
			if errors.Is(err, flag.ErrHelp) {
				return cli.ShowCommandHelp(parent.Lineage()[1], "run")
			}
			if err != nil {
				return err
			}
			cfg, err := loadConfig(parent)
			if err != nil {
				return err
			}
			file, name, err := cfg.FindModel(ref)
			if err != nil {
				return fmt.Errorf("run: %w (MODEL is a GGUF file's path, a model's name in %s, or %s)", err, cfg.ModelsDir, node.BuiltinModelName)
			}
			// What to do, decided before the model loads: one prompt (-p, or
			// stdin when it is not a terminal), or a conversation.
			in := c.App.Reader
			if in == nil {
				in = os.Stdin
			}
			interactive := c.Bool("interactive") || !c.IsSet("prompt") && isTerminal(in)
			if interactive && c.IsSet("prompt") {
				return errors.New("run: -p gives one prompt and -i reads them from stdin: give one of them")
			}
			text := c.String("prompt")
			if !interactive && !c.IsSet("prompt") {
				b, err := io.ReadAll(io.LimitReader(in, maxRunPrompt+1))
				if err != nil {
					return fmt.Errorf("run: reading the prompt from stdin: %w", err)
				}
				if len(b) > maxRunPrompt {
					return fmt.Errorf("run: the prompt on stdin is over %d bytes", maxRunPrompt)
				}
				if text = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"); strings.TrimSpace(text) == "" {
					return errors.New("run: no prompt: give -p TEXT, pipe the text on stdin, or run it on a terminal (or with -i) to chat")
				}
			}
			r := &runner{
				gen: ggufengine.Generation{
					Sampling: sample.Params{
						Temperature:      c.Float64("temp"),
						TopK:             c.Int("top-k"),
						TopP:             c.Float64("top-p"),
						MinP:             c.Float64("min-p"),
						RepeatPenalty:    c.Float64("repeat-penalty"),
						PresencePenalty:  c.Float64("presence-penalty"),
						FrequencyPenalty: c.Float64("frequency-penalty"),
						TypicalP:         c.Float64("typical"),
						TopNSigma:        c.Float64("top-nsigma"),
						XTCProbability:   c.Float64("xtc-probability"),
						XTCThreshold:     c.Float64("xtc-threshold"),
						DynaTempRange:    c.Float64("dynatemp-range"),
						DynaTempExponent: c.Float64("dynatemp-exp"),
						MinKeep:          c.Int("min-keep"),
						Seed:             rand.Uint64(),
					},
					Stop:      c.StringSlice("stop"),
					MaxTokens: max(0, c.Int("max-tokens")),
				},
				seeded: c.IsSet("seed"),
				out:    c.App.Writer,
				info:   c.App.ErrWriter,
			}
			if r.seeded {
				r.gen.Sampling.Seed = c.Uint64("seed")
			}
			switch n := c.Int("repeat-last-n"); {
			case n < -1:
				return fmt.Errorf("run: --repeat-last-n %d: -1 (all of prompt and output), 0 (no penalties) or a count", n)
			case n == 0:
				r.gen.Sampling.RepeatPenalty, r.gen.Sampling.PresencePenalty, r.gen.Sampling.FrequencyPenalty = 0, 0, 0
			default:
				// Over prompt and output (generate gives the prompt).
				r.gen.Sampling.PenaltyWindow, r.penaltyPrompt = max(n, 0), true
			}
			if r.gen.Sampling.LogitBias, err = parseLogitBiasFlags(c.StringSlice("logit-bias")); err != nil {
				return err
			}
			if m, n := c.Float64("dry-multiplier"), c.Int("dry-penalty-last-n"); m != 0 && n != 0 {
				if n < -1 {
					return fmt.Errorf("run: --dry-penalty-last-n %d: -1 (all of prompt and output), 0 (off) or a count", n)
				}
				// The breakers are read once the model's vocabulary is.
				r.gen.Sampling.DRY = &sample.DRY{Multiplier: m, Base: c.Float64("dry-base"), AllowedLength: c.Int("dry-allowed-length"), LastN: max(n, 0)}
				if r.dryBreakers = c.StringSlice("dry-sequence-breaker"); len(r.dryBreakers) == 0 {
					r.dryBreakers = sample.DefaultBreakers
				}
			}
			if v := c.Int("mirostat"); v != 0 {
				r.gen.Sampling.Mirostat = &sample.Mirostat{Version: v, Tau: c.Float64("mirostat-ent"), Eta: c.Float64("mirostat-lr")}
			}
			if t := c.Float64("adaptive-target"); t >= 0 {
				r.gen.Sampling.AdaptiveP = &sample.AdaptiveP{Target: t, Decay: c.Float64("adaptive-decay")}
			}
			if err := r.gen.Sampling.Validate(); err != nil { // before any output
				return err
			}

			draft := c.String("draft")
			if draft != "" && draft != ggufengine.DraftLookup {
				if draft, _, err = cfg.FindModel(draft); err != nil {
					return fmt.Errorf("run: --draft: %w", err)
				}
			}
			if enc, err := ggufengine.IsEncoder(file); err != nil {
				return err
			} else if enc {
				return fmt.Errorf("run: %s is a text encoder (an embedding model or a reranker): it generates no text; serve it (meshnode --model) and ask POST /v1/embeddings or /v1/rerank", file)
			}
			start := time.Now()
			m, err := ggufengine.Load(file, ggufengine.Config{
				Name: name, Threads: c.Int("threads"), Context: c.Int("ctx"), KV: c.String("kv"), Sessions: 1, Draft: draft,
			})
			if err != nil {
				return err
			}
			defer m.Close()
			if c.Bool("ignore-eos") && r.gen.MaxTokens > 0 {
				r.gen.Sampling.MinTokens, r.gen.Sampling.EOG = r.gen.MaxTokens, m.Tokenizer().EOG()
			}
			if err := m.CheckSampling(r.gen.Sampling); err != nil { // before any output
				return fmt.Errorf("run: --logit-bias: %w", err)
			}
			if d := r.gen.Sampling.DRY; d != nil {
				if d.Breakers, err = m.DRYBreakers(r.dryBreakers); err != nil {
					return fmt.Errorf("run: --dry-sequence-breaker: %w", err)
				}
			}
			r.m, r.loaded = m, time.Since(start)
			r.chat = c.Bool("chat") || interactive && m.Template().Kind() != "transcript"
			if interactive {
				return r.converse(c.Context, in)
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt)
			defer stop()
			return r.once(ctx, text)
		},
	}
}

// parseLogitBiasFlags reads --logit-bias values, llama.cpp's ID+BIAS and
// ID-BIAS, each token once.
func parseLogitBiasFlags(vals []string) ([]sample.Bias, error) {
	var out []sample.Bias
	for _, v := range vals {
		i := strings.IndexAny(v, "+-")
		if i <= 0 {
			return nil, fmt.Errorf("run: --logit-bias %q: want TOKEN+BIAS or TOKEN-BIAS, as 15043+1 or 2-100", v)
		}
		id, err := strconv.ParseUint(v[:i], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("run: --logit-bias %q: %q is not a token id", v, v[:i])
		}
		bias, err := strconv.ParseFloat(v[i:], 64)
		if err != nil || math.IsNaN(bias) || bias < -100 || bias > 100 {
			return nil, fmt.Errorf("run: --logit-bias %q: the bias must be a number from -100 to 100", v)
		}
		if slices.ContainsFunc(out, func(b sample.Bias) bool { return b.Token == uint32(id) }) {
			return nil, fmt.Errorf("run: --logit-bias: token %d is biased twice", id)
		}
		out = append(out, sample.Bias{Token: uint32(id), Bias: bias})
	}
	return out, nil
}

// maxRunPrompt bounds a prompt read from stdin.
const maxRunPrompt = 16 << 20

// isTerminal reports whether r is a terminal (a character device), as
// stdin is when nothing is piped to it.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// runner generates with one model for meshnode run.
type runner struct {
	m      *ggufengine.Model
	loaded time.Duration
	gen    ggufengine.Generation
	seeded bool // --seed given: every generation uses it
	chat   bool
	// penaltyPrompt: the penalties count the prompt's tokens too
	// (--repeat-last-n, as llama.cpp's penalty_last_n).
	penaltyPrompt bool
	// dryBreakers are DRY's sequence breakers, read into
	// gen.Sampling.DRY once the model is.
	dryBreakers []string
	out, info   io.Writer
}

// once generates for one prompt: raw text is echoed and continued; a chat
// message is rendered through the template and answered. The rates go to
// the info writer.
func (r *runner) once(ctx context.Context, text string) error {
	prompt, err := r.tokens([]chat.Message{{Role: "user", Content: text}}, text)
	if err != nil {
		return err
	}
	if !r.chat {
		fmt.Fprint(r.out, text)
	}
	_, st, err := r.generate(ctx, prompt)
	if err != nil {
		return err
	}
	mc := r.m.Config()
	fmt.Fprintf(r.info, "\n%s: %s %s, %d layers, %d threads, loaded in %v\n", r.m.Name(), mc.Arch, r.m.Facts().QuantizationType, mc.Layers, r.m.Threads(), r.loaded.Round(time.Millisecond))
	if !st.first.IsZero() {
		pre := st.first.Sub(st.start)
		fmt.Fprintf(r.info, "prompt: %d tokens in %v (%.1f tok/s)\n", st.out.TokensIn, pre.Round(time.Millisecond), float64(st.out.TokensIn)/pre.Seconds())
		if st.out.TokensOut > 1 {
			dt := st.end.Sub(st.first)
			fmt.Fprintf(r.info, "output: %d tokens, %.1f tok/s after the first\n", st.out.TokensOut, float64(st.out.TokensOut-1)/dt.Seconds())
		}
		if st.out.SpecProposed > 0 {
			fmt.Fprintf(r.info, "speculative: %d of %d drafted tokens accepted\n", st.out.SpecAccepted, st.out.SpecProposed)
		}
	}
	return nil
}

// tokens is the prompt for msgs (a chat) or raw (continued as text).
func (r *runner) tokens(msgs []chat.Message, raw string) ([]uint32, error) {
	if !r.chat {
		return r.m.Tokenize(raw, true, false), nil
	}
	text, err := r.m.ApplyChat(msgs)
	if err != nil {
		return nil, err
	}
	return r.m.Tokenize(text, true, true), nil
}

// genStats times one generation.
type genStats struct {
	start, first, end time.Time
	out               engine.Outcome
}

// generate writes prompt's continuation to out as it comes and returns
// its text; a generation cut short by ctx is no error.
func (r *runner) generate(ctx context.Context, prompt []uint32) (string, genStats, error) {
	dec := r.m.NewDecoder()
	var text strings.Builder
	st := genStats{start: time.Now()}
	g := r.gen
	if r.penaltyPrompt {
		g.Sampling.PenaltyContext = prompt
	}
	if d := g.Sampling.DRY; d != nil {
		// DRY scans the prompt too, as llama.cpp's does.
		dry := *d
		dry.Context = prompt
		g.Sampling.DRY = &dry
	}
	out, err := r.m.Engine().Generate(ctx, prompt, g, func(tok uint32) error {
		if st.first.IsZero() {
			st.first = time.Now()
		}
		s, err := dec.Next(tok)
		fmt.Fprint(r.out, s)
		text.WriteString(s)
		return err
	})
	tail := dec.Flush()
	text.WriteString(tail)
	fmt.Fprintln(r.out, tail)
	st.end, st.out = time.Now(), out
	if err != nil && !errors.Is(err, context.Canceled) {
		return "", st, err
	}
	return text.String(), st, nil
}

// converse answers a message a line from in until it ends, /bye, or an
// interrupt while waiting for a line; an interrupt while answering stops
// that answer only. In chat mode the conversation so far is each
// answer's prompt (the engine reuses its cached prefix).
func (r *runner) converse(ctx context.Context, in io.Reader) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)
	lines, done := make(chan string), make(chan struct{})
	defer close(done)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(nil, maxRunPrompt)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-done:
				return
			}
		}
	}()
	mode := "each line is continued as text"
	if r.chat {
		mode = "a conversation through its chat template"
	}
	fmt.Fprintf(r.info, "%s loaded in %v: %s. /clear forgets, /bye or Ctrl-D leaves, Ctrl-C stops an answer.\n",
		r.m.Name(), r.loaded.Round(time.Millisecond), mode)
	var history []chat.Message
	for {
		fmt.Fprint(r.info, ">>> ")
		var line string
		select {
		case l, ok := <-lines:
			if !ok {
				fmt.Fprintln(r.info)
				return nil
			}
			line = l
		case <-sig:
			fmt.Fprintln(r.info)
			return nil
		case <-ctx.Done():
			return nil
		}
		switch strings.TrimSpace(line) {
		case "":
			continue
		case "/bye", "/exit":
			return nil
		case "/clear":
			history = nil
			fmt.Fprintln(r.info, "(the conversation is forgotten)")
			continue
		}
		msgs := append(history, chat.Message{Role: "user", Content: line})
		prompt, err := r.tokens(msgs, line)
		if err != nil {
			return err
		}
		if len(prompt)+r.gen.MaxTokens > r.m.ContextLength() && len(history) > 0 {
			fmt.Fprintf(r.info, "(the conversation no longer fits the model's %d-token context: /clear to start again)\n", r.m.ContextLength())
			continue
		}
		if !r.seeded {
			r.gen.Sampling.Seed = rand.Uint64()
		}
		gctx, cancel := context.WithCancel(ctx)
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			select {
			case <-sig:
				cancel()
			case <-gctx.Done():
			}
		}()
		reply, _, err := r.generate(gctx, prompt)
		cancel()
		<-stopped
		if err != nil {
			return err
		}
		if r.chat {
			history = append(msgs, chat.Message{Role: "assistant", Content: reply})
		}
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
		return nil, "", fmt.Errorf("run: give one model file or name (meshnode run MODEL -p TEXT; the built-in one is %s), got %d arguments", node.BuiltinModelName, len(pos))
	}
	return cli.NewContext(parent.App, set, parent), pos[0], nil
}
