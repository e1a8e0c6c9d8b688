package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestStatusSplit: meshcli status prints a split model's plan, stage by
// stage, and the state of one that waits for a plan.
func TestStatusSplit(t *testing.T) {
	self, peer := strings.Repeat("a", 64), strings.Repeat("b", 64)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"node_id":"` + self + `","version":"test","uptime":"1s","models":[
			{"name":"big","context":4096,"size_bytes":1073741824,"split":{"state":"serving","stages":[
				{"node":"` + self + `","layers":"0-20","memory_bytes":536870912},
				{"node":"` + peer + `","layers":"20-32","memory_bytes":402653184}]}},
			{"name":"bigger","context":4096,"size_bytes":1073741824,"split":{"state":"waiting for a plan: 2 GiB is missing"}}],
			"peers":[],"meter":{"selected":"estimator"},"grants":{"honoured":true}}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	out := newCLI(t, srv.URL).ok("status")
	for _, want := range []string{"Split big: serving", "0-20", "20-32", "(this node)", short(peer), "Split bigger: waiting for a plan: 2 GiB is missing"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	t.Log(out)
}
