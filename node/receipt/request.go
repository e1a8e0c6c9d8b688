package receipt

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
)

// ServeRequest is the content-addressed mesh/1 request (§3.1): a fidelity
// floor and a joule ceiling are the contract, the prompt is present only as
// its content address, and the payload travels beside the request, never in
// it (§5). Its identity is [ServeRequest.ID].
//
// The struct tags are the canonical form: text keys, det-CBOR sorted.
// Absent options (Decision, Sampling) are dropped from it, so a plain
// generation's id is the one any mesh/1 implementation computes.
type ServeRequest struct {
	// PromptHash is BLAKE3-256 of the prompt's bytes (see [PromptHash]).
	PromptHash ContentID `cbor:"prompt_hash" json:"prompt_hash"`
	// PromptTokens is the declared input token count; the router's
	// estimate uses it (§4). It is a declaration, not the payload's
	// length, and the steward does not hold the payload to it.
	PromptTokens uint32 `cbor:"prompt_tokens" json:"prompt_tokens"`
	// MaxTokens is the output ceiling. The steward refuses to seal a serve
	// whose engine emits more.
	MaxTokens uint32 `cbor:"max_tokens" json:"max_tokens"`
	// FidelityFloor is the least fidelity the caller accepts.
	FidelityFloor Fidelity `cbor:"fidelity_floor" json:"fidelity_floor"`
	// JouleCeilingUJ is the energy budget in microjoules.
	JouleCeilingUJ uint64 `cbor:"joule_ceiling_uj" json:"joule_ceiling_uj"`
	// Decision, when set, makes the request a typed decision (§3.6)
	// rather than a generation.
	Decision *Decision `cbor:"decision,omitempty" json:"decision,omitempty"`
	// Sampling is a meshnode extension to §3.1, absent for greedy
	// decoding. Everything that changes which tokens an engine emits must
	// be inside the request identity, or a replay (§6.4) re-runs a
	// different request than the one served; so sampling options are part
	// of the canonical form when set and absent (leaving the id
	// spec-identical) when not.
	Sampling *Sampling `cbor:"sampling,omitempty" json:"sampling,omitempty"`
}

// Decision is the typed-decision part of a request (§3.6).
type Decision struct {
	// Questions is how many typed questions the request asks (≥ 1).
	Questions uint32 `cbor:"questions" json:"questions"`
	// OptionsScored is how many options are scored across all questions
	// (each question scores at least one).
	OptionsScored uint32 `cbor:"options_scored" json:"options_scored"`
	// SchemaTokens is how many of PromptTokens are schema, not state.
	SchemaTokens uint32 `cbor:"schema_tokens" json:"schema_tokens"`
}

