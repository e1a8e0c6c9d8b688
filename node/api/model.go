package api

import (
	"context"
	"encoding/json"
	"net"
	"time"

	"github.com/meshnode/meshnode/gguf/chat/toolcall"
	"github.com/meshnode/meshnode/gguf/grammar"
	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/node/identity"
)

// Model is a model served on this node. The node's implementation applies
// the chat template, tokenizes, serves through the steward and
// detokenizes; the API only sees text.
type Model interface {
	// Prepare readies one generation: it renders and tokenizes the
	// prompt, checks it against the model's context and builds the
	// request it will be served as. It runs before the request takes one
	// of the model's generation slots, so that a prompt that cannot be
	// served is refused without waiting behind running generations, and
	// tokenizing it holds no slot. An error is the request's answer (an
	// *Error carries its status).
	Prepare(ctx context.Context, g *Generation) (Prepared, error)
}

// Prepared is a generation ready to run, on a slot of its model.
type Prepared interface {
	// Generate runs the generation, calling emit with each piece of
	// output as it is produced (with its tokens' log-probabilities when
	// Generation.Logprobs asked for them). It returns when the generation
	// ends, fails, or ctx is cancelled (the client went away).
	Generate(ctx context.Context, emit func(Delta) error) (*Result, error)
	// PromptTokens is the length of the prompt, in tokens, as it will be
	// served (an answer's opening event may name it before any output).
	PromptTokens() int
}

// Infill is an /infill request's text: before the gap (Prefix), after
// it (Suffix), and other files' (Extra), which go before them as
// context.
type Infill struct {
	Prefix, Suffix string
	Extra          []InfillChunk
}

// InfillChunk is a file's text given as context to an infill.
type InfillChunk struct {
	Filename, Text string
}

// Message is one chat message, its content flattened to text (a null
// content is ""). ToolCalls are an assistant's function calls; a "tool"
// message answers the call ToolCallID, and Name is its function's name.
type Message struct {
	Role    string
	Content string
	// Reasoning is an assistant's reasoning given back (reasoning_content,
	// thinking blocks, Ollama's thinking): the chat template renders it
	// where it renders any (Qwen3's, for the turns of a tool loop).
	Reasoning  string
	ToolCalls  []ToolCall
	ToolCallID string
	Name       string
}

// ToolCall is one function call of an assistant message: Arguments is the
// JSON text OpenAI carries.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// ToolModel is a Model that can be given tools: Format is how its chat
// template has it write calls; ok is false for a model that cannot take
// tools at all (one without a vocabulary).
type ToolModel interface {
	ToolFormat() (f toolcall.Format, ok bool)
}

// ReasoningModel is a Model whose replies come in OpenAI's harmony format
// (gpt-oss), the channel markers written out: the chat API splits them
// into reasoning_content (the analysis channel) and content (package
// harmony).
type ReasoningModel interface {
	Harmony() bool
}

// isHarmony reports whether m's replies are harmony messages.
func isHarmony(m Model) bool {
	rm, ok := m.(ReasoningModel)
	return ok && rm.Harmony()
}

