package api

import (
	"encoding/json"
	"math"
	"net/http"
)

// llama-server's own embeddings endpoints, POST /embedding and
// /embeddings: the same inputs as /v1/embeddings (in "input" or
// "content"), each answered as {"index", "embedding": [vector]}, the
// vector scaled as embd_normalize says.

type llamaEmbeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	Content        json.RawMessage `json:"content"`
	EmbdNormalize  *int            `json:"embd_normalize"`
	EncodingFormat string          `json:"encoding_format"`
}

type llamaEmbedding struct {
	Index     int         `json:"index"`
	Embedding [][]float32 `json:"embedding"` // one vector: the pooled one
}

// euclidean is embd_normalize's default: unit L2 length, as /v1/embeddings
// makes every embedding.
const euclidean = 2

// parseLlamaEmbedding reads a POST /embedding body into an Embedding and
// the embd_normalize it asks for.
func parseLlamaEmbedding(body []byte, endpoint string) (*Embedding, int, error) {
	var req llamaEmbeddingRequest
	if err := decodeBody(body, &req); err != nil {
		return nil, 0, err
	}
	if err := checkFields(body, &req, "POST "+endpoint); err != nil {
		return nil, 0, err
	}
	switch req.EncodingFormat {
	case "", "float":
	default:
		// llama-server reads it and answers floats all the same: a base64
		// asked for here would silently not be one.
		return nil, 0, badRequest("encoding_format", "%s answers floats (encoding_format float); for base64 use POST /v1/embeddings", endpoint)
	}
	raw := req.Input
	if len(raw) == 0 {
		raw = req.Content
	} else if len(req.Content) != 0 {
		return nil, 0, badRequest("content", "give the text in input or in content, not both")
	}
	if len(raw) == 0 {
		return nil, 0, badRequest("content", "content (or input) is required")
	}
	inputs, err := embedInputs(raw)
	if err != nil {
		return nil, 0, err
	}
	norm, err := embedNormalize(req.EmbdNormalize)
	if err != nil {
		return nil, 0, err
	}
	return &Embedding{Model: req.Model, Inputs: inputs, Unnormalized: norm != euclidean}, norm, nil
}

// embedNormalize checks embd_normalize: -1 (none), 0 (the largest
// magnitude to 32760: an int16's range), 1 (taxicab), 2 (Euclidean, the
// default) or a p-norm past 2.
func embedNormalize(p *int) (int, error) {
	switch {
	case p == nil:
		return euclidean, nil
	case *p < -1:
		return 0, badRequest("embd_normalize", "embd_normalize must be -1 (none), 0 (max absolute, int16 range), 1 (taxicab), 2 (Euclidean) or a p-norm above 2; got %d", *p)
	}
	return *p, nil
}

// normalizeEmbedding scales a pooled vector as llama.cpp's
// common_embd_normalize does for norm p (embedNormalize's values other
// than 2, whose unit vectors the model makes): the norm summed in
// float64, the scale its reciprocal rounded to float32, 0 where the norm
// is 0.
func normalizeEmbedding(v []float32, p int) {
	var sum float64
	switch p {
	case -1:
		return
	case 0:
		for _, x := range v {
			sum = max(sum, math.Abs(float64(x)))
		}
		sum /= 32760
	default:
		for _, x := range v {
			sum += math.Pow(math.Abs(float64(x)), float64(p))
		}
		sum = math.Pow(sum, 1/float64(p))
	}
	var scale float32
	if sum > 0 {
		scale = float32(1 / sum)
	}
	for i := range v {
		v[i] *= scale
	}
}

// handleLlamaEmbedding is POST /embedding and /embeddings. A request that
// names no model is for the node's one (soleModel), as llama-server's
// single model.
func (s *Server) handleLlamaEmbedding(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	e, norm, err := parseLlamaEmbedding(body, r.URL.Path)
	if err != nil {
		writeError(w, err)
		return
	}
	if e.Model, body, err = s.soleModelFor(e.Model, body); err != nil {
		writeError(w, err)
		return
	}
	res, handled := s.embed(w, r, e, body)
	if handled {
		return
	}
	out := make([]llamaEmbedding, len(res.Vectors))
	for i, v := range res.Vectors {
		if norm != euclidean {
			normalizeEmbedding(v, norm)
		}
		out[i] = llamaEmbedding{Index: i, Embedding: [][]float32{v}}
	}
	writeJSON(w, http.StatusOK, out)
}
