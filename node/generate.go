package node

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/meshnode/meshnode/gguf/chat/harmony"
	"github.com/meshnode/meshnode/gguf/chat/think"
	"github.com/meshnode/meshnode/gguf/chat/toolcall"
	"github.com/meshnode/meshnode/gguf/grammar"
	"github.com/meshnode/meshnode/gguf/sample"
	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/metrics"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward"
	"github.com/meshnode/meshnode/node/steward/grant"
)

// servedModel is a local model as the API sees it: every generation is a
// serve through the steward, scoped to this model's backends, and ends in
// a sealed receipt in usage.energy.
type servedModel struct {
	in       *instance
	steward  *steward.Steward
	metrics  *metrics.Metrics
	defaults generationDefaults
	// place records each sealed serve for the figures the node gossips.
	place *placed
	// now is the clock the client's time limits read.
	now func() time.Time
}

type generationDefaults struct {
	maxTokens      int
	fidelityFloor  receipt.Fidelity
	jouleCeilingUJ uint64
}

// Energy is usage.energy: the receipt and its envelope, and the figures a
// client most wants without decoding the receipt.
type Energy struct {
	receipt.Usage
	UJPerAcceptedToken *uint64 `json:"uj_per_accepted_token,omitempty"`
	Provenance         string  `json:"energy_provenance"`
	Route              string  `json:"route"`
	// Seed is the seed the node drew for a sampled request that sent
	// none. It is part of the receipt's request id, so a replay needs
	// it: POST /v1/mesh/replay reads it from the energy object shown.
	Seed *uint64 `json:"seed,omitempty"`
	// Draft is the draft the node named for a sampled request that may
	// speculate ("lookup", a draft model's digest, or "" where sampled
	// speculation does not pay here): part of the request id, and what
	// the node measured at load decides it, so a replay reads it from
	// here as it reads Seed.
	Draft *string `json:"draft,omitempty"`
}

func energyOf(s *receipt.Sealed) *Energy {
	e := &Energy{Usage: s.Usage(), Provenance: s.Receipt.Energy.Provenance().String(), Route: s.Receipt.Route}
	if uj, ok := s.Receipt.UJPerAcceptedToken(); ok {
		e.UJPerAcceptedToken = &uj
	}
	return e
}

// Slots implements api.SlotModel: the model's own, or 1 for a model that
// runs one generation at a time.
func (s *servedModel) Slots() int {
	if sm, ok := s.in.m.(interface{ Slots() int }); ok {
		return sm.Slots()
	}
	return 1
}

// Speculates implements api.SpeculatingModel: the model has a draft
// configured, so its serves speculate unless they turn it off.
func (s *servedModel) Speculates() bool {
	_, ok := draftOf(s.in.m)
	return ok
}

// Prepare implements api.Model: it tokenizes the prompt, refusing one that
// cannot fit the context as soon as that is known, and builds the request
// it will be served as. It holds the model's gate while it reads the
// tokenizer, not while the request waits for a slot.
func (s *servedModel) Prepare(ctx context.Context, g *api.Generation) (api.Prepared, error) {
	_, leave, err := s.in.gate.enter(ctx)
	if err != nil {
		return nil, s.draining(err)
	}
	defer leave()
	req, prompt, opts, err := s.prepare(g)
	if err != nil {
		return nil, err
	}
	ids := prompt.ids
	var drawn *uint64
	if len(g.Presentation) == 0 && req.Sampling.Unseeded() {
		// Drawn here so that the request the receipt seals fixes the
		// sampling; handed back in usage.energy.seed for a replay. 53
		// bits, so that a JSON client that reads numbers as float64
		// (JavaScript) gives it back unchanged.
		var b [8]byte
		_, _ = rand.Read(b[:])
		seed := binary.LittleEndian.Uint64(b[:]) >> 11
		req.Sampling.Seed, drawn = &seed, &seed
	}
	noSpec := g.Speculative != nil && !*g.Speculative
	if g.Placement != "" {
		opts = append(opts, steward.WithPlacement(g.Placement))
	}
	p := &preparedGeneration{s: s, stop: g.Stop, req: req, ids: ids, opts: opts, drawn: drawn, noSpec: noSpec, grammar: g.Grammar,
		received: g.Received, tools: len(g.Tools) > 0, block: prompt.block, opens: prompt.opens, chat: g.Messages != nil,
		promptLimit: g.PromptTimeLimit, predictLimit: g.PredictTimeLimit, limits: g.SpecLimits, returnTokens: g.ReturnTokens, noPromptCache: g.NoPromptCache}
	if s.namesDraft(g, prompt.prediction) && req.Sampling != nil {
		d := req.Sampling.Draft
		p.draft = &d
	}
	if g.Logprobs {
		pieces, ok := s.in.m.(tokenPieces)
		if !ok || !engine.ReportsLogprobs(s.in.m.Engine()) {
			e := api.Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_option",
				"model %q cannot report log-probabilities: its engine (%s) has no token distribution to report", s.in.m.Name(), s.in.m.Engine().Recipe())
			e.Param = "logprobs"
			return nil, e
		}
		p.pieces, p.top, p.postSampling = pieces, g.TopLogprobs, g.PostSampling
	}
	if g.Echo {
		if err := p.prepareEcho(g); err != nil {
			return nil, err
		}
	}
	p.prediction = prompt.prediction
	if g.Speculative != nil && *g.Speculative && len(p.prediction) == 0 {
		if why := s.noSpeculation(g); why != "" {
			e := api.Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_option", `"speculative": true, but %s`, why)
			e.Param = "speculative"
			return nil, e
		}
	}
	if d, ok := draftOf(s.in.m); len(p.prediction) > 0 || ok && !noSpec {
		// The bounds a serve could not keep (spec.Limits.Apply, in the
		// engine), answered here with the field they were asked by. A
		// prediction's drafts, like lookup's, have no probability.
		lookup := len(p.prediction) > 0 || d.DraftName() == spec.DraftLookup
		sampled := g.Temperature != nil && *g.Temperature > 0
		var le *spec.LimitError
		if err := g.SpecLimits.CheckFor(lookup, !lookup && sampled); errors.As(err, &le) {
			e := api.Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_option", "model %q: %s", s.in.m.Name(), le.Why)
			e.Param = le.Field
			return nil, e
		}
	}
	return p, nil
}