// Generation is a request, in the API's terms, as a Model receives it.
type Generation struct {
	Model string
	// Messages is set for chat-shaped requests (chat completions, responses
	// with message input); Prompt for raw text (completions, responses with
	// a string input and no instructions).
	Messages []Message
	Prompt   string
	// PromptIDs is a completion's prompt given as token ids of the
	// model's vocabulary (Prompt is then empty): the model is given them
	// as they are, with no BOS added.
	PromptIDs []uint32
	// Prefill, with Messages, is the start of the assistant's reply, which
	// the model continues (Anthropic's final assistant message): it
	// follows the rendered conversation as a message's content would,
	// and is not part of the answer.
	Prefill string
	// Continued: Prefill is a chat's final assistant message, continued
	// as continue_final_message asks.
	Continued bool
	// Suffix, when set, is the text after the answer: the model fills in
	// the middle between Prompt and it (completions' suffix), through
	// its fill-in-the-middle tokens.
	Suffix string
	// Infill, when set, is llama.cpp's /infill: the text around the gap
	// and other files' text, composed before Prompt (the start of the
	// middle) as llama-server composes them, and fitted to the context.
	Infill *Infill
	// N is how many choices to answer with (n; 0 is 1), and batch a
	// completions request's prompts when it sends more than one: such a
	// request is served as its Choices, each a generation of one.
	N     int
	batch []batchPrompt
	// first marks a choice that is its prompt's first (Choices).
	first bool
	// Echo puts the prompt before the answer (completions' echo), and,
	// with Logprobs, its tokens' log-probabilities before the answer's:
	// each under the distribution after the tokens before it, the
	// first's unscored.
	Echo bool
	// Tools are the request's tool definitions, each the JSON object the
	// client sent ({"type": "function", "function": {...}}), for the chat
	// template to render. They are nil when the request has none or its
	// tool_choice is "none" (the model is then told of no tools).
	Tools []json.RawMessage
	// ToolChoice is the tool_choice of a request with Tools: "auto",
	// "required" or "function" (ToolName is the function);
	// ParallelToolCalls is parallel_tool_calls. "required" and "function"
	// hold the output to calls: the API sets Grammar to a grammar of the
	// model's call format once it knows the model.
	ToolChoice        string
	ToolName          string
	ParallelToolCalls bool

	MaxTokens        int // 0: the model's default, unless PromptOnly
	Temperature      *float64
	TopP             *float64
	Seed             *uint64
	Stop             []string
	PresencePenalty  float64
	FrequencyPenalty float64
	// TopK, MinP and RepeatPenalty are llama.cpp's; 0 is off, and so is a
	// RepeatPenalty of 1.
	TopK          int
	MinP          float64
	RepeatPenalty float64
	// PenaltyLastN is which tokens the penalties count: 0 the answer's
	// (the default), n the last n of prompt and answer together
	// (llama-server's and Ollama's repeat_last_n), -1 every token of
	// both (receipt.Sampling.PenaltyLastN). PenaltiesOff: repeat_last_n
	// 0, under which the penalties given count no token (llama.cpp's
	// penalty_last_n 0), so none applies. Each is set only beside a
	// penalty, where it changes something.
	PenaltyLastN int
	PenaltiesOff bool
	// llama.cpp's other filters (llamafilters.go), each 0 where off:
	// TypicalP (1 is off too), TopNSigma, XTCProbability beside its
	// XTCThreshold, DynaTempRange beside its DynaTempExponent, and
	// MinKeep (1 is off too). Only on a sampled request.
	TypicalP, TopNSigma             float64
	XTCProbability, XTCThreshold    float64
	DynaTempRange, DynaTempExponent float64
	MinKeep                         int
	// DRY's penalty (llamafilters.go): on where DRYMultiplier is above
	// 0, greedy requests included; DRYLastN -1 scans every token of
	// prompt and answer; DRYBreakers nil, llama.cpp's four.
	DRYMultiplier, DRYBase     float64
	DRYAllowedLength, DRYLastN int
	DRYBreakers                []string
	// Mirostat is llama.cpp's mirostat sampling (llamafilters.go): its
	// version, 0 off, 1 or 2, and beside it its target surprise in bits
	// and its learning rate. Only on a sampled request; it picks in place
	// of the filters and the penalties, which, set beside it, do not run
	// (as in llama.cpp).
	Mirostat                 int
	MirostatTau, MirostatEta float64
	// AdaptiveTarget, where set, makes the chain's last draw adaptive-p
	// (llamafilters.go): its target probability, 0 … 1, beside its
	// moving average's AdaptiveDecay. Only on a sampled request.
	AdaptiveTarget *float64
	AdaptiveDecay  float64
	// IgnoreEOS bans the model's end-of-generation tokens (llama.cpp's
	// ignore_eos): they are held back the whole answer (MinTokens at its
	// ceiling), so it runs to its ceiling or a stop (or where a grammar
	// must end). Part of the request's identity as that min_tokens.
	IgnoreEOS bool
	// MinTokens holds the end-of-generation tokens back until the answer
	// has that many tokens (vLLM's min_tokens; text-generation-webui's
	// min_length), greedy answers too; stop strings still end it. At
	// most the answer's ceiling; part of the request's identity.
	MinTokens int
	// NoPromptCache evaluates the whole prompt, none of it taken from the
	// cache (llama-server's cache_prompt false); the answer is the same.
	NoPromptCache bool
	// ReturnTokens hands the answer's token ids out with its text
	// (Delta.Tokens: llama-server's return_tokens).
	ReturnTokens bool
	// PostSampling, beside Logprobs, reports each token under the
	// distribution the sampler drew it from (llama-server's
	// post_sampling_probs) in place of the model's; such a serve does not
	// speculate.
	PostSampling bool
	// LogitBias adds each bias (−100 … 100) to its token's logit before
	// the penalties, greedy requests included (OpenAI's logit_bias), by
	// token id; nil is none.
	LogitBias map[uint32]float64
	// SSEPing is llama-server's sse_ping_interval: a stream silent this
	// long gets an SSE comment (0: never).
	SSEPing time.Duration
	// PromptOnly: the prompt is evaluated (and so cached) and nothing is
	// generated (llama.cpp's n_predict 0, which editors send to have
	// their context cached before they ask).
	PromptOnly bool
	// Samplers is the order the sampling filters run in, in gguf/sample's
	// letters (llama.cpp's samplers: receipt.Sampling.Samplers); "" is
	// the default.
	Samplers string
	// MinIndent is llama.cpp's n_indent: the answer ends at a line, after
	// the first, that begins under this many spaces or tabs
	// (receipt.Sampling.MinIndent).
	MinIndent int
	// PromptTimeLimit and PredictTimeLimit are llama.cpp's
	// t_max_prompt_ms and t_max_predict_ms; 0 is none. A prompt whose
	// evaluation takes longer than PromptTimeLimit is answered with
	// nothing (it is cached for the next request); once PredictTimeLimit
	// has passed since the first token, the answer ends after the next
	// token holding a newline. Either cut is sealed as the client's limit
	// (receipt.CutLimit) and tells as stop_type "limit".
	PromptTimeLimit, PredictTimeLimit time.Duration
	// ReasoningEffort, when set, is the reasoning effort the model's chat
	// template is given ("low", "medium" or "high": gpt-oss's
	// reasoning_effort); a model whose template reads none refuses it.
	ReasoningEffort string
	// Think, when set, turns a thinking model's reasoning on or off
	// through its chat template's enable_thinking (setThinking sets it
	// only for a template that has the switch). Part of the prompt, so
	// of the receipt's prompt_hash.
	Think *bool
	// ThinkBudget, when positive, bounds a thinking model's reasoning
	// block in tokens (Anthropic's thinking.budget_tokens): past it the
	// block is closed for it (grammar.Budgeted). Part of the request's
	// grammar, so of its identity.
	ThinkBudget int
	// ThinkOff holds a thinking model whose template has no switch to no
	// reasoning: its block is closed as soon as it opens (a budget of
	// none).
	ThinkOff bool
	// thinking is the request's switch, as parsed, applied to the model
	// by applyThinking (which sets Think).
	thinking *thinkSwitch
	// reasoning is how a chat reply's reasoning comes back
	// (reasoning_format): split off (the default), not split off ("none":
	// the reply as written), or both ("deepseek-legacy").
	reasoning reasoningMode
	// ContextLimit, when set, bounds the prompt and the answer within
	// the model's context (Ollama's num_ctx): the smaller of the two
	// holds.
	ContextLimit int
	// Prediction is OpenAI's predicted output (prediction.content): text
	// the answer is expected to repeat in large part (a file being
	// edited), which drafts the serve's speculative rounds (docs/api.md,
	// Predicted outputs): a greedy answer's tokens are the same; a
	// sampled one names it as its draft.
	Prediction string
	// Speculative switches speculative decoding for this request: nil
	// is the model's default (on where it has a draft), false off.
	Speculative *bool
	// SpecLimits bound its speculative rounds (llama-server's
	// speculative.n_max, n_min and p_min); none by default.
	SpecLimits spec.Limits
	// Grammar, when set, is what the output is held to (structured
	// outputs: response_format, text.format; a GBNF grammar; tool
	// calls); Format names which (FormatJSONObject, FormatJSONSchema,
	// FormatGBNF, FormatToolCalls).
	Grammar *grammar.Grammar
	Format  string
	// content is the response format's JSON content (json_object, or
	// json_schema with its schema), kept so that tools under "auto" can
	// offer their calls beside it (toolcall.ContentOrCalls).
	content *jsonContent
	// Logprobs asks for each output token's log-probability, with the
	// TopLogprobs (0 … 20) likeliest tokens at its position. They are
	// presentation: they change no token, and are not in the request's
	// identity. A model that cannot report them refuses the request.
	Logprobs    bool
	TopLogprobs int

	// mesh/1 bounds from metadata.fidelity_floor and
	// metadata.joule_ceiling_uj; nil means the node's default.
	FidelityFloor  *uint64
	JouleCeilingUJ *uint64
	// Presentation is the body's jcp_presentation, when the request rides
	// on a grant (mesh/1 §2.3), as the caller sent it.
	Presentation json.RawMessage
	// Body is the raw request body, for bindings that derive the request
	// identity from it (granted_serve_request).
	Body []byte
	// Received is when the request arrived (its headers read), from which
	// the node measures its time to first token.
	Received time.Time

	// LatencyBudgetMS is metadata.latency_budget_ms: how long the client
	// will wait for the whole answer, against which placement prices
	// round trips and queues; nil means the default.
	LatencyBudgetMS *uint64
	// Placement is how the mesh placed the request on this node, one line
	// for the receipt's route: the placing node's decision, or which peer
	// placed it here ("" when it was not placed).
	Placement string
	// placed is the placement this node made, for a spill and for
	// usage.placement.
	placed *Placement
}

