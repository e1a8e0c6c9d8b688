package stage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire/stagewire"
)

// Placement is one stage of a plan: a node and the blocks it runs.
type Placement struct {
	Peer  identity.EndpointID
	Range model.LayerRange
	// LoadRows says the node takes LoadStage.Rows (it advertises
	// stagewire.FeatureLoadRows). Without it the node gets LoadStage
	// as it was before the field, and if it runs the last stage the
	// pipeline's steps hold Seqs output rows, whatever Rows asks.
	LoadRows bool
	// Windowless says the node's stages do not answer windows (it does
	// not advertise stagewire.FeatureRows: it predates them). A
	// pipeline with such a stage refuses a step that asks a sequence
	// for more than one row (Pipeline.Windows), where the stage would
	// answer it with one.
	Windowless bool
}

// PipelineConfig describes a split model to drive from this node, the
// head, which runs the first stage itself.
type PipelineConfig struct {
	// File is the head's copy of the model, Digest its weights digest:
	// the other stages load theirs by it.
	File   *gguf.File
	Digest [32]byte
	// Self is this node's id; Stages[0] must be placed on it, from layer
	// 0, and the ranges must follow one another to the last layer.
	Self   identity.EndpointID
	Stages []Placement
	// Context, KV, Batch and Seqs size every stage's sessions and steps
	// (0: model.DefaultContext, f16, model.DefaultBatch, model.DefaultBatchSeqs).
	Context     int
	KV          model.KVType
	Batch, Seqs int
	// Rows is the most output rows a step may ask of the last stage (a
	// speculative window of k drafts takes k+1), set apart from Seqs,
	// which sizes the requests whose KV each stage holds (Seqs where it
	// is not more; at most Batch). It takes effect only where the last
	// stage's node takes it (Placement.LoadRows); Pipeline.Rows is what
	// a step may ask.
	Rows int
	// DType is how hidden rows travel: stagewire.DTypeF32 (the default,
	// exact) or DTypeF16.
	DType   stagewire.DType
	Backend backend.Backend
	Dial    Dialer
	// ReportTimeout bounds how long Finish waits for the stages' reports
	// (0: DefaultReportTimeout).
	ReportTimeout time.Duration
	// Suspect, if set, is called with every other stage's node each time
	// a step or a Finish has waited SuspectAfter (0: DefaultSuspectAfter)
	// for an answer: the caller checks that the node is still there (a
	// mesh node's Probe), so that one that died without a word (killed,
	// powered off) is found out in seconds rather than when its
	// connection times out, and the wait ends with ErrStageLost as the
	// connection closes.
	Suspect      func(identity.EndpointID)
	SuspectAfter time.Duration
}

// DefaultSuspectAfter is how long a step waits for an answer before the
// stages' nodes are checked: a token step takes milliseconds; a long
// prefill on a slow CPU may take longer, and costs a check of each node
// per period, nothing more.
const DefaultSuspectAfter = 2 * time.Second

// Pipeline is the head of a split model: the first stage, run here, and a
// stream to each other stage. Steps go down the chain and their tokens
// or logits come back from the last stage. A Pipeline is not safe for
// concurrent use.
type Pipeline struct {
	m        *model.Model
	batch    *model.Batch
	sessions map[uint64]*model.Session
	opt      model.SessionOptions
	dtype    stagewire.DType
	rows     int     // the most output rows of a step
	windows  bool    // every stage answers windows (Placement.Windowless)
	links    []*link // the other stages, in order
	msgs     chan linkMsg
	done     chan struct{}
	hidden   []float32

	// For the reports (Finish): the weights digest, the head's range, the
	// positions each request has run through it, and the wait.
	digest        [32]byte
	place         model.LayerRange
	tokens        map[uint64]uint32
	reportTimeout time.Duration

	suspect      func(identity.EndpointID)
	suspectAfter time.Duration
}

// link is the head's stream to one other stage.
type link struct {
	st    *stream
	id    uint64
	place Placement
}

type linkMsg struct {
	from *link
	m    stagewire.Message
	err  error
}

// ErrStageLost says a stage's stream ended or failed: the pipeline cannot
// go on.
var ErrStageLost = errors.New("stage: a stage of the pipeline is gone")