// noSpeculation says why a serve of g could not speculate ("" where it
// may): an explicit "speculative": true that would decode plainly is
// refused rather than ignored. Replays do not ask (Replay calls
// prepare): a greedy serve's tokens are the same either way.
func (s *servedModel) noSpeculation(g *api.Generation) string {
	if _, ok := draftOf(s.in.m); !ok {
		return fmt.Sprintf(`model %q has no draft (draft = "NAME" or "lookup" in its [[model]] section gives it one)`, s.in.m.Name())
	}
	if what := pickByPick(g); what != "" {
		return what + " takes the tokens one pick at a time, which a speculative window's rows would not: the serve does not speculate"
	}
	return ""
}

// pickByPick names what makes a serve of g take its tokens one pick at a
// time, with no speculative window ("" for nothing): mirostat's μ and
// adaptive-p's average move with each pick, which a window's rows would
// move out of turn, and post_sampling_probs reports the sampler's
// distribution at each pick.
func pickByPick(g *api.Generation) string {
	sampled := g.Temperature != nil && *g.Temperature > 0
	switch {
	case g.Logprobs && g.PostSampling:
		return "post_sampling_probs"
	case sampled && g.Mirostat > 0:
		return "mirostat"
	case sampled && g.AdaptiveTarget != nil:
		return "adaptive-p"
	}
	return ""
}

// ToolFormat implements api.ToolModel: the model's chat template's call
// format; a model without a template engine (the reference model) takes
// no tools.
func (s *servedModel) ToolFormat() (toolcall.Format, bool) {
	if tm, ok := s.in.m.(toolModel); ok {
		return tm.ToolFormat()
	}
	return 0, false
}

// Thinking implements api.ThinkingModel: the model's reasoning block,
// when its replies may open with one (none for a harmony model, whose
// reasoning is a channel).
func (s *servedModel) Thinking() (tags think.Tags, switchable, ok bool) {
	tm, is := s.in.m.(thinkingModel)
	if !is || s.Harmony() {
		return think.Tags{}, false, false
	}
	return tm.Thinking()
}

// Harmony implements api.ReasoningModel: the model's replies come on
// harmony channels.
func (s *servedModel) Harmony() bool {
	hm, ok := s.in.m.(interface{ Harmony() bool })
	return ok && hm.Harmony()
}

// thinkingModel is a local model whose replies may open with a reasoning
// block (api.ThinkingModel).
type thinkingModel interface {
	Thinking() (tags think.Tags, switchable, ok bool)
}

// toolModel is a local model that can be given tools.
type toolModel interface {
	ToolFormat() (toolcall.Format, bool)
	// ReplyDecoder is Decoder for a reply read back for calls (tools)
	// or for a reasoning block (thinking): it writes the control tokens
	// that open calls and the block's tags.
	ReplyDecoder(tools, thinking bool) decoder
}

// tokenPieces is a model whose tokens have texts: the log-probabilities
// name each token by its bytes.
type tokenPieces interface {
	// Piece is the bytes of token id (a control token's by its name).
	Piece(id uint32) []byte
}

// draining is the answer to work for a model whose gate is closed.
func (s *servedModel) draining(err error) error {
	e := api.Errorf(http.StatusServiceUnavailable, "server_error", "model_draining", "model %q is draining: %v", s.in.m.Name(), err)
	e.RetryAfter = time.Second
	return e
}

// preparedGeneration is a generation whose request is built and whose
// prompt is tokenized, waiting for its slot.
type preparedGeneration struct {
	s     *servedModel
	stop  []string
	req   receipt.ServeRequest
	ids   []uint32
	opts  []steward.ServeOption
	drawn *uint64 // the seed drawn for it, if any
	// prediction: the request's predicted output, in the model's tokens,
	// which its rounds draft from (engine.WithPrediction).
	prediction []uint32
	// noSpec: the request turned speculative decoding off; limits: its
	// bounds on the rounds (a greedy serve's; a sampled one's draft name
	// carries them).
	noSpec bool
	limits spec.Limits
	// draft: the draft the node named for the request, handed back in
	// usage.energy.draft (decidedDraft); nil where the node named none.
	draft *string
	// grammar is what the output is held to (nil: nothing); the request
	// names it (receipt.Sampling.Grammar).
	grammar *grammar.Grammar
	// tools: the request has tools, so the output is read for calls.
	tools bool
	// block, when set, is the tagged block a thinking model's chat reply
	// reasons in, read back for it; opens: its prompt opened the block;
	// chat: the output is a chat reply.
	block       *think.Tags
	opens, chat bool
	// received is when the API received the request (zero: unknown).
	received time.Time
	// pieces, when set, reports each token's log-probabilities with top
	// alternatives.
	pieces tokenPieces
	top    int
	// postSampling reports them under the sampler's distributions
	// (engine.Logprobs.PostSampling).
	postSampling bool
	// returnTokens hands the token ids out with the text (api.Delta.Tokens).
	returnTokens bool
	// noPromptCache evaluates the whole prompt (engine.WithoutPromptCache).
	noPromptCache bool
	// echo, when set, goes before the answer (completions' echo): the
	// prompt's text, and with pieces its tokens' log-probabilities, the
	// first unscored, less the BOS the node added (echoFrom 1).
	echo     *string
	echoFrom int
	// promptLimit and predictLimit are the client's time limits
	// (timeLimits); 0 is none.
	promptLimit, predictLimit time.Duration
}

// prepareEcho readies g's echo: its prompt's text, or the text of its
// token ids; with log-probabilities, an engine that scores prompts.
func (p *preparedGeneration) prepareEcho(g *api.Generation) error {
	m := p.s.in.m
	text := g.Prompt
	if g.PromptIDs != nil {
		dec := m.Decoder()
		var b strings.Builder
		for _, id := range g.PromptIDs {
			b.WriteString(dec.Next(id))
		}
		b.WriteString(dec.Flush())
		text = b.String()
	} else if t, ok := m.(tokenizing); ok && len(p.ids) > 0 && t.Tokenizer().AddsBOS() && p.ids[0] == t.Tokenizer().BOS() {
		p.echoFrom = 1 // the client's prompt is the text after it
	}
	p.echo = &text
	if p.pieces != nil && !engine.ReportsPromptLogprobs(m.Engine()) {
		e := api.Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_option",
			"model %q cannot report its prompt's log-probabilities (echo with logprobs): its engine (%s) does not score prompts", m.Name(), m.Engine().Recipe())
		e.Param = "echo"
		return e
	}
	return nil
}

// promptLogprobs is the echo's log-probabilities: the prompt's tokens the
// client gave, each scored by the engine (scored covers all but the
// first of the prompt's ids), the first unscored.
func (p *preparedGeneration) promptLogprobs(scored []engine.TokenLogprob) []api.TokenLogprob {
	var out []api.TokenLogprob
	if p.echoFrom == 0 && len(p.ids) > 0 {
		out = append(out, api.TokenLogprob{ID: p.ids[0], Bytes: p.pieces.Piece(p.ids[0]), Unscored: true})
	}
	for _, t := range scored {
		out = append(out, p.logprob(t))
	}
	return out
}