// FinishJouleCeiling is the finish reason of a generation the steward
// stopped because one more step would have passed the request's joule
// ceiling (mesh/1 §3.1: the ceiling is a hard budget). The answer is the
// text produced so far, and its receipt covers exactly that.
const FinishJouleCeiling = "joule_ceiling"

// Result is how a generation ended.
type Result struct {
	PromptTokens     int
	CompletionTokens int
	// FinishReason is "stop" (a stop token or string), "length" (the
	// output ceiling) or FinishJouleCeiling.
	FinishReason string
	// StopSequence is the stop string that ended the output, when one
	// did (FinishReason "stop").
	StopSequence string
	// Energy is the usage.energy object: the receipt, its envelope and its
	// headline figures, marshalled as given.
	Energy any
	// EnergyUJ and Receipt are the serve's energy and its receipt's
	// envelope id, for the request's event (RequestEvent); the API reads
	// nothing else of the receipt.
	EnergyUJ uint64
	Receipt  string
	// Placement is usage.placement, set by the server.
	Placement any
	// Prediction counts, for a serve given a Prediction, the predicted
	// tokens its rounds verified: those that stood and those that did
	// not (usage's accepted_prediction_tokens and
	// rejected_prediction_tokens); nil without one.
	Prediction *PredictionCounts
	// ReasoningTokens, for a chat reply of a model that reasons, is how
	// many of its tokens were reasoning (usage's reasoning_tokens); nil
	// for a reply that carries none.
	ReasoningTokens *int
	// reasoningOpen: the prompt opened a reasoning block
	// (opensReasoning), set by the server for the readers of a whole
	// answer.
	reasoningOpen bool
	// firstText is when its first text came (zero: none came), set by
	// the server: a whole answer is built after the generation, so its
	// timings read it.
	firstText time.Time
}

