package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// Reranking, as llama-server answers it (POST /v1/rerank, /rerank,
// /v1/reranking, /reranking): a query and documents, each document scored
// by a reranker (a cross-encoder: query and document read together), the
// results sorted best first. The body is Jina's and Cohere's (documents,
// answered {"results": [{"index", "relevance_score"}]}) or Hugging Face
// TEI's (texts, answered with the bare array of {"index", "score"}).

// RerankModel is a Model that scores documents against a query.
type RerankModel interface {
	Model
	// Rerank scores each document against the query, in the documents'
	// order. An error is the request's answer (an *Error carries its
	// status; a model that is no reranker says why with a 400).
	Rerank(ctx context.Context, q *Rerank) (*RerankResult, error)
}

// Rerank is a rerank request as a model receives it.
type Rerank struct {
	Model     string
	Query     string
	Documents []string
}

// RerankResult is each document's score, in the documents' order, and
// the tokens the query-document pairs took.
type RerankResult struct {
	Scores       []float64
	PromptTokens int
}

// maxRerankDocuments bounds the documents of one request (Cohere's limit).
const maxRerankDocuments = 1000

type rerankRequest struct {
	Model     string          `json:"model"`
	Query     *string         `json:"query"`
	Documents json.RawMessage `json:"documents"` // strings, or {"text"} objects
	Texts     json.RawMessage `json:"texts"`     // TEI's name
	TopN      *int            `json:"top_n"`
	// ReturnDocuments (Jina, Cohere) and ReturnText (TEI) put each
	// document's text in its result.
	ReturnDocuments *bool `json:"return_documents"`
	ReturnText      *bool `json:"return_text"`
	// TEI's truncate and raw_scores: a document past the context is
	// refused, never cut, and scores are the model's own.
	Truncate  *bool `json:"truncate"`
	RawScores *bool `json:"raw_scores"`
}

// parseRerank reads a rerank request; tei is whether it is TEI's (texts).
func parseRerank(body []byte) (q *Rerank, req *rerankRequest, tei bool, err error) {
	req = new(rerankRequest)
	if err := decodeBody(body, req); err != nil {
		return nil, nil, false, err
	}
	if err := checkFields(body, req, "POST /v1/rerank"); err != nil {
		return nil, nil, false, err
	}
	if req.Query == nil || *req.Query == "" {
		return nil, nil, false, badRequest("query", "query must be a non-empty string")
	}
	raw, param := req.Documents, "documents"
	if !isAbsent(req.Texts) {
		if !isAbsent(req.Documents) {
			return nil, nil, false, badRequest("texts", "documents and texts (TEI's name for them) both hold the documents: send one")
		}
		raw, param, tei = req.Texts, "texts", true
	}
	docs, err := rerankDocuments(raw, param)
	if err != nil {
		return nil, nil, false, err
	}
	switch {
	case req.TopN != nil && *req.TopN < 1:
		return nil, nil, false, badRequest("top_n", "top_n must be at least 1, got %d", *req.TopN)
	case req.ReturnText != nil && !tei:
		return nil, nil, false, badRequest("return_text", "return_text is TEI's (with texts); with documents, send return_documents")
	case req.ReturnDocuments != nil && tei:
		return nil, nil, false, badRequest("return_documents", "return_documents goes with documents; TEI's texts take return_text")
	case req.Truncate != nil && *req.Truncate:
		return nil, nil, false, badRequest("truncate", "truncate true is not supported: a document that does not fit the model's context beside the query is refused, never cut (false is accepted)")
	case req.RawScores != nil && !*req.RawScores:
		return nil, nil, false, badRequest("raw_scores", "raw_scores false (scores through a sigmoid) is not supported: the scores are the model's own, as llama-server gives them (true is accepted)")
	}
	return &Rerank{Model: req.Model, Query: *req.Query, Documents: docs}, req, tei, nil
}

