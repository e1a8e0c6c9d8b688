package stagewire

import (
	"fmt"
	"strconv"

	"github.com/meshnode/meshnode/node/wire"
)

// DType is what an Activation's data holds.
type DType uint8

// The data types: token ids into the first stage, hidden rows between
// the others (f32 keeps a split model's logits the whole model's bit for
// bit; f16 halves the bytes and rounds).
const (
	DTypeTokens DType = 0
	DTypeF32    DType = 1
	DTypeF16    DType = 2
)

func (t DType) String() string {
	switch t {
	case DTypeTokens:
		return "tokens"
	case DTypeF32:
		return "f32"
	case DTypeF16:
		return "f16"
	}
	return fmt.Sprintf("dtype %d", uint8(t))
}

// size is the bytes of one element.
func (t DType) size() uint64 {
	if t == DTypeF16 {
		return 2
	}
	return 4
}

// Output is what the last stage returns for a sequence of an Activation.
type Output uint8

// The outputs.
const (
	// OutNone: nothing (a prompt chunk that is not the last).
	OutNone Output = 0
	// OutToken: the greedy next token, as NextToken.
	OutToken Output = 1
	// OutLogits: the logits after the sequence's last position, as Logits.
	OutLogits Output = 2
)

// ActSeq is one sequence of an Activation: Count positions of Request
// from Start on.
type ActSeq struct {
	Request uint64
	Start   uint32
	Count   uint32
	Out     Output
	// Rows is how many of the sequence's last positions Out follows: 0
	// (or 1, which encodes and decodes as 0) the last only; n ≥ 2 each of
	// the last n, 2 … Count — a speculative window [last token, drafts…]
	// verified in one step, whose answer is one token or logits row per
	// position (RowPos).
	Rows uint32
}

// outRowsFlag marks, in a sequence's out byte, that a u32 row count
// follows it. Encodings without it are byte for byte the ones before
// windows existed, and a stage that predates them refuses the flag as an
// unknown output rather than answer one row where n were asked for.
const outRowsFlag = 0x80

// actSeqBytes is one ActSeq's encoded size without a row count;
// actSeqRowsBytes with one.
const (
	actSeqBytes     = 8 + 4 + 4 + 1
	actSeqRowsBytes = actSeqBytes + 4
)

// MaxTokenRows is the most token rows (OutToken sequences' Rows, at
// least 1 each) one Activation may ask for: the count NextToken's u16
// can carry, so that the last stage answers a step in one frame.
const MaxTokenRows = 1<<16 - 1

// OutRows is how many outputs the sequence asks for: 0 for none, else
// max(1, Rows) — the logits rows the last stage computes for it.
func (s ActSeq) OutRows() int {
	if s.Out == OutNone {
		return 0
	}
	return int(max(1, s.Rows))
}

// RowPos is the position the token after the sequence's output row j
// (0 … rows−1) takes: the answers' Pos. The last row's is Start + Count.
func (s ActSeq) RowPos(j int) uint32 {
	return s.Start + s.Count - max(1, s.Rows) + 1 + uint32(j)
}

// Activation is one batched step's input to a stage: for each sequence,
// its positions' token ids (DTypeTokens, into the first stage) or hidden
// rows of Width elements (DTypeF32, DTypeF16), the sequences' data one
// after another in the order of Seqs. Exactly the field of DType holds
// data: Tokens, F32 or F16.
type Activation struct {
	Stage uint64
	DType DType
	// Width is the hidden row's length (the model's embedding length),
	// 1 … MaxWidth; 0 with token ids.
	Width  uint32
	Seqs   []ActSeq
	Tokens []uint32
	F32    []float32
	F16    []uint16
}

// Kind is KindActivation.
func (*Activation) Kind() Kind { return KindActivation }

// Positions is the total Count of the sequences.
func (m *Activation) Positions() int {
	n := 0
	for _, s := range m.Seqs {
		n += int(s.Count)
	}
	return n
}

// MaxPositions is the most positions one Activation of dtype and width
// fits in a frame, with seqs sequences (each counted with a row count,
// whether it has one or not): a sender cuts a longer prompt into several.
func MaxPositions(dtype DType, width, seqs int) int {
	if dtype == DTypeTokens {
		width = 1
	}
	room := maxFrameBody - activationHead - seqs*actSeqRowsBytes
	return max(room/(width*int(dtype.size())), 0)
}

// activationHead is the body bytes before the sequences: the kind byte,
// stage, dtype, width and the sequence count.
const activationHead = 1 + 8 + 1 + 4 + 2

// maxFrameBody mirrors wire.MaxControlFrameBytes as an int.
const maxFrameBody = 8 << 20

