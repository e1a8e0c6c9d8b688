package stagewire

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/wire"
)

// TestRoundTrip: every message parses back to itself, from a buffer and
// from a stream of all of them, and the frame is [u32 LE length][kind].
func TestRoundTrip(t *testing.T) {
	var stream []byte
	for _, m := range samples() {
		b, err := Append([]byte("x"), m)
		if err != nil {
			t.Fatalf("%v: %v", m.Kind(), err)
		}
		if b[0] != 'x' || int(le.Uint32(b[1:])) != len(b)-5 || Kind(b[5]) != m.Kind() {
			t.Fatalf("%v: frame %x", m.Kind(), b)
		}
		got, n, err := Parse(b[1:])
		if err != nil || n != len(b)-1 {
			t.Fatalf("%v: Parse: %v, %d of %d bytes", m.Kind(), err, n, len(b)-1)
		}
		if !equal(got, m) {
			t.Errorf("%v: round trip\n got %+v\nwant %+v", m.Kind(), got, m)
		}
		stream = append(stream, b[1:]...)
	}
	r := bytes.NewReader(stream)
	var buf []byte
	for i, want := range samples() {
		var got Message
		var err error
		got, buf, err = Read(context.Background(), r, buf)
		if err != nil || !equal(got, want) {
			t.Fatalf("frame %d: %+v, %v", i, got, err)
		}
	}
	if _, _, err := Read(context.Background(), r, buf); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

// equal compares messages bit for bit (a NaN equals itself).
func equal(a, b Message) bool {
	if fa, ok := a.(*Activation); ok {
		fb, ok := b.(*Activation)
		if !ok || !f32Bits(fa.F32, fb.F32) {
			return false
		}
		ca, cb := *fa, *fb
		ca.F32, cb.F32 = nil, nil
		return reflect.DeepEqual(&ca, &cb)
	}
	if la, ok := a.(*Logits); ok {
		lb, ok := b.(*Logits)
		return ok && la.Request == lb.Request && la.Pos == lb.Pos && f32Bits(la.Values, lb.Values)
	}
	return reflect.DeepEqual(a, b)
}

func f32Bits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestRefuseToEncode: Append refuses what Parse would refuse, naming the
// field, and leaves dst as it was.
func TestRefuseToEncode(t *testing.T) {
	mut := func(f func(a *Activation)) *Activation { a := sampleTokens(); f(a); return a }
	mutF32 := func(f func(a *Activation)) *Activation { a := sampleF32(); f(a); return a }
	ls := func(f func(l *LoadStage)) *LoadStage { l := sampleLoadStage(); f(l); return l }
	for _, tc := range []struct {
		name  string
		m     Message
		field string
	}{
		{"stage 0", ls(func(l *LoadStage) { l.Stage = 0 }), "stage"},
		{"empty range", ls(func(l *LoadStage) { l.Lo = 12 }), "layers"},
		{"range past MaxLayers", ls(func(l *LoadStage) { l.Hi = MaxLayers + 1 }), "layers"},
		{"no context", ls(func(l *LoadStage) { l.Context = 0 }), "context"},
		{"unknown KV type", ls(func(l *LoadStage) { l.KV = 2 }), "kv"},
		{"tokens as the output dtype", ls(func(l *LoadStage) { l.Out = DTypeTokens }), "out"},
		{"too many seqs", ls(func(l *LoadStage) { l.Seqs = MaxSeqs + 1 }), "seqs"},
		{"a next node without its stage", ls(func(l *LoadStage) { l.NextStage = 0 }), "next_stage"},
		{"a next stage without its node", ls(func(l *LoadStage) { l.Next = [32]byte{} }), "next_stage"},
		{"rows as many as seqs", ls(func(l *LoadStage) { l.Rows = l.Seqs }), "rows"},
		{"rows fewer than seqs", ls(func(l *LoadStage) { l.Rows = l.Seqs - 1 }), "rows"},
		{"ready without a stage", &Ready{Lo: 0, Hi: 1}, "stage"},
		{"stop without a stage", &Stop{}, "stage"},
		{"trim without a request", &Trim{Stage: 1}, "request"},
		{"trim past MaxPosition", &Trim{Stage: 1, Request: 1, Length: MaxPosition + 1}, "length"},
		{"inventory entry with no context", &Inventory{Stages: []StageInfo{{Stage: 1, Lo: 0, Hi: 1}}}, "context"},
		{"activation without sequences", mut(func(a *Activation) { a.Seqs = nil; a.Tokens = nil }), "seqs"},
		{"request 0", mut(func(a *Activation) { a.Seqs[1].Request = 0 }), "seqs[1].request"},
		{"a request twice", mut(func(a *Activation) { a.Seqs[2].Request = 42 }), "seqs[2].request"},
		{"count 0", mut(func(a *Activation) { a.Seqs[0].Count = 0 }), "seqs[0].count"},
		{"positions past MaxPosition", mut(func(a *Activation) { a.Seqs[0].Start = MaxPosition - 1 }), "seqs[0]"},
		{"unknown output", mut(func(a *Activation) { a.Seqs[0].Out = 3 }), "seqs[0].out"},
		{"fewer tokens than declared", mut(func(a *Activation) { a.Tokens = a.Tokens[:5] }), "tokens"},
		{"rows with token ids", mut(func(a *Activation) { a.F32 = []float32{1} }), "f32"},
		{"width with token ids", mut(func(a *Activation) { a.Width = 4 }), "width"},
		{"rows of width 0", mutF32(func(a *Activation) { a.Width = 0 }), "width"},
		{"rows wider than MaxWidth", mutF32(func(a *Activation) { a.Width = MaxWidth + 1 }), "width"},
		{"unknown dtype", mutF32(func(a *Activation) { a.DType = 3 }), "dtype"},
		{"rows short of width × positions", mutF32(func(a *Activation) { a.F32 = a.F32[:11] }), "f32"},
		{"no next tokens", &NextToken{}, "tokens"},
		{"next token at position 0", &NextToken{Tokens: []TokenOut{{Request: 1}}}, "tokens[0].pos"},
		{"empty logits", &Logits{Request: 1, Pos: 1}, "values"},
		{"error without a code", &Error{Text: "x"}, "code"},
		{"error text too long", &Error{Code: CodeBusy, Text: strings.Repeat("x", MaxErrorText+1)}, "text"},
		{"error text not UTF-8", &Error{Code: CodeBusy, Text: "\xff"}, "text"},
		{"finish without a stage", &Finish{Request: 1, Serve: id(1)}, "stage"},
		{"finish without a request", &Finish{Stage: 1, Serve: id(1)}, "request"},
		{"finish without the serve", &Finish{Stage: 1, Request: 1}, "serve"},
		{"report without a request", &Report{Stage: 1, Envelope: []byte{1}}, "request"},
		{"empty report", &Report{Stage: 1, Request: 1}, "envelope"},
		{"report over MaxReport", &Report{Stage: 1, Request: 1, Envelope: make([]byte, MaxReport+1)}, "envelope"},
	} {
		dst := []byte("keep")
		out, err := Append(dst, tc.m)
		var fe *wire.FrameError
		if !errors.Is(err, wire.ErrInvalidMessage) || !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: %v, want ErrInvalidMessage at %q", tc.name, err, tc.field)
		}
		if string(out) != "keep" {
			t.Errorf("%s: dst became %q", tc.name, out)
		}
	}
}

