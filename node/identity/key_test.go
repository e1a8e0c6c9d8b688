package identity

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestLoadOrCreateKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	k1, created, err := LoadOrCreateKey(dir)
	if err != nil || !created {
		t.Fatalf("first LoadOrCreateKey = created %v, %v", created, err)
	}
	st, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("key mode = %04o, want 0600", st.Mode().Perm())
	}
	if dst, _ := os.Stat(dir); dst.Mode().Perm() != 0o700 {
		t.Fatalf("state dir mode = %04o, want 0700", dst.Mode().Perm())
	}
	k2, created, err := LoadOrCreateKey(dir)
	if err != nil || created {
		t.Fatalf("second LoadOrCreateKey = created %v, %v", created, err)
	}
	if k1.ID() != k2.ID() {
		t.Fatal("reloaded key has a different id")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("state dir holds %d entries, want only the key (temp files left behind?)", len(entries))
	}
}

func TestLoadOrCreateKeyRace(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	ids := make([]EndpointID, 8)
	errs := make([]error, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, _, err := LoadOrCreateKey(dir)
			if err == nil {
				ids[i] = k.ID()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i := range ids {
		if errs[i] != nil {
			t.Fatalf("racer %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("racers disagree on the node id")
		}
	}
}

func TestLoadKeyRefusesOpenPermissions(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := LoadOrCreateKey(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, KeyFile)
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, _, err := LoadOrCreateKey(dir)
		if !errors.Is(err, ErrKeyPermissions) {
			t.Fatalf("mode %04o: error = %v, want ErrKeyPermissions", mode, err)
		}
		if !strings.Contains(err.Error(), "chmod 600 "+path) {
			t.Fatalf("mode %04o: error %q does not say how to fix it", mode, err)
		}
	}
}

func TestLoadKeyBadFiles(t *testing.T) {
	dir := t.TempDir()
	other, _ := GenerateKey(nil)
	good, _ := other.MarshalPEM()
	tests := map[string][]byte{
		"empty":          {},
		"not pem":        []byte("hello"),
		"wrong type":     []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
		"bad der":        []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"),
		"trailing data":  append(append([]byte{}, good...), []byte("junk")...),
		"oversized file": append(append([]byte{}, good...), make([]byte, maxKeyFileBytes)...),
	}
	for name, data := range tests {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadKey(path); !errors.Is(err, ErrBadKeyFile) {
			t.Errorf("%s: error = %v, want ErrBadKeyFile", name, err)
		}
	}
	if _, err := LoadKey(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: error = %v, want ErrNotExist", err)
	}
}

func TestKeyPEMRoundTrip(t *testing.T) {
	k := rfc8032Key(t)
	b, err := k.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseKeyPEM(b)
	if err != nil || back.ID() != k.ID() {
		t.Fatalf("round trip = %v, %v", back, err)
	}
}
