package stage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/wire/stagewire"
)

// Stage reports (docs/stage-protocol.md, "Reports"; docs/receipts.md).
//
// A stage meters each request on its own node, from its first Activation
// to its Finish, through the node's meter, and answers Finish with its
// part signed under its node key. The head's Pipeline.Finish collects the
// reports of every other stage, checks each against the plan, and hands
// them with its own range and positions to the serve's engine outcome
// (engine.Split); the steward meters the head's own part, signs it, and
// seals the receipt with every part and their total.

// metered is one request's meter on a stage.
type metered struct {
	span   hw.Span         // nil when it would not open: err says why
	work   hw.WorkRecorder // set where the meter splits shared energy by work
	err    error
	tokens uint32
}

// errNoReports is why a node without a meter or a signer answers Finish
// with a refusal: it cannot make an honest, signed report.
var errNoReports = errors.New("this node meters or signs no stage reports")

// openMeter opens a request's span on the node's meter, telling it the
// devices the stage runs on, and opening a span that is told the work
// done where the meter splits overlapping spans by it (as the steward
// opens a serve's).
func (srv *Server) openMeter() *metered {
	switch m := srv.Meter.(type) {
	case nil:
		return &metered{err: errNoReports}
	case hw.WorkMeter:
		span, err := m.OpenWork(srv.Uses)
		if err != nil {
			return &metered{err: err}
		}
		return &metered{span: span, work: span}
	case hw.DeviceMeter:
		span, err := m.OpenFor(srv.Uses)
		return &metered{span: span, err: err}
	default:
		span, err := m.Open()
		return &metered{span: span, err: err}
	}
}

// add counts a step's positions of the request: units of work of a
// token through layers of weightBytes, as the GGUF engine counts them.
func (mt *metered) add(positions uint32, weightBytes int64) {
	if mt == nil {
		return
	}
	mt.tokens = uint32(min(uint64(mt.tokens)+uint64(positions), 1<<32-1))
	if mt.work != nil {
		mt.work.AddWork(uint64(positions) * uint64(max(weightBytes, 1)))
	}
}

// close ends the span and returns its energy.
func (mt *metered) close() (hw.Energy, error) {
	if mt.span == nil {
		return hw.Energy{}, mt.err
	}
	span := mt.span
	mt.span = nil
	return span.Close()
}

// discard ends the span of a request that will not be reported (trimmed
// to 0, or its stage stopped): an open span would keep sharing the
// meter's energy with the spans it overlaps.
func (mt *metered) discard() {
	if mt.span != nil {
		mt.span.Close()
		mt.span = nil
	}
}

// forget discards request r's meter. s.mu is held.
func (s *stage) forget(r uint64) {
	if mt := s.metered[r]; mt != nil {
		mt.discard()
		delete(s.metered, r)
	}
}

// finish ends a request on s: its span closes, its report goes to the
// head, the request is forgotten, and the Finish goes on to the next
// stage (even when this stage could not report, so that the others do).
func (srv *Server) finish(ctx context.Context, st *stream, f *stagewire.Finish) *stagewire.Error {
	s, e := srv.fromPrev(st, f.Stage, f.Request)
	if e != nil {
		return e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return stagewire.Errorf(stagewire.CodeUnknownStage, s.id, f.Request, "stopped")
	}
	mt := s.metered[f.Request]
	delete(s.metered, f.Request)
	if ss := s.sessions[f.Request]; ss != nil {
		ss.Close()
		delete(s.sessions, f.Request)
	}
	var failed *stagewire.Error
	if err := s.owner.send(ctx, s.report(srv, f, mt)); err != nil {
		failed = stagewire.Errorf(stagewire.CodeInternal, s.id, f.Request, "head unreachable: %v", err)
	}
	if !s.m.Last() {
		fwd := *f
		fwd.Stage = s.ls.NextStage
		if e := s.forward(ctx, srv, &fwd, f.Request); e != nil && failed == nil {
			failed = e
		}
	}
	return failed
}

// report closes mt (nil: the stage never saw the request, which then did
// no work here: zero positions, zero energy) and signs the stage's report
// of it. A report it cannot make honestly is an Error to the head
// instead, which finish sends. s.mu is held.
func (s *stage) report(srv *Server, f *stagewire.Finish, mt *metered) stagewire.Message {
	if srv.Meter == nil || srv.Signer == nil {
		if mt != nil {
			mt.discard()
		}
		return stagewire.Errorf(stagewire.CodeRefused, s.id, f.Request, "no report: %v", errNoReports)
	}
	energy, tokens := hw.Estimated(0), uint32(0)
	if mt != nil {
		var err error
		if energy, err = mt.close(); err != nil {
			return stagewire.Errorf(stagewire.CodeInternal, s.id, f.Request, "no report: meter: %v", err)
		}
		tokens = mt.tokens
	}
	signed, err := srv.Signer.SignStageReport(receipt.StageReport{
		RequestID: receipt.ContentID(f.Serve), Weights: receipt.ContentID(s.ls.Model),
		Lo: s.ls.Lo, Hi: s.ls.Hi, Tokens: tokens, Energy: energy,
	})
	if err != nil {
		return stagewire.Errorf(stagewire.CodeInternal, s.id, f.Request, "no report: %v", err)
	}
	return &stagewire.Report{Stage: s.id, Request: f.Request, Envelope: signed.Envelope}
}