// logprob is the API's record of a token's log-probabilities.
func (p *preparedGeneration) logprob(t engine.TokenLogprob) api.TokenLogprob {
	out := api.TokenLogprob{ID: t.Token, Bytes: p.pieces.Piece(t.Token), Logprob: t.Logprob}
	for _, a := range t.Top {
		out.Top = append(out.Top, api.TopLogprob{ID: a.ID, Bytes: p.pieces.Piece(a.ID), Logprob: a.LogProb})
	}
	return out
}

// Generate implements api.Prepared: one serve through the steward.
func (p *preparedGeneration) Generate(ctx context.Context, emit func(api.Delta) error) (*api.Result, error) {
	s := p.s
	ctx, leave, err := s.in.gate.enter(ctx)
	if err != nil {
		return nil, s.draining(err)
	}
	defer leave()
	if p.noSpec {
		ctx = engine.WithSpeculation(ctx, false)
	}
	if p.noPromptCache {
		ctx = engine.WithoutPromptCache(ctx)
	}
	if !p.limits.IsZero() {
		ctx = engine.WithSpecLimits(ctx, p.limits)
	}
	if len(p.prediction) > 0 {
		ctx = engine.WithPrediction(ctx, p.prediction)
	}
	if p.grammar != nil {
		ctx = engine.WithGrammar(ctx, p.grammar)
	}
	if f := api.PromptProgressOf(ctx); f != nil {
		ctx = engine.WithPromptProgress(ctx, func(p engine.PromptProgress) { f(api.PromptProgress(p)) })
	}
	m := s.in.m
	maxTokens := int(p.req.MaxTokens)
	dec := m.Decoder()
	if tm, ok := m.(toolModel); ok && (p.tools || p.block != nil) {
		dec = tm.ReplyDecoder(p.tools, p.block != nil)
	}
	stops := &stopFilter{stops: p.stop}
	// The tokens' log-probabilities (the engine records each just before
	// it emits the token) wait for the text they make, and go with it.
	var lps []api.TokenLogprob
	if p.pieces != nil {
		lp := &engine.Logprobs{Top: p.top, PostSampling: p.postSampling, Record: func(t engine.TokenLogprob) {
			lps = append(lps, p.logprob(t))
		}}
		if p.echo != nil {
			lp.Prompt = func(scored []engine.TokenLogprob) { lps = append(p.promptLogprobs(scored), lps...) }
		}
		ctx = engine.WithLogprobs(ctx, lp)
	}
	echo := p.echo   // goes out with the first text, ahead of it
	var ids []uint32 // return_tokens's: made since the last delta
	out := func(text string) error {
		if echo != nil {
			text, echo = *echo+text, nil
		}
		if text == "" && len(lps) == 0 && len(ids) == 0 {
			return nil
		}
		d := api.Delta{Text: text, Logprobs: lps, Tokens: ids}
		lps, ids = nil, nil
		return emit(d)
	}
	tokenAt, progress := p.tokenTimer(m.Name()), api.Progress(ctx)
	isReasoning, reasoningTokens := p.reasoningReader(), 0
	limits := &timeLimits{prompt: p.promptLimit, predict: p.predictLimit, start: s.clock()}
	send := func(tok uint32) error {
		tokenAt(time.Now())
		at := s.clock()
		if !limits.admit(at) {
			return steward.ErrLimit
		}
		if p.returnTokens {
			ids = append(ids, tok)
		}
		text := dec.Next(tok)
		progress(text)
		limits.saw(at, text)
		if isReasoning != nil && isReasoning(text) {
			reasoningTokens++
		}
		if text := stops.push(text); text != "" {
			return out(text)
		}
		return nil
	}
	start := time.Now()
	served, err := s.steward.Serve(ctx, p.req, p.ids, send, append(p.opts, steward.ForRecipe(m.Name()))...)
	if served != nil && s.place != nil {
		s.place.record(m.Name(), &served.Receipt.Receipt, time.Since(start))
	}
	ceiling, limited := false, false
	if err != nil {
		switch {
		case served != nil && errors.Is(err, steward.ErrCeilingReached):
			// Not a failure: the steward stopped before a step that would
			// have passed the joule ceiling, and sealed what was served.
			ceiling = true
		case served != nil && errors.Is(err, steward.ErrLimit):
			limited = true // the client's time limit: what was made within it
		case served != nil && errors.Is(err, steward.ErrIncomplete) && ctx.Err() != nil:
			return nil, ctx.Err() // the client left; the partial serve is sealed and journaled
		default:
			return nil, serveError(err)
		}
	}
	if err := out(stops.push(dec.Flush()) + stops.flush()); err != nil {
		return nil, err
	}
	finish := "stop"
	switch {
	case stops.hit:
	case ceiling:
		finish = api.FinishJouleCeiling
	case limited, served.Outcome.Indented, len(served.Output) >= maxTokens:
		finish = "length" // llama.cpp's stop_type "limit"
	}
	energy := energyOf(served.Receipt)
	energy.Seed, energy.Draft = p.drawn, p.draft
	s.metrics.ObserveTokens(m.Name(), len(p.ids), len(served.Output))
	if r := &served.Receipt.Receipt; r.SpecProposed > 0 {
		s.metrics.ObserveSpeculation(m.Name(), int(r.SpecProposed), int(r.SpecAccepted))
	}
	res := &api.Result{
		PromptTokens:     len(p.ids),
		CompletionTokens: len(served.Output),
		FinishReason:     finish,
		StopSequence:     cmp.Or(served.Outcome.StopString, stops.matched),
		Energy:           energy,
		EnergyUJ:         served.Receipt.Receipt.Energy.UJ(),
		Receipt:          served.Receipt.ID.String(),
	}
	if isReasoning != nil {
		res.ReasoningTokens = &reasoningTokens
	}
	if len(p.prediction) > 0 {
		// The serve's only proposer was the prediction: its rounds'
		// drafts are the predicted tokens verified.
		r := &served.Receipt.Receipt
		res.Prediction = &api.PredictionCounts{Accepted: int(r.SpecAccepted), Rejected: int(r.SpecProposed - r.SpecAccepted)}
	}
	return res, nil
}

