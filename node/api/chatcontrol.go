package api

import (
	"io"
	"net/http"
)

// llama-server's POST /v1/chat/completions/control acts on a running
// chat completion: {"id": …, "action": "reasoning_end"} ends its
// reasoning block, where the completion armed it (reasoning_control).
// A node fixes a serve's reasoning budget (thinking_budget_tokens, a
// grammar) when the serve starts and cannot change it mid-answer, so it
// refuses the action: 501, after checking the body, so that a client
// learns what it asked for is not done rather than that it was wrong.

// chatControl is the control's body.
type chatControl struct {
	ID     string `json:"id"`
	Action string `json:"action"`
}

// maxControlBody bounds the control's body.
const maxControlBody = 4096

func (s *Server) handleChatControl(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxControlBody+1))
	if err != nil {
		writeError(w, badRequest("", "reading the body: %v", err))
		return
	}
	if _, err := parseChatControl(body); err != nil {
		writeError(w, asError(err))
		return
	}
	writeError(w, Errorf(http.StatusNotImplemented, "not_supported_error", "not_supported",
		"reasoning_end is not supported: a node fixes an answer's reasoning budget when it starts (thinking_budget_tokens) and cannot end its reasoning mid-answer; stop the answer instead (close the stream)"))
}

// parseChatControl reads and checks a control's body.
func parseChatControl(body []byte) (chatControl, error) {
	var c chatControl
	if len(body) > maxControlBody {
		return c, badRequest("", "the body is over %d bytes", maxControlBody)
	}
	if err := decodeBody(body, &c); err != nil {
		return c, err
	}
	if err := checkFields(body, &c, "POST /v1/chat/completions/control"); err != nil {
		return c, err
	}
	switch {
	case c.ID == "":
		return c, badRequest("id", "id names the running chat completion (its chatcmpl- id)")
	case c.Action != "reasoning_end":
		return c, badRequest("action", "action %q is not one: reasoning_end is llama-server's only", c.Action)
	}
	return c, nil
}