func (m *Activation) check() error {
	const msg = "Activation"
	if m.Stage == 0 {
		return wire.Invalid(msg, "stage", "zero")
	}
	switch m.DType {
	case DTypeTokens:
		if m.Width != 0 {
			return wire.Invalid(msg, "width", "%d with token ids, want 0", m.Width)
		}
	case DTypeF32, DTypeF16:
		if m.Width == 0 || m.Width > MaxWidth {
			return wire.Invalid(msg, "width", "%d, want 1 … %d", m.Width, MaxWidth)
		}
	default:
		return wire.Invalid(msg, "dtype", "unknown %v", m.DType)
	}
	if len(m.Seqs) == 0 || len(m.Seqs) > MaxSeqs {
		return wire.Invalid(msg, "seqs", "%d, want 1 … %d", len(m.Seqs), MaxSeqs)
	}
	seen := make(map[uint64]struct{}, len(m.Seqs))
	tokenRows := 0
	for i, s := range m.Seqs {
		field := "seqs[" + strconv.Itoa(i) + "]"
		switch {
		case s.Request == 0:
			return wire.Invalid(msg, field+".request", "zero")
		case s.Count == 0:
			return wire.Invalid(msg, field+".count", "zero")
		case uint64(s.Start)+uint64(s.Count) > MaxPosition:
			return wire.Invalid(msg, field, "positions %d + %d past %d", s.Start, s.Count, MaxPosition)
		case s.Out > OutLogits:
			return wire.Invalid(msg, field+".out", "unknown output %d", s.Out)
		case s.Rows > s.Count:
			return wire.Invalid(msg, field+".rows", "%d of %d positions", s.Rows, s.Count)
		case s.Rows > 1 && s.Out == OutNone:
			return wire.Invalid(msg, field+".rows", "%d with no output", s.Rows)
		}
		if s.Out == OutToken {
			if tokenRows += s.OutRows(); tokenRows > MaxTokenRows {
				return wire.Invalid(msg, field+".rows", "more than %d token rows in one step", MaxTokenRows)
			}
		}
		if _, dup := seen[s.Request]; dup {
			return wire.Invalid(msg, field+".request", "%d named twice", s.Request)
		}
		seen[s.Request] = struct{}{}
	}
	return nil
}

// elems is how many data elements the sequences declare.
func (m *Activation) elems() uint64 {
	var n uint64
	for _, s := range m.Seqs {
		n += uint64(s.Count)
	}
	if m.DType != DTypeTokens {
		n *= uint64(m.Width)
	}
	return n
}

func (m *Activation) appendBody(dst []byte) ([]byte, error) {
	if err := m.check(); err != nil {
		return dst, err
	}
	want := m.elems()
	have := map[DType]int{DTypeTokens: len(m.Tokens), DTypeF32: len(m.F32), DTypeF16: len(m.F16)}
	for t, n := range have {
		if t != m.DType && n != 0 {
			return dst, wire.Invalid("Activation", t.String(), "%d elements in an activation of %v", n, m.DType)
		}
	}
	if uint64(have[m.DType]) != want {
		return dst, wire.Invalid("Activation", m.DType.String(), "%d elements, the sequences declare %d", have[m.DType], want)
	}
	if want*m.DType.size() > maxFrameBody {
		return dst, wire.Invalid("Activation", m.DType.String(), "%d elements cannot fit a frame (MaxPositions)", want)
	}
	dst = le.AppendUint64(dst, m.Stage)
	dst = append(dst, byte(m.DType))
	dst = le.AppendUint32(dst, m.Width)
	dst = le.AppendUint16(dst, uint16(len(m.Seqs)))
	for _, s := range m.Seqs {
		dst = le.AppendUint64(dst, s.Request)
		dst = le.AppendUint32(dst, s.Start)
		dst = le.AppendUint32(dst, s.Count)
		if s.Rows > 1 {
			dst = append(dst, byte(s.Out)|outRowsFlag)
			dst = le.AppendUint32(dst, s.Rows)
		} else {
			dst = append(dst, byte(s.Out))
		}
	}
	switch m.DType {
	case DTypeTokens:
		for _, t := range m.Tokens {
			dst = le.AppendUint32(dst, t)
		}
	case DTypeF32:
		dst = appendF32s(dst, m.F32)
	case DTypeF16:
		for _, h := range m.F16 {
			dst = le.AppendUint16(dst, h)
		}
	}
	return dst, nil
}

func parseActivation(r *reader) Message {
	m := &Activation{Stage: r.U64("stage"), DType: DType(r.U8("dtype")), Width: r.U32("width")}
	n := r.Count("seqs", 2, MaxSeqs, actSeqBytes)
	if n > 0 {
		m.Seqs = make([]ActSeq, n)
	}
	for i := range m.Seqs {
		q := ActSeq{Request: r.U64("request"), Start: r.U32("start"), Count: r.U32("count"), Out: Output(r.U8("out"))}
		if q.Out&outRowsFlag != 0 {
			q.Out &^= outRowsFlag
			// A row count of 0 or 1 has the short form: one encoding.
			if q.Rows = r.U32("rows"); q.Rows < 2 && r.Err() == nil {
				r.Fail("rows", "%d with the row count flag, want ≥ 2", q.Rows)
			}
		}
		m.Seqs[i] = q
	}
	if r.Err() != nil {
		return m
	}
	if r.Check(m.check()); r.Err() != nil {
		return m
	}
	// The data's length follows from the sequences; checked against what
	// is left before it is allocated.
	elems := m.elems()
	data := r.Take(m.DType.String(), elems*m.DType.size())
	if data == nil {
		return m
	}
	switch m.DType {
	case DTypeTokens:
		m.Tokens = make([]uint32, elems)
		for i := range m.Tokens {
			m.Tokens[i] = le.Uint32(data[4*i:])
		}
	case DTypeF32:
		m.F32 = readF32s(data)
	case DTypeF16:
		m.F16 = make([]uint16, elems)
		for i := range m.F16 {
			m.F16[i] = le.Uint16(data[2*i:])
		}
	}
	return m
}
