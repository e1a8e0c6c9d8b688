package wire

import "github.com/meshnode/meshnode/node/wire/nodev1"

// DecodeGossipFrame decodes and validates the body of a frame from a GOSSIP
// stream (ValidateGossipFrame). Whether sender_id is the connection's
// identity is for the caller to check, with CheckSender.
func DecodeGossipFrame(b []byte) (*nodev1.GossipFrame, error) {
	return decode(b, new(nodev1.GossipFrame), ValidateGossipFrame)
}

// ValidateGossipFrame checks what the protocol requires of a GossipFrame:
// gen is ProtocolGeneration, sender_id is 32 bytes, and every peer passes
// ValidatePeerAnnouncement.
func ValidateGossipFrame(f *nodev1.GossipFrame) error {
	const msg = "GossipFrame"
	if err := checkGen(msg, f.GetGen()); err != nil {
		return err
	}
	if err := checkID(msg, "sender_id", f.GetSenderId()); err != nil {
		return err
	}
	for i, pa := range f.GetPeers() {
		if err := ValidatePeerAnnouncement(pa); err != nil {
			return within(err, msg, index("peers", i))
		}
	}
	return nil
}

// ValidatePeerAnnouncement checks one announced peer: endpoint_id is 32
// bytes, a HOST has an http_port, each advertised subprotocol passes
// ValidateMeshSubprotocol, and each meshnode model load passes
// ValidateMeshnodeModelLoad.
func ValidatePeerAnnouncement(pa *nodev1.PeerAnnouncement) error {
	const msg = "PeerAnnouncement"
	if err := checkID(msg, "endpoint_id", pa.GetEndpointId()); err != nil {
		return err
	}
	if pa.GetRole() == nodev1.NodeRole_HOST && pa.HttpPort == nil {
		return invalid(msg, "http_port", "required when role is HOST")
	}
	for i, sp := range pa.GetSubprotocols() {
		if err := ValidateMeshSubprotocol(sp); err != nil {
			return within(err, msg, index("subprotocols", i))
		}
	}
	seen := make(map[string]bool, len(pa.GetMeshnodeModelLoad()))
	for i, l := range pa.GetMeshnodeModelLoad() {
		if err := ValidateMeshnodeModelLoad(l); err != nil {
			return within(err, msg, index("meshnode_model_load", i))
		}
		if seen[l.GetModelName()] {
			return invalid(msg, index("meshnode_model_load", i)+".model_name", "%q listed twice", l.GetModelName())
		}
		seen[l.GetModelName()] = true
	}
	return nil
}

// ValidateMeshnodeModelLoad checks a meshnode extension entry: a model
// name that is not blank, a fidelity level F0..F4, and no more free slots
// than slots.
func ValidateMeshnodeModelLoad(l *nodev1.MeshnodeModelLoad) error {
	const msg = "MeshnodeModelLoad"
	if blank(l.GetModelName()) {
		return invalid(msg, "model_name", "blank")
	}
	if f := l.GetFidelity(); f > 4 {
		return invalid(msg, "fidelity", "%d, want 0..4", f)
	}
	if l.GetFreeSlots() > l.GetSlots() {
		return invalid(msg, "free_slots", "%d free of %d slots", l.GetFreeSlots(), l.GetSlots())
	}
	return nil
}