// Sampling holds the decoding options that change an engine's output
// beyond greedy decoding (a meshnode extension, see ServeRequest). The
// zero value of every field means "off", so the zero Sampling is greedy
// and is dropped from the canonical form.
//
// Real-valued options are fixed-point integers in millionths (the _e6
// suffix): the canonical form admits no floats, and an engine reading back
// exactly value/1e6 makes a replay exact. The API rounds to the nearest
// millionth when it builds the request.
type Sampling struct {
	// TemperatureE6 is the softmax temperature ×1e6; 0 is greedy.
	TemperatureE6 uint32 `cbor:"temperature_e6,omitempty" json:"temperature_e6,omitempty"`
	// TopPE6 is nucleus sampling's mass ×1e6, at most 1e6; 0 is off.
	TopPE6 uint32 `cbor:"top_p_e6,omitempty" json:"top_p_e6,omitempty"`
	// TopK keeps the k likeliest tokens; 0 is off.
	TopK uint32 `cbor:"top_k,omitempty" json:"top_k,omitempty"`
	// MinPE6 is min-p ×1e6, at most 1e6; 0 is off.
	MinPE6 uint32 `cbor:"min_p_e6,omitempty" json:"min_p_e6,omitempty"`
	// PresencePenaltyE6 and FrequencyPenaltyE6 are the OpenAI penalties
	// ×1e6; 0 is off.
	PresencePenaltyE6  int32 `cbor:"presence_penalty_e6,omitempty" json:"presence_penalty_e6,omitempty"`
	FrequencyPenaltyE6 int32 `cbor:"frequency_penalty_e6,omitempty" json:"frequency_penalty_e6,omitempty"`
	// RepeatPenaltyE6 is llama.cpp's repeat_penalty ×1e6: the logit of
	// each token already seen is divided by it (multiplied, if negative).
	// 0 is off; 1e6, which changes nothing, is refused as non-canonical.
	RepeatPenaltyE6 uint32 `cbor:"repeat_penalty_e6,omitempty" json:"repeat_penalty_e6,omitempty"`
	// Seed fixes the sampler's randomness. A sampled request without one
	// asks the engine for randomness the request does not fix, and its
	// serve cannot be replayed (§6.4); the API should draw a seed and put
	// it here so that every serve can be.
	Seed *uint64 `cbor:"seed,omitempty" json:"seed,omitempty"`
	// Stop ends the output at the first of these strings (at most
	// [MaxStops], each 1 … [MaxStopBytes] bytes of UTF-8).
	Stop []string `cbor:"stop,omitempty" json:"stop,omitempty"`
	// Draft names the proposer a sampled request may speculate with:
	// "lookup" (prompt lookup), or a draft model by its weights digest;
	// after an "@", the prices its windows are priced at
	// (gguf/spec.PricedDraft).
	// Speculation draws a sampled request's tokens differently (from
	// the same distribution), so what it speculated with is part of the
	// request's identity: a replay without that draft replays another
	// request. Empty: no speculation. Greedy requests do not carry it
	// (speculating does not change their tokens).
	Draft string `cbor:"draft,omitempty" json:"draft,omitempty"`
	// LogitBias adds a constant to the logits of the tokens it names
	// before the penalties (OpenAI's logit_bias), greedy requests
	// included: by token id, ascending, at most [MaxLogitBias] of them,
	// each bias in millionths, non-zero and at most ±[MaxLogitBiasE6].
	LogitBias []LogitBias `cbor:"logit_bias,omitempty" json:"logit_bias,omitempty"`
	// Grammar is the content id of the grammar the output is held to
	// (structured outputs: BLAKE3-256 of the grammar's canonical text,
	// gguf/grammar's Grammar.String), nil for none. The grammar decides
	// which tokens may be picked, so it is part of the request's identity:
	// a replay re-runs under the grammar it derives from the request's
	// response_format and gets this request id only if it is the same
	// grammar. A constrained request speculates as any other (its
	// windows' rows verified under the grammar), so a sampled one names
	// its Draft too.
	Grammar *ContentID `cbor:"grammar,omitempty" json:"grammar,omitempty"`
	// Samplers is the order the filters run in, in llama.cpp's sampler
	// letters (e penalties, d DRY, s top-n-sigma, k top-k, y typical-p, p top-p,
	// m min-p, x XTC, t temperature, i infill: gguf/sample's
	// Params.Order); empty, the default chain. The
	// API writes it only where the order changes the tokens: a sampled
	// request's order other than the default, or one with the infill
	// filter (which changes a greedy pick too, so such a request keeps
	// its truncations when greedy).
	Samplers string `cbor:"samplers,omitempty" json:"samplers,omitempty"`
	// MinIndent ends the output at a line, after the first, that begins
	// with fewer than MinIndent spaces or tabs before its text (llama.cpp's
	// n_indent, which code editors send so a completion stays in its
	// block): the token that shows that text and those after it are not
	// served. 0 is off; at most [MaxIndent].
	MinIndent uint32 `cbor:"n_indent,omitempty" json:"n_indent,omitempty"`
	// PenaltyLastN is which tokens the penalties (repeat, presence and
	// frequency) count: 0, every token of the answer (meshnode's
	// default); n, the last n tokens of prompt and answer together, as
	// llama.cpp's penalty_last_n counts them (llama-server's and
	// Ollama's repeat_last_n); [PenaltyAll], every token of both
	// (repeat_last_n -1). Only beside a penalty.
	PenaltyLastN uint32 `cbor:"penalty_last_n,omitempty" json:"penalty_last_n,omitempty"`
	// llama.cpp's other filters, each only on a sampled request (a
	// greedy pick is the likeliest token whatever they say) and only
	// when on (gguf/sample's Params):
	//   - TypicalPE6, locally typical sampling's mass ×1e6, below 1e6;
	//   - TopNSigmaE6, top-n-sigma's n ×1e6, at most [MaxTopNSigmaE6];
	//   - XTCProbabilityE6 and XTCThresholdE6, how often XTC runs and
	//     how likely a token it drops is, ×1e6: the probability above 0,
	//     the threshold at most 5e5 (above, XTC drops nothing);
	//   - DynaTempRangeE6 and DynaTempExponentE6, the dynamic
	//     temperature's range and exponent ×1e6, the exponent (above 0,
	//     at most [MaxDynaTempExponentE6]) only beside a range;
	//   - MinKeep, the fewest tokens top-p, min-p, typical-p and XTC
	//     leave: above 1 (1 changes nothing), at most [MaxMinKeep], and
	//     only beside one of them.
	TypicalPE6         uint32 `cbor:"typical_p_e6,omitempty" json:"typical_p_e6,omitempty"`
	TopNSigmaE6        uint32 `cbor:"top_n_sigma_e6,omitempty" json:"top_n_sigma_e6,omitempty"`
	XTCProbabilityE6   uint32 `cbor:"xtc_probability_e6,omitempty" json:"xtc_probability_e6,omitempty"`
	XTCThresholdE6     uint32 `cbor:"xtc_threshold_e6,omitempty" json:"xtc_threshold_e6,omitempty"`
	DynaTempRangeE6    uint32 `cbor:"dynatemp_range_e6,omitempty" json:"dynatemp_range_e6,omitempty"`
	DynaTempExponentE6 uint32 `cbor:"dynatemp_exponent_e6,omitempty" json:"dynatemp_exponent_e6,omitempty"`
	MinKeep            uint32 `cbor:"min_keep,omitempty" json:"min_keep,omitempty"`
	// DRY, llama.cpp's "don't repeat yourself" penalty (gguf/sample's
	// DRY), on where DRYMultiplierE6 is above 0, greedy requests
	// included (it changes logits, as the penalties do); its other
	// fields only beside it: DRYBaseE6 (at least 1e6), DRYAllowedLength,
	// DRYLastN (how many of the latest tokens of prompt and answer it
	// scans, at least 1; [PenaltyAll] every one) and DRYBreakers (the
	// sequence breakers, 1 … [MaxDRYBreakers] strings of 1 …
	// [MaxDRYBreakerBytes] bytes; omitted for llama.cpp's default four,
	// "\n", ":", "\"", "*").
	DRYMultiplierE6  uint32   `cbor:"dry_multiplier_e6,omitempty" json:"dry_multiplier_e6,omitempty"`
	DRYBaseE6        uint32   `cbor:"dry_base_e6,omitempty" json:"dry_base_e6,omitempty"`
	DRYAllowedLength uint32   `cbor:"dry_allowed_length,omitempty" json:"dry_allowed_length,omitempty"`
	DRYLastN         uint32   `cbor:"dry_penalty_last_n,omitempty" json:"dry_penalty_last_n,omitempty"`
	DRYBreakers      []string `cbor:"dry_sequence_breakers,omitempty" json:"dry_sequence_breakers,omitempty"`
	// Mirostat, llama.cpp's mirostat sampling (gguf/sample's Mirostat):
	// its version, 1 or 2, and beside it its target surprise
	// (MirostatTauE6, bits ×1e6, 1 … [MaxMirostatTauE6]) and learning
	// rate (MirostatEtaE6, ×1e6, 1 … 1e6). It picks in place of the
	// filters and penalties, so a request with it carries only the
	// temperature (above 0), the logit biases, the seed, the stops,
	// n_indent and the grammar beside it, and no draft: its picks move
	// its state, which speculation's rows would move out of turn.
	Mirostat      uint32 `cbor:"mirostat,omitempty" json:"mirostat,omitempty"`
	MirostatTauE6 uint32 `cbor:"mirostat_tau_e6,omitempty" json:"mirostat_tau_e6,omitempty"`
	MirostatEtaE6 uint32 `cbor:"mirostat_eta_e6,omitempty" json:"mirostat_eta_e6,omitempty"`
	// AdaptiveTargetE6, where set, makes the chain's last draw
	// llama.cpp's adaptive-p (gguf/sample's AdaptiveP): its target
	// probability (×1e6, 0 … 1e6; 0 is a target too, hence a pointer)
	// and beside it AdaptiveDecayE6, its moving average's decay per
	// token (×1e6, 0 … [MaxAdaptiveDecayE6]). Only on a sampled request,
	// and with no draft: its picks move its average, which
	// speculation's rows would move out of turn.
	AdaptiveTargetE6 *uint32 `cbor:"adaptive_target_e6,omitempty" json:"adaptive_target_e6,omitempty"`
	AdaptiveDecayE6  uint32  `cbor:"adaptive_decay_e6,omitempty" json:"adaptive_decay_e6,omitempty"`
	// MinTokens holds the model's end-of-generation tokens back until
	// the output holds that many tokens (vLLM's min_tokens), greedy
	// requests' too; at most the request's max_tokens.
	MinTokens uint32 `cbor:"min_tokens,omitempty" json:"min_tokens,omitempty"`
}

