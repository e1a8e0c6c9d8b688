package stage

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/wire/stagewire"
)

// Models finds this node's copy of a GGUF by weights digest. The File
// must stay open while the Server may use it.
type Models interface {
	Open(digest [32]byte) (*gguf.File, error)
}

// Dialer opens a meshnode-stage/1 stream to an admitted peer (for the
// mesh, MeshDialer).
type Dialer interface {
	Open(ctx context.Context, peer identity.EndpointID) (io.ReadWriteCloser, error)
}

// ErrNoModel is what Models.Open returns for a digest it does not hold.
var ErrNoModel = errors.New("stage: no model with that weights digest")

// Server serves the stages this node is asked to run. Its zero value is
// not usable: set Models, Backend and Dial.
type Server struct {
	Models  Models
	Backend backend.Backend
	Dial    Dialer
	// Budget, when not 0, is the most bytes of weights and KV cache all of
	// the node's stages together may hold (a stage's figure counts the
	// KV of Seqs requests at its full context).
	Budget int64
	Log    *slog.Logger
	// Meter meters each request's work on this node, from its first
	// Activation to its Finish, under the rules a serve is metered by
	// (docs/meters.md): the node's meter, so that requests and serves
	// running at once share its counters' energy. Uses is the devices
	// Backend runs on (0: any). Signer signs the report of each finished
	// request: the node key's receipt.Sealer. Without both, a Finish is
	// answered with a refusal and no report.
	Meter  hw.Meter
	Uses   hw.Domain
	Signer Signer

	mu     sync.Mutex
	stages map[uint64]*stage
	used   int64
}

// Signer signs a stage's report of its part of a request under the node
// key (*receipt.Sealer).
type Signer interface {
	SignStageReport(receipt.StageReport) (receipt.SignedStageReport, error)
}

// maxSessions bounds the requests one stage holds at once, beyond the
// sequences of one step: a request lives from its first Activation to a
// Trim to 0, its Finish or the stage's Stop.
const maxSessionsPerSeq = 4

// stage is one loaded stage.
type stage struct {
	id     uint64
	ls     stagewire.LoadStage
	m      *model.Model
	batch  *model.Batch
	memory int64
	owner  *stream // the head's stream: Stop comes on it, results and errors go to it

	mu       sync.Mutex // one step at a time; guards what follows
	sessions map[uint64]*model.Session
	metered  map[uint64]*metered // beside sessions, for the same requests
	next     *stream             // to ls.Next, opened at the first forward
	hidden   []float32
	stopped  bool
}

// stream is one stage stream's writing end, shared by the goroutines that
// answer on it.
type stream struct {
	peer identity.EndpointID
	mu   sync.Mutex
	rw   io.ReadWriteCloser
}

func (s *stream) send(ctx context.Context, m stagewire.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return stagewire.Write(ctx, s.rw, m)
}

func (srv *Server) log() *slog.Logger {
	if srv.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return srv.Log
}

// ServeStream serves one meshnode-stage/1 stream that peer opened, after
// its MeshSubprotocolOpen, until it ends or ctx does. Messages are taken
// in order; a step's answers may go to another stream (the head's).
func (srv *Server) ServeStream(ctx context.Context, peer identity.EndpointID, rw io.ReadWriteCloser) {
	st := &stream{peer: peer, rw: rw}
	// A stage lives as long as its head's stream: a head that is gone
	// takes its stages with it.
	defer srv.stopOwnedBy(st)
	var buf []byte
	for {
		var m stagewire.Message
		var err error
		m, buf, err = stagewire.Read(ctx, rw, buf)
		if err != nil {
			if err != io.EOF && ctx.Err() == nil {
				srv.log().Debug("stage: stream ended", "peer", peer.Short(), "err", err)
			}
			return
		}
		if e := srv.handle(ctx, st, m); e != nil {
			to := st
			if s := srv.lookup(e.Stage); s != nil && s.owner != nil {
				to = s.owner
			}
			if err := to.send(ctx, e); err != nil {
				srv.log().Debug("stage: error not delivered", "peer", to.peer.Short(), "err", err)
			}
		}
	}
}

