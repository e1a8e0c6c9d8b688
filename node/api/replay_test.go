package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const replayEnergy = `{"receipt":{"sequence":3},"envelope_hex":"d284"}`

// TestParseReplay: the original request is parsed by the parser of the
// endpoint its fields name, the energy and a disclosed output pass
// through, and each malformed body is a 400 naming what is wrong.
func TestParseReplay(t *testing.T) {
	for _, tc := range []struct {
		name, request string
		check         func(g *Generation) bool
	}{
		{"chat", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`,
			func(g *Generation) bool {
				return len(g.Messages) == 1 && g.Messages[0].Content == "hi" && g.MaxTokens == 3
			}},
		{"completions", `{"model":"tiny","prompt":"once","seed":7,"temperature":0.5}`,
			func(g *Generation) bool { return g.Prompt == "once" && *g.Seed == 7 && *g.Temperature == 0.5 }},
		{"responses", `{"model":"tiny","input":"hello","instructions":"be brief"}`,
			func(g *Generation) bool { return len(g.Messages) == 2 && g.Messages[1].Content == "hello" }},
	} {
		r, err := parseReplay([]byte(`{"request":` + tc.request + `,"energy":` + replayEnergy + `,"output":[5,6]}`))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !tc.check(r.Generation) || string(r.Generation.Body) != tc.request || string(r.Energy) != replayEnergy ||
			len(r.Disclosed) != 2 || r.Disclosed[1] != 6 {
			t.Errorf("%s: parsed %+v %+v", tc.name, r, r.Generation)
		}
	}

	for _, tc := range []struct {
		name, body, param, msg string
	}{
		{"empty", ``, "", "empty"},
		{"not JSON", `{"request":`, "", "not valid JSON"},
		{"an array", `[]`, "", "wrong type"},
		{"no request", `{"energy":` + replayEnergy + `}`, "request", "original request body"},
		{"request not an object", `{"request":"hi","energy":` + replayEnergy + `}`, "request", "original request body"},
		{"no energy", `{"request":{"model":"tiny","prompt":"x"}}`, "energy", "usage.energy"},
		{"energy not an object", `{"request":{"model":"tiny","prompt":"x"},"energy":"d284"}`, "energy", "usage.energy"},
		{"no endpoint", `{"request":{"model":"tiny"},"energy":` + replayEnergy + `}`, "request", "holds 0"},
		{"two endpoints", `{"request":{"model":"tiny","prompt":"x","messages":[]},"energy":` + replayEnergy + `}`, "request", "holds 2"},
		{"bad chat", `{"request":{"model":"tiny","messages":[]},"energy":` + replayEnergy + `}`, "request.messages", "request: messages must hold"},
		{"bad output", `{"request":{"model":"tiny","prompt":"x"},"energy":` + replayEnergy + `,"output":[-1]}`, "output", "wrong type"},
	} {
		_, err := parseReplay([]byte(tc.body))
		var e *Error
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Param != tc.param || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("%s: %v (param %q), want 400 on %q saying %q", tc.name, err, paramOf(e), tc.param, tc.msg)
		}
	}
}

func paramOf(e *Error) string {
	if e == nil {
		return ""
	}
	return e.Param
}

// TestReplayEndpoint: POST /v1/mesh/replay hands the node the parsed
// replay and answers its verdict; it is behind the API key and the body
// bound like every endpoint, holds a generation slot for a local model,
// and is not served to mesh peers.
func TestReplayEndpoint(t *testing.T) {
	h := newHarness(t, Config{APIKey: "sekret", MaxBodyBytes: 1024, MeshAccess: anyPeer{}}, nil)
	node := h.srv.node.(*fakeNode)
	at := 4
	node.replay = &ReplayResult{Verdict: VerdictDiverged, FirstDivergence: &at, Receipt: "ab", Sequence: 3, RequestID: "cd"}
	body := `{"request":{"model":"tiny","prompt":"x"},"energy":` + replayEnergy + `}`
	auth := []string{"Authorization", "Bearer sekret"}

	resp := h.post(t, "/v1/mesh/replay", body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without the API key: %d, want 401", resp.StatusCode)
	}
	resp = h.post(t, "/v1/mesh/replay", body, auth...)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil || resp.StatusCode != http.StatusOK || got["verdict"] != "diverged" ||
		got["first_divergence"] != float64(4) || got["disclosure"] != nil {
		t.Fatalf("replay: %d %s", resp.StatusCode, b)
	}
	if len(node.replays) != 1 || node.replays[0].Generation.Prompt != "x" {
		t.Fatalf("the node saw %+v", node.replays)
	}
	if n := h.srv.queued("tiny"); n != 0 {
		t.Fatalf("%d generations still hold a slot after the replay", n)
	}

	// A chat request naming no model (as llama-server's clients send it)
	// is replayed against the node's one model, as it was served.
	resp = h.post(t, "/v1/mesh/replay", `{"request":{"messages":[{"role":"user","content":"hi"}]},"energy":`+replayEnergy+`}`, auth...)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(node.replays) != 2 || node.replays[1].Generation.Model != "tiny" {
		t.Fatalf("replay naming no model: %d %s; the node saw %+v", resp.StatusCode, b, node.replays)
	}

	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"too large", `{"request":{"model":"tiny","prompt":"` + strings.Repeat("x", 2048) + `"},"energy":{}}`, http.StatusRequestEntityTooLarge, "request_too_large"},
		{"malformed", `{"request":1}`, http.StatusBadRequest, "invalid_request"},
		{"the node's error", strings.Replace(body, "tiny", "elsewhere", 1), http.StatusNotFound, "receipt_not_ours"},
	} {
		if tc.code == "receipt_not_ours" {
			node.replay = nil
		}
		resp := h.post(t, "/v1/mesh/replay", tc.body, auth...)
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		decodeJSON(t, resp.Body, &e)
		resp.Body.Close()
		if resp.StatusCode != tc.status || e.Error.Code != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, resp.StatusCode, e.Error.Code, tc.status, tc.code)
		}
	}
	h.srv.mu.Lock()
	_, keyed := h.srv.limits["elsewhere"]
	h.srv.mu.Unlock()
	if keyed {
		t.Error("a replay of a model this node does not serve made it a generation queue")
	}

	rec := httptest.NewRecorder()
	req, _ := http.NewRequestWithContext(context.WithValue(t.Context(), meshPeerKey{}, testID(9)),
		http.MethodPost, "/v1/mesh/replay", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.srv.MeshHandler().ServeHTTP(rec, req)
	if rec.Code != http.StatusNotFound {
		t.Errorf("replay through the mesh handler: %d, want 404", rec.Code)
	}
}