// Start loads the first stage here and every other on its node, the last
// first, and returns once all are Ready. On error nothing stays loaded.
func Start(ctx context.Context, cfg PipelineConfig) (*Pipeline, error) {
	if len(cfg.Stages) < 2 {
		return nil, fmt.Errorf("stage: a pipeline of %d stages", len(cfg.Stages))
	}
	if cfg.Stages[0].Peer != cfg.Self {
		return nil, fmt.Errorf("stage: the first stage is placed on %s, not this node", cfg.Stages[0].Peer.Short())
	}
	for i := 1; i < len(cfg.Stages); i++ {
		if cfg.Stages[i].Range.Lo != cfg.Stages[i-1].Range.Hi {
			return nil, fmt.Errorf("%w: stage %d starts at layer %d, stage %d ends at %d", model.ErrRange, i, cfg.Stages[i].Range.Lo, i-1, cfg.Stages[i-1].Range.Hi)
		}
	}
	if cfg.DType == stagewire.DTypeTokens {
		cfg.DType = stagewire.DTypeF32
	}
	m, err := model.LoadStage(cfg.File, cfg.Backend, cfg.Stages[0].Range)
	if err != nil {
		return nil, err
	}
	if !m.First() || m.Last() {
		return nil, fmt.Errorf("%w: the first stage runs layers %v", model.ErrRange, cfg.Stages[0].Range)
	}
	if last := cfg.Stages[len(cfg.Stages)-1].Range.Hi; last != m.Config().Layers {
		return nil, fmt.Errorf("%w: the stages end at layer %d of %d", model.ErrRange, last, m.Config().Layers)
	}
	bopt := model.BatchOptions{Tokens: cfg.Batch, Seqs: cfg.Seqs}
	if bopt.Tokens <= 0 {
		bopt.Tokens = model.DefaultBatch
	}
	if bopt.Seqs <= 0 {
		bopt.Seqs = model.DefaultBatchSeqs
	}
	// A step's hidden rows travel in one frame: a batch that could not
	// is refused here rather than after the first stage has run it.
	if most := stagewire.MaxPositions(cfg.DType, m.Config().Embd, bopt.Tokens); bopt.Tokens > most || bopt.Tokens > stagewire.MaxSeqs {
		return nil, fmt.Errorf("stage: a batch of %d positions of %d %v elements does not fit one frame (at most %d)", bopt.Tokens, m.Config().Embd, cfg.DType, min(most, stagewire.MaxSeqs))
	}
	rows := bopt.Seqs
	windows := true
	for _, pl := range cfg.Stages[1:] {
		windows = windows && !pl.Windowless
	}
	if last := cfg.Stages[len(cfg.Stages)-1]; cfg.Rows > bopt.Seqs && last.LoadRows {
		// The head's batch never computes output rows (it runs the
		// first stage, never the last); the last stage's does.
		if cfg.Rows > bopt.Tokens || cfg.Rows > stagewire.MaxTokenRows {
			return nil, fmt.Errorf("stage: %d output rows per step, more than a step's %d positions", cfg.Rows, bopt.Tokens)
		}
		rows = cfg.Rows
	}
	b, err := m.NewBatch(bopt)
	if err != nil {
		return nil, err
	}
	// Before the other stages load, so that the first step does not pay
	// for it (the CPU packs the weights it reads from memory); a stage
	// that cannot step one position serves nothing.
	if err := m.WarmUp(ctx); err != nil {
		return nil, fmt.Errorf("stage: the first stage: %w", err)
	}
	ctxLen := cfg.Context
	if ctxLen <= 0 {
		ctxLen = min(m.Config().TrainContext, model.DefaultContext)
	}
	p := &Pipeline{
		m: m, batch: b, sessions: map[uint64]*model.Session{},
		opt:   model.SessionOptions{Context: ctxLen, Batch: bopt.Tokens, KV: cfg.KV},
		dtype: cfg.DType, rows: rows, windows: windows, msgs: make(chan linkMsg, 64), done: make(chan struct{}),
		digest: cfg.Digest, place: cfg.Stages[0].Range, tokens: map[uint64]uint32{}, reportTimeout: cfg.ReportTimeout,
	}
	if p.reportTimeout <= 0 {
		p.reportTimeout = DefaultReportTimeout
	}
	p.suspect, p.suspectAfter = cfg.Suspect, cfg.SuspectAfter
	if p.suspectAfter <= 0 {
		p.suspectAfter = DefaultSuspectAfter
	}
	// Stage ids are random so that a restarted head does not collide
	// with stages a node still holds from before.
	ids := make([]uint64, len(cfg.Stages))
	for i := range ids {
		for ids[i] == 0 {
			ids[i] = rand.Uint64()
		}
	}
	kv := stagewire.KVF16
	if cfg.KV == model.KVF32 {
		kv = stagewire.KVF32
	}
	p.links = make([]*link, len(cfg.Stages)-1)
	for i := len(cfg.Stages) - 1; i >= 1; i-- {
		pl := cfg.Stages[i]
		ls := &stagewire.LoadStage{
			Stage: ids[i], Model: cfg.Digest, Lo: uint32(pl.Range.Lo), Hi: uint32(pl.Range.Hi),
			Context: uint32(ctxLen), Batch: uint32(bopt.Tokens), Seqs: uint16(bopt.Seqs), KV: kv, Out: cfg.DType,
			Prev: cfg.Stages[i-1].Peer, Head: cfg.Self,
		}
		if i+1 < len(cfg.Stages) {
			ls.Next, ls.NextStage = cfg.Stages[i+1].Peer, ids[i+1]
		} else if rows > bopt.Seqs {
			ls.Rows = uint16(rows)
		}
		l, err := p.load(ctx, cfg.Dial, pl, ls)
		if err != nil {
			p.Close(ctx)
			return nil, fmt.Errorf("stage: loading layers %v on %s: %w", pl.Range, pl.Peer.Short(), err)
		}
		p.links[i-1] = l
	}
	for _, l := range p.links {
		go p.read(l)
	}
	return p, nil
}

