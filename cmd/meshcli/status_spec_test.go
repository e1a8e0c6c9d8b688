package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestStatusSpeculation: meshcli status prints how each drafting model's
// windows are priced, and what sampled requests do with the prices: name
// them, or sample plainly where they say speculation cannot pay.
func TestStatusSpeculation(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"node_id":"` + strings.Repeat("a", 64) + `","version":"test","uptime":"1s","models":[
			{"name":"fortunes","context":256,"size_bytes":1024,"draft":"lookup","speculation":{"prices":"measured","measured_at":"2026-12-04T01:02:03Z","cost":0,"row":0.05,"sampled_cost":0,"sampled_row":0.51,"sampled_draft":"lookup@c0.00v0.51"}},
			{"name":"fortunes-f16","context":256,"size_bytes":2048,"draft":"meshnode-fortunes-draft","speculation":{"prices":"measured","cost":0.46,"row":0.08,"catch_up":0.6,"first":0.25,"sampled_cost":0.48,"sampled_row":0.4,"sampled_draft":""}},
			{"name":"fortunes-1b","context":256,"size_bytes":4096,"draft":"meshnode-fortunes-q8_0","speculation":{"prices":"measured","cost":0.01,"row":0.07,"catch_up":0.01,"sampled_cost":0.02,"sampled_row":0.06,"sampled_first":0.01,"sampled_catch_up":0.05,"sampled_draft":"ab12@c0.02v0.06f0.01u0.03"}},
			{"name":"plain","context":256,"size_bytes":1024}],
			"peers":[],"meter":{"selected":"estimator"},"grants":{"honoured":true}}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	out := newCLI(t, srv.URL).ok("status")
	for _, want := range []string{
		"Speculation fortunes (lookup): prices measured at 2026-12-04T01:02:03Z (greedy c 0.00, v 0.05; sampled c 0.00, v 0.51); sampled requests name lookup@c0.00v0.51",
		"Speculation fortunes-f16 (meshnode-fortunes-draft): prices measured (greedy c 0.46, v 0.08, catch-up 0.60, first step +0.25; sampled c 0.48, v 0.40); sampled requests sample plainly (the prices say speculation cannot pay)",
		"Speculation fortunes-1b (meshnode-fortunes-q8_0): prices measured (greedy c 0.01, v 0.07, catch-up 0.01; sampled c 0.02, v 0.06, first step +0.01, catch-up 0.05); sampled requests name ab12@c0.02v0.06f0.01u0.03",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Speculation plain") {
		t.Errorf("status prints speculation for a model without a draft:\n%s", out)
	}
}