// TestFrameCap: the largest activation MaxPositions allows encodes under
// the frame cap, one more position is refused before anything is
// written, and a declared length over the cap is refused before the body
// is read.
func TestFrameCap(t *testing.T) {
	for _, dt := range []DType{DTypeF32, DTypeF16, DTypeTokens} {
		width := 4096
		if dt == DTypeTokens {
			width = 0
		}
		n := MaxPositions(dt, max(width, 1), 1)
		// A window over every position: MaxPositions counts each
		// sequence with its row count.
		a := &Activation{Stage: 1, DType: dt, Width: uint32(width), Seqs: []ActSeq{{Request: 1, Count: uint32(n), Out: OutLogits, Rows: uint32(n)}}}
		fill := func(k int) {
			switch dt {
			case DTypeF32:
				a.F32 = make([]float32, k*width)
			case DTypeF16:
				a.F16 = make([]uint16, k*width)
			default:
				a.Tokens = make([]uint32, k)
			}
		}
		fill(n)
		b, err := Append(nil, a)
		if err != nil {
			t.Fatalf("%v: %d positions: %v", dt, n, err)
		}
		if len(b)-4 > wire.MaxControlFrameBytes || len(b)-4 < wire.MaxControlFrameBytes-max(width, 1)*4 {
			t.Errorf("%v: %d positions encode to %d bytes: MaxPositions is not the most that fits", dt, n, len(b)-4)
		}
		a.Seqs[0].Count++
		a.Seqs[0].Rows++
		fill(n + 1)
		if _, err := Append(nil, a); err == nil {
			t.Errorf("%v: %d positions encoded past the cap", dt, n+1)
		}
	}
	var w bytes.Buffer
	big := &Logits{Request: 1, Pos: 1, Values: make([]float32, MaxVocab+1)}
	if err := Write(context.Background(), &w, big); !errors.Is(err, wire.ErrInvalidMessage) || w.Len() != 0 {
		t.Errorf("an oversize Logits: %v, %d bytes written", err, w.Len())
	}
	hdr := le.AppendUint32(nil, wire.MaxControlFrameBytes+1)
	if _, _, err := Read(context.Background(), bytes.NewReader(append(hdr, byte(KindStop))), nil); !errors.Is(err, wire.ErrOversize) {
		t.Errorf("a declared oversize frame: %v, want ErrOversize", err)
	}
}

