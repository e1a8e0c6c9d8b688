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

// handleApplyTemplate is POST /apply-template, llama.cpp server's: a chat
// completions body, answered with {"prompt"} — the text the model would
// be given for it (tools rendered as the request would have them), and
// nothing generated.
func (s *Server) handleApplyTemplate(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	g, req, err := parseChat(body)
	if err != nil {
		writeError(w, err)
		return
	}
	m, handled := s.route(w, r, g.Model, body)
	if handled {
		return
	}
	tm, ok := m.(TemplateModel)
	if !ok {
		writeError(w, Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_model", "model %q renders no chat template", g.Model))
		return
	}
	if req.tools.active() {
		format, err := toolFormat(m, g.Model)
		if err == nil {
			_, err = forceTools(g, format)
		}
		if err != nil {
			writeError(w, err)
			return
		}
	}
	prompt, _, err := tm.Render(r.Context(), g)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": prompt})
}
