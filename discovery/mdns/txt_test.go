package mdns

import (
	"encoding/base64"
	"errors"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/discovery/token"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
)

func testID(t testing.TB, seed byte) identity.EndpointID {
	s := make([]byte, 32)
	s[0] = seed
	k, err := identity.KeyFromSeed(s)
	if err != nil {
		t.Fatal(err)
	}
	return k.ID()
}

func testAdvert(t testing.TB) Advert {
	return Advert{
		Version: "v0.1.0",
		MeshID:  "lab",
		Endpoint: mesh.EndpointAddr{ID: testID(t, 0), Addrs: []netip.AddrPort{
			netip.MustParseAddrPort("192.168.1.5:9338"),
			netip.MustParseAddrPort("[fd00::5]:9338"),
		}},
		TokenFP: token.Fingerprint("some-token"),
		VRAM:    64 << 30,
		Serving: []string{"fortunes-q8", "llama-3.2-1b"},
	}
}

func equalAdvert(a, b Advert) bool {
	return a.Version == b.Version && a.MeshID == b.MeshID && a.TokenFP == b.TokenFP && a.VRAM == b.VRAM &&
		slices.Equal(a.Serving, b.Serving) && a.Endpoint.ID == b.Endpoint.ID &&
		slices.Equal(a.Endpoint.Addrs, b.Endpoint.Addrs)
}

// TestTXTGolden pins the record a node announces.
func TestTXTGolden(t *testing.T) {
	txt, err := testAdvert(t).TXT()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/txt.golden")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(txt, "\n"); got != strings.TrimSpace(string(want)) {
		t.Fatalf("TXT\n%s\nwant\n%s", got, want)
	}
	for _, s := range txt {
		if strings.Contains(s, "some-token") {
			t.Fatalf("the raw token is in the record: %q", s)
		}
	}
}

func TestTXTRoundTrip(t *testing.T) {
	minimal := Advert{Endpoint: mesh.EndpointAddr{ID: testID(t, 1)}}
	for _, a := range []Advert{testAdvert(t), minimal} {
		txt, err := a.TXT()
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseTXT(txt)
		if err != nil {
			t.Fatal(err)
		}
		if !equalAdvert(a, back) {
			t.Fatalf("round trip of %+v gave %+v", a, back)
		}
	}
}

// TestTXTBounds: at every limit the record stays inside DNS's per-string
// limit and well under RFC 6763's 1300 bytes; what does not fit is left
// out whole.
func TestTXTBounds(t *testing.T) {
	var addrs []netip.AddrPort
	for i := range 40 {
		addrs = append(addrs, netip.AddrPortFrom(netip.AddrFrom16([16]byte{0xfd, 15: byte(i)}), 65535))
	}
	long := strings.Repeat("m", 60)
	a := Advert{
		Version:  strings.Repeat("v", 100) + "é",
		MeshID:   strings.Repeat("x", MaxValue),
		Endpoint: mesh.EndpointAddr{ID: testID(t, 2), Addrs: addrs, Relays: []string{"https://relay.example/"}},
		TokenFP:  token.Fingerprint("t"),
		VRAM:     ^uint64(0),
		Serving: []string{long, "", "bad|name", "bad\nname", strings.Repeat("z", MaxValue+1), long, long, long,
			"short", "a", "b", "c", "d", "e", "f", "g", "h"},
	}
	txt, err := a.TXT()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, s := range txt {
		if len(s) > 255 {
			t.Errorf("string of %d bytes: %.40q...", len(s), s)
		}
		total += 1 + len(s)
	}
	if total > 900 {
		t.Errorf("record is %d bytes, want at most 900", total)
	}
	back, err := ParseTXT(txt)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Version) != MaxVersion || back.Version != strings.Repeat("v", MaxVersion) {
		t.Errorf("version cut to %q", back.Version)
	}
	if n := len(back.Endpoint.Addrs); n == 0 || n == len(addrs) || !slices.Equal(back.Endpoint.Addrs, addrs[:n]) {
		t.Errorf("ep_addr kept %d of %d addresses, want a prefix that fits", n, len(addrs))
	}
	if len(back.Endpoint.Relays) != 0 {
		t.Error("a relay was announced")
	}
	// The fourth long name would overflow MaxValue and is skipped; the
	// list stops at MaxServing names.
	want := []string{long, long, long, "short", "a", "b", "c", "d"}
	if !slices.Equal(back.Serving, want) {
		t.Errorf("serving %q, want %q", back.Serving, want)
	}
	if _, err := (Advert{Endpoint: a.Endpoint, MeshID: strings.Repeat("x", MaxValue+1)}).TXT(); !errors.Is(err, ErrBadTXT) {
		t.Errorf("over-long mesh id: %v, want ErrBadTXT (a mesh id must not be cut)", err)
	}
	if _, err := (Advert{Endpoint: a.Endpoint, TokenFP: "raw-token"}).TXT(); !errors.Is(err, ErrBadTXT) {
		t.Errorf("a tok_fp that is not a fingerprint: %v, want ErrBadTXT", err)
	}
}

