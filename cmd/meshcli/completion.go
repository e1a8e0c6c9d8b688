package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// bashCompletion asks meshcli itself for the words that may follow
// (urfave/cli's --generate-bash-completion).
const bashCompletion = `_meshcli() {
  local cur="${COMP_WORDS[COMP_CWORD]}" words
  if [[ "$cur" == -* ]]; then
    words=$("${COMP_WORDS[@]:0:$COMP_CWORD}" "$cur" --generate-bash-completion 2>/dev/null)
  else
    words=$("${COMP_WORDS[@]:0:$COMP_CWORD}" --generate-bash-completion 2>/dev/null)
  fi
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o bashdefault -o default -F _meshcli meshcli
`

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script (bash, zsh or fish)",
		ArgsUsage: "SHELL",
		Description: "  bash: source <(meshcli completion bash)\n" +
			"  zsh:  source <(meshcli completion zsh)\n" +
			"  fish: meshcli completion fish | source",
		Action: func(c *cli.Context) error {
			w := envOf(c).stdout
			switch c.Args().First() {
			case "bash":
				_, err := fmt.Fprint(w, bashCompletion)
				return err
			case "zsh":
				_, err := fmt.Fprint(w, "autoload -U +X bashcompinit && bashcompinit\n"+bashCompletion)
				return err
			case "fish":
				s, err := c.App.ToFishCompletion()
				if err != nil {
					return err
				}
				_, err = fmt.Fprint(w, s)
				return err
			}
			return fmt.Errorf("completion takes bash, zsh or fish, not %q", c.Args().First())
		},
	}
}
