package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "new", "f")
	if err := Write(path, []byte("one"), 0o600, true); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("two"), 0o600, true); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("exclusive over an existing file = %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "one" {
		t.Fatalf("exclusive write replaced the file: %q", b)
	}
	if err := Write(path, []byte("three"), 0o644, false); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, %v", st.Mode(), err)
	}
	if b, _ := os.ReadFile(path); string(b) != "three" {
		t.Fatalf("got %q", b)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "new", ".*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}