// TestParseTXTTolerant: unknown keys, key case, repeats and upstream's
// base64 ep_addr are all read as RFC 6763 and upstream intend.
func TestParseTXTTolerant(t *testing.T) {
	a := testAdvert(t)
	txt, err := a.TXT()
	if err != nil {
		t.Fatal(err)
	}
	_, epJSON, _ := fitEndpoint(a.Endpoint)
	upstream := []string{
		"svc=mesh-llm", "schema=1", "join=token-fingerprint", "nodes=2", "clients=0", "max_clients=0",
		"vram=0", "serving=", "wanted=x|y", "on_disk=", "name=lab", "region=LAN",
		"ep_addr=" + base64.RawURLEncoding.EncodeToString([]byte(epJSON)), "details=/api/discovery/lan-details",
	}
	for _, tc := range []struct {
		name string
		txt  []string
		want func(Advert) bool
	}{
		{"unknown keys", append(slices.Clone(txt), "future=1", "flag", "=novalue", ""), func(b Advert) bool { return equalAdvert(a, b) }},
		{"key case", append([]string{"SVC=mesh-llm", "Schema=1", "MESH_ID=lab"}, txt[2:]...), func(b Advert) bool { return b.MeshID == "lab" }},
		{"first wins", append([]string{"svc=mesh-llm", "schema=1", "mesh_id=first"}, append(txt[2:], "mesh_id=second")...),
			func(b Advert) bool { return b.MeshID == "first" }},
		{"upstream", upstream, func(b Advert) bool {
			return b.Endpoint.ID == a.Endpoint.ID && slices.Equal(b.Endpoint.Addrs, a.Endpoint.Addrs) && b.MeshID == "" && b.Serving == nil
		}},
		{"serving spaces", []string{"svc=mesh-llm", "schema=1", "ep_addr=" + epJSON, "serving= a | b ||c"},
			func(b Advert) bool { return slices.Equal(b.Serving, []string{"a", "b", "c"}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := ParseTXT(tc.txt)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.want(b) {
				t.Fatalf("read %+v", b)
			}
		})
	}
}

func TestParseTXTErrors(t *testing.T) {
	_, ep, err := fitEndpoint(testAdvert(t).Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"svc=mesh-llm", "schema=1", "ep_addr=" + ep}
	with := func(extra ...string) []string { return append(slices.Clone(base), extra...) }
	for _, tc := range []struct {
		name string
		txt  []string
		want error
		says string
	}{
		{"empty", nil, ErrNotMeshLLM, "not a mesh-llm"},
		{"other service", []string{"svc=airplay", "schema=1"}, ErrNotMeshLLM, "not a mesh-llm"},
		{"svc flag", []string{"svc", "schema=1"}, ErrNotMeshLLM, "not a mesh-llm"},
		{"no schema", []string{"svc=mesh-llm", "ep_addr=" + ep}, ErrSchema, `schema ""`},
		{"schema 2", []string{"svc=mesh-llm", "schema=2", "ep_addr=" + ep}, ErrSchema, `schema "2"`},
		{"no ep_addr", []string{"svc=mesh-llm", "schema=1"}, ErrBadTXT, "no ep_addr"},
		{"ep_addr flag", []string{"svc=mesh-llm", "schema=1", "ep_addr"}, ErrBadTXT, "ep_addr has no value"},
		{"ep_addr junk", []string{"svc=mesh-llm", "schema=1", "ep_addr=%%%"}, ErrBadTXT, "neither JSON"},
		{"ep_addr bad json", []string{"svc=mesh-llm", "schema=1", `ep_addr={"id":"ab"}`}, ErrBadTXT, "ep_addr"},
		{"ep_addr bad ip", []string{"svc=mesh-llm", "schema=1",
			`ep_addr={"id":"` + testID(t, 0).String() + `","addrs":[{"Ip":"1.2.3.4:0"}]}`}, ErrBadTXT, "cannot be dialled"},
		{"empty mesh_id", with("mesh_id="), ErrBadTXT, "empty mesh_id"},
		{"control in mesh_id", with("mesh_id=a\x1bb"), ErrBadTXT, "control"},
		{"invalid utf8 version", with("version=\xff"), ErrBadTXT, "UTF-8"},
		{"long version", with("version=" + strings.Repeat("v", MaxVersion+1)), ErrBadTXT, "limit"},
		{"short tok_fp", with("tok_fp=abcd"), ErrBadTXT, "tok_fp"},
		{"upper tok_fp", with("tok_fp=" + strings.ToUpper(token.Fingerprint("x"))), ErrBadTXT, "lowercase"},
		{"negative vram", with("vram=-1"), ErrBadTXT, "vram"},
		{"hex vram", with("vram=0x10"), ErrBadTXT, "vram"},
		{"huge vram", with("vram=99999999999999999999"), ErrBadTXT, "vram"},
		{"empty vram", with("vram="), ErrBadTXT, "vram"},
		{"serving control", with("serving=a\x00b"), ErrBadTXT, "serving"},
		{"string too long", with("x=" + strings.Repeat("y", 300)), ErrBadTXT, "DNS bounds"},
		{"too many strings", with(slices.Repeat([]string{"k=v"}, 70)...), ErrBadTXT, "strings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseTXT(tc.txt)
			if err == nil {
				t.Fatalf("accepted %+v", a)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %q, want %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("error %q does not say %q", err, tc.says)
			}
		})
	}
}

