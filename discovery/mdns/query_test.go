package mdns

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/meshnode/meshnode/discovery/token"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
)

// answer is what the responder sends for a browse: the zone's records for
// a PTR question, packed as hashicorp/mdns packs them.
func answer(t testing.TB, z *zone) []byte {
	t.Helper()
	m := &dns.Msg{
		MsgHdr:   dns.MsgHdr{Response: true, Authoritative: true},
		Compress: true,
		Answer:   z.Records(dns.Question{Name: serviceFQDN, Qtype: dns.TypePTR, Qclass: dns.ClassINET}),
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func zoneFor(t testing.TB, a Advert, port uint16) *zone {
	t.Helper()
	txt, err := a.TXT()
	if err != nil {
		t.Fatal(err)
	}
	var z zone
	var ips []netip.Addr
	for _, ap := range a.Endpoint.Addrs {
		ips = append(ips, ap.Addr())
	}
	if err := z.set("meshnode-"+a.Endpoint.ID.Short(), port, ips, txt); err != nil {
		t.Fatal(err)
	}
	return &z
}

// TestCollectZoneAnswer: what the responder announces is what the
// querier reads, byte for byte, through DNS packing.
func TestCollectZoneAnswer(t *testing.T) {
	a := testAdvert(t)
	a.Serving = []string{`back\slash`, `"quoted"`, "ünïcode"} // bytes DNS text escapes
	pkt := answer(t, zoneFor(t, a, 9338))
	from := netip.MustParseAddrPort("192.168.1.5:5353")
	var c collector
	c.add(pkt, from)
	got := c.sightings()
	if len(got) != 1 {
		t.Fatalf("%d sightings, want 1", len(got))
	}
	s := got[0]
	want, _ := a.TXT()
	if !slices.Equal(s.TXT, want) || s.Port != 9338 || s.From != from {
		t.Fatalf("sighting %+v\nwant TXT %q port 9338", s, want)
	}
	back, err := ParseTXT(s.TXT)
	if err != nil || !equalAdvert(back, a) {
		t.Fatalf("read back %+v, %v", back, err)
	}
	if s.Instance != "meshnode-"+a.Endpoint.ID.Short()+"."+serviceFQDN {
		t.Fatalf("instance %q", s.Instance)
	}
}

// TestCollectIgnores: queries, failures, other services and garbage
// leave no sighting; a flood is bounded.
func TestCollectIgnores(t *testing.T) {
	from := netip.MustParseAddrPort("10.0.0.1:5353")
	z := zoneFor(t, testAdvert(t), 9338)
	good := answer(t, z)

	var query dns.Msg
	query.SetQuestion(serviceFQDN, dns.TypePTR)
	q, _ := query.Pack()

	var failed dns.Msg
	failed.Unpack(good)
	failed.Rcode = dns.RcodeServerFailure
	f, _ := failed.Pack()

	other := &dns.Msg{MsgHdr: dns.MsgHdr{Response: true}, Answer: []dns.RR{
		&dns.TXT{Hdr: dns.RR_Header{Name: "printer._ipp._tcp.local.", Rrtype: dns.TypeTXT, Class: dns.ClassINET}, Txt: []string{"svc=mesh-llm"}},
	}}
	o, _ := other.Pack()

	for name, pkt := range map[string][]byte{
		"query": q, "server failure": f, "other service": o, "empty": nil,
		"garbage": []byte("\x00\x01garbage"), "truncated": good[:len(good)/2],
	} {
		var c collector
		c.add(pkt, from)
		if s := c.sightings(); len(s) != 0 {
			t.Errorf("%s: %d sightings", name, len(s))
		}
	}

	var c collector
	for i := range maxSightings + 50 {
		m := &dns.Msg{MsgHdr: dns.MsgHdr{Response: true}, Answer: []dns.RR{&dns.TXT{
			Hdr: dns.RR_Header{Name: "x" + strings.Repeat("y", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26)) + "." + serviceFQDN,
				Rrtype: dns.TypeTXT, Class: dns.ClassINET},
			Txt: []string{"svc=mesh-llm"},
		}}}
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		c.add(b, from)
	}
	if n := len(c.sightings()); n != maxSightings {
		t.Fatalf("a flood left %d sightings, want the bound %d", n, maxSightings)
	}
}

// TestTXTEscaping: raw TXT bytes survive miekg/dns's presentation form
// both ways.
func TestTXTEscaping(t *testing.T) {
	for _, raw := range []string{"plain", `a\b`, `"q"`, "\x00\x01\xff", `\065`, "é", `\`, ""} {
		rr := &dns.TXT{Hdr: dns.RR_Header{Name: "x.local.", Rrtype: dns.TypeTXT, Class: dns.ClassINET}, Txt: []string{txtPresent(raw)}}
		buf := make([]byte, 512)
		n, err := dns.PackRR(rr, buf, 0, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		back, _, err := dns.UnpackRR(buf[:n], 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := txtRaw(back.(*dns.TXT).Txt[0]); got != raw {
			t.Errorf("%q came back as %q", raw, got)
		}
	}
}

func FuzzTXTEscaping(f *testing.F) {
	for _, s := range []string{"plain", `a\b`, `"q"`, "\x00\xff", `\065`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if got := txtRaw(txtPresent(raw)); got != raw {
			t.Fatalf("%q came back as %q", raw, got)
		}
	})
}

// FuzzCollect feeds the querier's packet reader anything a LAN host could
// send: it must not panic, stays bounded, and every sighting it reports
// is under the service.
func FuzzCollect(f *testing.F) {
	f.Add(answer(f, zoneFor(f, testAdvert(f), 9338)))
	f.Add(answer(f, zoneFor(f, Advert{Endpoint: mesh.EndpointAddr{ID: testID(f, 3),
		Addrs: []netip.AddrPort{netip.MustParseAddrPort("10.1.1.1:1")}}}, 1)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		var c collector
		c.add(pkt, netip.MustParseAddrPort("10.0.0.1:5353"))
		c.add(pkt, netip.MustParseAddrPort("10.0.0.2:5353"))
		s := c.sightings()
		if len(s) > maxSightings {
			t.Fatalf("%d sightings", len(s))
		}
		for _, x := range s {
			if !strings.HasSuffix(x.Instance, "."+serviceFQDN) {
				t.Fatalf("sighting outside the service: %q", x.Instance)
			}
			ParseTXT(x.TXT) // must not panic
		}
	})
}

func sightingOf(t *testing.T, a Advert, from string, port uint16) sighting {
	t.Helper()
	txt, err := a.TXT()
	if err != nil {
		t.Fatal(err)
	}
	return sighting{Instance: "i." + serviceFQDN, TXT: txt, Port: port, From: netip.MustParseAddrPort(from)}
}

// TestEndpoints: own announcements, other meshes and malformed records
// are dropped; the answer's source joins the named addresses; one node
// seen twice is one endpoint.
func TestEndpoints(t *testing.T) {
	self, peer, stranger, tokenPeer := testID(t, 10), testID(t, 11), testID(t, 12), testID(t, 13)
	ad := func(id identity.EndpointID, meshID, tok string, addrs ...string) Advert {
		a := Advert{MeshID: meshID, Endpoint: mesh.EndpointAddr{ID: id}}
		if tok != "" {
			a.TokenFP = token.Fingerprint(tok)
		}
		for _, s := range addrs {
			a.Endpoint.Addrs = append(a.Endpoint.Addrs, netip.MustParseAddrPort(s))
		}
		return a
	}
	m, err := New(Config{ID: self, Listen: netip.MustParseAddrPort("[::]:9338"), MeshID: "lab", Token: "tok",
		Found: func(mesh.EndpointAddr) {}})
	if err != nil {
		t.Fatal(err)
	}
	found := []sighting{
		sightingOf(t, ad(self, "lab", "", "192.168.1.2:9338"), "192.168.1.2:5353", 9338),
		sightingOf(t, ad(peer, "lab", "", "192.168.1.3:9338"), "192.168.1.3:5353", 9338),
		sightingOf(t, ad(stranger, "other", "tok", "192.168.1.4:9338"), "192.168.1.4:5353", 9338),
		sightingOf(t, ad(tokenPeer, "", "tok", "192.168.1.5:9338"), "192.168.1.5:5353", 9338),
		{Instance: "bad." + serviceFQDN, TXT: []string{"svc=mesh-llm", "schema=1", "ep_addr=nope"}},
		{Instance: "other." + serviceFQDN, TXT: []string{"svc=something"}},
		// The peer again, over IPv6, its answer from an address it does
		// not name (a NAT'd or renumbered host), then from a link-local
		// address, which is not dialled.
		sightingOf(t, ad(peer, "lab", "", "192.168.1.3:9338"), "[fd00::3]:5353", 9338),
		sightingOf(t, ad(peer, "lab", "", "192.168.1.3:9338"), "[fe80::3]:5353", 9338),
	}
	got := m.endpoints(found)
	want := []mesh.EndpointAddr{
		{ID: peer, Addrs: []netip.AddrPort{netip.MustParseAddrPort("192.168.1.3:9338"), netip.MustParseAddrPort("[fd00::3]:9338")}},
		{ID: tokenPeer, Addrs: []netip.AddrPort{netip.MustParseAddrPort("192.168.1.5:9338")}},
	}
	if len(got) != len(want) {
		t.Fatalf("endpoints %v, want %v", got, want)
	}
	for i := range want {
		if got[i].ID != want[i].ID || !slices.Equal(got[i].Addrs, want[i].Addrs) {
			t.Fatalf("endpoint %d: %v, want %v", i, got[i], want[i])
		}
	}
}

func TestSameMesh(t *testing.T) {
	fp := token.Fingerprint("tok")
	for _, tc := range []struct {
		meshID, fp string
		ad         Advert
		want       bool
	}{
		{"", "", Advert{MeshID: "any"}, true},
		{"", "", Advert{}, true},
		{"lab", "", Advert{MeshID: "lab"}, true},
		{"lab", "", Advert{MeshID: "LAB"}, false},
		{"lab", "", Advert{MeshID: "other"}, false},
		{"lab", "", Advert{}, false},
		{"lab", fp, Advert{TokenFP: fp}, true},
		{"lab", fp, Advert{TokenFP: token.Fingerprint("other")}, false},
		{"lab", fp, Advert{MeshID: "other", TokenFP: fp}, false}, // a mesh id says more than a token
	} {
		if got := sameMesh(tc.meshID, tc.fp, tc.ad); got != tc.want {
			t.Errorf("sameMesh(%q, %q, %+v) = %v, want %v", tc.meshID, tc.fp, tc.ad, got, tc.want)
		}
	}
}