// TestRefuseToParse: bodies no encoder makes are refused with the field
// at fault, before any allocation their counts would ask for.
func TestRefuseToParse(t *testing.T) {
	body := func(m Message) []byte {
		b, err := Append(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		return b[4:]
	}
	tokens := body(sampleTokens())
	seqCount := 1 + 8 + 1 + 4 // where the sequence count is
	for _, tc := range []struct {
		name  string
		body  []byte
		kind  error
		field string
	}{
		{"empty", nil, wire.ErrInvalidMessage, "kind"},
		{"unknown kind", []byte{0x7f}, wire.ErrInvalidMessage, "kind"},
		{"trailing byte", append(body(&Stop{Stage: 1}), 0), wire.ErrInvalidMessage, ""},
		{"cut inside a field", body(sampleReady())[:10], wire.ErrInvalidMessage, "lo"},
		{"zero stage", append([]byte{byte(KindStop)}, make([]byte, 8)...), wire.ErrInvalidMessage, "stage"},
		{"more sequences than MaxSeqs", func() []byte {
			b := append([]byte(nil), tokens...)
			le.PutUint16(b[seqCount:], MaxSeqs+1)
			return b
		}(), wire.ErrInvalidMessage, "seqs"},
		{"more sequences than bytes", func() []byte {
			b := append([]byte(nil), tokens...)
			le.PutUint16(b[seqCount:], 900)
			return b
		}(), wire.ErrInvalidMessage, "seqs"},
		{"a count larger than the data", func() []byte {
			b := append([]byte(nil), tokens...)
			le.PutUint32(b[seqCount+2+12:], 1<<29) // seqs[0].count
			return b
		}(), wire.ErrInvalidMessage, "tokens"},
		{"a huge logits count", func() []byte {
			b := body(sampleLogits())
			le.PutUint32(b[1+8+4:], 0xffffffff)
			return b
		}(), wire.ErrInvalidMessage, "values"},
		{"an inventory count past the bytes", func() []byte {
			b := body(sampleInventory())
			le.PutUint16(b[1:], 3)
			return b
		}(), wire.ErrInvalidMessage, "stages"},
		{"a report longer than MaxReport", func() []byte {
			b := body(sampleReport())
			le.PutUint16(b[1+16:], MaxReport+1)
			return b
		}(), wire.ErrInvalidMessage, "envelope"},
		{"a report longer than its bytes", func() []byte {
			b := body(sampleReport())
			le.PutUint16(b[1+16:], 8)
			return b
		}(), wire.ErrInvalidMessage, "envelope"},
		{"a report of 0 bytes", func() []byte {
			b := body(sampleReport())
			le.PutUint16(b[1+16:], 0)
			return b[:1+18]
		}(), wire.ErrInvalidMessage, "envelope"},
		{"a finish for the zero serve", append(body(sampleFinish())[:17], make([]byte, 32)...), wire.ErrInvalidMessage, "serve"},
		{"load rows of 0 in the long form", append(body(sampleLoadStage()), 0, 0), wire.ErrInvalidMessage, "rows"},
		{"load rows no more than seqs", func() []byte {
			b := body(sampleLoadStageRows())
			le.PutUint16(b[len(b)-2:], 8) // seqs is 8
			return b
		}(), wire.ErrInvalidMessage, "rows"},
		{"load rows cut short", func() []byte {
			b := body(sampleLoadStageRows())
			return b[:len(b)-1]
		}(), wire.ErrInvalidMessage, "rows"},
		{"a byte after load rows", append(body(sampleLoadStageRows()), 0), wire.ErrInvalidMessage, ""},
		{"a row count of 1 in the long form", func() []byte {
			b := body(sampleWindow())
			le.PutUint32(b[seqCount+2+17:], 1) // seqs[0].rows
			return b
		}(), wire.ErrInvalidMessage, "rows"},
		{"more rows than positions", func() []byte {
			b := body(sampleWindow())
			le.PutUint32(b[seqCount+2+17:], 5)
			return b
		}(), wire.ErrInvalidMessage, "seqs[0].rows"},
		{"rows with no output", func() []byte {
			b := body(sampleWindow())
			b[seqCount+2+16] = outRowsFlag | byte(OutNone)
			return b
		}(), wire.ErrInvalidMessage, "seqs[0].rows"},
		{"a bad output", func() []byte {
			b := append([]byte(nil), tokens...)
			b[seqCount+2+16] = 9 // seqs[0].out
			return b
		}(), wire.ErrInvalidMessage, "seqs[0].out"},
	} {
		_, err := ParseBody(tc.body)
		var fe *wire.FrameError
		if !errors.Is(err, tc.kind) || !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: %v, want %v at %q", tc.name, err, tc.kind, tc.field)
		}
	}
	if _, _, err := Parse(body(&Stop{Stage: 1})); !errors.Is(err, wire.ErrTruncated) && !errors.Is(err, wire.ErrInvalidMessage) {
		t.Errorf("a body without its length prefix: %v", err)
	}
	b, _ := Append(nil, sampleF32())
	if _, _, err := Parse(b[:len(b)-1]); !errors.Is(err, wire.ErrTruncated) {
		t.Errorf("a frame cut short: %v, want ErrTruncated", err)
	}
}