// preparePrediction tokenizes a request's predicted output (no BOS, its
// text as text) for the engine to draft from, refusing it where the
// model's engine cannot or it is longer than the context.
func (s *servedModel) preparePrediction(g *api.Generation) ([]uint32, error) {
	if !engine.TakesPrediction(s.in.m.Engine()) {
		e := api.Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_option",
			"model %q cannot draft from a prediction: its engine (%s) does not speculate from one", s.in.m.Name(), s.in.m.Engine().Recipe())
		e.Param = "prediction"
		return nil, e
	}
	tok, err := s.tokenizerOf()
	if err != nil {
		return nil, err
	}
	ids := tok.Encode(g.Prediction, tokenizer.EncodeOptions{})
	if n := s.ContextLength(); len(ids) > n {
		// Each round searches it: bounded as the answer is.
		e := api.Errorf(http.StatusBadRequest, "invalid_request_error", "invalid_request",
			"prediction is %d tokens; model %q's context holds %d", len(ids), s.in.m.Name(), n)
		e.Param = "prediction"
		return nil, e
	}
	return ids, nil
}

// namesDraft reports whether g's request names a draft, which its
// answer hands back (usage.energy.draft) and its replay takes from
// there: a sampled request that speculates with the model's proposer
// (decidedDraft), or that was given a prediction.
func (s *servedModel) namesDraft(g *api.Generation, prediction []uint32) bool {
	_, ok := s.decidedDraft(g)
	return ok || len(prediction) > 0 && g.Temperature != nil && *g.Temperature > 0
}

// predictionPrices are what a sampled request given a prediction names
// its windows' prices as (spec.PredictionPrices): the model's draft's
// measured sampled rows, else the files'.
func (s *servedModel) predictionPrices() spec.DraftPrices {
	if d, ok := draftOf(s.in.m); ok {
		p, at := d.DraftPrices()
		return spec.PredictionPrices(p, !at.IsZero())
	}
	return spec.PredictionPrices(spec.Prices{}, false)
}

// clock is the time the client's time limits read.
func (s *servedModel) clock() time.Time {
	if s.now == nil {
		return time.Now()
	}
	return s.now()
}

// timeLimits are a client's time limits on a generation (llama.cpp's
// t_max_prompt_ms and t_max_predict_ms, which code editors send: a late
// suggestion is no use). The prompt's limit runs from the serve's start
// to its first token; the prediction's from the first token, and ends
// the answer after a token that holds a newline (a completion's lines
// come whole), as llama-server's does.
type timeLimits struct {
	prompt, predict time.Duration
	start, first    time.Time
	over            bool // a newline came after the prediction's limit: nothing more is served
}

// admit reports whether a token that came at at is served.
func (l *timeLimits) admit(at time.Time) bool {
	if l.first.IsZero() {
		l.first = at
		return l.prompt <= 0 || at.Sub(l.start) <= l.prompt
	}
	return !l.over
}

// saw takes a served token's text.
func (l *timeLimits) saw(at time.Time, text string) {
	if l.predict > 0 && at.Sub(l.first) > l.predict && strings.Contains(text, "\n") {
		l.over = true
	}
}

// reasoningReader reads a chat reply token by token and tells which
// tokens are reasoning (a thinking block's, harmony's analysis
// channel's), for usage's reasoning_tokens; nil for a reply that carries
// none.
func (p *preparedGeneration) reasoningReader() func(text string) bool {
	switch {
	case !p.chat:
	case p.block != nil:
		r := think.NewParser(*p.block, p.opens)
		return func(text string) bool {
			_, k := r.FeedToken(text)
			return k == think.Reasoning
		}
	case p.s.Harmony():
		var r harmony.Parser
		return func(text string) bool {
			_, k := r.FeedToken(text)
			return k == harmony.Reasoning
		}
	}
	return nil
}

// PromptTokens implements api.Prepared.
func (p *preparedGeneration) PromptTokens() int { return len(p.ids) }

// MaxTokens implements api.BoundedPrepared: the most tokens the answer
// may hold, as the serve's request bounds it.
func (p *preparedGeneration) MaxTokens() int { return int(p.req.MaxTokens) }

// tokenTimer returns what each generated token of model is told of, at
// the time it is produced: its time to first token (from the request's
// arrival, when known) and the time between tokens.
func (p *preparedGeneration) tokenTimer(model string) func(at time.Time) {
	var last time.Time
	return func(at time.Time) {
		switch {
		case !last.IsZero():
			p.s.metrics.ObserveInterToken(model, at.Sub(last))
		case !p.received.IsZero():
			p.s.metrics.ObserveTTFT(model, at.Sub(p.received))
		}
		last = at
	}
}

// preparedPrompt is a generation's prompt, tokenized: block, for a
// thinking model's chat, is the block its reply reasons in, and opens
// says the prompt leaves it open (think.Tags.Opens).
type preparedPrompt struct {
	ids   []uint32
	block *think.Tags
	opens bool
	// prediction is the request's predicted output in the model's
	// tokens (preparePrediction), nil for none.
	prediction []uint32
}

// prepare tokenizes a generation's prompt and builds the mesh/1 request
// it is served as, exactly as a serve and its replay must agree on. An
// unseeded sampled request is left unseeded. The options carry the
// tokenized prompt length, which the router prices whatever the request
// declares.
//
// A thinking model's grammar lets it reason first (reasoningFirst); the
// request names the grammar so.
func (s *servedModel) prepare(g *api.Generation) (receipt.ServeRequest, preparedPrompt, []steward.ServeOption, error) {
	m := s.in.m
	ctxLen := m.ContextLength()
	if g.ContextLimit > 0 {
		ctxLen = min(ctxLen, g.ContextLimit)
	}
	// A prompt of ctxLen tokens or more leaves no room to answer.
	text, ids, err := m.Prompt(g, ctxLen-1)
	var long *promptTooLongError
	if errors.As(err, &long) || err == nil && len(ids) >= ctxLen {
		n := len(ids)
		if long != nil {
			n = long.AtLeast
		}
		e := api.Errorf(http.StatusBadRequest, "invalid_request_error", "context_length_exceeded",
			"the prompt is at least %d tokens; model %q has a context of %d, which leaves no room to answer", n, m.Name(), ctxLen)
		e.Param, e.PromptTokens, e.ContextTokens = "messages", n, ctxLen
		return receipt.ServeRequest{}, preparedPrompt{}, nil, e
	}
	if e := (*api.Error)(nil); errors.As(err, &e) {
		return receipt.ServeRequest{}, preparedPrompt{}, nil, e // the model's own answer (an embedding model's refusal)
	}
	if err != nil {
		return receipt.ServeRequest{}, preparedPrompt{}, nil, api.Errorf(http.StatusBadRequest, "invalid_request_error", "invalid_prompt", "%v", err)
	}
	pp := preparedPrompt{ids: ids}
	tags, _, thinks := s.Thinking()
	if thinks && g.Messages != nil {
		pp.block, pp.opens = &tags, tags.Opens(text)
		// Thinking switched off (the template wrote the block empty),
		// the model writes none, and a grammar holds as it is.
		if g.Grammar != nil && (g.Think == nil || *g.Think) {
			if g.Grammar, err = reasoningFirst(g.Grammar, tags, pp.opens); err != nil {
				return receipt.ServeRequest{}, preparedPrompt{}, nil, fmt.Errorf("a grammar after the reasoning block: %w", err)
			}
		}
	}
	if g.ThinkBudget > 0 || g.ThinkOff {
		block, ok := s.reasoningBlock()
		if !ok || g.Messages == nil {
			e := api.Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_option",
				"model %q writes no reasoning block for a thinking budget to bound", m.Name())
			e.Param = "thinking"
			return receipt.ServeRequest{}, preparedPrompt{}, nil, e
		}
		if g.Grammar, err = budgeted(g.Grammar, block, pp.opens, g.ThinkBudget); err != nil { // ThinkOff: 0
			return receipt.ServeRequest{}, preparedPrompt{}, nil, fmt.Errorf("a thinking budget: %w", err)
		}
	}
	if g.Prediction != "" {
		if pp.prediction, err = s.preparePrediction(g); err != nil {
			return receipt.ServeRequest{}, preparedPrompt{}, nil, err
		}
	}
	req, opts, err := s.request(g, text, ids, ctxLen, pp.prediction)
	return req, pp, append(opts, steward.WithPromptTokens(uint32(len(ids)))), err
}

