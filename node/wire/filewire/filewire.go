// Package filewire is the codec of meshnode-file/1, the subprotocol on
// which a node fetches a model file that a mesh peer holds
// (docs/file-protocol.md). A stream carries one request — Get (a file by
// name or weights digest, from an offset) or List — and its answer: a
// Header followed by the file's raw bytes from the offset to its end, a
// Listing, or an Error. Every message is one frame, [u32 LE length][kind]
// [fields], fixed-width little-endian fields, lengths and counts checked
// against their limits and the bytes left before anything is allocated,
// and exactly one encoding per message.
package filewire

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// The subprotocol's name and major version, as MeshSubprotocolOpen and
// PeerAnnouncement.subprotocols carry them.
const (
	Name  = "meshnode-file"
	Major = 1
)

// Advertisement is the entry a node serving files puts in its
// PeerAnnouncement.subprotocols.
func Advertisement() *nodev1.MeshSubprotocol {
	return &nodev1.MeshSubprotocol{Name: Name, Major: Major}
}

// Limits checked before anything is allocated.
const (
	// MaxName is the longest file name, in bytes.
	MaxName = 250
	// MaxFiles is the most entries one Listing carries.
	MaxFiles = 1024
	// MaxErrorText is the longest Error text, in bytes.
	MaxErrorText = 1024
)

// Kind is a message's first body byte.
type Kind uint8

// The message kinds.
const (
	KindGet     Kind = 0x01
	KindList    Kind = 0x02
	KindListing Kind = 0x03
	KindHeader  Kind = 0x04
	KindError   Kind = 0x05
)

func (k Kind) String() string {
	switch k {
	case KindGet:
		return "Get"
	case KindList:
		return "List"
	case KindListing:
		return "Listing"
	case KindHeader:
		return "Header"
	case KindError:
		return "Error"
	}
	return fmt.Sprintf("kind 0x%02x", uint8(k))
}

// Message is *Get, *List, *Listing, *Header or *Error.
type Message interface {
	Kind() Kind
	appendBody(dst []byte) ([]byte, error)
}

// Get asks for a file from Offset on: by Name, or, when Name is empty, by
// its weights digest.
type Get struct {
	Name    string
	Weights [32]byte
	Offset  uint64
}

// List asks for the files the node serves.
type List struct{}

// File is a file a node serves: its name in its models dir, size, SHA-256
// and weights digest (gguf/digest, over the file under Name).
type File struct {
	Name    string
	Size    uint64
	SHA256  [32]byte
	Weights [32]byte
}

// Listing answers List.
type Listing struct{ Files []File }

// Header answers Get: the file, and the offset its bytes, which follow
// the frame up to Size, start at.
type Header struct {
	File   File
	Offset uint64
}

// Error codes.
const (
	CodeNotFound uint16 = 1 // no such file
	CodeRefused  uint16 = 2 // the node serves this peer no files
	CodeBusy     uint16 = 3 // too many transfers
	CodeBad      uint16 = 4 // a request the node cannot take
	CodeInternal uint16 = 5 // the node failed
)

// Error answers a request the node does not serve.
type Error struct {
	Code uint16
	Text string
}

func (*Get) Kind() Kind     { return KindGet }
func (*List) Kind() Kind    { return KindList }
func (*Listing) Kind() Kind { return KindListing }
func (*Header) Kind() Kind  { return KindHeader }
func (*Error) Kind() Kind   { return KindError }

func (e *Error) Error() string {
	what := map[uint16]string{CodeNotFound: "not found", CodeRefused: "refused", CodeBusy: "busy", CodeBad: "bad request", CodeInternal: "internal error"}[e.Code]
	if what == "" {
		what = fmt.Sprintf("code %d", e.Code)
	}
	return what + ": " + e.Text
}

// Get: by u8 (1 name, 2 weights digest), then the name (u8 length,
// bytes) or the digest [32], then offset u64.
const (
	byName    = 1
	byWeights = 2
)

func (m *Get) appendBody(dst []byte) ([]byte, error) {
	if m.Name == "" {
		dst = append(dst, byWeights)
		dst = append(dst, m.Weights[:]...)
	} else {
		if err := checkName("Get", m.Name); err != nil {
			return nil, err
		}
		dst = append(dst, byName, byte(len(m.Name)))
		dst = append(dst, m.Name...)
	}
	return binary.LittleEndian.AppendUint64(dst, m.Offset), nil
}

func (*List) appendBody(dst []byte) ([]byte, error) { return dst, nil }

func appendFile(dst []byte, msg string, f *File) ([]byte, error) {
	if err := checkName(msg, f.Name); err != nil {
		return nil, err
	}
	dst = append(dst, byte(len(f.Name)))
	dst = append(dst, f.Name...)
	dst = binary.LittleEndian.AppendUint64(dst, f.Size)
	dst = append(dst, f.SHA256[:]...)
	return append(dst, f.Weights[:]...), nil
}