// load opens a stream to a stage's node, sends LoadStage and waits for
// Ready.
func (p *Pipeline) load(ctx context.Context, dial Dialer, pl Placement, ls *stagewire.LoadStage) (*link, error) {
	rw, err := dial.Open(ctx, pl.Peer)
	if err != nil {
		return nil, err
	}
	l := &link{st: &stream{peer: pl.Peer, rw: rw}, id: ls.Stage, place: pl}
	if err := l.st.send(ctx, ls); err != nil {
		rw.Close()
		return nil, err
	}
	m, _, err := stagewire.Read(ctx, rw, nil)
	if err == nil {
		switch m := m.(type) {
		case *stagewire.Ready:
			if m.Stage == ls.Stage {
				return l, nil
			}
			err = fmt.Errorf("stage: a Ready for stage %d, want %d", m.Stage, ls.Stage)
		case *stagewire.Error:
			err = m
		default:
			err = fmt.Errorf("%v in answer to LoadStage", m.Kind())
		}
	}
	rw.Close()
	return nil, err
}

// read passes what a stage sends the head to Step, until its stream ends.
func (p *Pipeline) read(l *link) {
	var buf []byte
	for {
		m, b, err := stagewire.Read(context.Background(), l.st.rw, buf)
		buf = b
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			err = fmt.Errorf("%w: layers %v on %s: %w", ErrStageLost, l.place.Range, l.place.Peer.Short(), err)
		}
		select {
		case p.msgs <- linkMsg{from: l, m: m, err: err}:
		case <-p.done:
			return
		}
		if err != nil {
			return
		}
	}
}

// Seq is one request's part of a Step: tokens at its next positions, and
// what the last stage returns after them.
type Seq struct {
	Request uint64
	Tokens  []uint32
	Out     stagewire.Output
	// Rows is how many of the last tokens Out follows: 0 or 1 the last
	// only; n, up to len(Tokens), each of the last n (a speculative
	// window [last token, drafts…], verified in one step). The rows of
	// one step, over all its sequences, must fit Pipeline.Rows.
	Rows int
}

