package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// flagsFirst moves the flags that follow a command's arguments in front of
// them, so that `meshcli auth sign-node NODE_ID -o FILE` reads as written:
// urfave/cli v2 stops reading flags at a command's first argument and
// would take "-o" and FILE for arguments. It follows the command path
// through the app's commands, knows which flags take a value, and leaves
// everything after "--" (and a shell-completion request) as it is. A
// flag that wants a value and ends the line is an error, here rather than
// one that takes the argument moved behind it for its value.
func flagsFirst(app *cli.App, args []string) ([]string, error) {
	if len(args) < 2 || slices.Contains(args, "--generate-bash-completion") {
		return args, nil
	}
	out := []string{args[0]}
	rest := args[1:]
	flags, cmds := app.Flags, app.Commands
	// The command path: each level's own flags, then a command name.
	for len(rest) > 0 {
		a := rest[0]
		if isFlag(a) {
			n := flagWidth(flags, a)
			if n > len(rest) {
				return nil, fmt.Errorf("flag %s needs a value", a)
			}
			out, rest = append(out, rest[:n]...), rest[n:]
			continue
		}
		c := findCommand(cmds, a)
		if c == nil {
			break
		}
		out, rest = append(out, a), rest[1:]
		flags, cmds = c.Flags, c.Subcommands
	}
	// The leaf command's arguments, with its flags among them.
	var fl, pos []string
	help := false
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			pos = append(pos, rest[i:]...)
			break
		}
		if !isFlag(a) {
			pos = append(pos, a)
			continue
		}
		n := flagWidth(flags, a)
		if i+n > len(rest) {
			return nil, fmt.Errorf("flag %s needs a value", a)
		}
		// Only a flag is help; "-h" as another flag's value is that value.
		help = help || a == "-h" || a == "--help"
		fl = append(fl, rest[i:i+n]...)
		i += n - 1
	}
	if help {
		pos = nil // urfave/cli would read an argument after --help as a help topic
	}
	return append(append(out, fl...), pos...), nil
}

func isFlag(a string) bool { return len(a) > 1 && a[0] == '-' && a != "--" }

// flagWidth is how many arguments the flag a takes up: 1 for a boolean,
// a -name=value or a flag the command does not know (urfave/cli reports
// it), 2 for a flag followed by its value.
func flagWidth(flags []cli.Flag, a string) int {
	name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
	if hasValue {
		return 1
	}
	for _, f := range flags {
		if !slices.Contains(f.Names(), name) {
			continue
		}
		if _, isBool := f.(*cli.BoolFlag); isBool {
			return 1
		}
		if d, ok := f.(cli.DocGenerationFlag); ok && !d.TakesValue() {
			return 1
		}
		return 2
	}
	return 1
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if slices.Contains(c.Names(), name) {
			return c
		}
	}
	return nil
}
