package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
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
}

func (e *Error) body() errorBody {
	var param any
	if e.Param != "" {
		param = e.Param
	}
	return errorBody{Error: errorObject{Message: e.Message, Type: e.Type, Param: param, Code: e.Code, Details: e.Details}}
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
	writeJSON(w, e.Status, e.body())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