func (srv *Server) lookup(id uint64) *stage {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.stages[id]
}

// handle serves one message and returns the Error to answer it with, if
// any.
func (srv *Server) handle(ctx context.Context, st *stream, m stagewire.Message) *stagewire.Error {
	switch m := m.(type) {
	case *stagewire.LoadStage:
		return srv.load(ctx, st, m)
	case *stagewire.Stop:
		s := srv.lookup(m.Stage)
		if s == nil {
			return stagewire.Errorf(stagewire.CodeUnknownStage, m.Stage, 0, "no such stage")
		}
		if st.peer != identity.EndpointID(s.ls.Head) {
			return stagewire.Errorf(stagewire.CodeRefused, 0, 0, "stop of stage %d from a node that is not its head", m.Stage)
		}
		srv.stop(s)
		return nil
	case *stagewire.InventoryRequest:
		if err := st.send(ctx, srv.inventory()); err != nil {
			srv.log().Debug("stage: inventory not sent", "err", err)
		}
		return nil
	case *stagewire.Trim:
		return srv.trim(ctx, st, m)
	case *stagewire.Activation:
		return srv.activate(ctx, st, m)
	case *stagewire.Finish:
		return srv.finish(ctx, st, m)
	}
	return stagewire.Errorf(stagewire.CodeRefused, 0, 0, "%v is not a message a stage takes", m.Kind())
}

func (srv *Server) load(ctx context.Context, st *stream, ls *stagewire.LoadStage) *stagewire.Error {
	fail := func(code stagewire.Code, format string, args ...any) *stagewire.Error {
		return stagewire.Errorf(code, 0, 0, "stage %d: "+format, append([]any{ls.Stage}, args...)...)
	}
	if st.peer != identity.EndpointID(ls.Head) {
		return fail(stagewire.CodeRefused, "LoadStage from a node that is not the head it names")
	}
	f, err := srv.Models.Open(ls.Model)
	if err != nil {
		return fail(stagewire.CodeNoModel, "%v", err)
	}
	m, err := model.LoadStage(f, srv.Backend, model.LayerRange{Lo: int(ls.Lo), Hi: int(ls.Hi)})
	if err != nil {
		code := stagewire.CodeInternal
		if errors.Is(err, model.ErrRange) {
			code = stagewire.CodeBadRange
		}
		return fail(code, "%v", err)
	}
	if m.Last() != (ls.NextStage == 0) {
		return fail(stagewire.CodeBadRange, "layers %d-%d of %d with next stage %d", ls.Lo, ls.Hi, m.Config().Layers, ls.NextStage)
	}
	kv := model.KVF16
	if ls.KV == stagewire.KVF32 {
		kv = model.KVF32
	}
	if int(ls.Context) > m.Config().TrainContext {
		return fail(stagewire.CodeContext, "context %d, the model's is %d", ls.Context, m.Config().TrainContext)
	}
	if most := stagewire.MaxPositions(ls.Out, m.Config().Embd, int(ls.Batch)); !m.Last() && int(ls.Batch) > most {
		return fail(stagewire.CodeBadInput, "a step of %d positions of %d %v elements does not fit one frame (at most %d)", ls.Batch, m.Config().Embd, ls.Out, most)
	}
	// The last stage computes a step's output rows: Rows of them where
	// the head set them apart from Seqs (a speculative window's k+1).
	rows := int(ls.Seqs)
	if m.Last() {
		if rows = ls.StepRows(); rows > int(ls.Batch) {
			return fail(stagewire.CodeBadInput, "%d output rows per step, more than a step's %d positions", rows, ls.Batch)
		}
	}
	// The head's int8 shadow (a last stage's, on a CPU that builds one)
	// is built and counted where the budget holds it, and not built where
	// it does not: the plan was made from the file, and the shadow only
	// speeds greedy picks.
	mem := m.WeightBytes() + int64(ls.Seqs)*m.KVBytes(int(ls.Context), kv)
	shadow := m.ShadowBytes()
	b, err := m.NewBatch(model.BatchOptions{Tokens: int(ls.Batch), Seqs: rows})
	if err != nil {
		return fail(stagewire.CodeBadRange, "%v", err)
	}
	s := &stage{id: ls.Stage, ls: *ls, m: m, batch: b, owner: st,
		sessions: map[uint64]*model.Session{}, metered: map[uint64]*metered{}}
	srv.mu.Lock()
	switch {
	case srv.stages[ls.Stage] != nil:
		srv.mu.Unlock()
		return fail(stagewire.CodeBusy, "a stage of that id is loaded")
	case srv.Budget > 0 && srv.used+mem > srv.Budget:
		srv.mu.Unlock()
		return fail(stagewire.CodeNoMemory, "needs %d bytes, %d of %d free", mem, srv.Budget-srv.used, srv.Budget)
	case srv.Budget > 0 && srv.used+mem+shadow > srv.Budget:
		shadow = 0
	}
	// The shadow's bytes are held for it while it is built, outside the
	// lock (the built-in model's 32000 × 192 head took 0.2 s on a build
	// machine's core).
	mem += shadow
	s.memory = mem
	if srv.stages == nil {
		srv.stages = map[uint64]*stage{}
	}
	srv.stages[ls.Stage] = s
	srv.used += mem
	srv.mu.Unlock()
	if shadow > 0 && !m.BuildShadow() {
		// A head it could not take after all (a weight not finite).
		mem -= shadow
		srv.mu.Lock()
		if srv.stages[ls.Stage] == s {
			srv.used -= shadow
			s.memory = mem
		}
		srv.mu.Unlock()
	}
	// Before Ready, so that the first step does not pay for it (the CPU
	// packs the weights it reads from memory).
	if err := m.WarmUp(ctx); err != nil {
		srv.log().Warn("stage: warm-up failed; the first step pays what it would have", "stage", ls.Stage, "lo", ls.Lo, "hi", ls.Hi, "err", err)
	}
	if err := st.send(ctx, &stagewire.Ready{Stage: ls.Stage, Lo: ls.Lo, Hi: ls.Hi, Memory: uint64(mem)}); err != nil {
		srv.stop(s)
	}
	return nil
}