// PredictionCounts are a serve's predicted tokens, verified.
type PredictionCounts struct {
	Accepted, Rejected int
}

// ModelInfo describes one model for /v1/models.
type ModelInfo struct {
	ID string
	// Local reports whether this node serves it; otherwise Hosts names the
	// peers that do.
	Local bool
	Hosts []identity.EndpointID
	// Owner is the node that serves it (this node for local models, the
	// first host otherwise).
	Owner identity.EndpointID
}

// Registry is the node's view of which models exist where.
type Registry interface {
	// Local returns the model this node serves under name.
	Local(name string) (Model, bool)
	// List returns every model in the mesh, local first, sorted by id.
	List() []ModelInfo
}

// ReceiptExporter is a Node that exports its steward's receipts: GET
// /v1/mesh/receipts (never to mesh peers).
type ReceiptExporter interface {
	// Receipts is up to limit receipts from sequence from (or the first
	// the node still holds, when that is later).
	Receipts(from uint64, limit int) (ReceiptPage, error)
}

// ReceiptPage is one answer of GET /v1/mesh/receipts.
type ReceiptPage struct {
	// Steward is the did:key that sealed them.
	Steward string `json:"steward"`
	// FirstSequence is the first receipt the node still holds (0 unless
	// its log dropped older ones, or began after them); NextSequence is
	// the sequence the next receipt will take.
	FirstSequence uint64 `json:"first_sequence"`
	NextSequence  uint64 `json:"next_sequence"`
	// Receipts are {"sequence": N, "envelope_hex": "…"} objects in chain
	// order, from the sequence asked for.
	Receipts []json.RawMessage `json:"receipts"`
}