// DefaultReportTimeout is how long Pipeline.Finish waits for the reports
// when PipelineConfig.ReportTimeout is 0.
const DefaultReportTimeout = 10 * time.Second

// ErrReport says a stage's report did not come in time, or came and does
// not hold: not signed by the stage's node, or for another request,
// weights or layer range than the plan's.
var ErrReport = errors.New("stage: no valid stage report")

// Finish ends request on every stage: the head forgets it here, and a
// Finish naming serve (the serve's mesh/1 request id) goes down the
// chain, which each stage answers with its signed report. Finish waits
// for one report from each other stage, at most ctx's deadline or the
// configured ReportTimeout, and checks each: signed by the node the plan
// placed the stage on, naming serve, the model's weights digest and the
// stage's planned range. It returns the head's own part (its range and
// the positions it processed) with the reports in layer order, for the
// serve's engine.Outcome.Split. An error wraps ErrReport, ErrStageLost,
// or the stage's Error.
func (p *Pipeline) Finish(ctx context.Context, request uint64, serve receipt.ContentID) (*engine.Split, error) {
	select {
	case <-p.done:
		return nil, errors.New("stage: pipeline closed")
	default:
	}
	split := &engine.Split{Lo: uint32(p.place.Lo), Hi: uint32(p.place.Hi), Tokens: p.tokens[request]}
	delete(p.tokens, request)
	if s := p.sessions[request]; s != nil {
		s.Close()
		delete(p.sessions, request)
	}
	if err := p.links[0].st.send(ctx, &stagewire.Finish{Stage: p.links[0].id, Request: request, Serve: serve}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStageLost, err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.reportTimeout)
	defer cancel()
	split.Reports = make([]receipt.SignedStageReport, len(p.links))
	got := 0
	for got < len(p.links) {
		lm, err := p.await(ctx)
		if err != nil {
			var missing []string
			for i, l := range p.links {
				if split.Reports[i].Envelope == nil {
					missing = append(missing, fmt.Sprintf("layers %v on %s", l.place.Range, l.place.Peer.Short()))
				}
			}
			return nil, fmt.Errorf("%w: none from %v: %w", ErrReport, missing, err)
		}
		if lm.err != nil {
			return nil, lm.err
		}
		switch m := lm.m.(type) {
		case *stagewire.Report:
			// A report of another request is one Finish made earlier and
			// gave up on; it is no longer wanted.
			if m.Request != request || m.Stage != lm.from.id {
				continue
			}
			i := p.linkIndex(lm.from)
			if split.Reports[i].Envelope != nil {
				continue
			}
			rep, err := p.checkReport(lm.from, m.Envelope, serve)
			if err != nil {
				return nil, err
			}
			split.Reports[i] = rep
			got++
		case *stagewire.Error:
			return nil, fmt.Errorf("stage: layers %v on %s: %w", lm.from.place.Range, lm.from.place.Peer.Short(), m)
		}
	}
	return split, nil
}

func (p *Pipeline) linkIndex(l *link) int {
	for i, x := range p.links {
		if x == l {
			return i
		}
	}
	panic("stage: a message from a link the pipeline does not have")
}

// checkReport opens a report that came on l's stream and holds it to the
// plan.
func (p *Pipeline) checkReport(l *link, envelope []byte, serve receipt.ContentID) (receipt.SignedStageReport, error) {
	where := fmt.Sprintf("layers %v on %s", l.place.Range, l.place.Peer.Short())
	rep, err := receipt.OpenStageReport(envelope)
	switch {
	case err != nil:
		return rep, fmt.Errorf("%w: %s: %w", ErrReport, where, err)
	case !rep.SignedBy(l.place.Peer.PublicKey()):
		return rep, fmt.Errorf("%w: %s: signed by %s, not the stage's node", ErrReport, where, rep.Node)
	case rep.RequestID != serve:
		return rep, fmt.Errorf("%w: %s: for request %s, not %s", ErrReport, where, rep.RequestID, serve)
	case rep.Weights != receipt.ContentID(p.digest):
		return rep, fmt.Errorf("%w: %s: for weights %s", ErrReport, where, rep.Weights)
	case int(rep.Lo) != l.place.Range.Lo || int(rep.Hi) != l.place.Range.Hi:
		return rep, fmt.Errorf("%w: %s: reports layers [%d, %d)", ErrReport, where, rep.Lo, rep.Hi)
	}
	return rep, nil
}