// stop drops s and what it holds.
func (srv *Server) stop(s *stage) {
	srv.mu.Lock()
	if srv.stages[s.id] == s {
		delete(srv.stages, s.id)
		srv.used -= s.memory
	}
	srv.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	for _, ss := range s.sessions {
		ss.Close()
	}
	s.sessions = nil
	for _, mt := range s.metered {
		mt.discard()
	}
	s.metered = nil
	if s.next != nil {
		s.next.rw.Close()
		s.next = nil
	}
}

func (srv *Server) stopOwnedBy(st *stream) {
	srv.mu.Lock()
	var owned []*stage
	for _, s := range srv.stages {
		if s.owner == st {
			owned = append(owned, s)
		}
	}
	srv.mu.Unlock()
	for _, s := range owned {
		srv.stop(s)
	}
}

// Stop drops every stage; for the node's shutdown.
func (srv *Server) Stop() {
	srv.mu.Lock()
	all := make([]*stage, 0, len(srv.stages))
	for _, s := range srv.stages {
		all = append(all, s)
	}
	srv.mu.Unlock()
	for _, s := range all {
		srv.stop(s)
	}
}

func (srv *Server) inventory() *stagewire.Inventory {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	inv := &stagewire.Inventory{}
	for _, s := range srv.stages {
		inv.Stages = append(inv.Stages, stagewire.StageInfo{Stage: s.id, Model: s.ls.Model, Lo: s.ls.Lo, Hi: s.ls.Hi,
			Context: s.ls.Context, KV: s.ls.KV, Memory: uint64(s.memory)})
	}
	return inv
}

// fromPrev finds the stage a chain message is for and checks it came from
// the stage's prev.
func (srv *Server) fromPrev(st *stream, id, request uint64) (*stage, *stagewire.Error) {
	s := srv.lookup(id)
	if s == nil {
		return nil, stagewire.Errorf(stagewire.CodeUnknownStage, 0, request, "no stage %d", id)
	}
	if st.peer != identity.EndpointID(s.ls.Prev) {
		return nil, stagewire.Errorf(stagewire.CodeRefused, 0, request, "stage %d takes its input from its prev only", id)
	}
	return s, nil
}

