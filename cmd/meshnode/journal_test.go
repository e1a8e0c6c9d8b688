package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward/journal"
)

// cutJournal writes a journal of three sealed receipts in stateDir and cuts
// the last, as a rollback would; the journal then refuses to open.
func cutJournal(t *testing.T, stateDir string) string {
	t.Helper()
	path := node.JournalPath(stateDir)
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(0); i < 3; i++ {
		if _, err := j.Append(journal.Entry{Sealed: &journal.Sealed{Sequence: i, Envelope: receipt.Sum([]byte{byte(i)})}}); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	raw, _ := os.ReadFile(path)
	lines := bytes.SplitAfter(raw, []byte("\n"))
	if err := os.WriteFile(path, bytes.Join(lines[:2], nil), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := journal.Open(path, journal.Options{}); !errors.Is(err, journal.ErrRolledBack) {
		t.Fatalf("cut journal opens: %v", err)
	}
	return path
}

func runApp(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &out
	err := app.Run(append([]string{"meshnode"}, args...))
	return out.String(), err
}

// TestJournalAcceptRollback: `meshnode journal accept-rollback` re-anchors
// a cut journal's checkpoint, with --state-dir after the command, the
// daemon's own before it, or the default state dir, says what that means,
// and does nothing to a journal that already agrees; it refuses while a
// node holds the journal.
func TestJournalAcceptRollback(t *testing.T) {
	home := isolate(t)
	for _, tc := range []struct {
		dir  string
		args []string
	}{
		{filepath.Join(home, "a"), []string{"journal", "accept-rollback", "--state-dir", filepath.Join(home, "a")}},
		{filepath.Join(home, "b"), []string{"--state-dir", filepath.Join(home, "b"), "journal", "accept-rollback"}},
		{node.DefaultStateDir(), []string{"journal", "accept-rollback"}},
	} {
		args := tc.args
		path := cutJournal(t, tc.dir)
		out, err := runApp(t, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		for _, want := range []string{path, "was 3 records", "2 records", "Accepted", "may now be used again"} {
			if !strings.Contains(out, want) {
				t.Errorf("%v: output lacks %q:\n%s", args, want, out)
			}
		}
		j, err := journal.Open(path, journal.Options{})
		if err != nil {
			t.Fatalf("%v: the journal still refuses: %v", args, err)
		}
		if _, err := runApp(t, args...); !errors.Is(err, journal.ErrLocked) || !strings.Contains(err.Error(), "stop the node first") {
			t.Fatalf("%v: while the journal is held: %v", args, err)
		}
		j.Close()
		if out, err := runApp(t, args...); err != nil || !strings.Contains(out, "Nothing to accept") {
			t.Fatalf("%v: again: %v\n%s", args, err, out)
		}
	}
}
