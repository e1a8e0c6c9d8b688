package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"unicode/utf8"
)

// TokenizingModel is a Model whose tokenizer the API lends out: POST
// /tokenize and /detokenize (llama.cpp server's endpoints, in its dialect
// and vLLM's) and GET /tokenizer_info (vLLM's), which a client needs to
// name tokens (logit_bias), count them or send them as a prompt.
type TokenizingModel interface {
	Model
	// Tokenize returns text's token ids: with BOS (and EOS) where
	// addSpecial and the vocabulary adds them, matching control tokens'
	// text ("<|im_start|>") where parseSpecial. An error is the request's
	// answer (an *Error carries its status; a model without a tokenizer
	// says why with a 400).
	Tokenize(text string, addSpecial, parseSpecial bool) ([]uint32, error)
	// Piece is a token's text, a control token's included, as llama.cpp's
	// token_to_piece writes it (it may be part of a UTF-8 character); an
	// error for an id outside the vocabulary, or as Tokenize's.
	Piece(id uint32) ([]byte, error)
	// TokenizerInfo describes the tokenizer (GET /tokenizer_info); an
	// error as Tokenize's.
	TokenizerInfo() (TokenizerInfo, error)
}

// TokenizerInfo is GET /tokenizer_info's answer, vLLM's: what a client
// that tokenizes for itself needs (lm-evaluation-harness's remote
// tokenizer reads it). A special token the vocabulary lacks is null.
type TokenizerInfo struct {
	Class    string  `json:"tokenizer_class"`
	BOSToken *string `json:"bos_token"`
	EOSToken *string `json:"eos_token"`
	UNKToken *string `json:"unk_token"`
	PadToken *string `json:"pad_token"`
	AddBOS   bool    `json:"add_bos_token"`
	// ChatTemplate is the model's own template (null: it has none).
	ChatTemplate   *string `json:"chat_template"`
	ModelMaxLength int     `json:"model_max_length"`
	VocabSize      int     `json:"vocab_size"`
}

// Bounds on a tokenize request: its content's parts, and the ids a
// detokenize request may hold (a body's bytes bound both further).
const (
	maxTokenizeParts = 1 << 16
	maxDetokenize    = 1 << 20
)

// tokenizeRequest is llama.cpp server's /tokenize body, or vLLM's:
// prompt (a string) and add_special_tokens (default true) for content
// and add_special (default false).
type tokenizeRequest struct {
	Model            string          `json:"model"`
	Content          json.RawMessage `json:"content"`
	AddSpecial       *bool           `json:"add_special"`
	ParseSpecial     *bool           `json:"parse_special"`
	WithPieces       bool            `json:"with_pieces"`
	Prompt           *string         `json:"prompt"`
	AddSpecialTokens *bool           `json:"add_special_tokens"`
}

// addSpecial is whether BOS goes before the first part: as the request
// says, by either name, else each server's default (llama.cpp's none,
// vLLM's, for a prompt, BOS).
func (r *tokenizeRequest) addSpecial() (bool, error) {
	switch {
	case r.AddSpecial != nil && r.AddSpecialTokens != nil && *r.AddSpecial != *r.AddSpecialTokens:
		return false, badRequest("add_special", "add_special and add_special_tokens disagree")
	case r.AddSpecial != nil:
		return *r.AddSpecial, nil
	case r.AddSpecialTokens != nil:
		return *r.AddSpecialTokens, nil
	}
	return r.Prompt != nil, nil
}

type detokenizeRequest struct {
	Model  string          `json:"model"`
	Tokens json.RawMessage `json:"tokens"`
}

// contentPart is a part of tokenize's content: text, or a token id.
type contentPart struct {
	text  string
	id    uint32
	isID  bool
	index int
}

