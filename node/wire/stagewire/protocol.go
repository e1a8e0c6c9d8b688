package stagewire

import (
	"context"
	"fmt"
	"io"

	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// The subprotocol's name and major version, as MeshSubprotocolOpen and
// PeerAnnouncement.subprotocols carry them.
const (
	Name  = "meshnode-stage"
	Major = 1
)

// FeatureF16 is advertised by a node that accepts f16 hidden rows.
const FeatureF16 = "f16-activations"

// FeatureRows is advertised by a node whose stages answer a sequence's
// output after each of its last n positions (ActSeq.Rows): a speculative
// window verified in one step. A head sends windows only through stages
// on such nodes; an older one refuses them.
const FeatureRows = "output-rows"

// FeatureLoadRows is advertised by a node that takes LoadStage.Rows: a
// stage's output rows per step set apart from its sequences (whose KV
// it holds), so that a speculative window is not bounded by the
// requests a stage is sized for. A head sends the field only to such a
// node; to an older one it sends LoadStage without it, and windows stay
// within Seqs rows.
const FeatureLoadRows = "load-rows"

// Limits on what one frame may declare, checked before anything is
// allocated; the frame cap bounds the rest.
const (
	// MaxSeqs is the most sequences one Activation carries (NextToken
	// carries up to MaxTokenRows rows of them).
	MaxSeqs = 1024
	// MaxWidth is the widest hidden row (a model's embedding length).
	MaxWidth = 1 << 16
	// MaxPosition bounds a position and a context length.
	MaxPosition = 1 << 30
	// MaxStages is the most entries one Inventory lists.
	MaxStages = 1024
	// MaxErrorText is the longest Error text, in bytes.
	MaxErrorText = 1024
)

// OpenMessage is the MeshSubprotocolOpen that follows the stream type byte
// 0x0d on a stream of this protocol.
func OpenMessage() *nodev1.MeshSubprotocolOpen {
	return &nodev1.MeshSubprotocolOpen{Gen: wire.ProtocolGeneration, Name: Name, Major: Major}
}

// Advertisement is the entry a node serving stages puts in its
// PeerAnnouncement.subprotocols.
func Advertisement() *nodev1.MeshSubprotocol {
	return &nodev1.MeshSubprotocol{Name: Name, Major: Major, Features: []string{FeatureF16, FeatureRows, FeatureLoadRows}}
}

// Matches reports whether an opened or advertised subprotocol is this
// one: the same name and major version.
func Matches(name string, major uint32) bool { return name == Name && major == Major }

// Kind is a message's first body byte.
type Kind uint8

// The message kinds.
const (
	KindLoadStage        Kind = 0x01
	KindReady            Kind = 0x02
	KindStop             Kind = 0x03
	KindInventoryRequest Kind = 0x04
	KindInventory        Kind = 0x05
	KindTrim             Kind = 0x06
	KindActivation       Kind = 0x07
	KindNextToken        Kind = 0x08
	KindLogits           Kind = 0x09
	KindError            Kind = 0x0a
	KindFinish           Kind = 0x0b
	KindReport           Kind = 0x0c
)

var kindNames = map[Kind]string{
	KindLoadStage: "LoadStage", KindReady: "Ready", KindStop: "Stop",
	KindInventoryRequest: "InventoryRequest", KindInventory: "Inventory", KindTrim: "Trim",
	KindActivation: "Activation", KindNextToken: "NextToken", KindLogits: "Logits", KindError: "Error",
	KindFinish: "Finish", KindReport: "Report",
}

func (k Kind) String() string {
	if n, ok := kindNames[k]; ok {
		return n
	}
	return fmt.Sprintf("kind 0x%02x", uint8(k))
}

// Message is one of this package's messages: *LoadStage, *Ready, *Stop,
// *InventoryRequest, *Inventory, *Trim, *Activation, *NextToken, *Logits,
// *Error, *Finish or *Report.
type Message interface {
	Kind() Kind
	// appendBody appends the fields after the kind byte, or fails with
	// the same error Parse would give the bytes.
	appendBody(dst []byte) ([]byte, error)
}

// Append appends m as one frame, [u32 LE length][kind][fields], to dst.
// A message Parse would refuse (a bad field, or over the frame cap) is
// refused with dst unchanged, so nothing of it reaches the wire.
func Append(dst []byte, m Message) ([]byte, error) {
	start := len(dst)
	out := append(dst, 0, 0, 0, 0, byte(m.Kind()))
	out, err := m.appendBody(out)
	if err != nil {
		return dst[:start], err
	}
	body := len(out) - start - 4
	if body > wire.MaxControlFrameBytes {
		return dst[:start], &wire.FrameError{Kind: wire.ErrOversize, Message: m.Kind().String(),
			Reason: fmt.Sprintf("encodes to %d bytes, limit %d", body, wire.MaxControlFrameBytes)}
	}
	putU32(out[start:], uint32(body))
	return out, nil
}

// Parse parses one frame at the start of b and returns its message and
// the bytes the frame took. The message does not alias b.
func Parse(b []byte) (Message, int, error) {
	body, n, err := wire.ParseFrame(b)
	if err != nil {
		return nil, 0, err
	}
	m, err := ParseBody(body)
	if err != nil {
		return nil, 0, err
	}
	return m, n, nil
}

// ParseBody decodes a frame's body (wire.ReadFrame's result).
func ParseBody(body []byte) (Message, error) {
	if len(body) == 0 {
		return nil, &wire.FrameError{Kind: wire.ErrInvalidMessage, Field: "kind", Reason: "empty body"}
	}
	k := Kind(body[0])
	r := &reader{wire.NewBodyReader(body, 1, k.String())}
	var m Message
	switch k {
	case KindLoadStage:
		m = parseLoadStage(r)
	case KindReady:
		m = parseReady(r)
	case KindStop:
		m = parseStop(r)
	case KindInventoryRequest:
		m = &InventoryRequest{}
	case KindInventory:
		m = parseInventory(r)
	case KindTrim:
		m = parseTrim(r)
	case KindActivation:
		m = parseActivation(r)
	case KindNextToken:
		m = parseNextToken(r)
	case KindLogits:
		m = parseLogits(r)
	case KindError:
		m = parseError(r)
	case KindFinish:
		m = parseFinish(r)
	case KindReport:
		m = parseReport(r)
	default:
		return nil, &wire.FrameError{Kind: wire.ErrInvalidMessage, Field: "kind", Reason: fmt.Sprintf("unknown %v", k)}
	}
	if err := r.End(); err != nil {
		return nil, err
	}
	return m, nil
}

// Read reads one frame from r and decodes it, reusing buf for the body
// (pass nil, or the buffer it returned last). ctx bounds the read as for
// wire.ReadFrame; a stream that ends cleanly before a frame returns
// io.EOF.
func Read(ctx context.Context, r io.Reader, buf []byte) (Message, []byte, error) {
	body, err := wire.ReadFrame(ctx, r, buf[:0])
	if err != nil {
		return nil, body, err
	}
	m, err := ParseBody(body)
	return m, body, err
}

// Write writes m to w as one frame in a single Write, nothing if Append
// refuses it. ctx bounds the write through SetWriteDeadline when w has
// it.
func Write(ctx context.Context, w io.Writer, m Message) error {
	b, err := Append(nil, m)
	if err != nil {
		return err
	}
	return wire.WriteEncoded(ctx, w, b)
}
