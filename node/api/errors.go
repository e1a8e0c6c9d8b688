package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Error is an error in OpenAI's shape, with the HTTP status it is served
// with. Models return one (wrapped or not) to choose the status a failure
// gets; any other error is a 500.
type Error struct {
	Status  int
	Type    string // invalid_request_error, not_found_error, ...
	Code    string // machine-readable, e.g. model_not_found
	Param   string // the request field at fault, when there is one
	Message string
	// RetryAfter, when set, is sent as a Retry-After header (429, 503).
	RetryAfter time.Duration
	// Details are extra, structured facts (the router's reasons for a 422).
	Details any
	// PromptTokens and ContextTokens, on a prompt too long for the
	// context (context_length_exceeded), are the prompt's tokens (at
	// least) and the context's, as llama-server's n_prompt_tokens and
	// n_ctx (its clients read them to cut the prompt).
	PromptTokens, ContextTokens int
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// Errorf builds an *Error.
func Errorf(status int, typ, code, format string, args ...any) *Error {
	return &Error{Status: status, Type: typ, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Common errors, as constructors so each carries its own message.
func badRequest(param, format string, args ...any) *Error {
	e := Errorf(http.StatusBadRequest, "invalid_request_error", "invalid_request", format, args...)
	e.Param = param
	return e
}

type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   any    `json:"param"`
	Code    string `json:"code"`
	Details any    `json:"details,omitempty"`
	NPrompt int    `json:"n_prompt_tokens,omitempty"`
	NCtx    int    `json:"n_ctx,omitempty"`
}

func (e *Error) body() errorBody {
	var param any
	if e.Param != "" {
		param = e.Param
	}
	return errorBody{Error: errorObject{Message: e.Message, Type: e.Type, Param: param, Code: e.Code, Details: e.Details,
		NPrompt: e.PromptTokens, NCtx: e.ContextTokens}}
}

// asError maps any error to the *Error it is served as.
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var maxBytes *http.MaxBytesError
	if errors.As(err, &maxBytes) {
		return Errorf(http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
			"request body is larger than %d bytes", maxBytes.Limit)
	}
	return Errorf(http.StatusInternalServerError, "server_error", "internal_error", "%v", err)
}

func writeError(w http.ResponseWriter, err error) {
	e := asError(err)
	noteError(w, e.Message)
	if e.RetryAfter > 0 {
		secs := int((e.RetryAfter + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	if dw, ok := unwrapTo[*dialectWriter](w); ok {
		writeJSON(w, e.Status, dw.body(e))
		return
	}
	writeJSON(w, e.Status, e.body())
}

// unwrapTo finds the writer of type T that w is or wraps (through
// Unwrap, as http.ResponseController finds the connection's).
func unwrapTo[T http.ResponseWriter](w http.ResponseWriter) (T, bool) {
	for {
		if t, ok := w.(T); ok {
			return t, true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			var zero T
			return zero, false
		}
		w = u.Unwrap()
	}
}

// dialectWriter marks a response to an API whose errors have their own
// shape (Anthropic's Messages API, Ollama's API): every error on its way
// out, from authentication to the generation, is written as body makes
// it, which that API's clients read.
type dialectWriter struct {
	http.ResponseWriter
	body func(e *Error) any
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *dialectWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// errorDialects gives the paths of the APIs with their own error shapes
// their dialect, whichever layer refuses a request.
func errorDialects(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case p == "/v1/messages" || strings.HasPrefix(p, "/v1/messages/"):
			w = &dialectWriter{w, func(e *Error) any { return e.anthropicBody() }}
		case ollamaPath(p):
			w = &dialectWriter{w, func(e *Error) any { return ollamaError{e.Message} }}
		}
		next.ServeHTTP(w, r)
	})
}

// anthropicErrorBody is Anthropic's error object: {"type": "error",
// "error": {"type", "message"}}, with meshnode's code (and the router's
// details) beside them.
type anthropicErrorBody struct {
	Type  string               `json:"type"`
	Error anthropicErrorObject `json:"error"`
}

type anthropicErrorObject struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	Code    string `json:"code,omitempty"`
	Details any    `json:"details,omitempty"`
}

func (e *Error) anthropicBody() anthropicErrorBody {
	return anthropicErrorBody{Type: "error", Error: anthropicErrorObject{Type: anthropicErrorType(e.Status), Message: e.Message, Code: e.Code, Details: e.Details}}
}

// anthropicErrorType is Anthropic's error type for an HTTP status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
