package wire

import "testing"

func TestStreamTypes(t *testing.T) {
	type props struct {
		name                                   string
		dispatchable, reserved, framed, quaran bool
	}
	want := map[StreamType]props{
		0x01: {"GOSSIP", true, false, true, true},
		0x02: {"TUNNEL", true, false, false, false},
		0x03: {"TUNNEL_MAP", true, false, true, false},
		0x04: {"TUNNEL_HTTP", true, false, false, false},
		0x05: {"ROUTE_REQUEST", true, false, true, true},
		0x06: {"PEER_DOWN", true, false, true, false},
		0x07: {"PEER_LEAVING", true, false, true, false},
		0x08: {"PLUGIN_CHANNEL", true, false, false, false},
		0x09: {"PLUGIN_BULK_TRANSFER", true, false, false, false},
		0x0a: {"PLUGIN_MESH_STREAM", true, false, false, false},
		0x0b: {"CONFIG_SUBSCRIBE", false, true, false, false},
		0x0c: {"CONFIG_PUSH", false, true, false, false},
		0x0d: {"SUBPROTOCOL", true, false, true, false},
		0x0e: {"DIRECT_PATH_REQUEST", true, false, true, false},
	}
	for b := range 256 {
		st := StreamType(b)
		w, known := want[st]
		got := props{st.String(), st.Dispatchable(), st.Reserved(), st.Framed(), st.AllowedBeforeAdmission()}
		if !known {
			w.name = got.name // the format of unknown names is checked below
		}
		if got != w || st.Known() != known {
			t.Errorf("%#02x: got %+v known=%v, want %+v known=%v", b, got, st.Known(), w, known)
		}
	}
	for st, s := range map[StreamType]string{0x00: "StreamType(0x00)", 0x0f: "StreamType(0x0f)", 0xff: "StreamType(0xff)"} {
		if st.String() != s {
			t.Errorf("%#02x prints as %q, want %q", byte(st), st.String(), s)
		}
	}
	// The named constants are the protocol's bytes.
	for st, b := range map[StreamType]byte{StreamGossip: 0x01, StreamTunnelHTTP: 0x04, StreamConfigSubscribe: 0x0b,
		StreamConfigPush: 0x0c, StreamSubprotocol: 0x0d, StreamDirectPathRequest: 0x0e} {
		if byte(st) != b {
			t.Errorf("%v is %#02x, want %#02x", st, byte(st), b)
		}
	}
}
