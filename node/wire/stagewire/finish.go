package stagewire

import "github.com/meshnode/meshnode/node/wire"

// Finish ends a request on a stage: the stage closes the meter it opened
// at the request's first Activation, sends the head a Report of its part
// signed under its node key, forgets the request as a Trim to 0 does, and
// passes the Finish to its next stage. It travels the chain as Trim does,
// so it never overtakes an Activation of the request.
type Finish struct {
	Stage, Request uint64
	// Serve is the serve's mesh/1 request id (the content id its receipt
	// carries), which the reports name.
	Serve [32]byte
}

// Kind is KindFinish.
func (*Finish) Kind() Kind { return KindFinish }

func (m *Finish) check() error {
	switch {
	case m.Stage == 0:
		return wire.Invalid("Finish", "stage", "zero")
	case m.Request == 0:
		return wire.Invalid("Finish", "request", "zero")
	case m.Serve == [32]byte{}:
		return wire.Invalid("Finish", "serve", "zero")
	}
	return nil
}

func (m *Finish) appendBody(dst []byte) ([]byte, error) {
	if err := m.check(); err != nil {
		return dst, err
	}
	dst = le.AppendUint64(dst, m.Stage)
	dst = le.AppendUint64(dst, m.Request)
	return append(dst, m.Serve[:]...), nil
}

func parseFinish(r *reader) Message {
	m := &Finish{Stage: r.U64("stage"), Request: r.U64("request"), Serve: r.id("serve")}
	r.Check(m.check())
	return m
}