// MaxAdaptiveDecayE6 bounds Sampling.AdaptiveDecayE6, as llama.cpp
// clamps the decay: 0.99.
const MaxAdaptiveDecayE6 = 990_000

// MaxMirostatTauE6 bounds Sampling.MirostatTauE6: 100 bits, past any
// token's surprise.
const MaxMirostatTauE6 = 100 * e6

// Bounds on DRY's fields (Sampling).
const (
	MaxDRYMultiplierE6  = 100 * e6
	MaxDRYBaseE6        = 100 * e6
	MaxDRYAllowedLength = 1 << 20
	MaxDRYBreakers      = 32
	MaxDRYBreakerBytes  = 40
)

// DefaultDRYBreakers are llama.cpp's sequence breakers, which a
// Sampling without DRYBreakers means.
var DefaultDRYBreakers = []string{"\n", ":", "\"", "*"}

// Bounds on llama.cpp's other filters (Sampling).
const (
	MaxTopNSigmaE6        = 1000 * e6
	MaxDynaTempRangeE6    = 2 * e6 // the temperature's own bound
	MaxDynaTempExponentE6 = 100 * e6
	MaxMinKeep            = 1 << 20
)

// xtcOff is the XTC threshold above which no token can go: two tokens
// can both be that likely only at exactly one half.
const xtcOff = e6 / 2