// FuzzParseTXT: any record is accepted or refused with one of the
// package's errors, and whatever is accepted re-encodes to a record that
// reads back the same.
func FuzzParseTXT(f *testing.F) {
	txt, err := testAdvert(f).TXT()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(strings.Join(txt, "\n"))
	f.Add("svc=mesh-llm\nschema=1\nep_addr=e30")
	f.Add("svc=mesh-llm\nschema=1\nserving=a|b\nvram=12")
	f.Fuzz(func(t *testing.T, joined string) {
		a, err := ParseTXT(strings.Split(joined, "\n"))
		if err != nil {
			if !errors.Is(err, ErrNotMeshLLM) && !errors.Is(err, ErrSchema) && !errors.Is(err, ErrBadTXT) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if len(a.Serving) > MaxServing || len(a.Endpoint.Addrs) > mesh.MaxEndpointAddrAddrs || len(a.Endpoint.Relays) > 0 {
			t.Fatalf("accepted out of bounds: %+v", a)
		}
		again, err := a.TXT()
		if err != nil {
			t.Fatalf("re-encode of accepted %+v: %v", a, err)
		}
		b, err := ParseTXT(again)
		if err != nil {
			t.Fatalf("re-encoded record does not read: %v", err)
		}
		if b.Endpoint.ID != a.Endpoint.ID || b.MeshID != a.MeshID || b.TokenFP != a.TokenFP || b.VRAM != a.VRAM {
			t.Fatalf("re-encode changed %+v to %+v", a, b)
		}
	})
}