// rerankDocuments reads the documents: strings, or objects holding a
// text (Jina's and Cohere's {"text": ...}).
func rerankDocuments(raw json.RawMessage, param string) ([]string, error) {
	if isAbsent(raw) {
		return nil, badRequest(param, "%s must be a non-empty array of strings", param)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || len(items) == 0 {
		return nil, badRequest(param, "%s must be a non-empty array of strings", param)
	}
	if len(items) > maxRerankDocuments {
		return nil, badRequest(param, "%s holds %d documents; at most %d", param, len(items), maxRerankDocuments)
	}
	docs := make([]string, len(items))
	for i, it := range items {
		var s string
		if err := json.Unmarshal(it, &s); err != nil {
			var obj struct {
				Text *string `json:"text"`
			}
			dec := json.NewDecoder(bytes.NewReader(it))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&obj); err != nil || obj.Text == nil {
				return nil, badRequest(param, "%s[%d] must be a string or an object holding only a text", param, i)
			}
			s = *obj.Text
		}
		if s == "" {
			return nil, badRequest(param, "%s[%d] is empty", param, i)
		}
		docs[i] = s
	}
	return docs, nil
}

type rerankResult struct {
	Index          int             `json:"index"`
	RelevanceScore *float64        `json:"relevance_score,omitempty"`
	Score          *float64        `json:"score,omitempty"` // TEI's name
	Text           *string         `json:"text,omitempty"`  // TEI's return_text
	Document       *rerankDocument `json:"document,omitempty"`
}

type rerankDocument struct {
	Text string `json:"text"`
}

type rerankList struct {
	Model   string         `json:"model"`
	Object  string         `json:"object"`
	Usage   embeddingUsage `json:"usage"`
	Results []rerankResult `json:"results"`
}

func (s *Server) handleRerank(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	q, req, tei, err := parseRerank(body)
	if err != nil {
		writeError(w, err)
		return
	}
	// TEI's and llama-server's clients name no model: the node's one.
	if q.Model, body, err = s.soleModelFor(q.Model, body); err != nil {
		writeError(w, err)
		return
	}
	m, handled := s.route(w, r, q.Model, body)
	if handled {
		return
	}
	rm, ok := m.(RerankModel)
	if !ok {
		writeError(w, badRequest("model", "model %q is not a reranker", q.Model))
		return
	}
	// Scoring is a forward pass per document: it takes one of the
	// model's slots, as a generation does.
	release, err := s.acquire(r.Context(), q.Model, m)
	if err != nil {
		writeError(w, err)
		return
	}
	defer release()
	start := s.now()
	res, err := rm.Rerank(r.Context(), q)
	if err != nil {
		if r.Context().Err() == nil {
			s.log.Info("api: rerank failed", "model", q.Model, "err", errString(err))
		}
		writeError(w, err)
		return
	}
	if len(res.Scores) != len(q.Documents) {
		writeError(w, fmt.Errorf("api: the model returned %d scores for %d documents", len(res.Scores), len(q.Documents)))
		return
	}
	s.log.Info("api: reranked", "model", q.Model, "documents", len(q.Documents), "prompt_tokens", res.PromptTokens,
		"took", s.now().Sub(start).Round(time.Millisecond), "relayed", r.Header.Get(ForwardedHeader) != "")
	results := make([]rerankResult, len(res.Scores))
	for i := range res.Scores {
		results[i] = rerankResult{Index: i}
		score := &res.Scores[i]
		if tei {
			results[i].Score = score
			if req.ReturnText != nil && *req.ReturnText {
				results[i].Text = &q.Documents[i]
			}
			continue
		}
		results[i].RelevanceScore = score
		if req.ReturnDocuments != nil && *req.ReturnDocuments {
			results[i].Document = &rerankDocument{Text: q.Documents[i]}
		}
	}
	// Best first; a tie keeps the documents' order.
	slices.SortStableFunc(results, func(a, b rerankResult) int {
		return cmp.Compare(res.Scores[b.Index], res.Scores[a.Index])
	})
	if n := req.TopN; n != nil && *n < len(results) {
		results = results[:*n]
	}
	if tei {
		writeJSON(w, http.StatusOK, results)
		return
	}
	writeJSON(w, http.StatusOK, rerankList{Model: q.Model, Object: "list", Results: results,
		Usage: embeddingUsage{PromptTokens: res.PromptTokens, TotalTokens: res.PromptTokens}})
}