// PenaltyAll is Sampling.PenaltyLastN's every token of prompt and answer.
const PenaltyAll = math.MaxUint32

// MaxSamplers bounds Sampling.Samplers: each filter at most once.
const MaxSamplers = 10

// MaxIndent bounds Sampling.MinIndent.
const MaxIndent = 1024

// LogitBias is one token's bias: a [token, bias_e6] pair.
type LogitBias struct {
	_      struct{} `cbor:",toarray"`
	Token  uint32   `json:"token"`
	BiasE6 int32    `json:"bias_e6"`
}

// MaxDraftBytes bounds Sampling.Draft.
const MaxDraftBytes = 128

// Bounds on Sampling.LogitBias: OpenAI's 300 tokens, each biased by at
// most ±100.
const (
	MaxLogitBias   = 300
	MaxLogitBiasE6 = 100 * e6
)

// Bounds on Sampling.Stop, which an outside party writes.
const (
	MaxStops     = 16
	MaxStopBytes = 256
	maxArray     = MaxLogitBias // decoder's array bound: the longest list is a request's biases
	e6           = 1_000_000
	// maxRequestSize bounds an encoded request: fixed fields, a decision
	// and a sampling block with the largest stop list (4.2 KB) and the
	// most logit biases (300 × at most 12 bytes) fit within it.
	maxRequestSize = 12 << 10
)

// PromptHash is the prompt_hash of a prompt: BLAKE3-256 of its bytes.
func PromptHash(prompt []byte) ContentID { return Sum(prompt) }

// TokenPromptHash is the prompt_hash of a prompt a client gave as token
// ids: BLAKE3-256 of its bytes, which for ids are their canonical
// det-CBOR array (the payload the engine is handed, so no text stands
// in for it).
func TokenPromptHash(ids []uint32) ContentID {
	b, err := encMode.Marshal(ids)
	if err != nil {
		panic(err) // an array of integers always encodes
	}
	return Sum(b)
}

