package main

import (
	"os"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestHelpEverywhere: every command and subcommand answers --help.
func TestHelpEverywhere(t *testing.T) {
	c := newCLI(t, "http://127.0.0.1:1")
	var walk func(prefix []string, cmds []*cli.Command)
	n := 0
	walk = func(prefix []string, cmds []*cli.Command) {
		for _, cmd := range cmds {
			args := append(append([]string{}, prefix...), cmd.Name)
			out := c.ok(append(args, "--help")...)
			if !strings.Contains(out, "USAGE:") || !strings.Contains(out, cmd.Usage) {
				t.Errorf("meshcli %s --help: %s", strings.Join(args, " "), out)
			}
			n++
			walk(args, cmd.Subcommands)
		}
	}
	walk(nil, newApp(newEnv(nil, nil)).Commands)
	if n < 20 {
		t.Fatalf("only %d commands have help", n)
	}
}

func TestCompletion(t *testing.T) {
	c := newCLI(t, "http://127.0.0.1:1")
	if out := c.ok("completion", "bash"); !strings.Contains(out, "complete -o bashdefault -o default -F _meshcli meshcli") {
		t.Fatalf("bash: %s", out)
	}
	if out := c.ok("completion", "zsh"); !strings.HasPrefix(out, "autoload -U +X bashcompinit") {
		t.Fatalf("zsh: %s", out)
	}
	if out := c.ok("completion", "fish"); !strings.Contains(out, "complete -c meshcli") || !strings.Contains(out, "scan-refresh") {
		t.Fatalf("fish: %s", out)
	}
	c.fail("completion", "tcsh")
	// The words bash completes come from meshcli itself. urfave/cli reads
	// the command line from os.Args for this.
	defer func(saved []string) { os.Args = saved }(os.Args)
	os.Args = []string{"meshcli", "config", "--generate-bash-completion"}
	if out := c.ok("config", "--generate-bash-completion"); !strings.Contains(out, "apply") || !strings.Contains(out, "watch") {
		t.Fatalf("config completions: %q", out)
	}
}

// TestNoNode: without a node to talk to, commands fail in one line that
// says what to do.
func TestNoNode(t *testing.T) {
	c := newCLI(t, "http://127.0.0.1:1")
	for _, args := range [][]string{{"status"}, {"peers"}, {"invite"}, {"load", "alpha"}, {"config", "get"}, {"models"}} {
		msg := c.fail(args...)
		if !strings.Contains(msg, "$API") {
			t.Errorf("meshcli %s: %s", strings.Join(args, " "), msg)
		}
	}
	if msg := c.fail("status"); !strings.Contains(msg, "is meshnode running") {
		t.Fatalf("status: %s", msg)
	}
	if msg := c.fail("frobnicate"); !strings.Contains(msg, "frobnicate") {
		t.Fatalf("unknown command: %s", msg)
	}
}
