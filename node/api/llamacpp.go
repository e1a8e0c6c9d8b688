package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/meshnode/meshnode/node/receipt"
)

// llama.cpp's native completion endpoint, POST /completion, which
// llama-server's own clients and many scripts speak: a raw prompt (no
// chat template), llama-server's sampling defaults, its answer shape
// (content, stop, stop_type, timings) and its stream (data: events, the
// last one whole). It is read into the same Generation /v1/completions
// makes, so it is served, metered, sealed and replayed as one;
// llamacppstream.go writes the answer.

// llamaCompletionRequest is /completion's body: the fields honoured.
// llama-server's options meshnode does not implement are refused by name
// unless they ask for nothing (llamaRefusals, read by checkFieldsWith).
type llamaCompletionRequest struct {
	Model    string          `json:"model"`
	Prompt   json.RawMessage `json:"prompt"`
	NPredict *int            `json:"n_predict"`
	// llama-server's other names of n_predict, n_cmpl and n_probs.
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	N                   *int            `json:"n"`
	Logprobs            *int            `json:"logprobs"`
	Stream              bool            `json:"stream"`
	Temperature         *float64        `json:"temperature"`
	TopK                *int64          `json:"top_k"`
	TopP                *float64        `json:"top_p"`
	MinP                *float64        `json:"min_p"`
	Seed                *json.Number    `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	RepeatPenalty       *float64        `json:"repeat_penalty"`
	RepeatLastN         *int            `json:"repeat_last_n"`
	PresencePenalty     *float64        `json:"presence_penalty"`
	FrequencyPenalty    *float64        `json:"frequency_penalty"`
	llamaFilterFields
	LogitBias  json.RawMessage `json:"logit_bias"`
	Grammar    *string         `json:"grammar"`
	JSONSchema json.RawMessage `json:"json_schema"`
	// What code editors' plugins send (llama.vim, llama.vscode).
	Samplers       json.RawMessage `json:"samplers"`
	NIndent        *int            `json:"n_indent"`
	TMaxPredictMS  *int64          `json:"t_max_predict_ms"`
	TMaxPromptMS   *int64          `json:"t_max_prompt_ms"`
	IDSlot         *int            `json:"id_slot"`
	CachePrompt    *bool           `json:"cache_prompt"`
	ResponseFields []string        `json:"response_fields"`
	NCmpl          *int            `json:"n_cmpl"`
	NProbs         *int            `json:"n_probs"`
	// PostSamplingProbs gives n_probs's records under the distribution
	// each token was drawn from, as probabilities (prob, top_probs).
	PostSamplingProbs bool `json:"post_sampling_probs"`
	// ReturnTokens gives the answer's token ids (tokens), as the model
	// made them.
	ReturnTokens bool `json:"return_tokens"`
	// The stream's extras: events of the prompt's progress, and the
	// timings in every event; SSE comments through a silence.
	ReturnProgress  bool `json:"return_progress"`
	TimingsPerToken bool `json:"timings_per_token"`
	SSEPingInterval *int `json:"sse_ping_interval"`
	// meshnode's, as on every endpoint.
	Metadata        map[string]any  `json:"metadata"`
	JCPPresentation json.RawMessage `json:"jcp_presentation"`
	Speculative     *bool           `json:"speculative"`
	// llama-server's bounds on the speculative rounds.
	SpecNMax *int     `json:"speculative.n_max"`
	SpecNMin *int     `json:"speculative.n_min"`
	SpecPMin *float64 `json:"speculative.p_min"`
	// What SillyTavern's text completion sends beside (tavern.go).
	tavernFields
}

// llamaRefusals are llama-server's /completion options meshnode does not
// implement, with why, and the values that ask for nothing (its
// defaults, or off), which are accepted.
var llamaRefusals = withRefusals(tavernRefusals, map[string]refusal{
	"n_keep":           {"n_keep is not supported: a prompt that does not fit the context is refused, never shifted (0 is accepted)", isZero},
	"backend_sampling": {"backend_sampling is not supported: a node picks tokens on the host (false is accepted)", isFalse},
	"image_data":       {"image_data: meshnode's models read text", isEmpty},
	"lora":             {"lora adapters are not supported", isEmpty},
})

// withRefusals is the refusals of both tables.
func withRefusals(a, b map[string]refusal) map[string]refusal {
	m := maps.Clone(a)
	maps.Copy(m, b)
	return m
}

// isZero accepts a count or probability that turns its option off.
var isZero = oneOf("0", "0.0")

// llama-server's sampler defaults (its README): a sampled request that
// names none of these draws from the 40 likeliest tokens, top_p 0.95,
// min_p 0.05. The temperature's default stays meshnode's, 0 (greedy), as
// on every endpoint (llama-server's is 0.8): an answer a client did not
// ask to be random is the model's likeliest, and replays.
var (
	llamaTopK = int64(40)
	llamaTopP = 0.95
	llamaMinP = 0.05
)

func parseLlamaCompletion(body []byte) (*Generation, *llamaCompletionRequest, error) {
	var req llamaCompletionRequest
	if err := decodeBody(body, &req); err != nil {
		return nil, nil, err
	}
	if err := checkFieldsWith(body, &req, "POST /completion", llamaRefusals); err != nil {
		return nil, nil, err
	}
	g, err := req.generation(body)
	if err != nil {
		return nil, nil, err
	}
	text, ids, ok, err := onePrompt(bytes.TrimSpace(req.Prompt), "prompt")
	switch {
	case isAbsent(req.Prompt):
		return nil, nil, badRequest("prompt", "prompt is required")
	case !ok:
		return nil, nil, badRequest("prompt", "prompt must be a string or an array of token ids (several prompts, or text and ids mixed, are not supported: send each prompt on its own)")
	case err != nil:
		return nil, nil, err
	}
	g.Prompt, g.PromptIDs = text, ids
	return g, &req, nil
}

// generation reads what /completion and /infill share: every field but
// the prompt.
func (req *llamaCompletionRequest) generation(body []byte) (*Generation, error) {
	if err := req.aliases(); err != nil {
		return nil, err
	}
	// llama-server serves one model and needs no name: a request without
	// one is for the one this node serves (Server.soleModel).
	s := sampling{
		Model: req.Model, Stream: req.Stream, Temperature: req.Temperature, TopK: req.TopK, TopP: req.TopP, MinP: req.MinP,
		Stop: req.Stop, RepeatPenalty: req.RepeatPenalty, RepeatLastN: req.RepeatLastN, PresencePenalty: req.PresencePenalty, FrequencyPenalty: req.FrequencyPenalty,
		Metadata: req.Metadata, JCPPresentation: req.JCPPresentation, Speculative: req.Speculative, modelOptional: true,
		SpecNMax: req.SpecNMax, SpecNMin: req.SpecNMin, SpecPMin: req.SpecPMin, llamaFilterFields: req.llamaFilterFields,
		maxStops: receipt.MaxStops,
	}
	order, ordered, err := llamaSamplers(req.Samplers)
	if err != nil {
		return nil, err
	}
	if order, err = s.adaptiveOrder(order, ordered); err != nil {
		return nil, err
	}
	if ordered {
		if err := checkSamplerOrder(order, &s); err != nil {
			return nil, err
		}
	}
	// llama-server's truncation defaults, where they run.
	runs := func(c byte) bool { return !ordered || strings.IndexByte(order, c) >= 0 }
	if s.TopK == nil && runs('k') {
		s.TopK = &llamaTopK
	}
	if s.TopP == nil && runs('p') {
		s.TopP = &llamaTopP
	}
	if s.MinP == nil && runs('m') {
		s.MinP = &llamaMinP
	}
	if req.Seed != nil && req.Seed.String() != "-1" {
		s.Seed = req.Seed // -1: llama-server's random seed, meshnode's default
	}
	bias, err := llamaLogitBias(req.LogitBias)
	if err != nil {
		return nil, err
	}
	s.LogitBias = bias
	g := &Generation{Body: body}
	if err := s.apply(g); err != nil {
		return nil, err
	}
	// llama-server's default n_predict, -1, is until the model ends, as
	// Ollama's num_predict -1 (the context bounds it). 0 evaluates the
	// prompt and answers nothing: editors send it to have their context
	// cached before they ask.
	g.MaxTokens = math.MaxInt32
	if n := req.NPredict; n != nil && *n != -1 {
		if *n < 0 {
			return nil, badRequest("n_predict", "n_predict must be -1 (until the model ends), 0 (the prompt alone) or more, got %d", *n)
		}
		g.MaxTokens, g.PromptOnly = *n, *n == 0
	}
	if ordered {
		g.Samplers = order
	}
	if err := ssePing(req.SSEPingInterval, g); err != nil {
		return nil, err
	}
	if err := req.editorOptions(g); err != nil {
		return nil, err
	}
	if err := req.tavernFields.apply(g); err != nil {
		return nil, err
	}
	if !isAbsent(req.JSONSchema) && !bytes.Equal(compact(req.JSONSchema), []byte("{}")) {
		if err := applyFormat(FormatJSONSchema, &jsonSchemaSpec{Name: "json_schema", Schema: req.JSONSchema}, "json_schema", "json_schema", g); err != nil {
			return nil, err
		}
	}
	if g.Grammar != nil && req.Grammar != nil && *req.Grammar != "" {
		return nil, badRequest("grammar", "grammar and json_schema both hold the output to a grammar; send one")
	}
	if err := parseGBNF(req.Grammar, g); err != nil {
		return nil, err
	}
	return g, nil
}

// aliases folds the other names of req's fields into them: llama-server's
// (max_tokens and max_completion_tokens for n_predict, n for n_cmpl,
// logprobs for n_probs) and SillyTavern's. Names of one setting that
// disagree are refused, where llama-server would take one of them.
func (req *llamaCompletionRequest) aliases() error {
	var err error
	if req.NPredict, err = agreed(named[int]{"n_predict", req.NPredict}, named[int]{"max_tokens", req.MaxTokens}, named[int]{"max_completion_tokens", req.MaxCompletionTokens}); err != nil {
		return err
	}
	if req.NCmpl, err = agreed(named[int]{"n_cmpl", req.NCmpl}, named[int]{"n", req.N}); err != nil {
		return err
	}
	if req.NProbs, err = agreed(named[int]{"n_probs", req.NProbs}, named[int]{"logprobs", req.Logprobs}); err != nil {
		return err
	}
	return req.tavernFields.resolve(req)
}

// maxResponseFields bounds response_fields.
const maxResponseFields = 64

// editorOptions reads what code editors' plugins add to a request:
// n_indent, the time limits, id_slot and response_fields.
func (req *llamaCompletionRequest) editorOptions(g *Generation) error {
	if n := req.NIndent; n != nil {
		if *n < 0 || *n > receipt.MaxIndent {
			return badRequest("n_indent", "n_indent must be from 0 (off) to %d, got %d", receipt.MaxIndent, *n)
		}
		g.MinIndent = *n
	}
	for _, l := range []struct {
		param string
		ms    *int64
		dst   *time.Duration
	}{{"t_max_prompt_ms", req.TMaxPromptMS, &g.PromptTimeLimit}, {"t_max_predict_ms", req.TMaxPredictMS, &g.PredictTimeLimit}} {
		switch {
		case l.ms == nil || *l.ms <= 0:
			// llama-server's -1 and 0: no limit.
		case *l.ms > maxTimeLimitMS:
			return badRequest(l.param, "%s must be at most %d (an hour), got %d", l.param, maxTimeLimitMS, *l.ms)
		default:
			*l.dst = time.Duration(*l.ms) * time.Millisecond
		}
	}
	// The node reuses whatever prompt prefix it holds cached, on any
	// slot: the answer never depends on which.
	g.NoPromptCache = req.CachePrompt != nil && !*req.CachePrompt
	if id := req.IDSlot; id != nil && *id < -1 {
		return badRequest("id_slot", "id_slot must be -1 (any) or a slot's index, got %d", *id)
	}
	// n_cmpl is n: several completions of one prompt, each a serve of
	// its own (a seeded request's j-th with the seed plus j), answered
	// as an array, as llama-server answers them.
	if n := req.NCmpl; n != nil {
		switch {
		case *n < 1 || *n > maxChoices:
			return badRequest("n_cmpl", "n_cmpl must be from 1 to %d, got %d", maxChoices, *n)
		}
		g.N = *n
		if err := checkChoices(g); err != nil {
			return err
		}
	}
	if len(req.ResponseFields) > maxResponseFields {
		return badRequest("response_fields", "response_fields names %d fields, at most %d", len(req.ResponseFields), maxResponseFields)
	}
	// n_probs: each token's log-probability and its n likeliest
	// alternatives (completion_probabilities).
	if n := req.NProbs; n != nil && *n != 0 {
		if *n < 0 || *n > maxTopLogprobs {
			return badRequest("n_probs", "n_probs must be from 0 to %d, got %d", maxTopLogprobs, *n)
		}
		g.Logprobs, g.TopLogprobs = true, *n
		g.PostSampling = req.PostSamplingProbs
	}
	g.ReturnTokens = req.ReturnTokens
	return nil
}

// maxTimeLimitMS bounds t_max_prompt_ms and t_max_predict_ms.
const maxTimeLimitMS = 3_600_000

// llamaLogitBias turns llama-server's logit_bias into OpenAI's object
// form, which parseLogitBias reads: an object (the same), or an array of
// [token id, bias] pairs where a bias of false bans the token. Pairs
// naming a token by its text are refused: they would be tokenized here,
// for one vocabulary, before the model is known.
func llamaLogitBias(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return raw, nil
	}
	var pairs [][]json.RawMessage
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, badRequest("logit_bias", "logit_bias must be an object of token ids to biases, or an array of [token id, bias] pairs")
	}
	if len(pairs) > maxLogitBias {
		return nil, badRequest("logit_bias", "logit_bias names %d tokens, at most %d", len(pairs), maxLogitBias)
	}
	obj := map[string]json.RawMessage{}
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, badRequest("logit_bias", "logit_bias[%d] must be a [token id, bias] pair", i)
		}
		var id uint32
		if err := json.Unmarshal(p[0], &id); err != nil {
			return nil, badRequest("logit_bias", "logit_bias[%d]: the token must be an id (a token named by its text is not supported; /tokenize gives its ids)", i)
		}
		bias := p[1]
		if bytes.Equal(bytes.TrimSpace(bias), []byte("false")) {
			bias = json.RawMessage(fmt.Sprint(-maxLogitBiasValue)) // never
		}
		obj[fmt.Sprint(id)] = bias
	}
	return mustJSON(obj), nil
}

// llamaCompletion is /completion's answer, and its stream's last event.
type llamaCompletion struct {
	Index              int           `json:"index"`
	Content            string        `json:"content"`
	Tokens             []uint32      `json:"tokens"` // return_tokens's, unstreamed; else empty
	IDSlot             int           `json:"id_slot"`
	Stop               bool          `json:"stop"`
	Model              string        `json:"model"`
	TokensPredicted    int           `json:"tokens_predicted"`
	TokensEvaluated    int           `json:"tokens_evaluated"`
	TokensCached       int           `json:"tokens_cached"` // the context the node holds after the answer: prompt and output
	GenerationSettings llamaSettings `json:"generation_settings"`
	Prompt             string        `json:"prompt"`
	HasNewLine         bool          `json:"has_new_line"`
	Truncated          bool          `json:"truncated"`
	StopType           string        `json:"stop_type"`
	StoppingWord       string        `json:"stopping_word"`
	Timings            *llamaTimings `json:"timings,omitempty"`
	// Probs are n_probs's: each token's, unstreamed (streamed, each
	// event carries its own tokens').
	Probs     []llamaTokenProb `json:"completion_probabilities,omitempty"`
	Energy    any              `json:"energy,omitempty"` // meshnode's: the receipt
	Placement any              `json:"placement,omitempty"`
}

// llamaPartial is a stream event before the last.
type llamaPartial struct {
	Index   int              `json:"index"`
	Content string           `json:"content"`
	Tokens  []uint32         `json:"tokens"`
	Stop    bool             `json:"stop"`
	IDSlot  int              `json:"id_slot"`
	Probs   []llamaTokenProb `json:"completion_probabilities,omitempty"`
	// Where asked: the timings so far, and the prompt's progress.
	Timings        *llamaTimings      `json:"timings,omitempty"`
	PromptProgress *promptProgressOut `json:"prompt_progress,omitempty"`
}

// llamaTokenProb is a token's log-probability with its likeliest
// alternatives, in llama-server's completion_probabilities shape; with
// post_sampling_probs (post), its probability under the distribution it
// was drawn from and that distribution's likeliest, as llama-server
// names them (prob, top_probs).
type llamaTokenProb struct {
	ID      uint32
	Token   string
	Bytes   []int
	Logprob float64
	Top     []llamaTokenProb
	post    bool
}

func (p llamaTokenProb) MarshalJSON() ([]byte, error) {
	type logprob struct {
		ID      uint32           `json:"id"`
		Token   string           `json:"token"`
		Bytes   []int            `json:"bytes"`
		Logprob float64          `json:"logprob"`
		Top     []llamaTokenProb `json:"top_logprobs,omitempty"`
	}
	type prob struct {
		ID    uint32           `json:"id"`
		Token string           `json:"token"`
		Bytes []int            `json:"bytes"`
		Prob  float64          `json:"prob"`
		Top   []llamaTokenProb `json:"top_probs,omitempty"`
	}
	if p.post {
		return json.Marshal(prob{p.ID, p.Token, p.Bytes, math.Exp(p.Logprob), p.Top})
	}
	return json.Marshal(logprob{p.ID, p.Token, p.Bytes, reportable(p.Logprob), p.Top})
}

// llamaProbs is lps in llama-server's shape (post: post_sampling_probs's).
func llamaProbs(lps []TokenLogprob, post bool) []llamaTokenProb {
	probs := make([]llamaTokenProb, 0, len(lps))
	for _, lp := range lps {
		p := llamaTokenProb{ID: lp.ID, Token: string(lp.Bytes), Bytes: byteList(lp.Bytes), Logprob: lp.Logprob, Top: []llamaTokenProb{}, post: post}
		for _, a := range lp.Top {
			p.Top = append(p.Top, llamaTokenProb{ID: a.ID, Token: string(a.Bytes), Bytes: byteList(a.Bytes), Logprob: a.Logprob, post: post})
		}
		probs = append(probs, p)
	}
	return probs
}

// llamaSettings is the sampling the answer was made with, as
// llama-server reports it.
type llamaSettings struct {
	NCtx          int     `json:"n_ctx,omitempty"` // the model's context (llama.vscode shows it)
	NPredict      int     `json:"n_predict"`
	NProbs        int     `json:"n_probs"`
	Seed          *uint64 `json:"seed,omitempty"`
	Temperature   float64 `json:"temperature"`
	TopK          int64   `json:"top_k"`
	TopP          float64 `json:"top_p"`
	MinP          float64 `json:"min_p"`
	RepeatPenalty float64 `json:"repeat_penalty"`
	// RepeatLastN is the request's repeat_last_n, where it bounds a
	// penalty (without, the penalties count the answer alone).
	RepeatLastN      *int    `json:"repeat_last_n,omitempty"`
	PresencePenalty  float64 `json:"presence_penalty"`
	FrequencyPenalty float64 `json:"frequency_penalty"`
	// llama.cpp's other filters, at llama-server's off values where off.
	TypicalP         float64  `json:"typical_p"`
	TopNSigma        float64  `json:"top_n_sigma"`
	XTCProbability   float64  `json:"xtc_probability"`
	XTCThreshold     float64  `json:"xtc_threshold"`
	DynaTempRange    float64  `json:"dynatemp_range"`
	DynaTempExponent float64  `json:"dynatemp_exponent"`
	MinKeep          int      `json:"min_keep"`
	DRYMultiplier    float64  `json:"dry_multiplier"`
	DRYBase          float64  `json:"dry_base"`
	DRYAllowedLength int      `json:"dry_allowed_length"`
	DRYLastN         int      `json:"dry_penalty_last_n"`
	DRYBreakers      []string `json:"dry_sequence_breakers"`
	Mirostat         int      `json:"mirostat"`
	MirostatTau      float64  `json:"mirostat_tau"`
	MirostatEta      float64  `json:"mirostat_eta"`
	AdaptiveTarget   float64  `json:"adaptive_target"`
	AdaptiveDecay    float64  `json:"adaptive_decay"`
	Stop             []string `json:"stop"`
	Stream           bool     `json:"stream"`
	Grammar          string   `json:"grammar"`
	// The request's bounds on the speculative rounds, where it gave
	// them (llama-server reports its defaults; a node's window has its
	// own, engine.md).
	SpecNMax *int     `json:"speculative.n_max,omitempty"`
	SpecNMin *int     `json:"speculative.n_min,omitempty"`
	SpecPMin *float64 `json:"speculative.p_min,omitempty"`
}

type llamaTimings struct {
	PromptN             int     `json:"prompt_n"`
	PromptMS            float64 `json:"prompt_ms"`
	PromptPerTokenMS    float64 `json:"prompt_per_token_ms"`
	PromptPerSecond     float64 `json:"prompt_per_second"`
	PredictedN          int     `json:"predicted_n"`
	PredictedMS         float64 `json:"predicted_ms"`
	PredictedPerTokenMS float64 `json:"predicted_per_token_ms"`
	PredictedPerSecond  float64 `json:"predicted_per_second"`
}

// settings reports g's sampling as llama-server does.
func llamaSettingsOf(g *Generation, req *llamaCompletionRequest) llamaSettings {
	st := llamaSettings{NPredict: -1, Stream: req.Stream, Stop: g.Stop}
	if g.MaxTokens != math.MaxInt32 {
		st.NPredict = g.MaxTokens
	}
	if st.Stop == nil {
		st.Stop = []string{}
	}
	st.TopP = 1
	if g.Temperature != nil {
		st.Temperature = *g.Temperature
	}
	if g.TopP != nil {
		st.TopP = *g.TopP
	}
	st.TopK, st.MinP, st.RepeatPenalty = int64(g.TopK), g.MinP, g.RepeatPenalty
	st.PresencePenalty, st.FrequencyPenalty = g.PresencePenalty, g.FrequencyPenalty
	st.TypicalP, st.TopNSigma, st.XTCThreshold, st.DynaTempExponent = 1, -1, llamaXTCThreshold, llamaDynaTempExponent
	if g.TypicalP > 0 {
		st.TypicalP = g.TypicalP
	}
	if g.TopNSigma > 0 {
		st.TopNSigma = g.TopNSigma
	}
	if g.XTCProbability > 0 {
		st.XTCProbability, st.XTCThreshold = g.XTCProbability, g.XTCThreshold
	}
	if g.DynaTempRange > 0 {
		st.DynaTempRange, st.DynaTempExponent = g.DynaTempRange, g.DynaTempExponent
	}
	st.MinKeep = g.MinKeep
	st.DRYBase, st.DRYAllowedLength, st.DRYLastN, st.DRYBreakers = llamaDRYBase, llamaDRYAllowedLength, llamaDRYLastN, receipt.DefaultDRYBreakers
	if g.DRYMultiplier > 0 {
		st.DRYMultiplier, st.DRYBase, st.DRYAllowedLength, st.DRYLastN = g.DRYMultiplier, g.DRYBase, g.DRYAllowedLength, g.DRYLastN
		if g.DRYBreakers != nil {
			st.DRYBreakers = g.DRYBreakers
		}
	}
	st.Mirostat, st.MirostatTau, st.MirostatEta = g.Mirostat, llamaMirostatTau, llamaMirostatEta
	if g.Mirostat > 0 {
		st.MirostatTau, st.MirostatEta = g.MirostatTau, g.MirostatEta
	}
	st.AdaptiveTarget, st.AdaptiveDecay = llamaAdaptiveTarget, llamaAdaptiveDecay
	if g.AdaptiveTarget != nil {
		st.AdaptiveTarget, st.AdaptiveDecay = *g.AdaptiveTarget, g.AdaptiveDecay
	}
	switch {
	case g.PenaltiesOff:
		st.RepeatLastN = new(int)
	case g.PenaltyLastN != 0:
		st.RepeatLastN = &g.PenaltyLastN
	}
	st.Seed = g.Seed
	if g.Logprobs {
		st.NProbs = g.TopLogprobs
	}
	if req.Grammar != nil {
		st.Grammar = *req.Grammar
	}
	st.SpecNMax, st.SpecNMin, st.SpecPMin = req.SpecNMax, req.SpecNMin, req.SpecPMin
	return st
}

// per is ms per one of n, and n per second over ms milliseconds; zero
// where either is.
func per(n int, ms float64) (perToken, perSecond float64) {
	if n == 0 || ms == 0 {
		return 0, 0
	}
	return ms / float64(n), float64(n) / ms * 1000
}

// llamaStopType is llama-server's stop_type for a finish reason.
func llamaStopType(res *Result) string {
	switch {
	case res.FinishReason == "stop" && res.StopSequence != "":
		return "word"
	case res.FinishReason == "stop":
		return "eos"
	case res.FinishReason == "length":
		return "limit"
	}
	return res.FinishReason // meshnode's own: joule_ceiling
}

func (s *Server) handleLlamaCompletion(w http.ResponseWriter, r *http.Request) {
	var req *llamaCompletionRequest
	m, g, ok := s.accept(w, r, func(body []byte) (g *Generation, err error) {
		g, req, err = parseLlamaCompletion(body)
		return g, err
	})
	if ok {
		s.answerLlama(w, r, m, g, req)
	}
}

// answerLlama answers g, read from req, in /completion's shape.
func (s *Server) answerLlama(w http.ResponseWriter, r *http.Request, m Model, g *Generation, req *llamaCompletionRequest) {
	settings := llamaSettingsOf(g, req)
	if c, ok := m.(ContextModel); ok {
		settings.NCtx = c.ContextLength()
	}
	stream := func(index int) *llamaStream {
		return &llamaStream{model: g.Model, settings: settings, prompt: g.Prompt, fields: req.ResponseFields, index: index, postSampling: g.PostSampling,
			extras: extras{progress: req.ReturnProgress && req.Stream, timings: req.TimingsPerToken && req.Stream, now: s.now, received: g.Received}}
	}
	if gs := g.Choices(); len(gs) > 1 {
		// n_cmpl: an array of answers, each with its index (a whole
		// answer's builder takes its text and cannot fail), or streamed,
		// each event carrying its answer's index. Greedy, the
		// completions are one: it is served once, and answered n_cmpl
		// times (each replays as the same serve).
		greedy := g.Temperature == nil || *g.Temperature == 0
		if req.Stream {
			sse := s.newSSEWriter(w)
			defer sse.pingEvery(g.SSEPing)()
			sts := make(llamaCopies, len(gs))
			for i := range gs {
				sts[i] = stream(i)
				sts[i].sse = sse
			}
			if greedy {
				s.generate(w, r, m, gs[0], sts, sse)
				return
			}
			cs := make([]choiceStream, len(sts))
			for i, st := range sts {
				cs[i] = st
			}
			s.generateChoices(w, r, m, gs, cs, sse)
			return
		}
		var outs []Delta
		var ress []*Result
		if greedy {
			out, res, ok := s.generate(w, r, m, gs[0], nil, nil)
			if !ok {
				return
			}
			for range gs {
				outs, ress = append(outs, out), append(ress, res)
			}
		} else {
			var ok bool
			if outs, ress, ok = s.generateChoices(w, r, m, gs, nil, nil); !ok {
				return
			}
		}
		answers := make([]any, len(gs))
		for i := range gs {
			st := stream(i)
			_ = st.delta(outs[i])
			_ = st.end(ress[i])
			answers[i] = st.answer()
		}
		writeJSON(w, http.StatusOK, answers)
		return
	}
	st := stream(0)
	if !req.Stream {
		s.answerWhole(w, r, m, g, st, st.answer)
		return
	}
	st.sse = s.newSSEWriter(w)
	defer st.sse.pingEvery(g.SSEPing)()
	s.generate(w, r, m, g, st, st.sse)
}

// roundMS rounds milliseconds to the microsecond.
func roundMS(ms float64) float64 { return math.Round(ms*1000) / 1000 }
