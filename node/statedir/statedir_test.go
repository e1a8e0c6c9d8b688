package statedir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// made creates path as kind with exactly mode perm (umask aside).
func made(t *testing.T, path string, kind Kind, perm os.FileMode) string {
	t.Helper()
	var err error
	if kind == Dir {
		err = os.Mkdir(path, 0o700)
	} else {
		err = os.WriteFile(path, []byte("x"), 0o600)
	}
	if err == nil {
		err = os.Chmod(path, perm)
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// insecure returns the *InsecureError errs holds for path, if any.
func insecure(err error, path string) *InsecureError {
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	} else if err != nil {
		list = []error{err}
	}
	for _, e := range list {
		var ie *InsecureError
		if errors.As(e, &ie) && ie.Path == path {
			return ie
		}
	}
	return nil
}

// TestAttackWeakPermissions: a state dir, a trusted file or a secret that
// group or others can change (or, for a secret, read) is refused, naming
// the exact chmod that fixes it; the modes the node creates, and
// world-readable trusted files, pass.
func TestAttackWeakPermissions(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		kind Kind
		perm os.FileMode
		fix  string // "" when it passes
	}{
		{"world-writable state dir", Dir, 0o777, "chmod 755"},
		{"group-writable dir", Dir, 0o770, "chmod 750"},
		{"sticky world-writable dir", Dir, 0o777 | os.ModeSticky, "chmod 755"},
		{"world-writable journal", File, 0o666, "chmod 644"},
		{"group-writable ownership certificate", File, 0o664, "chmod 644"},
		{"others may write, not read", File, 0o602, "chmod 600"},
		{"readable node key", Secret, 0o644, "chmod 600"},
		{"group-readable secret", Secret, 0o640, "chmod 600"},
		{"private dir", Dir, 0o700, ""},
		{"listable dir", Dir, 0o755, ""},
		{"world-readable config", File, 0o644, ""},
		{"private file", File, 0o600, ""},
		{"private secret", Secret, 0o600, ""},
		{"owner-read-only secret", Secret, 0o400, ""},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := made(t, filepath.Join(dir, strings.Repeat("p", i+1)), tc.kind, tc.perm)
			err := Check(Item{path, tc.kind})
			if tc.fix == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			ie := insecure(err, path)
			if !errors.Is(err, ErrPermissions) || ie == nil || ie.Mode != tc.perm.Perm() || ie.Kind != tc.kind {
				t.Fatalf("got %v, want ErrPermissions for %s", err, path)
			}
			if want := tc.fix + " " + path; ie.Fix != want || !strings.Contains(err.Error(), "run `"+want+"`") {
				t.Fatalf("fix %q in %q, want %q", ie.Fix, err, want)
			}
			if errors.Is(err, ErrOwner) {
				t.Fatalf("a file of ours called foreign: %v", err)
			}
		})
	}
	// A path that does not exist is the node's to create; one that cannot
	// be examined fails.
	if err := Check(Item{filepath.Join(dir, "missing"), Secret}); err != nil {
		t.Fatalf("missing path: %v", err)
	}
	notDir := made(t, filepath.Join(dir, "plain"), File, 0o600)
	if err := Check(Item{filepath.Join(notDir, "x"), File}); err == nil {
		t.Fatal("a path under a file passed")
	}
}

// TestAttackAllProblemsReported: one check lists every fix, not only the
// first.
func TestAttackAllProblemsReported(t *testing.T) {
	dir := made(t, filepath.Join(t.TempDir(), "state"), Dir, 0o777)
	key := made(t, filepath.Join(dir, "node.key"), Secret, 0o644)
	journal := made(t, filepath.Join(dir, "steward.jsonl"), File, 0o666)
	err := Check(Item{dir, Dir}, Item{key, Secret}, Item{journal, File})
	for _, p := range []string{dir, key, journal} {
		if insecure(err, p) == nil {
			t.Errorf("%s not reported in %v", p, err)
		}
	}
}

// TestAttackForeignOwner: a file another user owns is refused, naming the
// chown that fixes it, whatever its mode; one root owns is not. Changing
// a file's owner needs root: as another user the rule is checked against a
// stand-in uid instead.
func TestAttackForeignOwner(t *testing.T) {
	dir := t.TempDir()
	self := os.Geteuid()
	t.Run("planted by another user", func(t *testing.T) {
		if self != 0 {
			t.Skip("chown to another user needs root; the stand-in test below covers the rule")
		}
		cert := made(t, filepath.Join(dir, "node.ownership"), File, 0o644)
		const other = 4242
		if err := os.Chown(cert, other, other); err != nil {
			t.Fatal(err)
		}
		err := Check(Item{cert, File})
		ie := insecure(err, cert)
		if !errors.Is(err, ErrOwner) || ie == nil || ie.Owner != other || ie.Self != 0 {
			t.Fatalf("got %v, want ErrOwner for %s", err, cert)
		}
		if want := "chown root " + cert; ie.Fix != want || !strings.Contains(err.Error(), "run `"+want+"`") ||
			!strings.Contains(err.Error(), "uid 4242") || !strings.Contains(err.Error(), "remove it") {
			t.Fatalf("message %q, want the fix %q", err, want)
		}
	})
	t.Run("stand-in uid", func(t *testing.T) {
		f := made(t, filepath.Join(dir, "mine"), File, 0o600)
		if err := check(self, []Item{{f, File}}); err != nil {
			t.Fatalf("its own file: %v", err)
		}
		// To a node running as another uid, f is foreign, unless root
		// owns it: root's files are trusted by every node user (the
		// package's /etc/meshnode/config.toml is root's).
		err := check(self+1000, []Item{{f, File}})
		if self == 0 {
			if err != nil {
				t.Fatalf("a root-owned file refused: %v", err)
			}
			return
		}
		if ie := insecure(err, f); !errors.Is(err, ErrOwner) || ie == nil || ie.Owner != self {
			t.Fatalf("got %v, want ErrOwner", err)
		}
	})
}
