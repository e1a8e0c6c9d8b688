package wire

import (
	"fmt"
	"reflect"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// MaxDecodedBytes bounds the memory one decoded frame may take. Protobuf
// amplifies: an 8 MiB body of two-byte empty PeerAnnouncements would
// unmarshal into about 3 GiB of structs, so decoders estimate the decoded
// size from the wire bytes first and refuse, with ErrOversize, anything
// over this. Real frames stay far below it.
const MaxDecodedBytes = 64 << 20

// decode bounds, unmarshals and validates one frame body into m.
func decode[M proto.Message](b []byte, m M, validate func(M) error) (M, error) {
	var zero M
	if len(b) > MaxControlFrameBytes {
		return zero, &FrameError{Kind: ErrOversize, Message: messageName(m),
			Reason: fmt.Sprintf("body of %d bytes, limit %d", len(b), MaxControlFrameBytes)}
	}
	md := m.ProtoReflect().Descriptor()
	cost, err := decodedCost(b, md, MaxDecodedBytes)
	if err != nil {
		return zero, &FrameError{Kind: ErrInvalidMessage, Message: string(md.Name()), Reason: "malformed protobuf", Err: err}
	}
	if cost > MaxDecodedBytes {
		return zero, &FrameError{Kind: ErrOversize, Message: string(md.Name()),
			Reason: fmt.Sprintf("%d bytes would decode to more than %d", len(b), MaxDecodedBytes)}
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return zero, &FrameError{Kind: ErrInvalidMessage, Message: string(md.Name()), Reason: "malformed protobuf", Err: err}
	}
	if err := validate(m); err != nil {
		return zero, err
	}
	return m, nil
}

// appendGrowth bounds the total a slice built by append allocates, as a
// multiple of its final size: Go grows large slices by 1.25x, so the
// abandoned arrays sum to 4x the last one (measured: 5.2x in all).
const appendGrowth = 6

// Costs of decoded data beyond its message structs, in bytes, chosen as
// upper bounds for protobuf-go (TestDecodedCostIsAnUpperBound measures
// them).
const (
	costRepeatedSlot = appendGrowth * 16 // a string header or message pointer in a repeated field
	costScalarByte   = appendGrowth * 8  // a repeated scalar takes at least one wire byte, at most 8 decoded
	costUnknownByte  = appendGrowth      // unknown fields are appended to one byte slice
	costStringAlloc  = 16                // allocator rounding of a string or bytes value
	costPresence     = 16                // a proto3 optional scalar lives behind a pointer
	costMapEntry     = 256               // measured 125 to 190 for map<string, uint64>
)

// decodedCost returns an upper estimate of the heap proto.Unmarshal
// allocates decoding b as md, stopping early once it passes limit. It
// walks the wire format without allocating.
func decodedCost(b []byte, md protoreflect.MessageDescriptor, limit int) (int, error) {
	cost := structSize(md)
	fields := md.Fields()
	for len(b) > 0 && cost <= limit {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			// %v, not %w: a short buffer here is bad data, not a cut stream.
			return 0, fmt.Errorf("tag: %v", protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return 0, fmt.Errorf("field %d: %v", num, protowire.ParseError(m))
		}
		value := b[n : n+m]
		fd := fields.ByNumber(num)
		switch {
		case fd == nil || !wireTypeFits(fd, typ):
			cost += costUnknownByte * (n + m)
		case fd.IsMap():
			cost += costMapEntry + len(value)
		case fd.Kind() == protoreflect.MessageKind:
			sub, _ := protowire.ConsumeBytes(value)
			c, err := decodedCost(sub, fd.Message(), limit-cost)
			if err != nil {
				return 0, err
			}
			cost += c
			if fd.IsList() {
				cost += costRepeatedSlot
			}
		case fd.Kind() == protoreflect.StringKind || fd.Kind() == protoreflect.BytesKind:
			cost += len(value) + costStringAlloc
			if fd.IsList() {
				cost += costRepeatedSlot
			} else if fd.HasPresence() {
				cost += costPresence
			}
		case fd.IsList():
			cost += costScalarByte * len(value)
		case fd.HasPresence():
			cost += costPresence
		}
		b = b[n+m:]
	}
	return cost, nil
}

// wireTypeFits reports whether protobuf-go decodes a value of wire type typ
// into fd rather than keeping it as an unknown field.
func wireTypeFits(fd protoreflect.FieldDescriptor, typ protowire.Type) bool {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.StringKind, protoreflect.BytesKind:
		return typ == protowire.BytesType
	case protoreflect.GroupKind:
		return typ == protowire.StartGroupType
	}
	if fd.IsList() && typ == protowire.BytesType {
		return true // packed
	}
	switch fd.Kind() {
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return typ == protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return typ == protowire.Fixed64Type
	}
	return typ == protowire.VarintType
}

// structSizes maps each generated message to the size of its Go struct.
var structSizes = sync.OnceValue(func() map[protoreflect.FullName]int {
	sizes := make(map[protoreflect.FullName]int)
	protoregistry.GlobalTypes.RangeMessages(func(mt protoreflect.MessageType) bool {
		sizes[mt.Descriptor().FullName()] = int(reflect.TypeOf(mt.Zero().Interface()).Elem().Size())
		return true
	})
	return sizes
})

// structSize is the allocation for one decoded md, rounded up the way the
// Go allocator's size classes round (at most 1/8 for these sizes).
func structSize(md protoreflect.MessageDescriptor) int {
	s, ok := structSizes()[md.FullName()]
	if !ok {
		s = 1024 // not a registered Go type; larger than any of ours
	}
	return s + s/8 + 16
}
