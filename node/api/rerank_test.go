package api

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// TestRerank: Jina's and Cohere's request (documents, as strings or
// {"text"} objects) is answered in llama-server's shape, results best
// first with their indexes, cut to top_n, documents returned when asked;
// TEI's (texts) with its bare array of {index, score}, texts when asked;
// every llama-server path answers; a request that names no model is for
// the node's one model.
func TestRerank(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	type result struct {
		Index          int      `json:"index"`
		RelevanceScore *float64 `json:"relevance_score"`
		Score          *float64 `json:"score"`
		Text           *string  `json:"text"`
		Document       *struct {
			Text string `json:"text"`
		} `json:"document"`
	}
	var list struct {
		Model   string   `json:"model"`
		Object  string   `json:"object"`
		Results []result `json:"results"`
		Usage   struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		} `json:"usage"`
	}
	// "cat" shares 3 bytes with "a cat", 2 with "at home", 0 with "zzz".
	for _, path := range []string{"/v1/rerank", "/rerank", "/v1/reranking", "/reranking"} {
		code, _, b := ollamaPost(t, h, path, `{"model":"tiny","query":"cat","documents":["zzz","at home",{"text":"a cat"}],"top_n":2,"return_documents":true}`)
		if err := json.Unmarshal(b, &list); err != nil || code != 200 || list.Model != "tiny" || list.Object != "list" || len(list.Results) != 2 {
			t.Fatalf("%s: %d %s", path, code, b)
		}
		r0, r1 := list.Results[0], list.Results[1]
		if r0.Index != 2 || r1.Index != 1 || r0.RelevanceScore == nil || *r0.RelevanceScore < *r1.RelevanceScore || r0.Score != nil ||
			r0.Document == nil || r0.Document.Text != "a cat" || list.Usage.PromptTokens != 3*3+3+7+5 || list.Usage.TotalTokens != list.Usage.PromptTokens {
			t.Fatalf("%s: %s", path, b)
		}
	}
	if q := h.model.reranks[0]; q.Query != "cat" || len(q.Documents) != 3 || q.Documents[2] != "a cat" {
		t.Fatalf("the model got %+v", q)
	}
	code, _, b := ollamaPost(t, h, "/rerank", `{"query":"cat","texts":["zzz","a cat"],"return_text":true}`)
	var tei []result
	if err := json.Unmarshal(b, &tei); err != nil || code != 200 || len(tei) != 2 || tei[0].Index != 1 || tei[0].Score == nil ||
		tei[0].RelevanceScore != nil || tei[0].Text == nil || *tei[0].Text != "a cat" {
		t.Fatalf("TEI: %d %s", code, b)
	}
	if h.model.reranks[len(h.model.reranks)-1].Model != "tiny" {
		t.Fatalf("no model named: %+v", h.model.reranks[len(h.model.reranks)-1])
	}
}

// TestRerankRefusals: a malformed or unhonoured request is refused with
// 400 naming the field.
func TestRerankRefusals(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	for body, param := range map[string]string{
		`{"model":"tiny","documents":["a"]}`:                                              "query",
		`{"model":"tiny","query":"","documents":["a"]}`:                                   "query",
		`{"model":"tiny","query":"q"}`:                                                    "documents",
		`{"model":"tiny","query":"q","documents":[]}`:                                     "documents",
		`{"model":"tiny","query":"q","documents":[""]}`:                                   "documents",
		`{"model":"tiny","query":"q","documents":[{"text":"a","title":"b"}]}`:             "documents",
		`{"model":"tiny","query":"q","documents":[3]}`:                                    "documents",
		`{"model":"tiny","query":"q","documents":["a"],"texts":["a"]}`:                    "texts",
		`{"model":"tiny","query":"q","documents":["a"],"top_n":0}`:                        "top_n",
		`{"model":"tiny","query":"q","documents":["a"],"return_text":true}`:               "return_text",
		`{"model":"tiny","query":"q","texts":["a"],"return_documents":true}`:              "return_documents",
		`{"model":"tiny","query":"q","texts":["a"],"truncate":true}`:                      "truncate",
		`{"model":"tiny","query":"q","texts":["a"],"raw_scores":false}`:                   "raw_scores",
		`{"model":"tiny","query":"q","documents":["a"],"rank_fields":["x"]}`:              "rank_fields",
		`{"model":"tiny","query":"q","documents":["a"],"top_n":1,"max_chunks_per_doc":2}`: "max_chunks_per_doc",
	} {
		resp := h.post(t, "/v1/rerank", body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error struct {
				Param string `json:"param"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != 400 || e.Error.Param != param {
			t.Errorf("%s: %d %s, want a refusal of %s", body, resp.StatusCode, b, param)
		}
	}
	docs := `["` + strings.Repeat(`a","`, maxRerankDocuments) + `a"]`
	resp := h.post(t, "/v1/rerank", `{"model":"tiny","query":"q","documents":`+docs+`}`)
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("%d documents: %d", maxRerankDocuments+1, resp.StatusCode)
	}
}

// FuzzParseRerank: no body makes the parser panic, and a request it
// accepts holds a query and 1 to maxRerankDocuments non-empty documents.
func FuzzParseRerank(f *testing.F) {
	for _, seed := range []string{
		`{"model":"tiny","query":"cat","documents":["zzz","at home",{"text":"a cat"}],"top_n":2,"return_documents":true}`,
		`{"query":"cat","texts":["zzz","a cat"],"return_text":true,"truncate":false,"raw_scores":true}`,
		``, `null`, `{"query":1}`, `{"query":"q","documents":[{"text":null}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		q, _, _, err := parseRerank(body)
		if err != nil {
			return
		}
		if q.Query == "" || len(q.Documents) == 0 || len(q.Documents) > maxRerankDocuments {
			t.Fatalf("accepted %+v", q)
		}
		for _, d := range q.Documents {
			if d == "" {
				t.Fatalf("accepted an empty document: %+v", q)
			}
		}
	})
}
