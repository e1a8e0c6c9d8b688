package wire

import "github.com/meshnode/meshnode/node/wire/nodev1"

// DecodeTunnelMap decodes and validates the frame of a TUNNEL_MAP stream
// (ValidateTunnelMap). Its owner_peer_id must also be the sender's own
// identity: check that with CheckSender.
func DecodeTunnelMap(b []byte) (*nodev1.TunnelMap, error) {
	return decode(b, new(nodev1.TunnelMap), ValidateTunnelMap)
}

// ValidateTunnelMap checks that owner_peer_id and every entry's
// target_peer_id are 32 bytes and every tunnel_port is in 1..65535.
func ValidateTunnelMap(m *nodev1.TunnelMap) error {
	const msg = "TunnelMap"
	if err := checkID(msg, "owner_peer_id", m.GetOwnerPeerId()); err != nil {
		return err
	}
	for i, e := range m.GetEntries() {
		if err := validateTunnelEntry(e); err != nil {
			return within(err, msg, index("entries", i))
		}
	}
	return nil
}

func validateTunnelEntry(e *nodev1.TunnelEntry) error {
	const msg = "TunnelEntry"
	if err := checkID(msg, "target_peer_id", e.GetTargetPeerId()); err != nil {
		return err
	}
	if p := e.GetTunnelPort(); p == 0 || p > 65535 {
		return invalid(msg, "tunnel_port", "%d, want 1..65535", p)
	}
	return nil
}
