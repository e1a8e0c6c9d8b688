package stagewire

import "github.com/meshnode/meshnode/node/wire"

// InventoryRequest asks a node which stages it holds.
type InventoryRequest struct{}

// Kind is KindInventoryRequest.
func (*InventoryRequest) Kind() Kind { return KindInventoryRequest }

func (*InventoryRequest) appendBody(dst []byte) ([]byte, error) { return dst, nil }

// Inventory answers InventoryRequest.
type Inventory struct{ Stages []StageInfo }

// StageInfo is one stage a node holds.
type StageInfo struct {
	Stage   uint64
	Model   [32]byte
	Lo, Hi  uint32
	Context uint32
	KV      KVType
	Memory  uint64
}

// stageInfoBytes is one StageInfo's encoded size.
const stageInfoBytes = 8 + 32 + 4 + 4 + 4 + 1 + 8

// Kind is KindInventory.
func (*Inventory) Kind() Kind { return KindInventory }

func (s *StageInfo) check() error {
	const msg = "StageInfo"
	switch {
	case s.Stage == 0:
		return wire.Invalid(msg, "stage", "zero")
	case s.Lo >= s.Hi || s.Hi > MaxLayers:
		return wire.Invalid(msg, "layers", "[%d, %d), want lo < hi ≤ %d", s.Lo, s.Hi, MaxLayers)
	case s.Context == 0 || s.Context > MaxPosition:
		return wire.Invalid(msg, "context", "%d, want 1 … %d", s.Context, MaxPosition)
	case s.KV > KVF32:
		return wire.Invalid(msg, "kv", "unknown type %d", s.KV)
	}
	return nil
}

func (m *Inventory) appendBody(dst []byte) ([]byte, error) {
	if len(m.Stages) > MaxStages {
		return dst, wire.Invalid("Inventory", "stages", "%d, limit %d", len(m.Stages), MaxStages)
	}
	dst = le.AppendUint16(dst, uint16(len(m.Stages)))
	for _, s := range m.Stages {
		if err := s.check(); err != nil {
			return dst, err
		}
		dst = le.AppendUint64(dst, s.Stage)
		dst = append(dst, s.Model[:]...)
		dst = le.AppendUint32(dst, s.Lo)
		dst = le.AppendUint32(dst, s.Hi)
		dst = le.AppendUint32(dst, s.Context)
		dst = append(dst, byte(s.KV))
		dst = le.AppendUint64(dst, s.Memory)
	}
	return dst, nil
}

func parseInventory(r *reader) Message {
	m := &Inventory{}
	n := r.Count("stages", 2, MaxStages, stageInfoBytes)
	if n > 0 {
		m.Stages = make([]StageInfo, n)
	}
	for i := range m.Stages {
		s := &m.Stages[i]
		*s = StageInfo{Stage: r.U64("stage"), Model: r.id("model"), Lo: r.U32("lo"), Hi: r.U32("hi"),
			Context: r.U32("context"), KV: KVType(r.U8("kv")), Memory: r.U64("memory")}
		r.Check(s.check())
	}
	return m
}