func (srv *Server) trim(ctx context.Context, st *stream, t *stagewire.Trim) *stagewire.Error {
	s, e := srv.fromPrev(st, t.Stage, t.Request)
	if e != nil {
		return e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return stagewire.Errorf(stagewire.CodeUnknownStage, s.id, t.Request, "stopped")
	}
	if ss := s.sessions[t.Request]; ss != nil {
		ss.Truncate(int(t.Length))
		if t.Length == 0 {
			ss.Close()
			delete(s.sessions, t.Request)
			s.forget(t.Request)
		}
	}
	if s.m.Last() {
		return nil
	}
	fwd := *t
	fwd.Stage = s.ls.NextStage
	return s.forward(ctx, srv, &fwd, t.Request)
}

// forward sends m on to the next stage, opening the stream the first time.
// s.mu is held.
func (s *stage) forward(ctx context.Context, srv *Server, m stagewire.Message, request uint64) *stagewire.Error {
	if s.next == nil {
		rw, err := srv.Dial.Open(ctx, identity.EndpointID(s.ls.Next))
		if err != nil {
			return stagewire.Errorf(stagewire.CodeInternal, s.id, request, "next stage unreachable: %v", err)
		}
		s.next = &stream{peer: identity.EndpointID(s.ls.Next), rw: rw}
		// The next stage answers on the head's stream; anything it says
		// here is only logged.
		go srv.drain(s.next)
	}
	if err := s.next.send(ctx, m); err != nil {
		s.next.rw.Close()
		s.next = nil
		return stagewire.Errorf(stagewire.CodeInternal, s.id, request, "next stage: %v", err)
	}
	return nil
}

func (srv *Server) drain(st *stream) {
	var buf []byte
	for {
		m, b, err := stagewire.Read(context.Background(), st.rw, buf)
		if err != nil {
			return
		}
		buf = b
		srv.log().Warn("stage: the next stage answered on the chain", "peer", st.peer.Short(), "message", m.Kind())
	}
}