// TestLoadStageRows: a LoadStage without Rows is byte for byte the
// message of before the field (what a node that does not advertise
// FeatureLoadRows parses), Rows adds exactly its two bytes at the end,
// and StepRows is Rows, else Seqs. Every node now advertises the field.
func TestLoadStageRows(t *testing.T) {
	short, err := Append(nil, sampleLoadStage())
	if err != nil {
		t.Fatal(err)
	}
	// The layout of before: kind, stage, model, lo, hi, context, batch,
	// seqs, kv, out, next, next_stage, prev, head.
	const old = 1 + 8 + 32 + 4 + 4 + 4 + 4 + 2 + 1 + 1 + 32 + 8 + 32 + 32
	if len(short) != 4+old {
		t.Fatalf("a LoadStage without rows is %d bytes, the message of before %d", len(short)-4, old)
	}
	long, err := Append(nil, sampleLoadStageRows())
	if err != nil {
		t.Fatal(err)
	}
	if len(long) != len(short)+2 || !bytes.Equal(long[4:len(short)], short[4:]) || le.Uint16(long[len(long)-2:]) != 9 {
		t.Fatalf("with rows 9:\n%x\nwithout:\n%x", long, short)
	}
	if r := sampleLoadStage().StepRows(); r != 8 {
		t.Errorf("StepRows without rows: %d, want seqs (8)", r)
	}
	if r := sampleLoadStageRows().StepRows(); r != 9 {
		t.Errorf("StepRows with rows 9: %d", r)
	}
	adv := Advertisement().GetFeatures()
	if !slices.Contains(adv, FeatureLoadRows) || !slices.Contains(adv, FeatureRows) {
		t.Errorf("advertised features %v", adv)
	}
}

