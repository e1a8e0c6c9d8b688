package control

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/meshnode/meshnode/node/control/internal/atomicfile"
)

// SecretFile is the file in a node's state dir holding its local control
// credential: the secret the loopback REST facade requires in SecretHeader.
// It is 0600, so only the node's own user (and root) can read it, and that
// is who may drive the node through the facade. Any other local process
// can reach the loopback port; it cannot read the file.
const SecretFile = "control.secret"

// SecretHeader carries the local control credential. It is not
// Authorization, which carries the node's API key when one is set.
const SecretHeader = "X-Meshnode-Control-Secret"

// secretBytes is the credential's entropy; it is written as hex.
const secretBytes = 32

// Errors reading a credential file.
var (
	// ErrSecretPermissions: the file is readable or writable by group or
	// others, so it proves nothing about who read it.
	ErrSecretPermissions = errors.New("control: the local control credential is accessible to other users")
	// ErrBadSecret: the file does not hold a credential.
	ErrBadSecret = errors.New("control: not a local control credential")
)

// WriteSecret draws a fresh credential and writes it to SecretFile in
// stateDir (0600, atomically), replacing any earlier one: a node rotates
// it at every start, so a copy taken from an earlier run is useless.
func WriteSecret(stateDir string) (string, error) {
	var b [secretBytes]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		return "", fmt.Errorf("control: local credential: %w", err)
	}
	s := hex.EncodeToString(b[:])
	if err := atomicfile.Write(filepath.Join(stateDir, SecretFile), []byte(s+"\n"), 0o600, false); err != nil {
		return "", fmt.Errorf("control: local credential: %w", err)
	}
	return s, nil
}

// ReadSecret reads a credential file as WriteSecret wrote it, refusing
// one that group or others can access.
func ReadSecret(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("control: local credential: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("control: local credential: %w", err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %s is not a regular file", ErrBadSecret, path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("%w: %s has mode %04o; run `chmod 600 %s`, and restart the node to rotate it",
			ErrSecretPermissions, path, perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 2*secretBytes+2))
	if err != nil {
		return "", fmt.Errorf("control: local credential %s: %w", path, err)
	}
	s := strings.TrimSpace(string(b))
	if raw, err := hex.DecodeString(s); err != nil || len(raw) != secretBytes {
		return "", fmt.Errorf("%w: %s does not hold %d hex-encoded bytes", ErrBadSecret, path, secretBytes)
	}
	return s, nil
}
