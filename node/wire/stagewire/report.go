package stagewire

import "github.com/meshnode/meshnode/node/wire"

// MaxReport is the longest signed report a Report carries, in bytes (a
// real one is under 1 KiB: receipt.MaxStageEnvelope bounds it).
const MaxReport = 4096

// Report answers Finish: a stage's signed report of its part of a
// request (receipt.SignedStageReport's envelope, a COSE_Sign1 under the
// stage node's key), sent to the head on the stream the stage was loaded
// on. The codec carries the envelope opaque; the head verifies it.
type Report struct {
	Stage, Request uint64
	Envelope       []byte
}

// Kind is KindReport.
func (*Report) Kind() Kind { return KindReport }

func (m *Report) check() error {
	switch {
	case m.Stage == 0:
		return wire.Invalid("Report", "stage", "zero")
	case m.Request == 0:
		return wire.Invalid("Report", "request", "zero")
	case len(m.Envelope) == 0 || len(m.Envelope) > MaxReport:
		return wire.Invalid("Report", "envelope", "%d bytes, want 1 … %d", len(m.Envelope), MaxReport)
	}
	return nil
}

func (m *Report) appendBody(dst []byte) ([]byte, error) {
	if err := m.check(); err != nil {
		return dst, err
	}
	dst = le.AppendUint64(dst, m.Stage)
	dst = le.AppendUint64(dst, m.Request)
	dst = le.AppendUint16(dst, uint16(len(m.Envelope)))
	return append(dst, m.Envelope...), nil
}

func parseReport(r *reader) Message {
	m := &Report{Stage: r.U64("stage"), Request: r.U64("request")}
	n := r.Count("envelope", 2, MaxReport, 1)
	if r.Err() != nil {
		return m
	}
	m.Envelope = append([]byte(nil), r.Take("envelope", uint64(n))...)
	r.Check(m.check())
	return m
}
