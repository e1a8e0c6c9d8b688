package api

import (
	"encoding/json"
	"math"
)

// llamaOpenAI are llama-server's own options, which its clients send on
// the OpenAI endpoints too (llama.vim's instruction editing on chat
// completions; llama-server takes every /completion option there), read
// as /completion reads them: the sampler order, n_predict (0: the prompt
// alone), id_slot and response_fields. cache_prompt is
// llamaOpenAIRefusals'.
type llamaOpenAI struct {
	Samplers       json.RawMessage `json:"samplers"`
	NPredict       *int            `json:"n_predict"`
	IDSlot         *int            `json:"id_slot"`
	ResponseFields []string        `json:"response_fields"`
}

// llamaOpenAIRefusals are llama-server's options the OpenAI endpoints
// refuse unless they ask for nothing: /completion's, which llama-server
// takes on its OpenAI endpoints too, and which its web UI sends there,
// every sampler's setting at its default.
var llamaOpenAIRefusals = llamaRefusals

// applyLlama reads the options into g: sp is the request's sampling (the
// order checks it), maxSet whether the request bounds its answer
// itself (max_tokens), stream whether it streams.
func (o *llamaOpenAI) applyLlama(g *Generation, sp *sampling, maxSet, stream bool) error {
	order, ordered, err := llamaSamplers(o.Samplers)
	if err != nil {
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