// samplerOrder is the sampler order a request names in its identity
// (receipt.Sampling.Samplers): the order of the filters that do
// something under sp (an inert one runs or not to the same tokens), ""
// where that is the default chain's order and no infill filter runs.
func samplerOrder(order string, sp *receipt.Sampling) string {
	if order == "" {
		return ""
	}
	active := func(c byte) bool {
		switch c {
		case 'e':
			return sp.Penalised()
		case 'k':
			return sp.TopK > 0
		case 'p':
			return sp.TopPE6 > 0
		case 'm':
			return sp.MinPE6 > 0
		case 't':
			return sp.TemperatureE6 > 0
		case 's':
			return sp.TopNSigmaE6 > 0
		case 'y':
			return sp.TypicalPE6 > 0
		case 'x':
			return sp.XTCProbabilityE6 > 0
		case 'd':
			return sp.DRYMultiplierE6 > 0
		}
		return true // infill
	}
	keep := func(order string) string {
		var b []byte
		for i := 0; i < len(order); i++ {
			if active(order[i]) {
				b = append(b, order[i])
			}
		}
		return string(b)
	}
	if got := keep(order); got != keep(sample.DefaultOrder) {
		return got
	}
	return ""
}

// dryPenalty writes a request's DRY penalty into sp (receipt.Sampling's
// rules: the API has checked the ranges and filled in llama.cpp's
// defaults).
func dryPenalty(g *api.Generation, sp *receipt.Sampling) {
	if g.DRYMultiplier <= 0 {
		return
	}
	sp.DRYMultiplierE6 = max(millionths(g.DRYMultiplier), 1)
	sp.DRYBaseE6 = max(millionths(g.DRYBase), 1_000_000)
	sp.DRYAllowedLength = uint32(g.DRYAllowedLength)
	sp.DRYLastN = receipt.PenaltyAll
	if g.DRYLastN > 0 {
		sp.DRYLastN = uint32(g.DRYLastN)
	}
	if !slices.Equal(g.DRYBreakers, receipt.DefaultDRYBreakers) {
		sp.DRYBreakers = g.DRYBreakers
	}
}

// llamaFilters writes a sampled request's llama.cpp filters (typical-p,
// top-n-sigma, XTC, the dynamic temperature, min_keep) into sp, each
// where it changes something (receipt.Sampling's rules): the API has
// checked their ranges.
func llamaFilters(g *api.Generation, sp *receipt.Sampling) {
	if g.TypicalP > 0 && g.TypicalP < 1 {
		sp.TypicalPE6 = min(millionths(g.TypicalP), 999_999)
	}
	if g.TopNSigma > 0 {
		sp.TopNSigmaE6 = max(millionths(g.TopNSigma), 1)
	}
	if g.XTCProbability > 0 && g.XTCThreshold <= 0.5 {
		sp.XTCProbabilityE6, sp.XTCThresholdE6 = max(millionths(g.XTCProbability), 1), millionths(g.XTCThreshold)
	}
	if g.DynaTempRange > 0 {
		sp.DynaTempRangeE6, sp.DynaTempExponentE6 = max(millionths(g.DynaTempRange), 1), max(millionths(g.DynaTempExponent), 1)
	}
	if g.MinKeep > 1 && (sp.TopPE6 > 0 || sp.MinPE6 > 0 || sp.TypicalPE6 > 0 || sp.XTCProbabilityE6 > 0) {
		sp.MinKeep = uint32(g.MinKeep)
	}
	if t := g.AdaptiveTarget; t != nil {
		target := millionths(*t)
		sp.AdaptiveTargetE6, sp.AdaptiveDecayE6 = &target, min(millionths(g.AdaptiveDecay), receipt.MaxAdaptiveDecayE6)
	}
}

// reasoningFirst lets a thinking model reason before a grammar holds its
// answer: a lazy grammar's triggers (a call's opening tag) do not count
// inside the reasoning block, which may name them while the model plans;
// a grammar that would hold the reply from its first byte, where the
// prompt opened the block, waits for the block's closing tag; and where
// the model opens its own block (Qwen3), the grammar holds from the
// block's end, or from the first byte if the model opens none. A grammar
// that spells the block itself (it begins with the opening tag) holds the
// reply as written.
func reasoningFirst(gr *grammar.Grammar, tags think.Tags, opens bool) (*grammar.Grammar, error) {
	switch {
	case len(gr.Triggers()) > 0:
		return gr.Skipping(grammar.Block{Open: tags.Open, Close: tags.Close, Opened: opens})
	case opens:
		return gr.Lazy(grammar.Trigger{Text: tags.Close})
	}
	if m, err := gr.NewMatcher(); err == nil && m.Advance([]byte(tags.Open)) == nil {
		return gr, nil
	}
	return gr.Skipping(grammar.Block{Open: tags.Open, Close: tags.Close})
}

// harmonyAnalysis is the block a thinking budget bounds on a harmony
// model (gpt-oss): its reply's first message, on the analysis channel.
var harmonyAnalysis = think.Tags{Open: "<|channel|>analysis<|message|>", Close: "<|end|>"}

