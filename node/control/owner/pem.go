package owner

import (
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/control/internal/atomicfile"

	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// PEMType is the PEM block type of a certificate file.
const PEMType = "MESHNODE NODE OWNERSHIP"

// Size bounds. A certificate with every field at its limit encodes to well
// under MaxCertBytes.
const (
	MaxCertBytes = 2 << 10
	maxFileBytes = 16 << 10
)

// Marshal encodes a certificate as deterministic protobuf.
func Marshal(c *nodev1.SignedNodeOwnership) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("owner: encode certificate: %w", err)
	}
	return b, nil
}

// Unmarshal decodes a certificate from protobuf, bounding its size and
// checking its shape (Check). It does not verify the signature.
func Unmarshal(b []byte) (*nodev1.SignedNodeOwnership, error) {
	if len(b) > MaxCertBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrMalformed, len(b), MaxCertBytes)
	}
	c := new(nodev1.SignedNodeOwnership)
	if err := proto.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := Check(c); err != nil {
		return nil, err
	}
	return c, nil
}

// MarshalPEM writes a certificate as a PEM block whose headers repeat, for
// people reading the file, who it binds to whom and until when. Only the
// block's body counts; the headers are ignored when it is read.
func MarshalPEM(c *nodev1.SignedNodeOwnership) ([]byte, error) {
	b, err := Marshal(c)
	if err != nil {
		return nil, err
	}
	h := map[string]string{
		"Owner":    c.GetOwnerId(),
		"Endpoint": EndpointOf(c).String(),
		"Expires":  Expires(c).Format(time.RFC3339),
	}
	if c.NodeLabel != nil {
		h["Label"] = c.GetNodeLabel()
	}
	return pem.EncodeToMemory(&pem.Block{Type: PEMType, Headers: h, Bytes: b}), nil
}

// ParsePEM reads what MarshalPEM wrote: exactly one certificate block.
func ParsePEM(b []byte) (*nodev1.SignedNodeOwnership, error) {
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("%w: %d bytes of PEM, limit %d", ErrMalformed, len(b), maxFileBytes)
	}
	block, rest := pem.Decode(b)
	switch {
	case block == nil:
		return nil, fmt.Errorf("%w: no PEM block", ErrMalformed)
	case block.Type != PEMType:
		return nil, fmt.Errorf("%w: PEM block is %q, want %q", ErrMalformed, block.Type, PEMType)
	case len(bytes.TrimSpace(rest)) != 0:
		return nil, fmt.Errorf("%w: data after the PEM block", ErrMalformed)
	}
	return Unmarshal(block.Bytes)
}

// Load reads a certificate file (PEM).
func Load(path string) (*nodev1.SignedNodeOwnership, error) {
	b, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	c, err := ParsePEM(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Save writes a certificate file atomically. A certificate is public (a
// node advertises its own), so the file is world-readable.
func Save(path string, c *nodev1.SignedNodeOwnership) error {
	b, err := MarshalPEM(c)
	if err != nil {
		return err
	}
	return writeFile(path, b, 0o644, false)
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("owner: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("owner: read %s: %w", path, err)
	}
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("%s: %w: larger than %d bytes", path, ErrMalformed, maxFileBytes)
	}
	return b, nil
}

func writeFile(path string, data []byte, perm os.FileMode, exclusive bool) error {
	if err := atomicfile.Write(path, data, perm, exclusive); err != nil {
		return fmt.Errorf("owner: %w", err)
	}
	return nil
}
