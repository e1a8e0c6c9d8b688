package stagewire

import (
	"fmt"

	"github.com/meshnode/meshnode/node/wire"
)

// MaxLayers bounds a layer range's ends.
const MaxLayers = 4096

// KVType is a stage's KV cache element type.
type KVType uint8

// The KV cache types, as model.KVType has them.
const (
	KVF16 KVType = 0
	KVF32 KVType = 1
)

// LoadStage asks a node to load one stage of a model: its copy of the
// model found by weights digest, blocks [Lo, Hi), a KV cache for Context
// positions, and where its output goes.
type LoadStage struct {
	// Stage names the stage in every later message; chosen by the
	// sender, never 0.
	Stage uint64
	// Model is the weights digest (gguf/digest) of the GGUF to load from.
	Model [32]byte
	// Lo and Hi are the blocks, Lo < Hi ≤ MaxLayers; the node checks Hi
	// against the model.
	Lo, Hi uint32
	// Context is the most positions a request holds, 1 … MaxPosition.
	Context uint32
	// Batch is the most positions one Activation carries, 1 … MaxPosition;
	// Seqs the most sequences, 1 … MaxSeqs.
	Batch uint32
	Seqs  uint16
	KV    KVType
	// Out is how the stage sends hidden rows on (DTypeF32 or DTypeF16);
	// the last stage sends tokens or logits and ignores it.
	Out DType
	// Next is the node the stage sends its hidden rows (and Trims) to,
	// as stage NextStage there; all zero, and NextStage 0, on the last
	// stage. Prev is the node whose Activations and Trims it takes. Head
	// is the first stage's node: the one that sends LoadStage and Stop,
	// and to which the last stage sends NextToken and Logits.
	Next       [32]byte
	NextStage  uint64
	Prev, Head [32]byte
	// Rows, when not 0, is the most output rows a step may ask of the
	// stage (ActSeq.OutRows over its sequences; a speculative window of
	// k drafts takes k+1), Seqs < Rows: the last stage computes that
	// many logits rows per step while Seqs still counts the requests
	// whose KV it holds. 0 (the short form, with no field on the wire)
	// is Seqs rows, as before the field. It goes only to a node that
	// advertises FeatureLoadRows: an older one refuses it as bytes after
	// the last field.
	Rows uint16
}

// StepRows is the most output rows a step may ask of the stage: Rows,
// or Seqs where Rows is 0.
func (m *LoadStage) StepRows() int {
	if m.Rows != 0 {
		return int(m.Rows)
	}
	return int(m.Seqs)
}

// Kind is KindLoadStage.
func (*LoadStage) Kind() Kind { return KindLoadStage }

func (m *LoadStage) check() error {
	const msg = "LoadStage"
	switch {
	case m.Stage == 0:
		return wire.Invalid(msg, "stage", "zero")
	case m.Lo >= m.Hi || m.Hi > MaxLayers:
		return wire.Invalid(msg, "layers", "[%d, %d), want lo < hi ≤ %d", m.Lo, m.Hi, MaxLayers)
	case m.Context == 0 || m.Context > MaxPosition:
		return wire.Invalid(msg, "context", "%d, want 1 … %d", m.Context, MaxPosition)
	case m.Batch == 0 || m.Batch > MaxPosition:
		return wire.Invalid(msg, "batch", "%d, want 1 … %d", m.Batch, MaxPosition)
	case m.Seqs == 0 || m.Seqs > MaxSeqs:
		return wire.Invalid(msg, "seqs", "%d, want 1 … %d", m.Seqs, MaxSeqs)
	case m.KV > KVF32:
		return wire.Invalid(msg, "kv", "unknown type %d", m.KV)
	case m.Out != DTypeF32 && m.Out != DTypeF16:
		return wire.Invalid(msg, "out", "%v, want f32 or f16", m.Out)
	case (m.Next == [32]byte{}) != (m.NextStage == 0):
		return wire.Invalid(msg, "next_stage", "%d with next %x…: both set, or neither (the last stage)", m.NextStage, m.Next[:4])
	case m.Rows != 0 && m.Rows <= m.Seqs:
		// Rows equal to Seqs has only the short form: one encoding.
		return wire.Invalid(msg, "rows", "%d, want 0 (as many as seqs) or more than seqs (%d)", m.Rows, m.Seqs)
	}
	return nil
}