// IsZero reports whether s asks for nothing beyond greedy decoding.
func (s *Sampling) IsZero() bool {
	return s == nil || s.TemperatureE6 == 0 && s.TopPE6 == 0 && s.TopK == 0 && s.MinPE6 == 0 &&
		s.PresencePenaltyE6 == 0 && s.FrequencyPenaltyE6 == 0 && s.RepeatPenaltyE6 == 0 && s.Seed == nil && len(s.Stop) == 0 && len(s.LogitBias) == 0 && s.Draft == "" && s.Grammar == nil &&
		s.Samplers == "" && s.MinIndent == 0 && s.PenaltyLastN == 0 && !s.Extended() && !s.DRY() &&
		s.Mirostat == 0 && s.MirostatTauE6 == 0 && s.MirostatEtaE6 == 0 && s.AdaptiveTargetE6 == nil && s.AdaptiveDecayE6 == 0 && s.MinTokens == 0
}

// DRY reports whether s sets any of DRY's fields (on, the multiplier).
func (s *Sampling) DRY() bool {
	return s != nil && (s.DRYMultiplierE6 != 0 || s.DRYBaseE6 != 0 || s.DRYAllowedLength != 0 || s.DRYLastN != 0 || s.DRYBreakers != nil)
}

// Extended reports whether s sets one of llama.cpp's other filters
// (typical-p, top-n-sigma, XTC, the dynamic temperature, min_keep).
func (s *Sampling) Extended() bool {
	return s != nil && (s.TypicalPE6 != 0 || s.TopNSigmaE6 != 0 || s.XTCProbabilityE6 != 0 || s.XTCThresholdE6 != 0 ||
		s.DynaTempRangeE6 != 0 || s.DynaTempExponentE6 != 0 || s.MinKeep != 0)
}

// Penalised reports whether s sets a penalty (presence, frequency or
// repeat), which PenaltyLastN bounds.
func (s *Sampling) Penalised() bool {
	return s != nil && (s.PresencePenaltyE6 != 0 || s.FrequencyPenaltyE6 != 0 || s.RepeatPenaltyE6 != 0)
}

// Unseeded reports whether s samples with randomness the request does not
// fix: a temperature above zero and no seed. An engine serving such a
// request samples, whatever it declares (§5), so its serve is not
// replayable.
func (s *Sampling) Unseeded() bool { return s != nil && s.TemperatureE6 > 0 && s.Seed == nil }

// IsDecision reports whether r asks for a typed decision (§3.6).
func (r *ServeRequest) IsDecision() bool { return r.Decision != nil }