// Result is the last stage's answer for one sequence of a Step: Token
// for OutToken, Logits for OutLogits, after its last token. Pos is the
// position the next token takes. For a sequence of Rows n > 1, Tokens or
// Rows hold every row's answer in order (the row after the sequence's
// token len(Tokens)−n+j), the last of which is Token or Logits.
type Result struct {
	Request uint64
	Pos     int
	Token   uint32
	Logits  []float32
	Tokens  []uint32
	Rows    [][]float32
}

// Step runs one batched step through every stage and returns the results
// of the sequences that asked for one, in their order. A request is new
// at its first Step; it holds its positions, on every stage, until Trim
// to 0 or Finish. A step the first stage refuses (model.ErrContext, a bad token,
// more than the batch) changes nothing; any later error leaves the step's
// requests in an unknown state on the other stages: Close the pipeline.
func (p *Pipeline) Step(ctx context.Context, seqs []Seq) ([]Result, error) {
	select {
	case <-p.done:
		return nil, fmt.Errorf("stage: pipeline closed")
	default:
	}
	act := &stagewire.Activation{Stage: p.links[0].id, DType: p.dtype, Width: uint32(p.m.Config().Embd)}
	mseqs := make([]model.Seq, len(seqs))
	// Refused here, before any stage changes: a step whose rows the
	// last stage could not compute would fail there, after the others ran.
	rows := 0
	for i, q := range seqs {
		if q.Rows < 0 || q.Rows > len(q.Tokens) || q.Rows > 1 && q.Out == stagewire.OutNone {
			return nil, fmt.Errorf("stage: step: sequence %d asks for %d rows of %d tokens with output %d", i, q.Rows, len(q.Tokens), q.Out)
		}
		if q.Rows > 1 && !p.windows {
			return nil, fmt.Errorf("stage: step: sequence %d asks for a window of %d rows, and a stage's node does not answer windows", i, q.Rows)
		}
		rows += stagewire.ActSeq{Out: q.Out, Rows: uint32(max(q.Rows, 0))}.OutRows()
	}
	if rows > p.rows {
		return nil, fmt.Errorf("stage: step: %d output rows, the stages compute at most %d a step", rows, p.rows)
	}
	for i, q := range seqs {
		s := p.sessions[q.Request]
		if s == nil {
			var err error
			if s, err = p.m.NewSession(p.opt); err != nil {
				return nil, err
			}
			p.sessions[q.Request] = s
		}
		aq := stagewire.ActSeq{Request: q.Request, Start: uint32(s.Len()), Count: uint32(len(q.Tokens)), Out: q.Out}
		if q.Rows > 1 {
			aq.Rows = uint32(q.Rows)
		}
		mseqs[i] = model.Seq{Session: s, Tokens: q.Tokens, Logits: aq.OutRows()}
		act.Seqs = append(act.Seqs, aq)
	}
	if err := p.batch.Step(ctx, mseqs); err != nil {
		return nil, err
	}
	for _, q := range seqs {
		p.tokens[q.Request] = uint32(min(uint64(p.tokens[q.Request])+uint64(len(q.Tokens)), 1<<32-1))
	}
	p.hidden = p.batch.Hidden(p.hidden)
	if p.dtype == stagewire.DTypeF16 {
		act.F16 = model.AppendF16(nil, p.hidden)
	} else {
		act.F32 = p.hidden
	}
	if err := p.links[0].st.send(ctx, act); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStageLost, err)
	}
	return p.collect(ctx, act.Seqs)
}

