package api

import (
	"encoding/json"
	"net/http"
)

// llama.cpp's code-infill endpoint, POST /infill, which editors' plugins
// speak (llama.vim, llama.vscode): the text before and after the cursor,
// other files' text as context, and the start of the middle (prompt);
// the rest is /completion's, and so is the answer. The node composes the
// fill-in-the-middle prompt as llama-server does (Generation.Infill).

// infillRequest is /infill's body: /completion's, with the text around
// the gap.
type infillRequest struct {
	llamaCompletionRequest
	InputPrefix *string         `json:"input_prefix"`
	InputSuffix *string         `json:"input_suffix"`
	InputExtra  json.RawMessage `json:"input_extra"`
}

// maxInfillChunks bounds input_extra: editors send a ring of recent
// chunks (llama.vim keeps 16).
const maxInfillChunks = 256

func parseInfill(body []byte) (*Generation, *infillRequest, error) {
	var req infillRequest
	if err := decodeBody(body, &req); err != nil {
		return nil, nil, err
	}
	if err := checkFieldsWith(body, &req, "POST /infill", llamaRefusals); err != nil {
		return nil, nil, err
	}
	g, err := req.generation(body)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case req.InputPrefix == nil:
		return nil, nil, badRequest("input_prefix", "input_prefix is required: the text before the gap (a string; it may be empty)")
	case req.InputSuffix == nil:
		return nil, nil, badRequest("input_suffix", "input_suffix is required: the text after the gap (a string; it may be empty)")
	}
	in := &Infill{Prefix: *req.InputPrefix, Suffix: *req.InputSuffix}
	if !isAbsent(req.Prompt) && json.Unmarshal(req.Prompt, &g.Prompt) != nil {
		return nil, nil, badRequest("prompt", "prompt must be a string: the start of the middle, after input_prefix (token ids are not supported on /infill)")
	}
	if !isAbsent(req.InputExtra) {
		var chunks []struct {
			Filename *string `json:"filename"`
			Text     *string `json:"text"`
		}
		if err := json.Unmarshal(req.InputExtra, &chunks); err != nil {
			return nil, nil, badRequest("input_extra", "input_extra must be an array of {\"filename\": string, \"text\": string}")
		}
		if len(chunks) > maxInfillChunks {
			return nil, nil, badRequest("input_extra", "input_extra holds %d chunks, at most %d", len(chunks), maxInfillChunks)
		}
		for i, c := range chunks {
			if c.Text == nil {
				return nil, nil, badRequest("input_extra", "input_extra[%d].text is required", i)
			}
			ch := InfillChunk{Filename: "tmp", Text: *c.Text} // llama-server's name for a chunk with none
			if c.Filename != nil {
				ch.Filename = *c.Filename
			}
			in.Extra = append(in.Extra, ch)
		}
	}
	g.Infill = in
	return g, &req, nil
}

func (s *Server) handleInfill(w http.ResponseWriter, r *http.Request) {
	var req *infillRequest
	m, g, ok := s.accept(w, r, func(body []byte) (g *Generation, err error) {
		g, req, err = parseInfill(body)
		return g, err
	})
	if ok {
		s.answerLlama(w, r, m, g, &req.llamaCompletionRequest)
	}
}
