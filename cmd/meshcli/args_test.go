package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/control/controltest"
	"github.com/meshnode/meshnode/node/control/owner"
)

func TestFlagsFirst(t *testing.T) {
	app := newApp(newEnv(nil, nil))
	tests := []struct{ in, want string }{
		{"meshcli auth sign-node ID -o f --label x", "meshcli auth sign-node -o f --label x ID"},
		{"meshcli --endpoint T drain alpha --timeout 2s", "meshcli --endpoint T drain --timeout 2s alpha"},
		{"meshcli config apply FILE --revision=3", "meshcli config apply --revision=3 FILE"},
		{"meshcli status --json", "meshcli status --json"},
		{"meshcli models --json extra", "meshcli models --json extra"},
		{"meshcli load -- -odd-name --x", "meshcli load -- -odd-name --x"},
		{"meshcli load m --unknown v", "meshcli load --unknown m v"}, // urfave/cli refuses --unknown
		// "-h" or "--help" as a flag's value is that value, not help.
		{"meshcli auth sign-node ID -o -h", "meshcli auth sign-node -o -h ID"},
		{"meshcli auth sign-node ID --label --help -o f", "meshcli auth sign-node --label --help -o f ID"},
		{"meshcli auth sign-node ID -o", "error: flag -o needs a value"},
		{"meshcli --endpoint", "error: flag --endpoint needs a value"},
		{"meshcli config --generate-bash-completion", "meshcli config --generate-bash-completion"},
		{"meshcli", "meshcli"},
	}
	for _, tt := range tests {
		args, err := flagsFirst(app, strings.Fields(tt.in))
		got := strings.Join(args, " ")
		if err != nil {
			got = "error: " + err.Error()
		}
		if got != tt.want {
			t.Errorf("flagsFirst(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// TestFlagsAfterArguments: a command's flags work after its arguments, as
// `meshcli auth sign-node NODE_ID -o FILE` in the docs writes them.
func TestFlagsAfterArguments(t *testing.T) {
	c := newCLI(t, "http://127.0.0.1:1")
	c.ok("auth", "init")
	node := controltest.Key(t, controltest.SeedNode)
	out := filepath.Join(t.TempDir(), "node.ownership")
	c.ok("auth", "sign-node", node.ID().String(), "--label", "bench-1", "-o", out)
	cert, err := owner.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if cert.GetNodeLabel() != "bench-1" {
		t.Fatalf("certificate label %q, want the flag's", cert.GetNodeLabel())
	}
	var stdout, stderr bytes.Buffer
	if code := c.runWith(&stdout, &stderr, "auth", "sign-node", node.ID().String(), "-o"); code == 0 ||
		stderr.String() != "meshcli: flag -o needs a value\n" {
		t.Fatalf("a flag without its value: exit %d, %q", code, stderr.String())
	}
	if out := c.ok("load", "alpha", "--help"); !strings.Contains(out, "USAGE:") {
		t.Fatalf("help after an argument: %q", out)
	}
}
