package control

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/meshnode/meshnode/discovery/token"
	"github.com/meshnode/meshnode/node/control/internal/atomicfile"
	"github.com/meshnode/meshnode/node/mesh"
)

// EndpointPrefix starts every control endpoint token, so that one is never
// mistaken for an invite token (which always starts "eyJ").
const EndpointPrefix = "ctl1."

// EndpointFile is the file in a node's state dir that holds its control
// endpoint token.
const EndpointFile = "control.token"

// EncodeEndpoint returns the control endpoint token for a node's address:
// EndpointPrefix, then the address in invite-token form. The owner gets it
// out of band (the node prints it and writes it to EndpointFile); it is
// never gossiped, routed or shown in /api/status.
func EncodeEndpoint(a mesh.EndpointAddr) (string, error) {
	t, err := token.Encode(a)
	if err != nil {
		return "", fmt.Errorf("control endpoint token: %w", err)
	}
	return EndpointPrefix + t, nil
}

// ParseEndpoint reads a control endpoint token.
func ParseEndpoint(s string) (mesh.EndpointAddr, error) {
	s = strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(s, EndpointPrefix)
	if !ok {
		if _, err := token.Decode(s); err == nil {
			return mesh.EndpointAddr{}, fmt.Errorf("%w: that is an invite token; a control endpoint token starts %q (the node prints it at start and keeps it in %s in its state dir)",
				ErrEndpointRequired, EndpointPrefix, EndpointFile)
		}
		return mesh.EndpointAddr{}, fmt.Errorf("%w: a control endpoint token starts %q", ErrEndpointRequired, EndpointPrefix)
	}
	a, err := token.Decode(rest)
	if err != nil {
		return mesh.EndpointAddr{}, fmt.Errorf("%w: %w", ErrEndpointRequired, err)
	}
	return a, nil
}

// WriteEndpointFile writes the node's control endpoint token to
// EndpointFile in its state dir (0600: it is for the owner, out of band)
// and returns it.
func WriteEndpointFile(stateDir string, a mesh.EndpointAddr) (string, error) {
	tok, err := EncodeEndpoint(a)
	if err != nil {
		return "", err
	}
	if err := atomicfile.Write(filepath.Join(stateDir, EndpointFile), []byte(tok+"\n"), 0o600, false); err != nil {
		return "", fmt.Errorf("control endpoint token: %w", err)
	}
	return tok, nil
}
