package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// KeyFile is the node key's file name inside the state dir.
const KeyFile = "node.key"

// maxKeyFileBytes bounds what LoadKey reads: a PEM PKCS#8 Ed25519 key is
// 119 bytes, so anything near this is not a node key.
const maxKeyFileBytes = 16 << 10

// ErrKeyPermissions is returned for a key file that group or others can
// read or write; the message says how to fix it.
var ErrKeyPermissions = errors.New("identity: node key file is accessible to group or others")

// ErrBadKeyFile is wrapped by every failure to parse a key file.
var ErrBadKeyFile = errors.New("identity: bad node key file")

// Key is a node's Ed25519 private key.
type Key struct {
	priv ed25519.PrivateKey
	id   EndpointID
}

// NewKey wraps an Ed25519 private key.
func NewKey(priv ed25519.PrivateKey) (*Key, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("%w: private key is %d bytes, want %d", ErrBadKeyFile, len(priv), ed25519.PrivateKeySize)
	}
	id, err := IDFromPublicKey(priv.Public().(ed25519.PublicKey))
	if err != nil {
		return nil, err
	}
	return &Key{priv: priv, id: id}, nil
}

// KeyFromSeed derives a key from a 32-byte RFC 8032 seed (tests and
// conformance vectors use fixed seeds).
func KeyFromSeed(seed []byte) (*Key, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("%w: seed is %d bytes, want %d", ErrBadKeyFile, len(seed), ed25519.SeedSize)
	}
	return NewKey(ed25519.NewKeyFromSeed(seed))
}

// GenerateKey makes a fresh key from rnd (crypto/rand when nil).
func GenerateKey(rnd io.Reader) (*Key, error) {
	if rnd == nil {
		rnd = rand.Reader
	}
	_, priv, err := ed25519.GenerateKey(rnd)
	if err != nil {
		return nil, fmt.Errorf("identity: generate key: %w", err)
	}
	return NewKey(priv)
}

// ID returns the key's EndpointID.
func (k *Key) ID() EndpointID { return k.id }

// Public returns the public half.
func (k *Key) Public() ed25519.PublicKey { return k.id.PublicKey() }

// Private returns the private key, for signers (COSE, TLS) that need the
// crypto.Signer.
func (k *Key) Private() ed25519.PrivateKey { return k.priv }

// Sign signs msg with Ed25519.
func (k *Key) Sign(msg []byte) []byte { return ed25519.Sign(k.priv, msg) }

// DIDKey is the key's did:key.
func (k *Key) DIDKey() string { return k.id.DIDKey() }

// MarshalPEM encodes the key as a PKCS#8 "PRIVATE KEY" PEM block, the form
// openssl reads.
func (k *Key) MarshalPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k.priv)
	if err != nil {
		return nil, fmt.Errorf("identity: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseKeyPEM decodes what MarshalPEM wrote.
func ParseKeyPEM(b []byte) (*Key, error) {
	block, rest := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("%w: no PEM block", ErrBadKeyFile)
	}
	if block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: PEM block is %q, want \"PRIVATE KEY\"", ErrBadKeyFile, block.Type)
	}
	if len(pemTrim(rest)) != 0 {
		return nil, fmt.Errorf("%w: trailing data after the PEM block", ErrBadKeyFile)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadKeyFile, err)
	}
	priv, ok := parsed.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: key is %T, want Ed25519", ErrBadKeyFile, parsed)
	}
	return NewKey(priv)
}

func pemTrim(b []byte) []byte {
	for len(b) > 0 && (b[0] == '\n' || b[0] == '\r' || b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// LoadKey reads the key at path, refusing a file that group or others can
// access: a node key is the node's identity and its steward's signing key.
func LoadKey(path string) (*Key, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrBadKeyFile, path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %04o; run `chmod 600 %s` (and check who could have read it)",
			ErrKeyPermissions, path, perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("identity: read %s: %w", path, err)
	}
	if len(b) > maxKeyFileBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrBadKeyFile, path, maxKeyFileBytes)
	}
	k, err := ParseKeyPEM(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// LoadOrCreateKey loads stateDir/node.key, creating the dir (0700) and a
// fresh key (0600, written atomically) when there is none. created reports
// whether the key is new.
func LoadOrCreateKey(stateDir string) (k *Key, created bool, err error) {
	path := filepath.Join(stateDir, KeyFile)
	k, err = LoadKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, false, err
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, false, fmt.Errorf("identity: create state dir: %w", err)
	}
	k, err = GenerateKey(nil)
	if err != nil {
		return nil, false, err
	}
	b, err := k.MarshalPEM()
	if err != nil {
		return nil, false, err
	}
	won, err := createExclusive(path, b)
	if err != nil {
		return nil, false, err
	}
	if !won {
		// Another process created the key between our load and our
		// create: use theirs, so both agree on one identity.
		k, err = LoadKey(path)
		return k, false, err
	}
	return k, true, nil
}

// createExclusive writes data to path atomically with mode 0600 unless path
// already exists (then it reports false). The data is synced to a temporary
// file that is then hard-linked into place, so a reader never sees a partial
// key and two racing creators never overwrite each other.
func createExclusive(path string, data []byte) (bool, error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".node.key.tmp-*")
	if err != nil {
		return false, fmt.Errorf("identity: %w", err)
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName)
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return false, fmt.Errorf("identity: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return false, fmt.Errorf("identity: write key: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return false, fmt.Errorf("identity: sync key: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return false, fmt.Errorf("identity: %w", err)
	}
	if err := os.Link(tmpName, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		return false, fmt.Errorf("identity: install key: %w", err)
	}
	syncDir(dir)
	return true, nil
}

// syncDir makes a new directory entry durable; best effort, since not every
// platform can sync a directory.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
