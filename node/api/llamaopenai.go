package api

import (
	"encoding/json"
	"math"
	"time"
)

// llamaOpenAI are llama-server's own options, which its clients send on
// the OpenAI endpoints too (llama.vim's instruction editing on chat
// completions; llama-server takes every /completion option there), read
// as /completion reads them: the sampler order, n_predict (0: the prompt
// alone), id_slot, cache_prompt and response_fields.
type llamaOpenAI struct {
	Samplers       json.RawMessage `json:"samplers"`
	NPredict       *int            `json:"n_predict"`
	IDSlot         *int            `json:"id_slot"`
	CachePrompt    *bool           `json:"cache_prompt"`
	ResponseFields []string        `json:"response_fields"`
	// SSEPingInterval is llama-server's: a stream silent this many
	// seconds gets an SSE comment (0 or -1: none).
	SSEPingInterval *int `json:"sse_ping_interval"`
}

// maxSSEPingInterval bounds sse_ping_interval (a day: past it, a ping
// keeps nothing alive).
const maxSSEPingInterval = 86400

// ssePing reads sse_ping_interval into g.
func ssePing(n *int, g *Generation) error {
	if n == nil {
		return nil
	}
	if *n < -1 || *n > maxSSEPingInterval {
		return badRequest("sse_ping_interval", "sse_ping_interval must be -1 or 0 (no pings) or the seconds of silence after which a stream gets an SSE comment, at most %d; got %d", maxSSEPingInterval, *n)
	}
	g.SSEPing = time.Duration(max(*n, 0)) * time.Second
	return nil
}

// llamaOpenAIRefusals are llama-server's options the OpenAI endpoints
// refuse unless they ask for nothing: /completion's, which llama-server
// takes on its OpenAI endpoints too, and which its web UI sends there,
// every sampler's setting at its default; and post_sampling_probs and
// return_tokens, which /completion honours in shapes of its own.
var llamaOpenAIRefusals = withRefusals(llamaRefusals, map[string]refusal{
	"post_sampling_probs": {"post_sampling_probs is served on /completion (completion_probabilities' prob and top_probs); the OpenAI endpoints' logprobs are the model's own (false is accepted)", isFalse},
	"return_tokens":       {"return_tokens is served on /completion (its tokens field); the OpenAI shapes have no place for the ids (false is accepted; /tokenize gives a text's)", isFalse},
})

// applyLlama reads the options into g: sp is the request's sampling (the
// order checks it), maxSet whether the request bounds its answer
// itself (max_tokens), stream whether it streams.
func (o *llamaOpenAI) applyLlama(g *Generation, sp *sampling, maxSet, stream bool) error {
	order, ordered, err := llamaSamplers(o.Samplers)
	if err != nil {
		return err
	}
	if order, err = sp.adaptiveOrder(order, ordered); err != nil {
		return err
	}
	if ordered {
		if err := checkSamplerOrder(order, sp); err != nil {
			return err
		}
		g.Samplers = order
	}
	if n := o.NPredict; n != nil {
		switch {
		case maxSet:
			return badRequest("n_predict", "n_predict and max_tokens both bound the answer: send one")
		case *n < -1:
			return badRequest("n_predict", "n_predict must be -1 (until the model ends), 0 (the prompt alone) or more, got %d", *n)
		case *n == -1:
			g.MaxTokens = math.MaxInt32 // the context bounds it
		default:
			g.MaxTokens, g.PromptOnly = *n, *n == 0
		}
	}
	if err := ssePing(o.SSEPingInterval, g); err != nil {
		return err
	}
	g.NoPromptCache = o.CachePrompt != nil && !*o.CachePrompt
	if id := o.IDSlot; id != nil && *id < -1 {
		return badRequest("id_slot", "id_slot must be -1 (any) or a slot's index, got %d", *id)
	}
	if len(o.ResponseFields) > maxResponseFields {
		return badRequest("response_fields", "response_fields names %d fields, at most %d", len(o.ResponseFields), maxResponseFields)
	}
	if o.ResponseFields != nil && stream {
		return badRequest("response_fields", "response_fields shapes a whole answer: send stream false")
	}
	return nil
}

// shape is a whole answer as response_fields asks: the answer, or the
// fields it names.
func (o *llamaOpenAI) shape(answer any) any {
	if o.ResponseFields == nil {
		return answer
	}
	return responseFields(answer, o.ResponseFields)
}
