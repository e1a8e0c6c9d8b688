package owner

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// The files of an owner's config directory.
const (
	// OwnerKeyFile is the owner's signing key (0600). It signs
	// certificates and nothing else.
	OwnerKeyFile = "owner.key"
	// ClientKeyFile is meshcli's QUIC identity (0600), distinct from the
	// owner key so that the owner key never takes part in a handshake.
	ClientKeyFile = "client.key"
	// ClientCertFile is the owner's certificate for the client identity,
	// presented in every owner-control handshake.
	ClientCertFile = "client.ownership"
)

// DefaultTTL is how long Init's client certificate and a signed node's
// certificate last unless told otherwise.
const DefaultTTL = 365 * 24 * time.Hour

// renewBefore: Init re-issues a client certificate this close to expiry.
const renewBefore = 7 * 24 * time.Hour

// ErrNoOwnerKey is returned when the config dir has no owner key yet.
var ErrNoOwnerKey = errors.New("owner: no owner key (run `meshcli auth init`)")

// Dir is an owner's config directory.
type Dir string

// DefaultDir is meshcli's directory under the user's config dir
// ($XDG_CONFIG_HOME or ~/.config on Linux, ~/Library/Application Support
// on macOS).
func DefaultDir() (Dir, error) {
	base, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("owner: no config dir: %w", err)
	}
	return Dir(filepath.Join(base, "meshcli")), nil
}

// Path is the path of a file in the directory.
func (d Dir) Path(name string) string { return filepath.Join(string(d), name) }

// OwnerKey loads the owner key.
func (d Dir) OwnerKey() (*identity.Key, error) {
	k, err := identity.LoadKey(d.Path(OwnerKeyFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s does not exist", ErrNoOwnerKey, d.Path(OwnerKeyFile))
	}
	return k, err
}

// Client loads the client identity and its certificate, and checks that
// they belong together and that the certificate is valid at now.
func (d Dir) Client(now time.Time) (*identity.Key, *nodev1.SignedNodeOwnership, error) {
	k, err := identity.LoadKey(d.Path(ClientKeyFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("owner: no client identity at %s (run `meshcli auth init`)", d.Path(ClientKeyFile))
	}
	if err != nil {
		return nil, nil, err
	}
	c, err := Load(d.Path(ClientCertFile))
	if err != nil {
		return nil, nil, fmt.Errorf("%w (run `meshcli auth init` to issue a new one)", err)
	}
	if got := EndpointOf(c); got != k.ID() {
		return nil, nil, fmt.Errorf("%w: %s certifies %s, but the client key is %s (run `meshcli auth init`)",
			ErrWrongEndpoint, d.Path(ClientCertFile), got.Short(), k.ID().Short())
	}
	if err := Verify(c, now); err != nil {
		return nil, nil, fmt.Errorf("%s: %w (run `meshcli auth init` to renew it)", d.Path(ClientCertFile), err)
	}
	return k, c, nil
}

// InitOptions tune Init.
type InitOptions struct {
	Now   time.Time
	TTL   time.Duration // of the client certificate; DefaultTTL when zero
	Label string        // the client certificate's label
	Rand  io.Reader     // crypto/rand when nil
}

// InitReport says what Init found and did.
type InitReport struct {
	Owner         PublicKey
	Client        identity.EndpointID
	Expires       time.Time // the client certificate's
	CreatedOwner  bool
	CreatedClient bool
	IssuedCert    bool
}

// Init makes the directory ready for owner control: it creates the owner
// key and the client key where they are missing (never replacing one), and
// issues the client certificate where it is missing, invalid, not for
// these keys, or within a week of expiry. Running it again is harmless.
func (d Dir) Init(o InitOptions) (InitReport, error) {
	var r InitReport
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	ownerKey, created, err := d.loadOrCreate(OwnerKeyFile, o.Rand)
	if err != nil {
		return r, err
	}
	r.Owner, r.CreatedOwner = KeyOf(ownerKey), created
	clientKey, created, err := d.loadOrCreate(ClientKeyFile, o.Rand)
	if err != nil {
		return r, err
	}
	r.Client, r.CreatedClient = clientKey.ID(), created

	if c, err := Load(d.Path(ClientCertFile)); err == nil && OwnerOf(c) == r.Owner &&
		EndpointOf(c) == r.Client && Verify(c, o.Now.Add(renewBefore)) == nil {
		r.Expires = Expires(c)
		return r, nil
	}
	c, err := Issue(ownerKey, Options{Endpoint: r.Client, IssuedAt: o.Now, ExpiresAt: o.Now.Add(o.TTL), Label: o.Label, Rand: o.Rand})
	if err != nil {
		return r, err
	}
	if err := Save(d.Path(ClientCertFile), c); err != nil {
		return r, err
	}
	r.Expires, r.IssuedCert = Expires(c), true
	return r, nil
}

func (d Dir) loadOrCreate(name string, rnd io.Reader) (*identity.Key, bool, error) {
	path := d.Path(name)
	k, err := identity.LoadKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, false, err
	}
	if k, err = identity.GenerateKey(rnd); err != nil {
		return nil, false, err
	}
	b, err := k.MarshalPEM()
	if err != nil {
		return nil, false, err
	}
	if err := writeFile(path, b, 0o600, true); err != nil {
		if errors.Is(err, fs.ErrExist) { // another init won the race: use its key
			k, err = identity.LoadKey(path)
			return k, false, err
		}
		return nil, false, err
	}
	return k, true, nil
}