// ReceiptLister is a Node that shows its steward's latest receipts, each
// checked: GET /api/receipts (never to mesh peers), which the web console
// reads.
type ReceiptLister interface {
	// RecentReceipts is the latest limit receipts, newest first.
	RecentReceipts(limit int) (RecentReceipts, error)
}

// RecentReceipts is the answer of GET /api/receipts.
type RecentReceipts struct {
	// Steward is the did:key that sealed them; NextSequence the sequence
	// the next receipt will take.
	Steward      string           `json:"steward"`
	NextSequence uint64           `json:"next_sequence"`
	Receipts     []ReceiptSummary `json:"receipts"`
}

// ReceiptSummary is one receipt's headline figures and whether it checks.
type ReceiptSummary struct {
	Sequence uint64 `json:"sequence"`
	// ID is the envelope's content id, which a RequestEvent names.
	ID         string  `json:"id"`
	RequestID  string  `json:"request_id"`
	Backend    string  `json:"backend"`
	Recipe     string  `json:"recipe"`
	TokensIn   uint32  `json:"tokens_in"`
	TokensOut  uint32  `json:"tokens_out"`
	EnergyUJ   uint64  `json:"energy_uj"`
	Provenance string  `json:"energy_provenance"`
	UJPerToken *uint64 `json:"uj_per_accepted_token,omitempty"`
	CutShort   string  `json:"cut_short,omitempty"`
	// Verified: the envelope's signature is the steward's and it links to
	// the receipt before it (sequence and prev), where the log holds that
	// one. Verification says what was checked, or what failed.
	Verified     bool   `json:"verified"`
	Verification string `json:"verification"`
}

// NoModelHinter is a Registry that can say how to get a model when its
// node serves none: GET /v1/models carries the hint as "hint", and a
// request for a model nothing serves says it in its 404.
type NoModelHinter interface {
	// NoModelHint is how to get a model, or "" while the node serves one.
	NoModelHint() string
}

// Placer is a Mesh that places a request among every host of its model,
// this node included (node/placement).
type Placer interface {
	// Place weighs the hosts of g's model; local says whether this node
	// serves it, load its queue here. nil: no placement to make (one host
	// only), and the request goes as without a Placer.
	Place(g *Generation, local bool, load LocalLoad) *Placement
}

// LocalLoad is one model's queue on this node.
type LocalLoad struct {
	// Slots run at once, Free of them are not taken, Queued wait for one,
	// and QueueLimit may wait before a request is refused with 429.
	Slots, Free, Queued, QueueLimit int
}

// Placement is where a request goes.
type Placement struct {
	// Hosts are the hosts to try, best first; this node is among them
	// under its own id when it may serve.
	Hosts []identity.EndpointID
	// Route is the decision in one line of UTF-8, for the receipt's
	// route (and PlacementHeader when relayed).
	Route string
	// Detail is usage.placement on this node's answers, marshalled as
	// given.
	Detail any
	// Sent, when set, is called as the request goes to a peer; done is
	// called once when that attempt has ended, with the envelope_hex of
	// the receipt its answer carried ("" when none was seen).
	Sent func(peer identity.EndpointID) (done func(envelopeHex string))
}

// Mesh is what the API needs of the mesh to relay a request.
type Mesh interface {
	// HostsOf returns the peers serving model, best first (admission
	// state, then round-trip time).
	HostsOf(model string) []identity.EndpointID
	// DialHTTP opens a tunnel to the peer's local HTTP endpoint.
	DialHTTP(ctx context.Context, peer identity.EndpointID) (net.Conn, error)
}

// Node is what the API reports about the node and its steward.
type Node interface {
	// StewardDID is the steward's did:key (GET /v1/mesh/steward).
	StewardDID() string
	// Witness answers POST /v1/mesh/witness: whether the steward's journal
	// holds the receipt (mesh/1 §2.2). body is the request body as sent.
	Witness(ctx context.Context, body []byte) (held bool, err error)
	// Replay answers POST /v1/mesh/replay: it re-runs a generation this
	// node served and judges it against the receipt (mesh/1 §6.4). Errors
	// are *Error where the status matters: energy that holds no receipt
	// (400), a receipt this node did not seal (404).
	Replay(ctx context.Context, r *Replay) (*ReplayResult, error)
	// Status is the JSON value of GET /api/status.
	Status(ctx context.Context) any
	// Invite is the node's invite token (GET /api/invite).
	Invite() string
}