// reasoningBlock is the block of the model's replies a thinking budget
// bounds: a thinking model's, or a harmony model's analysis message.
func (s *servedModel) reasoningBlock() (think.Tags, bool) {
	if tags, _, ok := s.Thinking(); ok {
		return tags, true
	}
	return harmonyAnalysis, s.Harmony()
}

// budgeted bounds a thinking model's reasoning block to budget tokens
// (grammar.Budgeted): alone, on the grammar that holds nothing else; with
// a grammar, on it (reasoningFirst has put the block before a grammar
// that holds the answer).
func budgeted(gr *grammar.Grammar, tags think.Tags, opens bool, budget int) (*grammar.Grammar, error) {
	if gr == nil {
		gr = grammar.Free()
	}
	return gr.Budgeted(grammar.Block{Open: tags.Open, Close: tags.Close, Opened: opens}, budget)
}

// OpensReasoning implements the API's question: the prompt left the
// model's reasoning block open, so its reply starts inside it.
func (p *preparedGeneration) OpensReasoning() bool { return p.opens }

// hasToolTurns reports whether g's prompt holds anything of tools beyond
// roles and contents.
func hasToolTurns(g *api.Generation) bool {
	if len(g.Tools) > 0 {
		return true
	}
	for _, m := range g.Messages {
		if len(m.ToolCalls) > 0 || m.ToolCallID != "" {
			return true
		}
	}
	return false
}

// givesReasoning reports whether one of g's messages gives an
// assistant's reasoning back.
func givesReasoning(g *api.Generation) bool {
	return slices.ContainsFunc(g.Messages, func(m api.Message) bool { return m.Reasoning != "" })
}