// Validate checks the rules a request must meet to be served or
// content-addressed.
func (r *ServeRequest) Validate() error {
	if !r.FidelityFloor.Valid() {
		return fmt.Errorf("%w: fidelity_floor %d is not F0 … F4", ErrInvalid, r.FidelityFloor)
	}
	if d := r.Decision; d != nil {
		switch {
		case d.Questions == 0:
			return fmt.Errorf("%w: a decision asks at least one question", ErrInvalid)
		case d.OptionsScored < d.Questions:
			return fmt.Errorf("%w: %d options scored over %d questions; each question scores at least one", ErrInvalid, d.OptionsScored, d.Questions)
		case d.SchemaTokens > r.PromptTokens:
			return fmt.Errorf("%w: schema_tokens %d exceeds prompt_tokens %d", ErrInvalid, d.SchemaTokens, r.PromptTokens)
		}
	}
	if s := r.Sampling; s != nil {
		if s.TopPE6 > e6 || s.MinPE6 > e6 {
			return fmt.Errorf("%w: top_p_e6 and min_p_e6 are at most %d", ErrInvalid, e6)
		}
		if s.RepeatPenaltyE6 == e6 {
			return fmt.Errorf("%w: repeat_penalty_e6 %d is no penalty; omit it", ErrInvalid, e6)
		}
		if len(s.Stop) > MaxStops {
			return fmt.Errorf("%w: %d stop strings, at most %d", ErrInvalid, len(s.Stop), MaxStops)
		}
		for i, st := range s.Stop {
			if len(st) == 0 || len(st) > MaxStopBytes || !utf8.ValidString(st) {
				return fmt.Errorf("%w: stop string %d must be 1 … %d bytes of UTF-8", ErrInvalid, i, MaxStopBytes)
			}
		}
		if len(s.LogitBias) > MaxLogitBias {
			return fmt.Errorf("%w: %d logit biases, at most %d", ErrInvalid, len(s.LogitBias), MaxLogitBias)
		}
		for i, b := range s.LogitBias {
			switch {
			case b.BiasE6 == 0:
				return fmt.Errorf("%w: logit bias of token %d is 0, no bias; omit it", ErrInvalid, b.Token)
			case b.BiasE6 > MaxLogitBiasE6 || b.BiasE6 < -MaxLogitBiasE6:
				return fmt.Errorf("%w: logit bias of token %d is %d millionths, at most ±%d", ErrInvalid, b.Token, b.BiasE6, MaxLogitBiasE6)
			case i > 0 && b.Token <= s.LogitBias[i-1].Token:
				return fmt.Errorf("%w: logit biases must be by token id, ascending, each once (token %d after %d)", ErrInvalid, b.Token, s.LogitBias[i-1].Token)
			}
		}
		if err := checkSamplers(s.Samplers); err != nil {
			return err
		}
		if err := s.checkExtended(); err != nil {
			return err
		}
		if err := s.checkDRY(); err != nil {
			return err
		}
		if err := s.checkMirostat(); err != nil {
			return err
		}
		if err := s.checkAdaptive(); err != nil {
			return err
		}
		if s.MinTokens > r.MaxTokens {
			return fmt.Errorf("%w: min_tokens %d past max_tokens %d", ErrInvalid, s.MinTokens, r.MaxTokens)
		}
		if s.PenaltyLastN != 0 && !s.Penalised() {
			return fmt.Errorf("%w: penalty_last_n %d without a penalty says nothing; omit it", ErrInvalid, s.PenaltyLastN)
		}
		if s.MinIndent > MaxIndent {
			return fmt.Errorf("%w: n_indent %d, at most %d", ErrInvalid, s.MinIndent, MaxIndent)
		}
		if s.Grammar != nil && s.Grammar.IsZero() {
			return fmt.Errorf("%w: a grammar digest of zeros; omit it for none", ErrInvalid)
		}
		if s.Draft != "" {
			if s.TemperatureE6 == 0 {
				return fmt.Errorf("%w: a draft names how a sampled request speculates; a greedy one's tokens do not depend on it, so it carries none", ErrInvalid)
			}
			if len(s.Draft) > MaxDraftBytes {
				return fmt.Errorf("%w: a draft name of %d bytes, at most %d", ErrInvalid, len(s.Draft), MaxDraftBytes)
			}
			for _, r := range s.Draft {
				if r <= 0x20 || r >= 0x7f {
					return fmt.Errorf("%w: draft %q: printable ASCII only", ErrInvalid, s.Draft)
				}
			}
		}
	}
	return nil
}

// checkExtended checks llama.cpp's other filters: each on a sampled
// request only, in its range, and only where it changes something, so
// that one meaning has one encoding.
func (s *Sampling) checkExtended() error {
	if !s.Extended() {
		return nil
	}
	switch {
	case s.TemperatureE6 == 0:
		return fmt.Errorf("%w: typical_p_e6, top_n_sigma_e6, xtc_*, dynatemp_* and min_keep weigh a sampled request's draws; a greedy one carries none", ErrInvalid)
	case s.TypicalPE6 >= e6:
		return fmt.Errorf("%w: typical_p_e6 %d: below %d (%d is off; omit it)", ErrInvalid, s.TypicalPE6, e6, e6)
	case s.TopNSigmaE6 > MaxTopNSigmaE6:
		return fmt.Errorf("%w: top_n_sigma_e6 %d, at most %d", ErrInvalid, s.TopNSigmaE6, MaxTopNSigmaE6)
	case s.XTCProbabilityE6 > e6:
		return fmt.Errorf("%w: xtc_probability_e6 %d, at most %d", ErrInvalid, s.XTCProbabilityE6, e6)
	case s.XTCThresholdE6 != 0 && s.XTCProbabilityE6 == 0:
		return fmt.Errorf("%w: xtc_threshold_e6 %d goes beside an xtc_probability_e6", ErrInvalid, s.XTCThresholdE6)
	case s.XTCThresholdE6 > xtcOff:
		return fmt.Errorf("%w: xtc_threshold_e6 %d, at most %d (above, XTC drops nothing; omit it)", ErrInvalid, s.XTCThresholdE6, xtcOff)
	case s.DynaTempRangeE6 > MaxDynaTempRangeE6:
		return fmt.Errorf("%w: dynatemp_range_e6 %d, at most %d", ErrInvalid, s.DynaTempRangeE6, MaxDynaTempRangeE6)
	case (s.DynaTempRangeE6 == 0) != (s.DynaTempExponentE6 == 0) || s.DynaTempExponentE6 > MaxDynaTempExponentE6:
		return fmt.Errorf("%w: dynatemp_exponent_e6 %d goes beside a dynatemp_range_e6 (%d), above 0 and at most %d", ErrInvalid, s.DynaTempExponentE6, s.DynaTempRangeE6, MaxDynaTempExponentE6)
	case s.MinKeep == 1 || s.MinKeep > MaxMinKeep:
		return fmt.Errorf("%w: min_keep %d: from 2 to %d (1 keeps what is kept anyway; omit it)", ErrInvalid, s.MinKeep, MaxMinKeep)
	case s.MinKeep > 1 && s.TopPE6 == 0 && s.MinPE6 == 0 && s.TypicalPE6 == 0 && s.XTCProbabilityE6 == 0:
		return fmt.Errorf("%w: min_keep %d goes beside top_p, min_p, typical_p or XTC, which it bounds", ErrInvalid, s.MinKeep)
	}
	return nil
}

