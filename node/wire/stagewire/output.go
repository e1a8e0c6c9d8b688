package stagewire

import (
	"strconv"

	"github.com/meshnode/meshnode/node/wire"
)

// NextToken is the last stage's answer to the sequences of an Activation
// that asked for OutToken, sent straight to the first stage (the Head of
// LoadStage): each request's greedy next token, or, for a sequence that
// asked for Rows n, n entries of its request, one per row in order, each
// with its row's Pos (ActSeq.RowPos).
type NextToken struct {
	Tokens []TokenOut
}

// TokenOut is one request's next token. Pos is the position the token
// will take: the Start + Count of the sequence that produced it, so that
// the first stage can tell an answer to a step it has since trimmed.
type TokenOut struct {
	Request uint64
	Pos     uint32
	Token   uint32
}

const tokenOutBytes = 8 + 4 + 4

// Kind is KindNextToken.
func (*NextToken) Kind() Kind { return KindNextToken }

func checkTokenOut(i int, t TokenOut) error {
	field := "tokens[" + strconv.Itoa(i) + "]"
	if t.Request == 0 {
		return wire.Invalid("NextToken", field+".request", "zero")
	}
	if t.Pos == 0 || t.Pos > MaxPosition {
		return wire.Invalid("NextToken", field+".pos", "%d, want 1 … %d", t.Pos, MaxPosition)
	}
	return nil
}

func (m *NextToken) appendBody(dst []byte) ([]byte, error) {
	if len(m.Tokens) == 0 || len(m.Tokens) > MaxTokenRows {
		return dst, wire.Invalid("NextToken", "tokens", "%d, want 1 … %d", len(m.Tokens), MaxTokenRows)
	}
	dst = le.AppendUint16(dst, uint16(len(m.Tokens)))
	for i, t := range m.Tokens {
		if err := checkTokenOut(i, t); err != nil {
			return dst, err
		}
		dst = le.AppendUint64(dst, t.Request)
		dst = le.AppendUint32(dst, t.Pos)
		dst = le.AppendUint32(dst, t.Token)
	}
	return dst, nil
}

func parseNextToken(r *reader) Message {
	m := &NextToken{}
	n := r.Count("tokens", 2, MaxTokenRows, tokenOutBytes)
	if r.Err() == nil && n == 0 {
		r.Fail("tokens", "none")
	}
	if r.Err() != nil {
		return m
	}
	m.Tokens = make([]TokenOut, n)
	for i := range m.Tokens {
		m.Tokens[i] = TokenOut{Request: r.U64("request"), Pos: r.U32("pos"), Token: r.U32("token")}
		r.Check(checkTokenOut(i, m.Tokens[i]))
	}
	return m
}

// Logits is the last stage's answer for one sequence that asked for
// OutLogits: the logits after its last position, sent to the first stage.
// Pos is as in TokenOut. A sequence that asked for Rows n gets n Logits
// frames, one per row in order, each with its row's Pos: a row is
// vocabulary-wide, so a frame per row keeps every window within the
// frame cap whatever its size.
type Logits struct {
	Request uint64
	Pos     uint32
	Values  []float32
}

// MaxVocab is the most logits one Logits frame carries.
const MaxVocab = (maxFrameBody - 1 - 8 - 4 - 4) / 4

// Kind is KindLogits.
func (*Logits) Kind() Kind { return KindLogits }

func (m *Logits) check() error {
	switch {
	case m.Request == 0:
		return wire.Invalid("Logits", "request", "zero")
	case m.Pos == 0 || m.Pos > MaxPosition:
		return wire.Invalid("Logits", "pos", "%d, want 1 … %d", m.Pos, MaxPosition)
	case len(m.Values) == 0 || len(m.Values) > MaxVocab:
		return wire.Invalid("Logits", "values", "%d, want 1 … %d", len(m.Values), MaxVocab)
	}
	return nil
}

func (m *Logits) appendBody(dst []byte) ([]byte, error) {
	if err := m.check(); err != nil {
		return dst, err
	}
	dst = le.AppendUint64(dst, m.Request)
	dst = le.AppendUint32(dst, m.Pos)
	dst = le.AppendUint32(dst, uint32(len(m.Values)))
	return appendF32s(dst, m.Values), nil
}

func parseLogits(r *reader) Message {
	m := &Logits{Request: r.U64("request"), Pos: r.U32("pos")}
	n := r.Count("values", 4, MaxVocab, 4)
	if r.Err() != nil {
		return m
	}
	m.Values = readF32s(r.Take("values", uint64(n)*4))
	r.Check(m.check())
	return m
}