// request builds the mesh/1 request a generation is served as, with the
// steward options it needs.
//
// A request riding on a grant is served as exactly what the OpenAI binding
// derives from its body alone (mesh/1 §2.3), since its presentation is
// signed for that request id; it must fit the context as it stands.
//
// Otherwise the node builds it: the output ceiling is the request's, or the
// default, cut to what the context leaves; sampling options are in its
// identity (receipt.Sampling); a sampled request without a seed is left
// without one (Generate draws it).
func (s *servedModel) request(g *api.Generation, prompt string, ids []uint32, ctxLen int, prediction []uint32) (receipt.ServeRequest, []steward.ServeOption, error) {
	promptTokens := len(ids)
	if len(g.Presentation) > 0 {
		if hasToolTurns(g) {
			// The binding's prompt_hash is over the messages' roles and
			// contents: tools and tool-call turns, which the template
			// renders into the prompt, would be served outside the id the
			// presentation is signed for.
			e := api.Errorf(http.StatusBadRequest, "invalid_request_error", "tools_not_granted",
				"a granted request cannot carry tools, tool calls or tool results: the OpenAI binding's request id (mesh/1 §2.3) covers only the messages' roles and contents")
			e.Param = "tools"
			return receipt.ServeRequest{}, nil, e
		}
		if g.ThinkBudget > 0 || g.ThinkOff {
			e := api.Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_option",
				"a thinking budget (or thinking off, on a model whose template has no switch) is not served on a request that rides on a grant (jcp_presentation): the granted request's binding does not cover the grammar that holds it")
			e.Param = "thinking"
			return receipt.ServeRequest{}, nil, e
		}
		if g.Grammar != nil {
			// granted_serve_request derives the request from the body
			// alone and has no place for a grammar: served, the output
			// would be held to one the signed request id does not cover.
			return receipt.ServeRequest{}, nil, api.Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_option",
				"a %s output format (response_format, text.format or grammar) is not served on a request that rides on a grant (jcp_presentation): the granted request's binding does not cover a grammar", g.Format)
		}
		// Nor what the binding derives nothing from: served, the model
		// would be given, or would pick by, more than the signed request
		// id covers.
		for _, f := range []struct {
			set         bool
			param, what string
			why         string
		}{
			{g.PromptIDs != nil, "prompt", "a prompt of token ids", "hashes a prompt's text"},
			{g.Suffix != "", "suffix", "suffix", "hashes the prompt alone"},
			{g.Infill != nil, "input_prefix", "an infill", "hashes the prompt alone"},
			{g.Samplers != "", "samplers", "a sampler order", "does not cover it"},
			{g.MinIndent > 0, "n_indent", "n_indent", "does not cover it"},
			{g.PromptOnly, "n_predict", "n_predict 0 (the prompt alone)", "derives its output ceiling from max_tokens"},
			{g.IgnoreEOS, "ignore_eos", "ignore_eos", "does not cover it"},
			{g.MinTokens > 0, "min_tokens", "min_tokens", "does not cover it"},
			{len(g.LogitBias) > 0, "logit_bias", "logit_bias", "does not cover it"},
			{g.PenaltyLastN != 0 || g.PenaltiesOff, "repeat_last_n", "repeat_last_n", "does not cover it"},
			{g.LlamaFilters() != "", g.LlamaFilters(), g.LlamaFilters(), "does not cover it"},
			{g.DRYMultiplier > 0, "dry_multiplier", "DRY", "does not cover it"},
			{g.Continued, "continue_final_message", "a final message continued (continue_final_message)", "hashes the messages as turns, not one continued"},
			{g.ReasoningEffort != "", "reasoning_effort", "a reasoning effort", "hashes the messages alone, not what the template writes for the effort"},
			{g.Think != nil, "think", "a thinking switch (enable_thinking, think, thinking)", "hashes the messages alone, not what the template writes for the switch"},
			{givesReasoning(g), "messages", "an assistant's reasoning given back (reasoning_content, thinking)", "covers only the messages' roles and contents"},
		} {
			if f.set {
				e := api.Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_option",
					"%s is not served on a request that rides on a grant (jcp_presentation): the granted request's binding (mesh/1 §2.3) %s", f.what, f.why)
				e.Param = f.param
				return receipt.ServeRequest{}, nil, e
			}
		}
		p, err := grant.ParsePresentation(g.Presentation)
		if err != nil {
			return receipt.ServeRequest{}, nil, api.Errorf(http.StatusBadRequest, "invalid_request_error", "invalid_presentation", "jcp_presentation: %v", err)
		}
		req, err := grant.GrantedServeRequest(g.Body)
		if err != nil {
			return req, nil, api.Errorf(http.StatusBadRequest, "invalid_request_error", "invalid_granted_request", "%v", err)
		}
		if promptTokens+int(req.MaxTokens) > ctxLen {
			e := api.Errorf(http.StatusBadRequest, "invalid_request_error", "context_length_exceeded",
				"the prompt is %d tokens and the request asks for up to %d more; the context holds %d", promptTokens, req.MaxTokens, ctxLen)
			e.PromptTokens, e.ContextTokens = promptTokens, ctxLen
			return req, nil, e
		}
		return req, []steward.ServeOption{steward.WithPresentation(p)}, nil
	}
	maxTokens := g.MaxTokens
	if maxTokens <= 0 && !g.PromptOnly {
		maxTokens = s.defaults.maxTokens
	}
	maxTokens = min(maxTokens, ctxLen-promptTokens)
	minTokens := g.MinTokens
	if g.IgnoreEOS {
		// ignore_eos: the end tokens held back the whole answer.
		minTokens = maxTokens
	}
	if minTokens > maxTokens {
		e := api.Errorf(http.StatusBadRequest, "invalid_request_error", "invalid_value",
			"min_tokens %d is past the answer's ceiling, %d tokens (max_tokens, or what the context leaves)", g.MinTokens, maxTokens)
		e.Param = "min_tokens"
		return receipt.ServeRequest{}, nil, e
	}
	hash := receipt.PromptHash([]byte(prompt))
	if g.PromptIDs != nil || g.Suffix != "" || g.Infill != nil {
		// The model is handed ids no text is: given as ids, or a fill in
		// the middle's composed of texts and its tokens.
		hash = receipt.TokenPromptHash(ids)
	}
	req := receipt.ServeRequest{
		PromptHash:     hash,
		PromptTokens:   uint32(promptTokens),
		MaxTokens:      uint32(maxTokens),
		FidelityFloor:  s.defaults.fidelityFloor,
		JouleCeilingUJ: s.defaults.jouleCeilingUJ,
	}
	if g.FidelityFloor != nil {
		req.FidelityFloor = receipt.Fidelity(*g.FidelityFloor)
	}
	if g.JouleCeilingUJ != nil {
		req.JouleCeilingUJ = *g.JouleCeilingUJ
	}
	sp := &receipt.Sampling{
		PresencePenaltyE6:  int32(math.Round(g.PresencePenalty * 1e6)),
		FrequencyPenaltyE6: int32(math.Round(g.FrequencyPenalty * 1e6)),
		RepeatPenaltyE6:    repeatPenaltyE6(g.RepeatPenalty),
		Stop:               g.Stop,
		LogitBias:          logitBiasE6(g.LogitBias),
		MinIndent:          uint32(g.MinIndent),
		MinTokens:          uint32(minTokens),
	}
	switch n := g.PenaltyLastN; {
	case g.PenaltiesOff:
		// repeat_last_n 0: the penalties count no token, so none applies.
		sp.PresencePenaltyE6, sp.FrequencyPenaltyE6, sp.RepeatPenaltyE6 = 0, 0, 0
	case !sp.Penalised():
		// Which tokens they count is said only beside a penalty.
	case n == -1:
		sp.PenaltyLastN = receipt.PenaltyAll
	case n > 0:
		sp.PenaltyLastN = uint32(n)
	}
	dryPenalty(g, sp)
	sampled := g.Temperature != nil && *g.Temperature > 0
	mirostat := sampled && g.Mirostat > 0
	if mirostat {
		// Mirostat picks in place of the filters and the penalties, as in
		// llama.cpp and Ollama: what is set beside it does not run, and the
		// request names only what does (receipt.Sampling's rules).
		*sp = receipt.Sampling{Stop: sp.Stop, LogitBias: sp.LogitBias, MinIndent: sp.MinIndent, MinTokens: sp.MinTokens,
			TemperatureE6: millionths(*g.Temperature),
			Mirostat:      uint32(g.Mirostat), MirostatTauE6: max(millionths(g.MirostatTau), 1), MirostatEtaE6: max(millionths(g.MirostatEta), 1)}
	}
	// A request whose tokens are taken one pick at a time does not
	// speculate: it names no draft, and takes no prediction to draft from.
	oneByOne := pickByPick(g)
	if oneByOne != "" && len(prediction) > 0 {
		e := api.Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_option",
			"a request with %s does not draft from a prediction: it takes its tokens one pick at a time, which a draft's rows would not", oneByOne)
		e.Param = "prediction"
		return req, nil, e
	}
	infill := strings.IndexByte(g.Samplers, 'i') >= 0 && !mirostat
	if !sampled && !infill && sp.DRYMultiplierE6 > 0 {
		// DRY changes greedy picks too, as the penalties do, and which
		// runs first changes them.
		sp.Samplers = samplerOrder(g.Samplers, sp)
	}
	if (sampled || infill) && !mirostat {
		// The truncations change only what is drawn from: greedy ignores
		// them, so they are not in a greedy request's identity, unless
		// the infill filter follows them (it weighs what they leave).
		if sampled {
			sp.TemperatureE6 = millionths(*g.Temperature)
		}
		if p := g.TopP; p != nil && *p < 1 {
			sp.TopPE6 = millionths(*p)
		}
		sp.TopK = uint32(g.TopK)
		sp.MinPE6 = millionths(g.MinP)
		if sampled {
			llamaFilters(g, sp)
		}
		sp.Samplers = samplerOrder(g.Samplers, sp)
	}
	if sampled {
		if g.Seed != nil {
			seed := *g.Seed
			sp.Seed = &seed
		}
		// A sampled request that may speculate names the draft: its
		// tokens depend on it (receipt.Sampling.Draft), so a replay
		// after the draft changed is another request.
		// One whose filters run in another order names none (the
		// engines speculate under the default chain only).
		// Its draft name carries its own bounds on the rounds, which
		// its tokens depend on.
		switch d, ok := s.decidedDraft(g); {
		case oneByOne != "":
			// No window: no draft.
		case len(prediction) > 0 && sp.Samplers != "":
			e := api.Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_option",
				"a sampled request drafts from a prediction only under the default sampler order, and this one sets samplers")
			e.Param = "prediction"
			return req, nil, e
		case len(prediction) > 0:
			// A prediction drafts in place of the model's own draft,
			// and the request names it.
			sp.Draft = spec.LimitedDraft(spec.PricedDraft(spec.PredictionID(prediction), s.predictionPrices()), g.SpecLimits)
		case ok && sp.Samplers == "" && d.Draft() != "":
			sp.Draft = spec.LimitedDraft(d.Draft(), g.SpecLimits)
		}
	}
	if g.Grammar != nil {
		if infill {
			// The infill filter may end the answer (its fallback to the
			// end of turn) where the grammar does not let it end.
			e := api.Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_option",
				"the infill sampler is not served with a grammar (grammar, json_schema, response_format or tools): it may end the answer where the grammar does not allow")
			e.Param = "samplers"
			return req, nil, e
		}
		id := engine.GrammarID(g.Grammar)
		sp.Grammar = &id
	}
	if !sp.IsZero() {
		req.Sampling = sp
	}
	if err := req.Validate(); err != nil {
		return req, nil, api.Errorf(http.StatusBadRequest, "invalid_request_error", "invalid_request", "%v", err)
	}
	return req, nil, nil
}

