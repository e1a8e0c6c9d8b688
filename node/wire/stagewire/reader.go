package stagewire

import (
	"encoding/binary"
	"math"

	"github.com/meshnode/meshnode/node/wire"
)

// reader is the shared body reader with this protocol's compound fields.
type reader struct{ wire.BodyReader }

func (r *reader) id(field string) (id [32]byte) {
	copy(id[:], r.Take(field, 32))
	return id
}

// nonzero is U64 for an id that 0 may not take (stage and request ids).
func (r *reader) nonzero(field string) uint64 {
	v := r.U64(field)
	if v == 0 && r.Err() == nil {
		r.Fail(field, "zero")
	}
	return v
}

func putU32(b []byte, v uint32) { binary.LittleEndian.PutUint32(b, v) }

var le = binary.LittleEndian

func appendF32s(dst []byte, xs []float32) []byte {
	for _, x := range xs {
		dst = le.AppendUint32(dst, math.Float32bits(x))
	}
	return dst
}

func readF32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(le.Uint32(b[4*i:]))
	}
	return out
}
