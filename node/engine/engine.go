package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/meshnode/meshnode/gguf/grammar"
	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/receipt"
)

// Engine is one backend (§5). Implementations must be safe for concurrent
// Serve calls; the steward serves requests in parallel.
type Engine interface {
	// Recipe names the composed model the engine runs (§4): a base plus
	// any merges or adapters, by name. It goes on the receipt.
	Recipe() string
	// Fidelity is the advertised level the router admits the engine on
	// (§3.2.1).
	Fidelity() receipt.Fidelity
	// UJPerToken is the modelled energy per token, in microjoules, the
	// router's estimate uses (§4). It is a model, never a measurement.
	UJPerToken() uint64
	// UJPerOptionScored is the modelled energy per option a typed decision
	// scores (§3.6); 0 declares nothing, which reproduces the token-only
	// model exactly.
	UJPerOptionScored() uint64
	// Deterministic reports whether serving the same request and prompt
	// payload again yields the same tokens (§5). An engine that samples
	// must not declare it. A request that itself asks for unseeded
	// sampling is not replayable whatever the engine declares.
	Deterministic() bool
	// Weights names the weights the engine runs and the precision of its
	// forward pass (§3.6), or reports false if it cannot address them.
	// The steward reads it before and after a serve and refuses to seal
	// when the two differ (§2).
	Weights() (receipt.Weights, bool)
	// Serve runs req on prompt, calling emit once per output token, in
	// order, from the calling goroutine, as each is produced. A
	// generation emits at most req.MaxTokens tokens; a decision emits
	// none. Serve honours ctx: when it is cancelled the engine stops
	// promptly and returns ctx's error.
	//
	// On any error Serve still returns the Outcome of the work done so far
	// (zero if none). An engine that refuses a request before doing any
	// work (an option it cannot honour) returns an error wrapping
	// ErrRefused; the steward seals nothing for it. When emit returns an
	// error the engine stops and returns an error wrapping it.
	Serve(ctx context.Context, req receipt.ServeRequest, prompt []uint32, emit func(tok uint32) error) (Outcome, error)
}

// DeviceUser is implemented by an engine that can say which devices its
// serves run on: hw.DomainCPU for the CPU backend, with hw.DomainGPU for
// CUDA or Metal. The steward hands them to the meter with each serve, so
// that a serve is graded by the counters covering what it used rather than
// by the meter's guess at start-up (mesh/1 §3.3).
type DeviceUser interface {
	Devices() hw.Domain
}

// DevicesOf is what e says it runs on, or hw.AnyDevice when it does not
// say (or says nothing): a meter must then cover every device for the
// serve to be graded a hardware reading.
func DevicesOf(e Engine) hw.Domain {
	if u, ok := e.(DeviceUser); ok {
		if d := u.Devices(); d != 0 {
			return d
		}
	}
	return hw.AnyDevice
}

// WorkReporter is implemented by an engine that tells the meter how much
// work each serve did: it calls AddWork on the hw.WorkRecorder its Serve
// context carries (hw.WorkFrom) as the work is done. A meter whose spans
// overlap (serves batched together) then splits the machine's energy among
// them by it; spans of engines that do not report share equally.
type WorkReporter interface {
	Engine
	ReportsWork() bool
}

// ReportsWork is whether e reports its serves' work.
func ReportsWork(e Engine) bool {
	w, ok := e.(WorkReporter)
	return ok && w.ReportsWork()
}

// TrainingSource is implemented by an engine that can address the corpus
// its weights were fitted to (§3.7).
type TrainingSource interface {
	Training() (receipt.Training, bool)
}