// checkDRY checks DRY's fields: each only beside the multiplier, in
// its range, the default breakers omitted.
func (s *Sampling) checkDRY() error {
	if !s.DRY() {
		return nil
	}
	switch {
	case s.DRYMultiplierE6 == 0:
		return fmt.Errorf("%w: dry_base_e6, dry_allowed_length, dry_penalty_last_n and dry_sequence_breakers go beside a dry_multiplier_e6", ErrInvalid)
	case s.DRYMultiplierE6 > MaxDRYMultiplierE6:
		return fmt.Errorf("%w: dry_multiplier_e6 %d, at most %d", ErrInvalid, s.DRYMultiplierE6, MaxDRYMultiplierE6)
	case s.DRYBaseE6 < e6 || s.DRYBaseE6 > MaxDRYBaseE6:
		return fmt.Errorf("%w: dry_base_e6 %d: from %d to %d", ErrInvalid, s.DRYBaseE6, e6, MaxDRYBaseE6)
	case s.DRYAllowedLength > MaxDRYAllowedLength:
		return fmt.Errorf("%w: dry_allowed_length %d, at most %d", ErrInvalid, s.DRYAllowedLength, MaxDRYAllowedLength)
	case s.DRYLastN == 0:
		return fmt.Errorf("%w: dry_penalty_last_n 0 scans nothing: DRY is then off; omit it", ErrInvalid)
	case s.DRYBreakers != nil && (len(s.DRYBreakers) == 0 || len(s.DRYBreakers) > MaxDRYBreakers):
		return fmt.Errorf("%w: %d dry sequence breakers: 1 to %d (omitted: llama.cpp's four)", ErrInvalid, len(s.DRYBreakers), MaxDRYBreakers)
	case slices.Equal(s.DRYBreakers, DefaultDRYBreakers):
		return fmt.Errorf("%w: dry_sequence_breakers are llama.cpp's default; omit them", ErrInvalid)
	}
	for i, b := range s.DRYBreakers {
		if len(b) == 0 || len(b) > MaxDRYBreakerBytes || !utf8.ValidString(b) {
			return fmt.Errorf("%w: dry sequence breaker %d must be 1 … %d bytes of UTF-8", ErrInvalid, i, MaxDRYBreakerBytes)
		}
	}
	return nil
}