// parseContent reads content as llama.cpp's tokenize_mixed does: a
// string, or an array of strings and token ids.
func parseContent(raw json.RawMessage) ([]contentPart, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, badRequest("content", "content is required: the text to tokenize, or an array of texts and token ids")
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return []contentPart{{text: one}}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest("content", "content must be a string or an array of strings and token ids")
	}
	if len(items) > maxTokenizeParts {
		return nil, badRequest("content", "content holds %d parts; at most %d", len(items), maxTokenizeParts)
	}
	parts := make([]contentPart, len(items))
	for i, it := range items {
		// (A null would unmarshal into a string as nothing.)
		if err := json.Unmarshal(it, &parts[i].text); err == nil && !bytes.Equal(bytes.TrimSpace(it), []byte("null")) {
			parts[i].index = i
			continue
		}
		id, err := tokenID(it)
		if err != nil {
			return nil, badRequest("content", "content[%d] is neither a string nor a token id", i)
		}
		parts[i] = contentPart{id: id, isID: true, index: i}
	}
	return parts, nil
}

// tokenID reads a JSON number that is a token id: an integer of 0 …
// 2³²−1.
func tokenID(raw json.RawMessage) (uint32, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var n json.Number
	if err := dec.Decode(&n); err != nil {
		return 0, err
	}
	v, err := n.Int64()
	if err != nil || v < 0 || v > math.MaxUint32 {
		return 0, badRequest("", "%s is not a token id", n)
	}
	return uint32(v), nil
}

// parseTokenize reads a POST /tokenize body.
func parseTokenize(body []byte) (*tokenizeRequest, []contentPart, error) {
	var req tokenizeRequest
	if err := decodeBody(body, &req); err != nil {
		return nil, nil, err
	}
	if err := checkFields(body, &req, "POST /tokenize"); err != nil {
		return nil, nil, err
	}
	if req.Prompt != nil {
		if len(req.Content) > 0 {
			return nil, nil, badRequest("prompt", "give content (llama.cpp's) or prompt (vLLM's), not both")
		}
		if _, err := req.addSpecial(); err != nil {
			return nil, nil, err
		}
		return &req, []contentPart{{text: *req.Prompt}}, nil
	}
	parts, err := parseContent(req.Content)
	if err != nil {
		return nil, nil, err
	}
	if _, err := req.addSpecial(); err != nil {
		return nil, nil, err
	}
	return &req, parts, nil
}

// parseDetokenize reads a POST /detokenize body.
func parseDetokenize(body []byte) (*detokenizeRequest, []uint32, error) {
	var req detokenizeRequest
	if err := decodeBody(body, &req); err != nil {
		return nil, nil, err
	}
	if err := checkFields(body, &req, "POST /detokenize"); err != nil {
		return nil, nil, err
	}
	if t := bytes.TrimSpace(req.Tokens); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return nil, nil, badRequest("tokens", "tokens is required: an array of token ids")
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(req.Tokens, &raw); err != nil {
		return nil, nil, badRequest("tokens", "tokens must be an array of token ids")
	}
	if len(raw) > maxDetokenize {
		return nil, nil, badRequest("tokens", "tokens holds %d ids; at most %d", len(raw), maxDetokenize)
	}
	ids := make([]uint32, len(raw))
	for i, x := range raw {
		id, err := tokenID(x)
		if err != nil {
			return nil, nil, badRequest("tokens", "tokens[%d] is not a token id", i)
		}
		ids[i] = id
	}
	return &req, ids, nil
}