// Outcome is what an engine reports about a serve (§5's ServeOutcome).
type Outcome struct {
	// TokensIn counts the input tokens processed; TokensOut the tokens
	// emitted.
	TokensIn, TokensOut uint32
	// TokensAccepted is the wedge metric's denominator: TokensOut under
	// greedy decode; under speculative decoding the proposed tokens the
	// target model accepted.
	TokensAccepted uint32
	// CacheHitTokens counts output served from a prefix or result cache.
	CacheHitTokens uint32
	// SpecProposed and SpecAccepted are the speculative-decoding counters.
	SpecProposed, SpecAccepted uint32
	// StopString is the stop string (receipt.Sampling.Stop) that ended
	// the output, "" when something else did. It is not sealed: the
	// API names it to clients that ask which stop was met.
	StopString string
	// Indented says the output ended at a line under the request's
	// indentation (receipt.Sampling.MinIndent). Not sealed either: the API
	// tells it as llama.cpp's stop_type "limit".
	Indented bool
	// Delivered is the fidelity the engine says it served, nil if it
	// reports none (§3.2.1). It must not exceed the advertised level.
	Delivered *receipt.Fidelity
	// Split is set by an engine that ran the serve's model split into
	// layer stages across nodes (node/stage), as the head: the steward
	// then signs the head's own part under its key, its metered span, and
	// seals the receipt with every stage's report and their total
	// (receipt.Receipt.Stages). Nil for a serve that ran on one node.
	Split *Split
}

// Split is what a serve's head knows of a split run: its own layer range
// [Lo, Hi) and the positions it ran through them, and every other
// stage's signed report in layer order, each already checked against the
// plan (stage.Pipeline.Finish gives exactly this).
type Split struct {
	Lo, Hi, Tokens uint32
	Reports        []receipt.SignedStageReport
}

// ErrRefused is wrapped by the error of a serve an engine declined before
// doing any work.
var ErrRefused = errors.New("engine: request refused")

// ErrUnavailable is wrapped by the error of a serve an engine could not
// finish, or start, for a reason that may clear by itself (a model split
// across nodes lost a stage and is being placed again): the request may
// be retried. The API answers it with 503 and Retry-After.
var ErrUnavailable = errors.New("engine: temporarily unavailable")

// speculationKey carries a serve's speculation switch in its context.
type speculationKey struct{}

// WithSpeculation returns ctx carrying the request's switch for
// speculative decoding (on by default where an engine has a proposer).
// It is not in the request's identity: a greedy serve's tokens do not
// depend on it, and a sampled request names its proposer in
// receipt.Sampling.Draft.
func WithSpeculation(ctx context.Context, on bool) context.Context {
	return context.WithValue(ctx, speculationKey{}, on)
}

// Speculation is ctx's speculation switch: true unless WithSpeculation
// turned it off.
func Speculation(ctx context.Context) bool {
	on, ok := ctx.Value(speculationKey{}).(bool)
	return !ok || on
}

// promptCacheKey carries a serve's switch off its prompt cache.
type promptCacheKey struct{}

// WithoutPromptCache returns ctx asking its serve to evaluate the whole
// prompt, none of it taken from the cache (llama-server's cache_prompt
// false: what a benchmark of prompt processing sends). The answer is
// the same either way, so it is not in the request's identity.
func WithoutPromptCache(ctx context.Context) context.Context {
	return context.WithValue(ctx, promptCacheKey{}, true)
}

// PromptCache reports whether a serve may take its prompt's prefix from
// the cache: true unless WithoutPromptCache turned it off.
func PromptCache(ctx context.Context) bool {
	off, _ := ctx.Value(promptCacheKey{}).(bool)
	return !off
}

// specLimitsKey carries a greedy serve's bounds on its rounds.
type specLimitsKey struct{}

// WithSpecLimits returns ctx carrying a greedy request's own bounds on
// its speculative rounds (llama-server's speculative.n_max, n_min and
// p_min). Like the switch, they are not in a greedy request's identity:
// its tokens do not depend on them. A sampled request's bounds are in its
// draft name (spec.LimitedDraft), which the engine reads instead.
func WithSpecLimits(ctx context.Context, l spec.Limits) context.Context {
	return context.WithValue(ctx, specLimitsKey{}, l)
}

// SpecLimits is ctx's bounds on a greedy serve's rounds (none unless
// WithSpecLimits set them).
func SpecLimits(ctx context.Context) spec.Limits {
	l, _ := ctx.Value(specLimitsKey{}).(spec.Limits)
	return l
}

