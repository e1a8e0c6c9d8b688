package node

import (
	"bufio"
	"encoding/hex"
	"errors"
	"io/fs"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// listeningTCP maps the inode of each TCP socket this process holds in
// LISTEN state to its local address: the socket inodes of /proc/self/fd
// matched against the LISTEN entries of /proc/net/tcp and tcp6. It skips
// the test where /proc cannot say (not Linux, or /proc not mounted).
func listeningTCP(t *testing.T) map[string]netip.AddrPort {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot list this process's sockets without /proc: %v", err)
	}
	mine := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if inode, ok := strings.CutPrefix(target, "socket:["); ok {
			mine[strings.TrimSuffix(inode, "]")] = true
		}
	}
	out := map[string]netip.AddrPort{}
	read := 0
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if errors.Is(err, fs.ErrNotExist) {
			continue // no IPv6, say
		}
		if err != nil {
			t.Skipf("cannot read %s: %v", table, err)
		}
		read++
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" || !mine[fields[9]] { // 0A: TCP_LISTEN
				continue
			}
			ap, err := parseProcAddr(fields[1])
			if err != nil {
				f.Close()
				t.Fatalf("%s: %v", table, err)
			}
			out[fields[9]] = ap
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatalf("%s: %v", table, err)
		}
	}
	if read == 0 {
		t.Skip("no /proc/net/tcp: cannot list listening sockets")
	}
	return out
}

// parseProcAddr reads a /proc/net/tcp address, "0100007F:1F90": the IP's
// 32-bit words in host (little-endian) order, then the port in hex.
func parseProcAddr(s string) (netip.AddrPort, error) {
	ipHex, portHex, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, errors.New("no port in " + s)
	}
	b, err := hex.DecodeString(ipHex)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return netip.AddrPort{}, errors.New("bad address " + s)
	}
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	port, err := strconv.ParseUint(portHex, 16, 16)
	if err != nil {
		return netip.AddrPort{}, errors.New("bad port in " + s)
	}
	ip, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)), nil
}

// openedListeners is what listening TCP sockets the process holds now
// that it did not hold in before.
func openedListeners(t *testing.T, before map[string]netip.AddrPort) []netip.AddrPort {
	var out []netip.AddrPort
	for inode, ap := range listeningTCP(t) {
		if _, ok := before[inode]; !ok {
			out = append(out, ap)
		}
	}
	return out
}

func TestParseProcAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:1F90":                         "127.0.0.1:8080",
		"00000000:248D":                         "0.0.0.0:9357",
		"00000000000000000000000001000000:0050": "[::1]:80",
		"0000000000000000FFFF00000100007F:1F90": "127.0.0.1:8080",
	} {
		got, err := parseProcAddr(in)
		if err != nil || got.String() != want {
			t.Errorf("parseProcAddr(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
}

// TestNodeListensOnlyOnAPI: a running node, with peers joined and a
// request relayed through the mesh, holds one listening TCP socket, its
// API's: mesh tunnels reach the API in-process, not through a port.
func TestNodeListensOnlyOnAPI(t *testing.T) {
	before := listeningTCP(t)
	host := startFortunesHost(t, Config{APIKey: "host-key", API: APIConfig{MeshAccess: MeshAccessAny}})
	relay := startRelay(t, host, "")
	wantServedBy(t, readAnswer(t, post(t, relay, "/v1/chat/completions", fortunesChat)), host, "a relayed request")
	opened := openedListeners(t, before)
	want := map[string]bool{host.HTTPAddr().String(): true, relay.HTTPAddr().String(): true}
	if len(opened) != len(want) {
		t.Fatalf("two nodes listen on TCP %v, want their APIs %v alone", opened, want)
	}
	for _, ap := range opened {
		if !want[ap.String()] {
			t.Fatalf("a node listens on TCP %s, which is not an API (%v)", ap, want)
		}
	}
}

// TestAttackLocalClientSkipsAPIKey: a local program that finds the node's
// listening TCP ports (as `ss -ltnp` does) reaches the generation
// endpoints on none of them without the API key. The node used to listen
// on a loopback port for mesh tunnels that served any local client
// without the key.
func TestAttackLocalClientSkipsAPIKey(t *testing.T) {
	before := listeningTCP(t)
	host := startFortunesHost(t, Config{APIKey: "host-key"})
	opened := openedListeners(t, before)
	if len(opened) == 0 {
		t.Fatal("the node holds no listening TCP socket, not even its API's")
	}
	for _, ap := range opened {
		addr := ap
		if ap.Addr().IsUnspecified() {
			addr = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), ap.Port())
		}
		resp, err := http.Post("http://"+addr.String()+"/v1/chat/completions", "application/json", strings.NewReader(fortunesChat))
		if err != nil {
			t.Logf("%s: %v: not a way in", addr, err)
			continue
		}
		if a := readAnswer(t, resp); a.status != http.StatusUnauthorized {
			t.Fatalf("a keyless request to %s (the API is %s): %d %s, want 401 invalid_api_key",
				addr, host.HTTPAddr(), a.status, a.code)
		}
	}
}
