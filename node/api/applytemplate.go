package api

import (
	"context"
	"net/http"
)

// TemplateModel is a Model that renders a chat as it would serve it,
// without generating: POST /apply-template.
type TemplateModel interface {
	Model
	// Render is the prompt g is served with: its messages (and tools)
	// through the model's chat template, and its length in tokens. An
	// error is the request's answer.
	Render(ctx context.Context, g *Generation) (prompt string, tokens int, err error)
}

// renderBody answers for the prompt a body would be served with, nothing
// generated: the body read and parsed (parse may give a check of it
// against the model it names), routed (relayed to a host when only a peer
// serves its model), its tools readied as a serve readies them, and
// rendered through the model's chat template. ok is false when the
// answer, a relayed one or an error, has been written.
func (s *Server) renderBody(w http.ResponseWriter, r *http.Request, parse func(body []byte) (*Generation, func(Model) error, error)) (prompt string, tokens int, ok bool) {
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err)
		return "", 0, false
	}
	g, check, err := parse(body)
	if err == nil {
		body, err = s.resolveModel(g, body)
	}
	if err != nil {
		writeError(w, err)
		return "", 0, false
	}
	m, handled := s.route(w, r, g.Model, body)
	if handled {
		return "", 0, false
	}
	tm, ok := m.(TemplateModel)
	if !ok {
		err = Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_model", "model %q renders no chat template", g.Model)
	}
	if err == nil && check != nil {
		err = check(m)
	}
	if err == nil {
		_, _, err = setupTools(m, g)
	}
	if err == nil {
		prompt, tokens, err = tm.Render(r.Context(), g)
	}
	if err != nil {
		writeError(w, err)
		return "", 0, false
	}
	return prompt, tokens, true
}

// handleApplyTemplate is POST /apply-template, llama.cpp server's: a chat
// completions body, answered with {"prompt"} — the text the model would
// be given for it (tools rendered as the request would have them), and
// nothing generated.
func (s *Server) handleApplyTemplate(w http.ResponseWriter, r *http.Request) {
	prompt, _, ok := s.renderBody(w, r, func(body []byte) (*Generation, func(Model) error, error) {
		g, _, err := parseChat(body)
		if err != nil {
			return nil, nil, err
		}
		return g, func(m Model) error { return applyThinking(m, g) }, nil
	})
	if ok {
		writeJSON(w, http.StatusOK, map[string]string{"prompt": prompt})
	}
}
