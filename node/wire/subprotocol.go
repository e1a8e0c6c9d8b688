package wire

import "github.com/meshnode/meshnode/node/wire/nodev1"

// DecodeMeshSubprotocolOpen decodes and validates the frame that opens a
// SUBPROTOCOL stream (ValidateMeshSubprotocolOpen). The bytes after it
// belong to the named subprotocol.
func DecodeMeshSubprotocolOpen(b []byte) (*nodev1.MeshSubprotocolOpen, error) {
	return decode(b, new(nodev1.MeshSubprotocolOpen), ValidateMeshSubprotocolOpen)
}

// ValidateMeshSubprotocolOpen checks that gen is ProtocolGeneration, the
// name is not blank and major is not zero.
func ValidateMeshSubprotocolOpen(o *nodev1.MeshSubprotocolOpen) error {
	const msg = "MeshSubprotocolOpen"
	if err := checkGen(msg, o.GetGen()); err != nil {
		return err
	}
	return checkSubprotocol(msg, o.GetName(), o.GetMajor())
}

// ValidateMeshSubprotocol checks a subprotocol advertised in gossip: the
// name is not blank and major is not zero.
func ValidateMeshSubprotocol(sp *nodev1.MeshSubprotocol) error {
	return checkSubprotocol("MeshSubprotocol", sp.GetName(), sp.GetMajor())
}

func checkSubprotocol(msg, name string, major uint32) error {
	if blank(name) {
		return invalid(msg, "name", "empty")
	}
	if major == 0 {
		return invalid(msg, "major", "zero")
	}
	return nil
}
