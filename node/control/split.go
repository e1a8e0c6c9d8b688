package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// SplitPinsPath is the REST facade's route, under HTTPPrefix, that sets
// or clears a split model's pins (POST, a SplitPinsRequest; the answer is
// a SplitPlan). It is a meshnode command with no mesh-llm-control/1
// message: the protocol's schema has none for it, so it is served on the
// facade only, to the local owner holding the node's credential.
const SplitPinsPath = "/split/pins"

// SplitPinsRequest is the body of POST /split/pins.
type SplitPinsRequest struct {
	// Model is the split model's name.
	Model string `json:"model"`
	// Pins are "NODE:LO-HI" (NODE an endpoint id, hex, or "self"); none
	// clears the owner's pins, and the planner places every stage.
	Pins []string `json:"pins"`
}

// SplitPlan is a split model's plan after the pins took effect.
type SplitPlan struct {
	Model  string       `json:"model"`
	State  string       `json:"state"`
	Stages []SplitStage `json:"stages"`
	Pins   []string     `json:"pins,omitempty"`
}

// SplitStage is one stage of a SplitPlan.
type SplitStage struct {
	Node        string `json:"node"`
	Layers      string `json:"layers"` // "lo-hi", half-open
	MemoryBytes int64  `json:"memory_bytes"`
}

// SplitPinner sets a split model's pins while it serves: it re-plans and
// reloads the stages and returns the new plan. Pins the model or the
// planner cannot honour, and a model not served split, are errors that
// change nothing; they wrap ErrBadPins or ErrNotSplit.
type SplitPinner interface {
	SetSplitPins(ctx context.Context, model string, pins []string) (SplitPlan, error)
}

// ErrBadPins and ErrNotSplit are what a SplitPinner's errors wrap for a
// request the owner must change (both BAD_REQUEST on the facade).
var (
	ErrBadPins  = errors.New("bad pins")
	ErrNotSplit = errors.New("not a split model")
)

// decodeFacadeJSON reads a facade command's JSON body into v (bounded,
// no unknown fields), or answers BAD_REQUEST naming what it is not.
func decodeFacadeJSON(w http.ResponseWriter, r *http.Request, v any, what string) bool {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		writeHTTPError(w, errorf(ErrBadRequest.Code, "Content-Type %q: send application/json", ct))
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxHTTPBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeHTTPError(w, errorf(ErrBadRequest.Code, "body is not %s: %v", what, err))
		return false
	}
	if _, err := dec.Token(); err != io.EOF {
		writeHTTPError(w, errorf(ErrBadRequest.Code, "body is not %s: trailing data after the JSON object", what))
		return false
	}
	return true
}

// splitPinsTimeout bounds a re-plan: loading a stage reads its layers
// from disk on every node of the plan.
const splitPinsTimeout = 3 * time.Minute

func (s *Server) serveSplitPins(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Splits == nil {
		writeHTTPError(w, errorf(ErrUnavailable.Code, "this node does not serve split models"))
		return
	}
	var req SplitPinsRequest
	if !decodeFacadeJSON(w, r, &req, "a split pins request") {
		return
	}
	if req.Model == "" {
		writeHTTPError(w, errorf(ErrBadRequest.Code, "name the split model"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), splitPinsTimeout)
	defer cancel()
	plan, err := s.cfg.Splits.SetSplitPins(ctx, req.Model, req.Pins)
	if err != nil {
		code := ErrUnavailable.Code
		if errors.Is(err, ErrBadPins) || errors.Is(err, ErrNotSplit) {
			code = ErrBadRequest.Code
		}
		writeHTTPError(w, errorf(code, "%v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(plan)
}

// SplitPins sets (or, with no pins, clears) model's pins on the local
// node and returns its new plan. A refusal is an *Error: BAD_REQUEST for
// pins or a model the node refuses, with its reason.
func (c *HTTPClient) SplitPins(ctx context.Context, model string, pins []string) (SplitPlan, error) {
	if pins == nil {
		pins = []string{}
	}
	body, err := json.Marshal(SplitPinsRequest{Model: model, Pins: pins})
	if err != nil {
		return SplitPlan{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, splitPinsTimeout+5*time.Second)
	defer cancel()
	url := c.base + HTTPPrefix + SplitPinsPath
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return SplitPlan{}, fmt.Errorf("control: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	c.authorize(hr)
	resp, err := c.hc.Do(hr)
	if err != nil {
		return SplitPlan{}, fmt.Errorf("control: POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxHTTPBody))
	if resp.StatusCode != http.StatusOK {
		if e, ok := parseHTTPError(b); ok {
			return SplitPlan{}, e
		}
		if resp.StatusCode == http.StatusNotFound {
			return SplitPlan{}, &Error{Code: ErrUnsupported.Code, Message: "the node does not support split pins (" + url + ")"}
		}
		return SplitPlan{}, fmt.Errorf("control: POST %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	var plan SplitPlan
	if err := json.Unmarshal(b, &plan); err != nil {
		return SplitPlan{}, fmt.Errorf("control: the node's split plan does not decode: %w", err)
	}
	return plan, nil
}
