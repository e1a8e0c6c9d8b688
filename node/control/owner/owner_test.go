package owner

import (
	"bytes"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

var update = flag.Bool("update", false, "rewrite golden files")

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func seededKey(t testing.TB, b byte) *identity.Key {
	t.Helper()
	k, err := identity.KeyFromSeed(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// zeroRand makes certificate ids deterministic.
type zeroRand struct{}

func (zeroRand) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func issue(t testing.TB, ownerKey *identity.Key, ep identity.EndpointID) *nodev1.SignedNodeOwnership {
	t.Helper()
	c, err := Issue(ownerKey, Options{Endpoint: ep, IssuedAt: t0, ExpiresAt: t0.Add(24 * time.Hour),
		Label: "bench-1", HostnameHint: "jetson.local", Rand: zeroRand{}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSigningBytesGolden pins the signed form and the signature: another
// implementation must produce these bytes to interoperate.
func TestSigningBytesGolden(t *testing.T) {
	c := issue(t, seededKey(t, 1), seededKey(t, 2).ID())
	msg, err := SigningBytes(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(msg, []byte("meshnode/node-ownership/v1\n")) {
		t.Fatalf("signing bytes lack the domain tag: %q", msg[:32])
	}
	got := "signing_bytes " + hex.EncodeToString(msg) + "\nsignature " + hex.EncodeToString(c.GetSignature()) + "\n"
	golden(t, "signing-bytes.txt", []byte(got))
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs:\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

func TestIssueVerify(t *testing.T) {
	ownerKey, node := seededKey(t, 1), seededKey(t, 2).ID()
	c := issue(t, ownerKey, node)
	if err := Verify(c, t0.Add(time.Hour)); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if OwnerOf(c) != KeyOf(ownerKey) || EndpointOf(c) != node {
		t.Fatal("certificate names the wrong owner or endpoint")
	}
	if c.GetOwnerId() != ownerKey.DIDKey() {
		t.Fatalf("owner_id %q, want the owner's did:key", c.GetOwnerId())
	}
	if !Issued(c).Equal(t0) || !Expires(c).Equal(t0.Add(24*time.Hour)) {
		t.Fatalf("validity %v..%v", Issued(c), Expires(c))
	}
}

// TestVerifyRejects: every field is covered by the signature, and the
// validity window and shape are enforced.
func TestVerifyRejects(t *testing.T) {
	ownerKey, other := seededKey(t, 1), seededKey(t, 3)
	now := t0.Add(time.Hour)
	tests := []struct {
		name   string
		mutate func(c *nodev1.SignedNodeOwnership)
		now    time.Time
		want   error
	}{
		{"endpoint swapped", func(c *nodev1.SignedNodeOwnership) { c.NodeEndpointId = bytes.Repeat([]byte{9}, 32) }, now, ErrSignature},
		{"expiry extended", func(c *nodev1.SignedNodeOwnership) { c.ExpiresAtUnixMs += 1 }, now, ErrSignature},
		{"label changed", func(c *nodev1.SignedNodeOwnership) { c.NodeLabel = proto.String("evil") }, now, ErrSignature},
		{"cert id changed", func(c *nodev1.SignedNodeOwnership) { c.CertId = "x" }, now, ErrSignature},
		{"signature flipped", func(c *nodev1.SignedNodeOwnership) { c.Signature[0] ^= 1 }, now, ErrSignature},
		{"signature short", func(c *nodev1.SignedNodeOwnership) { c.Signature = c.Signature[:63] }, now, ErrSignature},
		{"unknown field added", func(c *nodev1.SignedNodeOwnership) {
			c.ProtoReflect().SetUnknown([]byte{0xf8, 0x01, 0x01}) // field 31, varint 1
		}, now, ErrSignature},
		{"owner key swapped with matching id", func(c *nodev1.SignedNodeOwnership) {
			pub := KeyOf(other)
			c.OwnerSignPublicKey, c.OwnerId = pub[:], pub.String()
		}, now, ErrSignature},
		{"owner id names another key", func(c *nodev1.SignedNodeOwnership) { c.OwnerId = other.DIDKey() }, now, ErrMalformed},
		{"wrong version", func(c *nodev1.SignedNodeOwnership) { c.Version = 2 }, now, ErrMalformed},
		{"short owner key", func(c *nodev1.SignedNodeOwnership) { c.OwnerSignPublicKey = c.OwnerSignPublicKey[:31] }, now, ErrMalformed},
		{"short endpoint", func(c *nodev1.SignedNodeOwnership) { c.NodeEndpointId = nil }, now, ErrMalformed},
		{"empty cert id", func(c *nodev1.SignedNodeOwnership) { c.CertId = "" }, now, ErrMalformed},
		{"long label", func(c *nodev1.SignedNodeOwnership) { c.NodeLabel = proto.String(strings.Repeat("a", 129)) }, now, ErrMalformed},
		{"expires before issued", func(c *nodev1.SignedNodeOwnership) { c.ExpiresAtUnixMs = c.IssuedAtUnixMs }, now, ErrMalformed},
		{"expired", nil, t0.Add(24 * time.Hour), ErrExpired},
		{"issued beyond skew", nil, t0.Add(-MaxSkew - time.Millisecond), ErrNotYetValid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := issue(t, ownerKey, seededKey(t, 2).ID())
			if tt.mutate != nil {
				tt.mutate(c)
			}
			if err := Verify(c, tt.now); !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
	// Within the skew is accepted.
	if err := Verify(issue(t, ownerKey, seededKey(t, 2).ID()), t0.Add(-MaxSkew)); err != nil {
		t.Fatalf("issued within the skew: %v", err)
	}
}

func TestTrustAuthorize(t *testing.T) {
	ownerKey, stranger := seededKey(t, 1), seededKey(t, 4)
	client := seededKey(t, 2).ID()
	trust := NewTrust(KeyOf(ownerKey))
	now := t0.Add(time.Minute)
	if got, err := trust.Authorize(issue(t, ownerKey, client), client, now); err != nil || got != KeyOf(ownerKey) {
		t.Fatalf("Authorize = %v, %v", got, err)
	}
	tests := []struct {
		name string
		cert *nodev1.SignedNodeOwnership
		peer identity.EndpointID
		now  time.Time
		want error
	}{
		{"replayed by another identity", issue(t, ownerKey, client), seededKey(t, 5).ID(), now, ErrWrongEndpoint},
		{"foreign owner", issue(t, stranger, client), client, now, ErrUntrusted},
		{"expired", issue(t, ownerKey, client), client, t0.Add(48 * time.Hour), ErrExpired},
		{"nil", nil, client, now, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := trust.Authorize(tt.cert, tt.peer, tt.now); !errors.Is(err, tt.want) {
				t.Fatalf("Authorize = %v, want %v", err, tt.want)
			}
		})
	}
	if NewTrust().Len() != 0 || trust.Len() != 1 || len(trust.Keys()) != 1 {
		t.Fatal("trust set sizes")
	}
}

func TestParsePublicKey(t *testing.T) {
	k := KeyOf(seededKey(t, 1))
	for _, s := range []string{k.String(), hex.EncodeToString(k[:]), "  " + k.String() + "\n"} {
		got, err := ParsePublicKey(s)
		if err != nil || got != k {
			t.Fatalf("ParsePublicKey(%q) = %v, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "did:key:zzz", "abcd", k.String()[:20]} {
		if _, err := ParsePublicKey(s); err == nil {
			t.Fatalf("ParsePublicKey(%q) succeeded", s)
		}
	}
	var back PublicKey
	if b, _ := k.MarshalText(); back.UnmarshalText(b) != nil || back != k {
		t.Fatal("text round trip")
	}
}

func TestPEMRoundTrip(t *testing.T) {
	c := issue(t, seededKey(t, 1), seededKey(t, 2).ID())
	b, err := MarshalPEM(c)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "node.ownership", b)
	back, err := ParsePEM(b)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(back, c) {
		t.Fatal("PEM round trip changed the certificate")
	}
	path := filepath.Join(t.TempDir(), "sub", "n.ownership")
	if err := Save(path, c); err != nil {
		t.Fatal(err)
	}
	if back, err = Load(path); err != nil || !proto.Equal(back, c) {
		t.Fatalf("Load: %v", err)
	}
}

func TestParsePEMRejects(t *testing.T) {
	good, _ := MarshalPEM(issue(t, seededKey(t, 1), seededKey(t, 2).ID()))
	tests := map[string][]byte{
		"empty":          nil,
		"not pem":        []byte("hello"),
		"wrong type":     bytes.Replace(good, []byte(PEMType), []byte("PRIVATE KEY"), 2),
		"trailing data":  append(append([]byte{}, good...), "junk"...),
		"two blocks":     append(append([]byte{}, good...), good...),
		"huge":           bytes.Repeat([]byte("a"), maxFileBytes+1),
		"garbage body":   []byte("-----BEGIN " + PEMType + "-----\nAAAA\n-----END " + PEMType + "-----\n"),
		"oversize body":  pemOf(bytes.Repeat([]byte{0x0a, 0}, MaxCertBytes)),
		"empty body":     pemOf(nil),
		"malformed body": pemOf([]byte{0x0a, 0x05, 1}),
	}
	for name, b := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := ParsePEM(b); !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParsePEM = %v, want ErrMalformed", err)
			}
		})
	}
}

func pemOf(body []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: PEMType, Bytes: body})
}

func TestDirInit(t *testing.T) {
	d := Dir(filepath.Join(t.TempDir(), "meshcli"))
	if _, err := d.OwnerKey(); !errors.Is(err, ErrNoOwnerKey) {
		t.Fatalf("OwnerKey before init = %v", err)
	}
	if _, _, err := d.Client(t0); err == nil {
		t.Fatal("Client before init succeeded")
	}
	r, err := d.Init(InitOptions{Now: t0, Label: "laptop"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.CreatedOwner || !r.CreatedClient || !r.IssuedCert || !r.Expires.Equal(t0.Add(DefaultTTL)) {
		t.Fatalf("first init: %+v", r)
	}
	for _, f := range []string{OwnerKeyFile, ClientKeyFile} {
		st, err := os.Stat(d.Path(f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v mode %v", f, err, st.Mode())
		}
	}
	k, c, err := d.Client(t0.Add(time.Hour))
	if err != nil || k.ID() != r.Client || OwnerOf(c) != r.Owner || c.GetNodeLabel() != "laptop" {
		t.Fatalf("Client: %v", err)
	}

	again, err := d.Init(InitOptions{Now: t0.Add(time.Hour)})
	if err != nil || again.CreatedOwner || again.CreatedClient || again.IssuedCert || again.Owner != r.Owner {
		t.Fatalf("second init changed something: %+v, %v", again, err)
	}
	// Close to expiry the client certificate is renewed; the keys stay.
	late := t0.Add(DefaultTTL - 24*time.Hour)
	renewed, err := d.Init(InitOptions{Now: late})
	if err != nil || !renewed.IssuedCert || renewed.Owner != r.Owner || renewed.Client != r.Client {
		t.Fatalf("renewal: %+v, %v", renewed, err)
	}
	if _, _, err := d.Client(t0.Add(2 * DefaultTTL)); !errors.Is(err, ErrExpired) {
		t.Fatalf("Client after expiry = %v", err)
	}
	// A certificate for another key is refused, and init repairs it.
	if err := Save(d.Path(ClientCertFile), issue(t, seededKey(t, 1), seededKey(t, 2).ID())); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Client(t0); !errors.Is(err, ErrWrongEndpoint) {
		t.Fatalf("Client with a foreign cert = %v", err)
	}
	if r, err := d.Init(InitOptions{Now: t0}); err != nil || !r.IssuedCert {
		t.Fatalf("repair: %+v %v", r, err)
	}
	// Keys are never replaced.
	if err := writeFile(d.Path(OwnerKeyFile), []byte("x"), 0o600, true); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("exclusive write over an existing key = %v", err)
	}
}

func FuzzParsePEM(f *testing.F) {
	good, _ := MarshalPEM(issue(f, seededKey(f, 1), seededKey(f, 2).ID()))
	f.Add(good)
	f.Add([]byte("-----BEGIN " + PEMType + "-----\n-----END " + PEMType + "-----\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParsePEM(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if err := Check(c); err != nil {
			t.Fatalf("ParsePEM accepted a certificate Check refuses: %v", err)
		}
	})
}

func FuzzUnmarshal(f *testing.F) {
	c := issue(f, seededKey(f, 1), seededKey(f, 2).ID())
	b, _ := Marshal(c)
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Unmarshal(b)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes, and verification never panics.
		if _, err := Marshal(c); err != nil {
			t.Fatal(err)
		}
		_ = Verify(c, t0)
	})
}

func TestLoadNodeCert(t *testing.T) {
	ownerKey, node, other := seededKey(t, 1), seededKey(t, 2).ID(), seededKey(t, 3).ID()
	dir := t.TempDir()
	path := filepath.Join(dir, "node.ownership")
	if c, err := LoadNodeCert(path, node, t0); c != nil || err != nil {
		t.Fatalf("no file: %v, %v", c, err)
	}
	if err := Save(path, issue(t, ownerKey, node)); err != nil {
		t.Fatal(err)
	}
	c, err := LoadNodeCert(path, node, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	trust := NodeTrust(c, KeyOf(seededKey(t, 4)))
	if trust.Len() != 2 || !trust.Trusts(KeyOf(ownerKey)) {
		t.Fatalf("NodeTrust: %v", trust.Keys())
	}
	if NodeTrust(nil).Len() != 0 {
		t.Fatal("an unowned node trusts someone")
	}
	if _, err := LoadNodeCert(path, other, t0); !errors.Is(err, ErrWrongEndpoint) {
		t.Fatalf("another node's certificate: %v", err)
	}
	if _, err := LoadNodeCert(path, node, t0.Add(48*time.Hour)); !errors.Is(err, ErrExpired) || !strings.Contains(err.Error(), "sign-node") {
		t.Fatalf("expired: %v", err)
	}
	os.WriteFile(path, []byte("junk"), 0o644)
	if _, err := LoadNodeCert(path, node, t0); !errors.Is(err, ErrMalformed) {
		t.Fatalf("junk: %v", err)
	}
}