func (m *LoadStage) appendBody(dst []byte) ([]byte, error) {
	if err := m.check(); err != nil {
		return dst, err
	}
	dst = le.AppendUint64(dst, m.Stage)
	dst = append(dst, m.Model[:]...)
	dst = le.AppendUint32(dst, m.Lo)
	dst = le.AppendUint32(dst, m.Hi)
	dst = le.AppendUint32(dst, m.Context)
	dst = le.AppendUint32(dst, m.Batch)
	dst = le.AppendUint16(dst, m.Seqs)
	dst = append(dst, byte(m.KV), byte(m.Out))
	dst = append(dst, m.Next[:]...)
	dst = le.AppendUint64(dst, m.NextStage)
	dst = append(dst, m.Prev[:]...)
	dst = append(dst, m.Head[:]...)
	if m.Rows != 0 {
		dst = le.AppendUint16(dst, m.Rows)
	}
	return dst, nil
}

func parseLoadStage(r *reader) Message {
	m := &LoadStage{Stage: r.U64("stage"), Model: r.id("model"), Lo: r.U32("lo"), Hi: r.U32("hi"),
		Context: r.U32("context"), Batch: r.U32("batch"), Seqs: r.U16("seqs"),
		KV: KVType(r.U8("kv")), Out: DType(r.U8("out")), Next: r.id("next"), NextStage: r.U64("next_stage"),
		Prev: r.id("prev"), Head: r.id("head")}
	// rows is the one optional field: present only when not 0.
	if r.Err() == nil && r.Left() > 0 {
		if m.Rows = r.U16("rows"); r.Err() == nil && m.Rows == 0 {
			r.Fail("rows", "0 in the long form (a LoadStage of seqs rows has no rows field)")
		}
	}
	r.Check(m.check())
	return m
}

// Ready answers LoadStage: the stage is loaded and serves, using Memory
// bytes (weights it holds, KV cache and scratch).
type Ready struct {
	Stage  uint64
	Lo, Hi uint32
	Memory uint64
}

// Kind is KindReady.
func (*Ready) Kind() Kind { return KindReady }

func (m *Ready) check() error {
	if m.Stage == 0 {
		return wire.Invalid("Ready", "stage", "zero")
	}
	if m.Lo >= m.Hi || m.Hi > MaxLayers {
		return wire.Invalid("Ready", "layers", "[%d, %d), want lo < hi ≤ %d", m.Lo, m.Hi, MaxLayers)
	}
	return nil
}

func (m *Ready) appendBody(dst []byte) ([]byte, error) {
	if err := m.check(); err != nil {
		return dst, err
	}
	dst = le.AppendUint64(dst, m.Stage)
	dst = le.AppendUint32(dst, m.Lo)
	dst = le.AppendUint32(dst, m.Hi)
	return le.AppendUint64(dst, m.Memory), nil
}

func parseReady(r *reader) Message {
	m := &Ready{Stage: r.U64("stage"), Lo: r.U32("lo"), Hi: r.U32("hi"), Memory: r.U64("memory")}
	r.Check(m.check())
	return m
}

// Stop asks a node to drop a stage and free what it holds.
type Stop struct{ Stage uint64 }

// Kind is KindStop.
func (*Stop) Kind() Kind { return KindStop }

func (m *Stop) appendBody(dst []byte) ([]byte, error) {
	if m.Stage == 0 {
		return dst, wire.Invalid("Stop", "stage", "zero")
	}
	return le.AppendUint64(dst, m.Stage), nil
}

func parseStop(r *reader) Message { return &Stop{Stage: r.nonzero("stage")} }

// Trim rewinds a request on a stage to its first Length positions (a
// rejected speculative draft): the next Activation for it starts there.
// A request trimmed to 0 is forgotten.
type Trim struct {
	Stage, Request uint64
	Length         uint32
}

// Kind is KindTrim.
func (*Trim) Kind() Kind { return KindTrim }

func (m *Trim) appendBody(dst []byte) ([]byte, error) {
	switch {
	case m.Stage == 0:
		return dst, wire.Invalid("Trim", "stage", "zero")
	case m.Request == 0:
		return dst, wire.Invalid("Trim", "request", "zero")
	case m.Length > MaxPosition:
		return dst, wire.Invalid("Trim", "length", "%d, limit %d", m.Length, MaxPosition)
	}
	dst = le.AppendUint64(dst, m.Stage)
	dst = le.AppendUint64(dst, m.Request)
	return le.AppendUint32(dst, m.Length), nil
}

func parseTrim(r *reader) Message {
	m := &Trim{Stage: r.nonzero("stage"), Request: r.nonzero("request"), Length: r.U32("length")}
	if r.Err() == nil && m.Length > MaxPosition {
		r.Fail("length", "%d, limit %d", m.Length, MaxPosition)
	}
	return m
}

// String is "f16" or "f32".
func (t KVType) String() string {
	switch t {
	case KVF16:
		return "f16"
	case KVF32:
		return "f32"
	}
	return fmt.Sprintf("kv type %d", uint8(t))
}
