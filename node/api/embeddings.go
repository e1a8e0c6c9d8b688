package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"time"
)

// EmbeddingModel is a Model that makes embeddings (POST /v1/embeddings).
// A local model that is not one answers 400.
type EmbeddingModel interface {
	Model
	// Embed returns one vector per input, Dimensions long each. An error
	// is the request's answer (an *Error carries its status; a model that
	// cannot embed says why with a 400).
	Embed(ctx context.Context, e *Embedding) (*EmbeddingResult, error)
}

// EncoderModel is implemented by a model that may be a text encoder,
// which generates no text: an embedding model, or a reranker.
type EncoderModel interface {
	// EncoderCapabilities is what an encoder does in Ollama's words
	// ("embedding"; a reranker, nothing Ollama names), and whether the
	// model is one.
	EncoderCapabilities() ([]string, bool)
}

// EmbedInput is one input to embed: text, or token ids of the model's
// vocabulary.
type EmbedInput struct {
	Text   string
	Tokens []uint32
	// IsTokens: the input is Tokens (an empty Text is refused).
	IsTokens bool
}

// Embedding is an embeddings request as a model receives it.
type Embedding struct {
	Model  string
	Inputs []EmbedInput
	// Dimensions is the length the client asked for, 0 for the model's: a
	// shorter one is the vector's first Dimensions, scaled as the whole
	// would be; a model refuses more than its own.
	Dimensions int
	// Unnormalized asks for the pooled hidden states as they are, not
	// scaled to unit length (Ollama's older /api/embeddings).
	Unnormalized bool
	// Truncate cuts an input past the model's context to fit, keeping its
	// first tokens (Ollama's /api/embed, by default), where otherwise it
	// is refused.
	Truncate bool
}

// EmbeddingResult is the vectors, in the order of the inputs, and the
// tokens they took.
type EmbeddingResult struct {
	Vectors      [][]float32
	PromptTokens int
}

// Bounds on an embeddings request, as OpenAI's: inputs per request, and
// tokens per token-id input (a text's are bounded by the model's context).
const (
	maxEmbedInputs = 2048
	maxEmbedTokens = 1 << 16
)

type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	User           string          `json:"user"`           // an opaque tag (docs/api.md)
	EmbdNormalize  *int            `json:"embd_normalize"` // llama-server's: how each vector is scaled
}

func parseEmbedding(body []byte) (*Embedding, *embeddingRequest, error) {
	var req embeddingRequest
	if err := decodeBody(body, &req); err != nil {
		return nil, nil, err
	}
	if err := checkFields(body, &req, "POST /v1/embeddings"); err != nil {
		return nil, nil, err
	}
	if req.Model == "" {
		return nil, nil, badRequest("model", "model is required")
	}
	switch req.EncodingFormat {
	case "", "float", "base64":
	default:
		return nil, nil, badRequest("encoding_format", "encoding_format must be float or base64, got %q", req.EncodingFormat)
	}
	e := &Embedding{Model: req.Model}
	if d := req.Dimensions; d != nil {
		if *d < 1 {
			return nil, nil, badRequest("dimensions", "dimensions must be at least 1, got %d", *d)
		}
		e.Dimensions = *d
	}
	inputs, err := embedInputs(req.Input)
	if err != nil {
		return nil, nil, err
	}
	e.Inputs = inputs
	norm, err := embedNormalize(req.EmbdNormalize)
	if err != nil {
		return nil, nil, err
	}
	e.Unnormalized = norm != euclidean
	return e, &req, nil
}

// embedInputs reads input: a string, an array of strings, an array of
// token ids, or an array of arrays of token ids.
func embedInputs(raw json.RawMessage) ([]EmbedInput, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, badRequest("input", "input is required")
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, badRequest("input", "input must not be an empty string")
		}
		return []EmbedInput{{Text: one}}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest("input", "input must be a string, an array of strings, an array of token ids or an array of arrays of token ids")
	}
	if len(items) == 0 {
		return nil, badRequest("input", "input must hold at least one item")
	}
	if len(items) > maxEmbedInputs {
		return nil, badRequest("input", "input holds %d items; at most %d", len(items), maxEmbedInputs)
	}
	// An array of numbers is one input of token ids.
	if ids, ok, err := tokenIDs(raw, "input", "input", maxEmbedTokens); ok || err != nil {
		if err != nil {
			return nil, err
		}
		return []EmbedInput{{Tokens: ids, IsTokens: true}}, nil
	}
	out := make([]EmbedInput, len(items))
	for i, it := range items {
		field := fmt.Sprintf("input[%d]", i)
		var s string
		if err := json.Unmarshal(it, &s); err == nil {
			if s == "" {
				return nil, badRequest("input", "%s must not be an empty string", field)
			}
			out[i] = EmbedInput{Text: s}
			continue
		}
		ids, ok, err := tokenIDs(it, "input", field, maxEmbedTokens)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, badRequest("input", "%s must be a string or an array of token ids; the items of input must all be strings or all token arrays", field)
		}
		out[i] = EmbedInput{Tokens: ids, IsTokens: true}
	}
	for i := range out {
		if out[i].IsTokens != out[0].IsTokens {
			return nil, badRequest("input", "input mixes strings and token arrays")
		}
	}
	return out, nil
}