// collect gathers the last stage's answers to a step of seqs: every row
// of every sequence that asked, matched by request and position, so that
// an answer to a step since trimmed is not taken for one of this step.
func (p *Pipeline) collect(ctx context.Context, seqs []stagewire.ActSeq) ([]Result, error) {
	type pending struct {
		at   int // the result's index
		q    stagewire.ActSeq
		have []bool
	}
	want := map[uint64]*pending{}
	var out []Result
	left := 0
	for _, q := range seqs {
		n := q.OutRows()
		if n == 0 {
			continue
		}
		r := Result{Request: q.Request, Pos: int(q.Start + q.Count)}
		if n > 1 {
			if q.Out == stagewire.OutToken {
				r.Tokens = make([]uint32, n)
			} else {
				r.Rows = make([][]float32, n)
			}
		}
		want[q.Request] = &pending{at: len(out), q: q, have: make([]bool, n)}
		out = append(out, r)
		left += n
	}
	// row finds the row of request's answer at pos, if it is one asked
	// for and not yet had.
	row := func(request uint64, pos uint32, out stagewire.Output) (*pending, int, bool) {
		w := want[request]
		if w == nil || w.q.Out != out {
			return nil, 0, false
		}
		j := int(pos) - int(w.q.RowPos(0))
		if j < 0 || j >= len(w.have) || w.have[j] {
			return nil, 0, false
		}
		w.have[j] = true
		left--
		return w, j, true
	}
	for left > 0 {
		lm, err := p.await(ctx)
		if err != nil {
			return nil, err
		}
		if lm.err != nil {
			return nil, lm.err
		}
		switch m := lm.m.(type) {
		case *stagewire.NextToken:
			for _, t := range m.Tokens {
				if w, j, ok := row(t.Request, t.Pos, stagewire.OutToken); ok {
					r := &out[w.at]
					if r.Tokens != nil {
						r.Tokens[j] = t.Token
					}
					if j == len(w.have)-1 {
						r.Token = t.Token
					}
				}
			}
		case *stagewire.Logits:
			if w, j, ok := row(m.Request, m.Pos, stagewire.OutLogits); ok {
				r := &out[w.at]
				if r.Rows != nil {
					r.Rows[j] = m.Values
				}
				if j == len(w.have)-1 {
					r.Logits = m.Values
				}
			}
		case *stagewire.Error:
			return nil, fmt.Errorf("stage: layers %v on %s: %w", lm.from.place.Range, lm.from.place.Peer.Short(), m)
		}
	}
	return out, nil
}

// await waits for what a stage sends the head, suspecting the stages'
// nodes each time it has waited suspectAfter.
func (p *Pipeline) await(ctx context.Context) (linkMsg, error) {
	var tick <-chan time.Time
	if p.suspect != nil {
		t := time.NewTicker(p.suspectAfter)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case lm := <-p.msgs:
			return lm, nil
		case <-ctx.Done():
			return linkMsg{}, ctx.Err()
		case <-tick:
			for _, l := range p.links {
				p.suspect(l.place.Peer)
			}
		}
	}
}

// Rows is the most output rows one Step may ask for, over all its
// sequences: PipelineConfig.Rows where the last stage's node took it,
// else Seqs.
func (p *Pipeline) Rows() int { return p.rows }

// Windows reports whether the pipeline answers windows: a sequence's
// rows after each of its last tokens (Seq.Rows > 1). It does where no
// stage's node predates them (Placement.Windowless).
func (p *Pipeline) Windows() bool { return p.windows }

// WeightBytes is the head's stage's weights in bytes: what a token
// evaluated here reads, the work units of a split serve on the head's
// meter (hw.WorkRecorder).
func (p *Pipeline) WeightBytes() int64 { return p.m.WeightBytes() }

// Trim rewinds request to its first n positions on every stage (after a
// rejected speculative draft); n 0 forgets it. The Trim follows the
// chain behind the steps already sent.
func (p *Pipeline) Trim(ctx context.Context, request uint64, n int) error {
	s := p.sessions[request]
	if s == nil {
		return nil
	}
	s.Truncate(n)
	if n == 0 {
		s.Close()
		delete(p.sessions, request)
		delete(p.tokens, request)
	}
	return p.links[0].st.send(ctx, &stagewire.Trim{Stage: p.links[0].id, Request: request, Length: uint32(n)})
}

// Close stops every other stage and ends the streams.
func (p *Pipeline) Close(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	default:
		close(p.done)
	}
	var errs []error
	for _, l := range p.links {
		if l == nil {
			continue
		}
		if err := l.st.send(ctx, &stagewire.Stop{Stage: l.id}); err != nil {
			errs = append(errs, err)
		}
		l.st.rw.Close()
	}
	for _, s := range p.sessions {
		s.Close()
	}
	return errors.Join(errs...)
}