func (m *Listing) appendBody(dst []byte) ([]byte, error) {
	if len(m.Files) > MaxFiles {
		return nil, wire.Invalid("Listing", "n", "%d files, limit %d", len(m.Files), MaxFiles)
	}
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(m.Files)))
	var err error
	for i := range m.Files {
		if dst, err = appendFile(dst, "Listing", &m.Files[i]); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

func (m *Header) appendBody(dst []byte) ([]byte, error) {
	if m.Offset > m.File.Size {
		return nil, wire.Invalid("Header", "offset", "%d past the size %d", m.Offset, m.File.Size)
	}
	dst, err := appendFile(dst, "Header", &m.File)
	if err != nil {
		return nil, err
	}
	return binary.LittleEndian.AppendUint64(dst, m.Offset), nil
}

func (m *Error) appendBody(dst []byte) ([]byte, error) {
	if m.Code == 0 {
		return nil, wire.Invalid("Error", "code", "zero")
	}
	if len(m.Text) > MaxErrorText || !utf8.ValidString(m.Text) {
		return nil, wire.Invalid("Error", "text", "%d bytes, limit %d, UTF-8", len(m.Text), MaxErrorText)
	}
	dst = binary.LittleEndian.AppendUint16(dst, m.Code)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(m.Text)))
	return append(dst, m.Text...), nil
}

// checkName holds a file name to what a models dir holds: a plain name,
// 1 to MaxName bytes of UTF-8, no path, not hidden, no control bytes.
func checkName(msg, name string) error {
	if name == "" || len(name) > MaxName {
		return wire.Invalid(msg, "name", "%d bytes, want 1 to %d", len(name), MaxName)
	}
	if !utf8.ValidString(name) || name[0] == '.' {
		return wire.Invalid(msg, "name", "%q is not a plain file name", name)
	}
	for _, c := range []byte(name) {
		if c < 0x20 || c == 0x7f || c == '/' || c == '\\' {
			return wire.Invalid(msg, "name", "%q is not a plain file name", name)
		}
	}
	return nil
}

// Append appends m as one frame, [u32 LE length][kind][fields], to dst.
// A message Parse would refuse is refused with dst unchanged.
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
	binary.LittleEndian.PutUint32(out[start:], uint32(body))
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

// ParseBody decodes a frame's body.
func ParseBody(body []byte) (Message, error) {
	if len(body) == 0 {
		return nil, &wire.FrameError{Kind: wire.ErrInvalidMessage, Field: "kind", Reason: "empty body"}
	}
	k := Kind(body[0])
	r := &reader{wire.NewBodyReader(body, 1, k.String())}
	var m Message
	switch k {
	case KindGet:
		g := &Get{}
		switch by := r.U8("by"); by {
		case byName:
			g.Name = r.name()
		case byWeights:
			copy(g.Weights[:], r.Take("weights", 32))
		default:
			if r.Err() == nil {
				r.Fail("by", "%d, want 1 (name) or 2 (weights digest)", by)
			}
		}
		g.Offset = r.U64("offset")
		m = g
	case KindList:
		m = &List{}
	case KindListing:
		l := &Listing{}
		n := r.Count("n", 2, MaxFiles, 1+1+8+64)
		if n > 0 {
			l.Files = make([]File, n)
		}
		for i := range l.Files {
			l.Files[i] = r.file()
		}
		m = l
	case KindHeader:
		h := &Header{File: r.file()}
		h.Offset = r.U64("offset")
		if r.Err() == nil && h.Offset > h.File.Size {
			r.Fail("offset", "%d past the size %d", h.Offset, h.File.Size)
		}
		m = h
	case KindError:
		e := &Error{Code: r.U16("code")}
		if r.Err() == nil && e.Code == 0 {
			r.Fail("code", "zero")
		}
		n := r.U16("length")
		if r.Err() == nil && n > MaxErrorText {
			r.Fail("length", "%d, limit %d", n, MaxErrorText)
		}
		text := r.Take("text", uint64(n))
		if r.Err() == nil && !utf8.Valid(text) {
			r.Fail("text", "not UTF-8")
		}
		e.Text = string(text)
		m = e
	default:
		return nil, &wire.FrameError{Kind: wire.ErrInvalidMessage, Field: "kind", Reason: fmt.Sprintf("unknown %v", k)}
	}
	if err := r.End(); err != nil {
		return nil, err
	}
	return m, nil
}

// Read reads one frame from r and decodes it. ctx bounds the read as for
// wire.ReadFrame; a stream that ends cleanly before a frame returns io.EOF.
func Read(ctx context.Context, r io.Reader) (Message, error) {
	body, err := wire.ReadFrame(ctx, r, nil)
	if err != nil {
		return nil, err
	}
	return ParseBody(body)
}

// Write writes m to w as one frame, nothing if Append refuses it.
func Write(ctx context.Context, w io.Writer, m Message) error {
	b, err := Append(nil, m)
	if err != nil {
		return err
	}
	return wire.WriteEncoded(ctx, w, b)
}

// reader is the shared body reader with this protocol's compound fields.
type reader struct{ wire.BodyReader }

func (r *reader) name() string {
	n := r.U8("name length")
	b := r.Take("name", uint64(n))
	if r.Err() != nil {
		return ""
	}
	if err := checkName(r.Msg(), string(b)); err != nil {
		r.Check(err)
		return ""
	}
	return string(b)
}

func (r *reader) file() File {
	f := File{Name: r.name(), Size: r.U64("size")}
	copy(f.SHA256[:], r.Take("sha256", 32))
	copy(f.Weights[:], r.Take("weights", 32))
	return f
}
