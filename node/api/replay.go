package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
)

// Replay is a POST /v1/mesh/replay as the node receives it: a generation
// re-run against the receipt its answer carried.
type Replay struct {
	// Generation is the original request, parsed as its endpoint parses
	// it (Body is that request's raw JSON).
	Generation *Generation
	// Energy is the usage.energy object the answer carried, as sent.
	Energy json.RawMessage
	// Disclosed is an output disclosed for the receipt earlier, as token
	// ids; nil if none. With it, a re-run that differs from an output that
	// opens the commitment is a divergence, not merely not replayable.
	Disclosed []uint32
}

// Replay verdicts (mesh/1 §6.4).
const (
	VerdictVerified      = "verified"
	VerdictDiverged      = "diverged"
	VerdictNotReplayable = "not_replayable"
)

// ReplayResult is the answer to a replay.
type ReplayResult struct {
	// Verdict is VerdictVerified, VerdictDiverged or VerdictNotReplayable.
	Verdict string `json:"verdict"`
	// FirstDivergence is the first token index at which the re-run and the
	// disclosed output part (diverged only).
	FirstDivergence *int `json:"first_divergence,omitempty"`
	// Reason says why the serve is not replayable.
	Reason string `json:"reason,omitempty"`
	// CutShort and PrefixTokens: the receipt says the serve was cut short
	// (receipt.CutShort) after PrefixTokens tokens, so only the re-run's
	// first PrefixTokens were held to its commitment (verified only).
	CutShort     string `json:"cut_short,omitempty"`
	PrefixTokens int    `json:"prefix_tokens,omitempty"`
	// Receipt is the receipt's envelope content id, Sequence its place in
	// the steward's chain, Steward the sealing node's did:key.
	Receipt  string `json:"receipt"`
	Sequence uint64 `json:"sequence"`
	Steward  string `json:"steward"`
	// RequestID is the receipt's request id; ReplayedRequestID the one the
	// node derived from the request shown (they differ when the request is
	// not the receipt's).
	RequestID         string `json:"request_id"`
	ReplayedRequestID string `json:"replayed_request_id,omitempty"`
	// Backend and Recipe are what the receipt names.
	Backend string `json:"backend"`
	Recipe  string `json:"recipe"`
	// Disclosure opens the receipt's output commitment (verified only):
	// the opening, the prompt payload digest and the output token ids.
	Disclosure any `json:"disclosure,omitempty"`
}

// replayBody is the body of POST /v1/mesh/replay.
type replayBody struct {
	Request json.RawMessage `json:"request"`
	Energy  json.RawMessage `json:"energy"`
	Output  []uint32        `json:"output"`
	// Endpoint names the endpoint the request was sent to; without it,
	// the request's fields say (replayParsers).
	Endpoint string `json:"endpoint"`
	// Choice is the index of the choice whose receipt Energy is, for a
	// request answered with several (n, a batch of prompts).
	Choice *int `json:"choice"`
}

// replayParsers are the parsers of the endpoints a replay's request may
// have been sent to.
var replayParsers = map[string]func([]byte) (*Generation, error){
	"/v1/chat/completions": func(b []byte) (*Generation, error) { g, _, err := parseChat(b); return g, err },
	"/v1/completions":      func(b []byte) (*Generation, error) { g, _, err := parseCompletion(b); return g, err },
	"/v1/responses":        func(b []byte) (*Generation, error) { g, _, err := parseResponses(b); return g, err },
	"/v1/messages":         func(b []byte) (*Generation, error) { g, _, err := parseMessages(b); return g, err },
	"/api/chat":            func(b []byte) (*Generation, error) { g, _, err := parseOllamaChat(b); return g, err },
	"/api/generate":        func(b []byte) (*Generation, error) { g, _, err := parseOllamaGenerate(b); return g, err },
	"/completion":          func(b []byte) (*Generation, error) { g, _, err := parseLlamaCompletion(b); return g, err },
	"/infill":              func(b []byte) (*Generation, error) { g, _, err := parseInfill(b); return g, err },
}