// tokenIDs reads raw, field of the request's param, as a non-empty array
// of at most most token ids; ok is false when raw is not an array of
// numbers at all.
func tokenIDs(raw json.RawMessage, param, field string, most int) ([]uint32, bool, error) {
	var nums []json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&nums); err != nil {
		return nil, false, nil
	}
	if len(nums) == 0 {
		return nil, true, badRequest(param, "%s is an empty token array", field)
	}
	if len(nums) > most {
		return nil, true, badRequest(param, "%s holds %d tokens; at most %d", field, len(nums), most)
	}
	ids := make([]uint32, len(nums))
	for i, n := range nums {
		v, err := n.Int64()
		if err != nil || v < 0 || v > math.MaxUint32 {
			if n == "" {
				n = "null" // a null item decodes to no number
			}
			return nil, true, badRequest(param, "%s[%d] %s is not a token id", field, i, n)
		}
		ids[i] = uint32(v)
	}
	return ids, true, nil
}

type embeddingObject struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string
}

type embeddingUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

type embeddingList struct {
	Object string            `json:"object"`
	Data   []embeddingObject `json:"data"`
	Model  string            `json:"model"`
	Usage  embeddingUsage    `json:"usage"`
}

// embed routes e (relayed to a host when only a peer serves its model)
// and embeds it on a model slot here; handled reports that the answer,
// a relayed one or an error, was written.
func (s *Server) embed(w http.ResponseWriter, r *http.Request, e *Embedding, body []byte) (res *EmbeddingResult, handled bool) {
	m, handled := s.route(w, r, e.Model, body)
	if handled {
		return nil, true
	}
	em, ok := m.(EmbeddingModel)
	if !ok {
		writeError(w, badRequest("model", "model %q cannot make embeddings", e.Model))
		return nil, true
	}
	// An embedding is a forward pass over its inputs: it takes one of the
	// model's slots, as a generation does.
	release, err := s.acquire(r.Context(), e.Model, m)
	if err != nil {
		writeError(w, err)
		return nil, true
	}
	defer release()
	start := s.now()
	res, err = em.Embed(r.Context(), e)
	if err != nil {
		if r.Context().Err() == nil {
			s.log.Info("api: embedding failed", "model", e.Model, "err", errString(err))
		}
		writeError(w, err)
		return nil, true
	}
	if len(res.Vectors) != len(e.Inputs) {
		writeError(w, fmt.Errorf("api: the model returned %d embeddings for %d inputs", len(res.Vectors), len(e.Inputs)))
		return nil, true
	}
	s.log.Info("api: embedded", "model", e.Model, "inputs", len(e.Inputs), "prompt_tokens", res.PromptTokens,
		"took", s.now().Sub(start).Round(time.Millisecond), "relayed", r.Header.Get(ForwardedHeader) != "")
	return res, false
}

func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	e, req, err := parseEmbedding(body)
	if err != nil {
		writeError(w, err)
		return
	}
	res, handled := s.embed(w, r, e, body)
	if handled {
		return
	}
	list := embeddingList{Object: "list", Model: e.Model, Data: make([]embeddingObject, len(res.Vectors)),
		Usage: embeddingUsage{PromptTokens: res.PromptTokens, TotalTokens: res.PromptTokens}}
	norm, _ := embedNormalize(req.EmbdNormalize) // checked by parseEmbedding
	for i, v := range res.Vectors {
		if norm != euclidean {
			normalizeEmbedding(v, norm)
		}
		o := embeddingObject{Object: "embedding", Index: i, Embedding: v}
		if req.EncodingFormat == "base64" {
			// OpenAI's base64: the float32s' little-endian bytes.
			b := make([]byte, 0, 4*len(v))
			for _, x := range v {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
			}
			o.Embedding = base64.StdEncoding.EncodeToString(b)
		}
		list.Data[i] = o
	}
	writeJSON(w, http.StatusOK, list)
}