// decidedDraft is the model's proposer where the node decides which
// draft g's request names: a sampled request that may speculate (not
// turned off, not held to a grammar) to a model with a proposer
// configured. The draft named can depend on what the node measured when
// the model loaded, or a split model's pipeline was placed (a proposer
// whose sampled speculation does not pay is named as none), so the serve
// hands it back in usage.energy.draft and a replay takes it from there.
func (s *servedModel) decidedDraft(g *api.Generation) (drafting, bool) {
	d, ok := draftOf(s.in.m)
	return d, ok && g.Temperature != nil && *g.Temperature > 0 && (g.Speculative == nil || *g.Speculative)
}

// drafting is a model that may decode speculatively.
type drafting interface {
	// Draft names its proposer as a new sampled request names it, with
	// the prices its windows are priced at: "" for none, or where
	// sampled speculation does not pay.
	Draft() string
	// DraftName is its draft as configured: a model's name, "lookup",
	// or "" for none.
	DraftName() string
	// DraftPrices are the prices its windows are priced by, and when
	// they were measured (zero: the files' prices).
	DraftPrices() (spec.Prices, time.Time)
}

// draftOf is m's proposer, where m has one configured.
func draftOf(m localModel) (drafting, bool) {
	d, ok := m.(drafting)
	return d, ok && d.DraftName() != ""
}

// serveError maps a steward refusal to the HTTP error it is answered with.
func serveError(err error) error {
	if status := grant.HTTPStatus(err); status != 0 {
		code := grant.Label(err)
		if code == "" {
			code = "grant_refused"
		}
		return api.Errorf(status, "invalid_request_error", code, "%v", err)
	}
	var se *steward.ServeError
	if !errors.As(err, &se) {
		return err
	}
	switch {
	case errors.Is(err, steward.ErrJournal):
		// The disk is full, or failing: nothing the client did, and it may
		// clear, so 503 rather than 500.
		what := "the serve's receipt could not be recorded, so it is withheld"
		if se.Stage == steward.StageAuthorise {
			what = "the authorisation could not be recorded, so the serve was refused"
		}
		e := api.Errorf(http.StatusServiceUnavailable, "server_error", "journal_unavailable",
			"the steward's journal is unavailable: %s: %v", what, se.Err)
		e.RetryAfter = 5 * time.Second
		return e
	case errors.Is(err, steward.ErrNoAdmissibleBackend):
		e := api.Errorf(http.StatusUnprocessableEntity, "invalid_request_error", "no_admissible_backend",
			"no backend can serve this request within its fidelity floor and joule ceiling")
		if se.Route != nil {
			reasons := make([]string, 0, len(se.Route.Candidates))
			for _, c := range se.Route.Candidates {
				reasons = append(reasons, fmt.Sprintf("%s: %s", c.Backend, c.Reason))
			}
			e.Message += ": " + strings.Join(reasons, "; ")
			e.Details = se.Route.Candidates
		}
		return e
	case errors.Is(err, steward.ErrInvalidRequest):
		return api.Errorf(http.StatusBadRequest, "invalid_request_error", "invalid_request", "%v", se.Err)
	case errors.Is(err, engine.ErrUnavailable):
		// A split model lost a stage: it is being placed again, and the
		// same request may succeed in a moment, here or on another node.
		e := api.Errorf(http.StatusServiceUnavailable, "server_error", "model_unavailable", "%v", se.Err)
		e.RetryAfter = 2 * time.Second
		return e
	case errors.Is(err, engine.ErrRefused):
		return api.Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_option", "%v", se.Err)
	case errors.Is(err, grammar.ErrRejected):
		// A lazy grammar's trigger came in a token whose text runs on
		// past it into bytes the grammar refuses (a strict tool's call
		// opened as no call can go on): the mask could not see it
		// coming. The model's doing, as OpenAI's "invalid content".
		return api.Errorf(http.StatusInternalServerError, "server_error", "invalid_model_output",
			"the model's output left the request's grammar: %v", se.Err)
	}
	return err
}

// stopFilter cuts generated text at the first stop string and holds back
// any tail that might be the start of one, so a client never sees a stop
// string, whole or in part. The engine stops at the same place itself
// (stop strings are in the request); the filter only shapes the text.
type stopFilter struct {
	stops   []string
	pending string
	hit     bool
	matched string // the stop string hit: the earliest in the text, the first listed of those there
}

// push adds generated text and returns what may be shown now.
func (f *stopFilter) push(s string) string {
	if f.hit {
		return ""
	}
	if len(f.stops) == 0 {
		return s
	}
	f.pending += s
	cut := -1
	for _, st := range f.stops {
		if i := strings.Index(f.pending, st); i >= 0 && (cut < 0 || i < cut) {
			cut, f.matched = i, st
		}
	}
	if cut >= 0 {
		out := f.pending[:cut]
		f.pending, f.hit = "", true
		return out
	}
	keep := 0
	for _, st := range f.stops {
		for k := min(len(st)-1, len(f.pending)); k > keep; k-- {
			if strings.HasSuffix(f.pending, st[:k]) {
				keep = k
				break
			}
		}
	}
	out := f.pending[:len(f.pending)-keep]
	f.pending = f.pending[len(f.pending)-keep:]
	return out
}

// flush returns the held-back tail once generation has ended.
func (f *stopFilter) flush() string {
	out := f.pending
	f.pending = ""
	return out
}

// millionths is a non-negative setting in the receipt's millionths,
// rounded.
func millionths(v float64) uint32 { return uint32(math.Round(v * 1e6)) }

// repeatPenaltyE6 is a repeat_penalty in the receipt's millionths; one
// that changes nothing (0 or 1) is 0, so that it leaves the request's
// identity alone.
func repeatPenaltyE6(p float64) uint32 {
	e6 := millionths(p)
	if e6 == 1e6 {
		return 0
	}
	return e6
}

// logitBiasE6 is the request's logit biases as the receipt holds them:
// in millionths, by token id, those that round to no bias left out.
func logitBiasE6(bias map[uint32]float64) []receipt.LogitBias {
	var out []receipt.LogitBias
	for id, b := range bias {
		if e6 := int32(math.Round(b * 1e6)); e6 != 0 {
			out = append(out, receipt.LogitBias{Token: id, BiasE6: e6})
		}
	}
	slices.SortFunc(out, func(a, b receipt.LogitBias) int { return cmp.Compare(a.Token, b.Token) })
	return out
}