// parseReplay parses a replay body; the original request is parsed by
// the parser of its endpoint.
func parseReplay(body []byte) (*Replay, error) {
	var b replayBody
	if err := decodeBody(body, &b); err != nil {
		return nil, err
	}
	if isAbsent(b.Request) || b.Request[0] != '{' {
		return nil, badRequest("request", "request must be the original request body: a chat/completions, completions, responses or messages JSON object")
	}
	if isAbsent(b.Energy) || b.Energy[0] != '{' {
		return nil, badRequest("energy", "energy must be the usage.energy object the answer carried: {\"receipt\": ..., \"envelope_hex\": ...}")
	}
	endpoint, err := replayEndpoint(b)
	if err != nil {
		return nil, err
	}
	g, err := replayParsers[endpoint](b.Request)
	if err != nil && b.Endpoint == "" && endpoint == "/v1/chat/completions" {
		// Chat completions', Anthropic's Messages API's and Ollama's
		// chat bodies all hold messages: the others' readings are tried
		// where chat's refuses the body. (A body two take is one
		// generation either way, but for a final assistant message,
		// which Anthropic's continues: such a request needs its
		// endpoint named.)
		for _, other := range []string{"/v1/messages", "/api/chat"} {
			if og, oerr := replayParsers[other](b.Request); oerr == nil {
				g, err = og, nil
				break
			}
		}
	}
	if err != nil {
		if e := (*Error)(nil); errors.As(err, &e) {
			e.Message = "request: " + e.Message
			if e.Param != "" {
				e.Param = "request." + e.Param
			}
		}
		return nil, err
	}
	if g, err = replayChoice(g, b.Choice); err != nil {
		return nil, err
	}
	return &Replay{Generation: g, Energy: b.Energy, Disclosed: b.Output}, nil
}

// replayChoice is the generation of the choice a replay names: a request
// answered with several choices was served as its Choices, each sealed
// on its own.
func replayChoice(g *Generation, choice *int) (*Generation, error) {
	gs := g.Choices()
	switch {
	case choice == nil && len(gs) > 1:
		return nil, badRequest("choice", "the request was answered with %d choices (n, or a batch of prompts), each sealed on its own: name the one whose energy this is (choice: its index)", len(gs))
	case choice == nil:
		return g, nil
	case *choice < 0 || *choice >= len(gs):
		return nil, badRequest("choice", "choice %d is not one of the request's %d choices", *choice, len(gs))
	}
	return gs[*choice], nil
}

// replayEndpoint is the endpoint whose parser reads a replay's request:
// the one named, else the one its fields name. An /infill request (its
// input_prefix says so) is read as one where /completion is named, since
// the two answer in the same shape and a saved answer cannot tell them
// apart.
func replayEndpoint(b replayBody) (string, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b.Request, &fields); err != nil {
		return "", badRequest("request", "request: %v", err)
	}
	if _, infill := fields["input_prefix"]; infill && (b.Endpoint == "" || b.Endpoint == "/completion") {
		return "/infill", nil
	}
	if b.Endpoint != "" {
		if _, ok := replayParsers[b.Endpoint]; !ok {
			return "", badRequest("endpoint", "endpoint %q is not a generation endpoint: name /v1/chat/completions, /v1/completions, /v1/responses, /v1/messages, /api/chat, /api/generate, /completion or /infill", b.Endpoint)
		}
		return b.Endpoint, nil
	}
	var endpoints []string
	for k, endpoint := range map[string]string{"messages": "/v1/chat/completions", "prompt": "/v1/completions", "input": "/v1/responses"} {
		if _, ok := fields[k]; ok {
			endpoints = append(endpoints, endpoint)
		}
	}
	if len(endpoints) != 1 {
		return "", badRequest("request", "request must hold exactly one of messages (chat/completions, messages), prompt (completions) or input (responses); it holds %d", len(endpoints))
	}
	if _, ok := fields["n_predict"]; ok && endpoints[0] == "/v1/completions" {
		return "/completion", nil // llama.cpp's field; a /v1/completions request that sets it is replayed naming its endpoint
	}
	return endpoints[0], nil
}

func isAbsent(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// handleReplay answers POST /v1/mesh/replay. The re-run holds one of the
// model's generation slots, as a generation does.
func (s *Server) handleReplay(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	rp, err := parseReplay(body)
	if err == nil {
		_, err = s.resolveModel(rp.Generation, rp.Generation.Body)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	// A model this node does not serve runs nothing (the node answers
	// why), so only a local one is queued for, and the limiter is never
	// keyed by a name a client made up.
	if m, local := s.registry.Local(rp.Generation.Model); local {
		// A tool_choice that requires a call was held to a grammar of
		// the model's call format: the re-run is held to it too.
		if _, _, err := setupTools(m, rp.Generation); err != nil {
			writeError(w, err)
			return
		}
		// So was a thinking switch, which the template wrote into the
		// prompt.
		if err := applyThinking(m, rp.Generation); err != nil {
			writeError(w, err)
			return
		}
		release, err := s.acquire(r.Context(), rp.Generation.Model, m)
		if err != nil {
			writeError(w, err)
			return
		}
		defer release()
	}
	res, err := s.node.Replay(r.Context(), rp)
	if err != nil {
		s.log.Warn("api: replay failed", "model", rp.Generation.Model, "err", errString(err))
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