// tokenizerOf is the local model a tokenize or detokenize request names,
// or the only one this node serves when it names none (llama.cpp's
// server, which these endpoints follow, serves one model and takes no
// name); handled is true when the request was answered (relayed to a
// peer that hosts the model, or refused).
func (s *Server) tokenizerOf(w http.ResponseWriter, r *http.Request, model string, body []byte) (TokenizingModel, bool) {
	if model == "" {
		var err error
		if model, err = s.soleModel(); err != nil {
			writeError(w, err)
			return nil, true
		}
	}
	m, handled := s.route(w, r, model, body)
	if handled {
		return nil, true
	}
	tm, ok := m.(TokenizingModel)
	if !ok {
		writeError(w, Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_model", "model %q lends out no tokenizer", model))
		return nil, true
	}
	return tm, false
}

// queryModel is the model a GET request's ?model= names, or where it
// names none, the node's one model (or its mesh's: Server.soleModel),
// then written into the request's query, so that a relay names it to
// the host, which may serve several.
func (s *Server) queryModel(r *http.Request) (string, error) {
	q := r.URL.Query()
	if name := q.Get("model"); name != "" {
		return name, nil
	}
	name, err := s.soleModel()
	if err != nil {
		return "", err
	}
	q.Set("model", name)
	r.URL.RawQuery = q.Encode()
	return name, nil
}

// handleTokenize is POST /tokenize: {"tokens": [ids]}, or with
// with_pieces [{"id", "piece"}], the piece a string where it is valid
// UTF-8 and its bytes otherwise, as llama.cpp's server answers.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	req, parts, err := parseTokenize(body)
	if err != nil {
		writeError(w, err)
		return
	}
	m, handled := s.tokenizerOf(w, r, req.Model, body)
	if handled {
		return
	}
	addSpecial, _ := req.addSpecial()                            // checked by parseTokenize
	parseSpecial := req.ParseSpecial == nil || *req.ParseSpecial // both servers match control tokens
	var ids []uint32
	for i, p := range parts {
		if p.isID {
			if _, err := m.Piece(p.id); err != nil {
				writeError(w, pieceError("content", p.index, err))
				return
			}
			ids = append(ids, p.id)
			continue
		}
		// BOS goes before the first part only, as in tokenize_mixed.
		got, err := m.Tokenize(p.text, addSpecial && i == 0, parseSpecial)
		if err != nil {
			writeError(w, err)
			return
		}
		ids = append(ids, got...)
	}
	if !req.WithPieces {
		// vLLM's count and max_model_len beside llama.cpp's tokens.
		info, err := m.TokenizerInfo()
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"tokens": nonNil(ids), "count": len(ids), "max_model_len": info.ModelMaxLength})
		return
	}
	type withPiece struct {
		ID    uint32 `json:"id"`
		Piece any    `json:"piece"`
	}
	out := make([]withPiece, len(ids))
	for i, id := range ids {
		p, err := m.Piece(id)
		if err != nil {
			writeError(w, err)
			return
		}
		out[i] = withPiece{ID: id, Piece: string(p)}
		if !utf8.Valid(p) {
			bs := make([]int, len(p))
			for j, c := range p {
				bs[j] = int(c)
			}
			out[i].Piece = bs
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": out})
}

// handleDetokenize is POST /detokenize: {"content"}, the tokens' pieces
// one after the other, as llama.cpp's server answers (control tokens as
// their text, no space stripped or cleaned up).
func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	req, ids, err := parseDetokenize(body)
	if err != nil {
		writeError(w, err)
		return
	}
	m, handled := s.tokenizerOf(w, r, req.Model, body)
	if handled {
		return
	}
	var text []byte
	for i, id := range ids {
		p, err := m.Piece(id)
		if err != nil {
			writeError(w, pieceError("tokens", i, err))
			return
		}
		text = append(text, p...)
	}
	// Pieces that split a character make invalid UTF-8, which JSON
	// carries as U+FFFD, as llama.cpp's JSON library does. vLLM calls the
	// text prompt.
	writeJSON(w, http.StatusOK, map[string]string{"content": string(text), "prompt": string(text)})
}

// handleTokenizerInfo is GET /tokenizer_info?model=NAME, vLLM's (model
// may be left out on a node that serves one).
func (s *Server) handleTokenizerInfo(w http.ResponseWriter, r *http.Request) {
	name, err := s.queryModel(r)
	if err != nil {
		writeError(w, err)
		return
	}
	m, handled := s.tokenizerOf(w, r, name, nil)
	if handled {
		return
	}
	info, err := m.TokenizerInfo()
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// pieceError is err as the answer to part i of a request's param: a
// model's own *Error as it is, any other (an id outside the vocabulary)
// a 400 naming the part.
func pieceError(param string, i int, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return badRequest(param, "%s[%d]: %v", param, i, err)
}

// nonNil is ids, or an empty array rather than null.
func nonNil(ids []uint32) []uint32 {
	if ids == nil {
		return []uint32{}
	}
	return ids
}