// TestErrorCode: a received Error matches its Code with errors.Is, an
// unknown code still prints, and Errorf keeps a long text within bounds.
func TestErrorCode(t *testing.T) {
	b, _ := Append(nil, sampleError())
	m, _, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	var e error = m.(*Error)
	if !errors.Is(e, CodePosition) || errors.Is(e, CodeContext) {
		t.Errorf("%v: Is(CodePosition) false or Is(CodeContext) true", e)
	}
	if !strings.Contains(e.Error(), "stage 7, request 42") {
		t.Errorf("Error() = %q", e.Error())
	}
	if s := Code(999).Error(); !strings.Contains(s, "999") {
		t.Errorf("unknown code: %q", s)
	}
	long := Errorf(CodeInternal, 1, 0, "%s", strings.Repeat("é", MaxErrorText))
	if _, err := Append(nil, long); err != nil {
		t.Errorf("Errorf's text refused: %v", err)
	}
}

func TestOpen(t *testing.T) {
	o := OpenMessage()
	if err := wire.ValidateMeshSubprotocolOpen(o); err != nil || !Matches(o.GetName(), o.GetMajor()) {
		t.Errorf("OpenMessage %v: %v", o, err)
	}
	if err := wire.ValidateMeshSubprotocol(Advertisement()); err != nil || Matches("skippy-stage", 2) || Matches(Name, 2) {
		t.Errorf("Advertisement: %v", err)
	}
}

// TestWindowRows: a window's rows answer positions in order, the last
// where a one-row sequence's answer is, and a step cannot ask for more
// token rows than one NextToken carries.
func TestWindowRows(t *testing.T) {
	w := sampleWindow()
	q := w.Seqs[0]
	for j, want := range []uint32{10, 11, 12, 13} {
		if got := q.RowPos(j); got != want {
			t.Errorf("row %d: pos %d, want %d", j, got, want)
		}
	}
	if got := (ActSeq{Start: 9, Count: 4, Out: OutToken}).RowPos(0); got != 13 {
		t.Errorf("one row: pos %d, want 13 (start + count)", got)
	}
	// Rows 1 is the short form: the bytes of a sequence without rows.
	one, _ := Append(nil, &Activation{Stage: 1, Seqs: []ActSeq{{Request: 1, Count: 2, Out: OutToken, Rows: 1}}, Tokens: []uint32{1, 2}})
	none, _ := Append(nil, &Activation{Stage: 1, Seqs: []ActSeq{{Request: 1, Count: 2, Out: OutToken}}, Tokens: []uint32{1, 2}})
	if !bytes.Equal(one, none) {
		t.Errorf("rows 1 encodes as %x, want %x", one, none)
	}
	big := &Activation{Stage: 1, Seqs: []ActSeq{{Request: 1, Count: MaxTokenRows + 1, Out: OutToken, Rows: MaxTokenRows + 1}},
		Tokens: make([]uint32, MaxTokenRows+1)}
	if _, err := Append(nil, big); !errors.Is(err, wire.ErrInvalidMessage) {
		t.Errorf("%d token rows in one step: %v", MaxTokenRows+1, err)
	}
	big.Seqs[0].Out = OutLogits // a frame per row: no such bound
	if _, err := Append(nil, big); err != nil {
		t.Errorf("%d logits rows: %v", MaxTokenRows+1, err)
	}
}
