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

// templateModel is m as a TemplateModel, or why it is not one.
func templateModel(m Model, name string) (TemplateModel, error) {
	tm, ok := m.(TemplateModel)
	if !ok {
		return nil, Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_model", "model %q renders no chat template", name)
	}
	return tm, nil
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
	tm, err := templateModel(m, g.Model)
	if err != nil {
		writeError(w, err)
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
