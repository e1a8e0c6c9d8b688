package stagewire

import (
	"fmt"
	"unicode/utf8"

	"github.com/meshnode/meshnode/node/wire"
)

// Code says what went wrong, in an Error message. A Code is an error
// itself, so errors.Is(err, CodeNoModel) finds it in a received Error.
type Code uint16

// The codes. A receiver treats a code it does not know as CodeInternal.
const (
	// CodeUnknownStage: no stage of that id here.
	CodeUnknownStage Code = 1
	// CodeNoModel: no GGUF with that weights digest here.
	CodeNoModel Code = 2
	// CodeBadRange: the layer range does not fit the model.
	CodeBadRange Code = 3
	// CodeNoMemory: the stage does not fit the node's memory budget.
	CodeNoMemory Code = 4
	// CodePosition: an Activation's Start is not where the request is.
	CodePosition Code = 5
	// CodeContext: the positions would pass the stage's context.
	CodeContext Code = 6
	// CodeBusy: too many requests or stages; retry later.
	CodeBusy Code = 7
	// CodeInternal: anything else.
	CodeInternal Code = 8
	// CodeRefused: the message is not one this node takes from this
	// peer, or not on this stream.
	CodeRefused Code = 9
	// CodeBadInput: the data does not fit the stage (token ids into a
	// later stage, rows of the wrong width, a token outside the
	// vocabulary).
	CodeBadInput Code = 10
)

var codeNames = map[Code]string{
	CodeUnknownStage: "unknown stage", CodeNoModel: "no such model", CodeBadRange: "bad layer range",
	CodeNoMemory: "out of memory", CodePosition: "position mismatch", CodeContext: "context exceeded",
	CodeBusy: "busy", CodeInternal: "internal error", CodeRefused: "refused", CodeBadInput: "bad input",
}

func (c Code) Error() string {
	if n, ok := codeNames[c]; ok {
		return "stage: " + n
	}
	return fmt.Sprintf("stage: error code %d", uint16(c))
}

// Error reports a failure to the peer: of a stage (Stage not 0), of one
// request on it (Request not 0), or of the stream's last message. It is
// also a Go error that unwraps to its Code.
type Error struct {
	Stage, Request uint64
	Code           Code
	Text           string
}

// Kind is KindError.
func (*Error) Kind() Kind { return KindError }

func (e *Error) Error() string {
	s := e.Code.Error()
	if e.Stage != 0 {
		s += fmt.Sprintf(" (stage %d", e.Stage)
		if e.Request != 0 {
			s += fmt.Sprintf(", request %d", e.Request)
		}
		s += ")"
	}
	if e.Text != "" {
		s += ": " + e.Text
	}
	return s
}

// Unwrap is the Code.
func (e *Error) Unwrap() error { return e.Code }

func (e *Error) check() error {
	switch {
	case e.Code == 0:
		return wire.Invalid("Error", "code", "zero")
	case len(e.Text) > MaxErrorText:
		return wire.Invalid("Error", "text", "%d bytes, limit %d", len(e.Text), MaxErrorText)
	case !utf8.ValidString(e.Text):
		return wire.Invalid("Error", "text", "not UTF-8")
	}
	return nil
}

func (e *Error) appendBody(dst []byte) ([]byte, error) {
	if err := e.check(); err != nil {
		return dst, err
	}
	dst = le.AppendUint64(dst, e.Stage)
	dst = le.AppendUint64(dst, e.Request)
	dst = le.AppendUint16(dst, uint16(e.Code))
	dst = le.AppendUint16(dst, uint16(len(e.Text)))
	return append(dst, e.Text...), nil
}

func parseError(r *reader) Message {
	e := &Error{Stage: r.U64("stage"), Request: r.U64("request"), Code: Code(r.U16("code"))}
	n := r.Count("text", 2, MaxErrorText, 1)
	if r.Err() != nil {
		return e
	}
	e.Text = string(r.Take("text", uint64(n)))
	r.Check(e.check())
	return e
}

// Errorf makes an Error of code about stage and request.
func Errorf(code Code, stage, request uint64, format string, args ...any) *Error {
	text := fmt.Sprintf(format, args...)
	if len(text) > MaxErrorText {
		text = text[:MaxErrorText]
		for !utf8.ValidString(text) {
			text = text[:len(text)-1]
		}
	}
	return &Error{Stage: stage, Request: request, Code: code, Text: text}
}
