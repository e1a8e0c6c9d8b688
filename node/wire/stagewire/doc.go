// Package stagewire is the wire codec of meshnode-stage/1, the protocol
// by which nodes run one model split into layer stages: a node is told to
// load a stage (LoadStage, answered by Ready or an Error), asked what it
// holds (InventoryRequest, Inventory), told to drop one (Stop) or rewind a
// request's positions (Trim), and fed Activation frames — token ids into
// the first stage, hidden rows between the others — while the last stage
// sends each request's next token (NextToken) or its logits (Logits)
// straight back to the first — after each of a sequence's last n
// positions when it asks for a window (ActSeq.Rows).
//
// It is our own subprotocol, not mesh-llm's stage schema: it is opened on
// the mesh-llm/1 SUBPROTOCOL stream (0x0d) with a MeshSubprotocolOpen
// naming Name and Major (OpenMessage), and advertised in
// PeerAnnouncement.subprotocols (Advertisement). docs/stage-protocol.md
// is its specification.
//
// Every message is one frame of the mesh's framing, [u32 LE length][body],
// under the same 8 MiB cap (wire.MaxControlFrameBytes); the body is a
// kind byte and fixed-width little-endian fields. Append encodes, Parse
// and Read decode; the decoder checks every count against the bytes that
// remain before it allocates, refuses trailing bytes and unknown values,
// and so accepts exactly one encoding of each message. Failures are
// *wire.FrameError with wire's kinds (ErrOversize, ErrTruncated,
// ErrInvalidMessage), matched with errors.Is.
package stagewire