func (srv *Server) activate(ctx context.Context, st *stream, a *stagewire.Activation) *stagewire.Error {
	first := uint64(0)
	if len(a.Seqs) > 0 {
		first = a.Seqs[0].Request
	}
	s, e := srv.fromPrev(st, a.Stage, first)
	if e != nil {
		return e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return stagewire.Errorf(stagewire.CodeUnknownStage, s.id, first, "stopped")
	}
	bad := func(code stagewire.Code, request uint64, format string, args ...any) *stagewire.Error {
		return stagewire.Errorf(code, s.id, request, format, args...)
	}
	embd := s.m.Config().Embd
	switch {
	case s.m.First() != (a.DType == stagewire.DTypeTokens):
		return bad(stagewire.CodeBadInput, first, "%v into layers %d-%d", a.DType, s.ls.Lo, s.ls.Hi)
	case a.DType != stagewire.DTypeTokens && int(a.Width) != embd:
		return bad(stagewire.CodeBadInput, first, "rows of %d, the model's are %d", a.Width, embd)
	}
	// Every sequence is checked before any session changes.
	seqs := make([]model.Seq, len(a.Seqs))
	var fresh []uint64
	rows := 0
	for _, q := range a.Seqs {
		rows += q.OutRows()
	}
	if s.m.Last() && rows > s.ls.StepRows() {
		return bad(stagewire.CodeBadInput, first, "%d output rows in a step, the stage computes at most %d", rows, s.ls.StepRows())
	}
	for i, q := range a.Seqs {
		ss := s.sessions[q.Request]
		held := 0
		if ss != nil {
			held = ss.Len()
		}
		if int(q.Start) != held {
			return bad(stagewire.CodePosition, q.Request, "start %d, the request holds %d positions", q.Start, held)
		}
		if ss == nil {
			if len(s.sessions)+len(fresh) >= maxSessionsPerSeq*int(s.ls.Seqs) {
				return bad(stagewire.CodeBusy, q.Request, "%d requests held", len(s.sessions))
			}
			fresh = append(fresh, q.Request)
		}
		seqs[i] = model.Seq{Count: int(q.Count), Logits: q.OutRows()}
	}
	kv := model.KVF16
	if s.ls.KV == stagewire.KVF32 {
		kv = model.KVF32
	}
	for _, r := range fresh {
		ss, err := s.m.NewSession(model.SessionOptions{Context: int(s.ls.Context), Batch: int(s.ls.Batch), KV: kv})
		if err != nil {
			return bad(stagewire.CodeInternal, r, "%v", err)
		}
		s.sessions[r] = ss
		// The request's meter opens before its first step runs.
		s.metered[r] = srv.openMeter()
	}
	for i, q := range a.Seqs {
		seqs[i].Session = s.sessions[q.Request]
	}
	var err error
	if s.m.First() {
		off := 0
		for i := range seqs {
			seqs[i].Tokens, seqs[i].Count = a.Tokens[off:off+seqs[i].Count], 0
			off += len(seqs[i].Tokens)
		}
		err = s.batch.Step(ctx, seqs)
	} else {
		rows := a.F32
		if a.DType == stagewire.DTypeF16 {
			s.hidden = model.F16ToF32(growF32(s.hidden, len(a.F16)), a.F16)
			rows = s.hidden
		}
		err = s.batch.StepHidden(ctx, seqs, rows)
	}
	if err != nil {
		for _, r := range fresh {
			if ss := s.sessions[r]; ss != nil && ss.Len() == 0 {
				ss.Close()
				delete(s.sessions, r)
				s.forget(r)
			}
		}
		code := stagewire.CodeInternal
		switch {
		case errors.Is(err, model.ErrContext):
			code = stagewire.CodeContext
		case errors.Is(err, model.ErrToken):
			code = stagewire.CodeBadInput
		}
		return bad(code, first, "%v", err)
	}
	for _, q := range a.Seqs {
		s.metered[q.Request].add(q.Count, s.m.WeightBytes())
	}
	if !s.m.Last() {
		out := &stagewire.Activation{Stage: s.ls.NextStage, DType: s.ls.Out, Width: uint32(embd), Seqs: a.Seqs}
		s.hidden = s.batch.Hidden(s.hidden)
		if s.ls.Out == stagewire.DTypeF16 {
			out.F16 = model.AppendF16(nil, s.hidden)
		} else {
			out.F32 = s.hidden
		}
		return s.forward(ctx, srv, out, first)
	}
	return s.answer(ctx, a)
}

// answer sends the last stage's results of a step to the head: one
// NextToken for the sequences that want tokens, a Logits each for those
// that want logits — a row each, in order, for a window (Rows n).
func (s *stage) answer(ctx context.Context, a *stagewire.Activation) *stagewire.Error {
	var next stagewire.NextToken
	var logits []*stagewire.Logits
	// Every token row first: on a RowArgMaxer the first ArgMax finds all
	// the step's rows, and a Logits read after it leaves them be.
	for i, q := range a.Seqs {
		if q.Out == stagewire.OutToken {
			for j := range q.OutRows() {
				next.Tokens = append(next.Tokens, stagewire.TokenOut{Request: q.Request, Pos: q.RowPos(j), Token: s.batch.ArgMaxAt(i, j)})
			}
		}
	}
	for i, q := range a.Seqs {
		if q.Out == stagewire.OutLogits {
			for j := range q.OutRows() {
				logits = append(logits, &stagewire.Logits{Request: q.Request, Pos: q.RowPos(j), Values: append([]float32(nil), s.batch.LogitsAt(i, j)...)})
			}
		}
	}
	if len(next.Tokens) > 0 {
		if err := s.owner.send(ctx, &next); err != nil {
			return stagewire.Errorf(stagewire.CodeInternal, s.id, next.Tokens[0].Request, "head unreachable: %v", err)
		}
	}
	for _, l := range logits {
		if err := s.owner.send(ctx, l); err != nil {
			return stagewire.Errorf(stagewire.CodeInternal, s.id, l.Request, "head unreachable: %v", err)
		}
	}
	return nil
}

func growF32(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// Used is the bytes of weights and KV cache the node's stages hold now.
func (srv *Server) Used() int64 {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.used
}