// checkMirostat checks mirostat's fields: its parameters only beside
// it, in range, and nothing beside it that it replaces.
func (s *Sampling) checkMirostat() error {
	switch {
	case s.Mirostat == 0 && (s.MirostatTauE6 != 0 || s.MirostatEtaE6 != 0):
		return fmt.Errorf("%w: mirostat_tau_e6 and mirostat_eta_e6 go beside a mirostat", ErrInvalid)
	case s.Mirostat == 0:
		return nil
	case s.Mirostat > 2:
		return fmt.Errorf("%w: mirostat %d: 1 or 2", ErrInvalid, s.Mirostat)
	case s.MirostatTauE6 == 0 || s.MirostatTauE6 > MaxMirostatTauE6 || s.MirostatEtaE6 == 0 || s.MirostatEtaE6 > e6:
		return fmt.Errorf("%w: mirostat_tau_e6 %d (1 … %d) and mirostat_eta_e6 %d (1 … %d)", ErrInvalid, s.MirostatTauE6, MaxMirostatTauE6, s.MirostatEtaE6, e6)
	case s.TemperatureE6 == 0:
		return fmt.Errorf("%w: mirostat draws; a greedy request carries none", ErrInvalid)
	case s.TopK != 0 || s.TopPE6 != 0 || s.MinPE6 != 0 || s.Penalised() || s.Extended() || s.DRY() || s.Samplers != "" || s.AdaptiveTargetE6 != nil:
		return fmt.Errorf("%w: mirostat picks in place of the filters, the penalties and adaptive-p; a request with it carries none", ErrInvalid)
	case s.Draft != "":
		return fmt.Errorf("%w: a request with mirostat does not speculate, so it names no draft", ErrInvalid)
	}
	return nil
}

// checkAdaptive checks adaptive-p's fields: the decay only beside the
// target, both in range, on a sampled request that names no draft.
func (s *Sampling) checkAdaptive() error {
	switch {
	case s.AdaptiveTargetE6 == nil && s.AdaptiveDecayE6 != 0:
		return fmt.Errorf("%w: adaptive_decay_e6 goes beside an adaptive_target_e6", ErrInvalid)
	case s.AdaptiveTargetE6 == nil:
		return nil
	case *s.AdaptiveTargetE6 > e6 || s.AdaptiveDecayE6 > MaxAdaptiveDecayE6:
		return fmt.Errorf("%w: adaptive_target_e6 %d (0 … %d) and adaptive_decay_e6 %d (0 … %d)", ErrInvalid, *s.AdaptiveTargetE6, e6, s.AdaptiveDecayE6, MaxAdaptiveDecayE6)
	case s.TemperatureE6 == 0:
		return fmt.Errorf("%w: adaptive-p draws; a greedy request carries none", ErrInvalid)
	case s.Draft != "":
		return fmt.Errorf("%w: a request with adaptive-p does not speculate, so it names no draft", ErrInvalid)
	}
	return nil
}

// checkSamplers checks a sampler order: llama.cpp's letters of the
// filters meshnode runs, each once.
func checkSamplers(order string) error {
	if len(order) > MaxSamplers {
		return fmt.Errorf("%w: samplers %q: at most %d filters", ErrInvalid, order, MaxSamplers)
	}
	for i := 0; i < len(order); i++ {
		c := order[i]
		if !strings.ContainsRune("edskypmxti", rune(c)) {
			return fmt.Errorf("%w: samplers %q: %q is not a filter (e, d, s, k, y, p, m, x, t, i)", ErrInvalid, order, c)
		}
		if strings.IndexByte(order[:i], c) >= 0 {
			return fmt.Errorf("%w: samplers %q names %q twice", ErrInvalid, order, c)
		}
	}
	return nil
}

// canonical returns r with options that say nothing dropped, so that one
// meaning has one encoding.
func (r ServeRequest) canonical() ServeRequest {
	if r.Sampling.IsZero() {
		r.Sampling = nil
	}
	return r
}

// Canonical returns the canonical det-CBOR encoding of r, the bytes its id
// is taken over.
func (r ServeRequest) Canonical() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return encMode.Marshal(r.canonical())
}

// ID returns request_id = ContentId(request).
func (r ServeRequest) ID() (ContentID, error) {
	b, err := r.Canonical()
	if err != nil {
		return ContentID{}, err
	}
	return Sum(b), nil
}

// DecodeRequest parses the canonical encoding of a request, refusing
// anything that is not exactly what [ServeRequest.Canonical] writes.
func DecodeRequest(b []byte) (ServeRequest, error) {
	var r ServeRequest
	if err := decodeCanonical(b, maxRequestSize, &r); err != nil {
		return ServeRequest{}, fmt.Errorf("request: %w", err)
	}
	if r.Sampling != nil && r.Sampling.IsZero() {
		return ServeRequest{}, fmt.Errorf("request: %w: empty sampling block", ErrNonCanonical)
	}
	if err := r.Validate(); err != nil {
		return ServeRequest{}, fmt.Errorf("request: %w", err)
	}
	return r, nil
}