// predictionKey carries a serve's predicted output in its context.
type predictionKey struct{}

// WithPrediction returns ctx carrying a request's predicted output
// (OpenAI's prediction), in the model's tokens: its speculative rounds
// draft from it (spec.Predicted) instead of the model's own proposer.
// Like the switch, it is not in a greedy request's identity, whose
// tokens do not depend on it; a sampled request's draft name names it
// (spec.PredictionID), as the prediction travels beside the request.
func WithPrediction(ctx context.Context, tokens []uint32) context.Context {
	return context.WithValue(ctx, predictionKey{}, tokens)
}

// Prediction is ctx's predicted output (nil unless WithPrediction set it).
func Prediction(ctx context.Context) []uint32 {
	t, _ := ctx.Value(predictionKey{}).([]uint32)
	return t
}

// PromptProgress is how far a serve's prompt has been evaluated, as
// llama-server's prompt_progress counts it: Total tokens, Cached of them
// reused from a KV cache, Processed of them held now (Cached included;
// Total once the prompt is in).
type PromptProgress struct{ Total, Cached, Processed int }

type promptProgressKey struct{}

// WithPromptProgress returns ctx carrying f, which an engine's Serve
// given ctx calls as the prompt is evaluated: after each step that took
// part of it, and once it is all in, before the first token. It is
// called on the goroutine that calls emit, never at once with it, so it
// may write where emit writes.
func WithPromptProgress(ctx context.Context, f func(PromptProgress)) context.Context {
	return context.WithValue(ctx, promptProgressKey{}, f)
}

// PromptProgressFrom is ctx's WithPromptProgress, or nil.
func PromptProgressFrom(ctx context.Context) func(PromptProgress) {
	f, _ := ctx.Value(promptProgressKey{}).(func(PromptProgress))
	return f
}

// PredictionTaker is an engine whose serves draft from a
// predicted output (WithPrediction).
type PredictionTaker interface {
	Engine
	TakesPrediction() bool
}

// TakesPrediction is whether e's serves draft from a prediction.
func TakesPrediction(e Engine) bool {
	t, ok := e.(PredictionTaker)
	return ok && t.TakesPrediction()
}

// grammarKey carries a constrained serve's grammar in its context.
type grammarKey struct{}

// WithGrammar returns ctx carrying the grammar a constrained request's
// output is held to (structured outputs). The request names it by digest
// (receipt.Sampling.Grammar, GrammarID); the grammar itself travels
// beside the request, as the prompt's tokens do.
func WithGrammar(ctx context.Context, g *grammar.Grammar) context.Context {
	return context.WithValue(ctx, grammarKey{}, g)
}

// GrammarID is the content id a request names its grammar by: BLAKE3-256
// of the grammar's canonical text.
func GrammarID(g *grammar.Grammar) receipt.ContentID { return receipt.Sum([]byte(g.String())) }

// GrammarFor is the grammar req's output is held to: the one ctx carries,
// which must be the one the request names; nil for a request that names
// none. A mismatch either way is refused (ErrRefused): an engine must
// never serve under a grammar the request's identity does not cover, nor
// ignore one it does.
func GrammarFor(ctx context.Context, req receipt.ServeRequest) (*grammar.Grammar, error) {
	g, _ := ctx.Value(grammarKey{}).(*grammar.Grammar)
	var named *receipt.ContentID
	if req.Sampling != nil {
		named = req.Sampling.Grammar
	}
	switch {
	case g == nil && named == nil:
		return nil, nil
	case g == nil:
		return nil, fmt.Errorf("%w: the request names grammar %s, and the serve carries none", ErrRefused, named)
	case named == nil:
		return nil, fmt.Errorf("%w: the serve carries a grammar its request does not name", ErrRefused)
	}
	if id := GrammarID(g); id != *named {
		return nil, fmt.Errorf("%w: the request names grammar %s; the serve carries %s", ErrRefused, named, id)
	}
	return g, nil
}
