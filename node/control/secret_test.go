package control_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshnode/meshnode/node/control"
)

// TestSecretFile: a node writes a fresh credential at every start, 0600;
// a reader refuses one others can access and anything that is not one.
func TestSecretFile(t *testing.T) {
	dir := t.TempDir()
	a, err := control.WriteSecret(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, control.SecretFile)
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("credential file: %v %v", st, err)
	}
	if got, err := control.ReadSecret(path); err != nil || got != a {
		t.Fatalf("read back %q, %v; wrote %q", got, err, a)
	}
	b, err := control.WriteSecret(dir)
	if err != nil || b == a {
		t.Fatalf("a second start kept the credential: %q %v", b, err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := control.ReadSecret(path); !errors.Is(err, control.ErrSecretPermissions) {
		t.Fatalf("a 0640 credential: %v", err)
	}
	for _, body := range []string{"", "zz", a[:10], a + a} {
		bad := filepath.Join(t.TempDir(), "bad")
		if err := os.WriteFile(bad, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := control.ReadSecret(bad); !errors.Is(err, control.ErrBadSecret) {
			t.Errorf("%q: %v", body, err)
		}
	}
}
