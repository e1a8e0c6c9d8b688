package control_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/wire/nodev1"

	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/control/controltest"
)

// facade serves r's REST facade on loopback and returns a client of it.
func facade(t *testing.T, r *rig) (*control.HTTPClient, *httptest.Server) {
	t.Helper()
	srv := r.HTTP(t)
	return control.NewHTTPClient(srv.URL, control.HTTPAuth{Secret: r.Secret}, srv.Client(), control.ClientTimeouts{}), srv
}

// TestHTTPFacade: every command through the REST facade, with the same
// results and typed errors as over QUIC.
func TestHTTPFacade(t *testing.T) {
	r := newRig(t)
	c, _ := facade(t, r)
	ctx := context.Background()

	snap, err := c.GetConfig(ctx)
	if err != nil || snap.GetRevision() != 0 || snap.GetHostname() != "node-b" {
		t.Fatalf("get: %v, %v", snap, err)
	}
	w, err := c.WatchConfig(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if first, err := w.Next(ctx); err != nil || first.GetSnapshot().GetRevision() != 0 {
		t.Fatalf("watch snapshot: %v, %v", first, err)
	}
	cfg := &nodev1.NodeConfigSnapshot{Version: 3, Models: []*nodev1.NodeModelEntry{{Model: "alpha"}}}
	res, err := c.ApplyConfig(ctx, 0, cfg)
	if err != nil || !res.GetSuccess() || res.GetCurrentRevision() != 1 {
		t.Fatalf("apply: %v, %v", res, err)
	}
	up, err := w.Next(ctx)
	if err != nil || up.GetUpdate().GetRevision() != 1 || !proto.Equal(up.GetUpdate().GetConfig(), cfg) {
		t.Fatalf("watch update: %v, %v", up, err)
	}
	_, err = c.ApplyConfig(ctx, 0, cfg)
	var e *control.Error
	if !errors.As(err, &e) || e.Code != control.ErrRevisionConflict.Code || e.CurrentRevision != 1 {
		t.Fatalf("stale apply: %v", err)
	}
	inv, err := c.RefreshInventory(ctx)
	if err != nil || len(inv.GetInventory().GetEntries()) != 3 || inv.GetInventory().GetDisposition() != dispExecuted {
		t.Fatalf("refresh: %v, %v", inv, err)
	}
	a, err := c.Lifecycle(ctx, control.Intent{Kind: control.IntentDrain, Model: modelRef("zeta"), DrainTimeout: 1500 * time.Millisecond})
	if err != nil || a.State != control.StateUnloaded || a.IntentID == "" {
		t.Fatalf("drain: %+v, %v", a, err)
	}
	_, err = c.Lifecycle(ctx, control.Intent{Kind: control.IntentEnsure, Model: modelRef("nonesuch")})
	wantCode(t, err, control.ErrBadRequest)
}

// TestHTTPFacadeRefusals: the facade is for this machine's owner only.
func TestHTTPFacadeRefusals(t *testing.T) {
	r := newRig(t)
	h := r.Server.HTTPHandler()
	do := func(method, path, body string, mutate func(*http.Request)) (int, string) {
		req := httptest.NewRequest(method, "http://127.0.0.1:9337"+path, strings.NewReader(body))
		req.RemoteAddr = "127.0.0.1:40000"
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set(control.SecretHeader, r.Secret)
		if mutate != nil {
			mutate(req)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	tests := []struct {
		name         string
		method, path string
		body         string
		mutate       func(*http.Request)
		status       int
		code         string
	}{
		{"remote client", "GET", control.HTTPPrefix + "/config", "", func(r *http.Request) { r.RemoteAddr = "192.168.1.9:5000" }, 403, "UNAUTHORIZED"},
		{"relayed through the mesh", "GET", control.HTTPPrefix + "/config", "", func(r *http.Request) { r.Header.Set("X-Meshnode-Forwarded-By", "abc") }, 403, "UNAUTHORIZED"},
		{"browser cross-origin", "POST", control.HTTPPrefix + "/models/load", `{"model":{"canonical_model_ref":"alpha"}}`,
			func(r *http.Request) { r.Header.Set("Origin", "https://evil.example") }, 403, "UNAUTHORIZED"},
		{"DNS rebinding", "GET", control.HTTPPrefix + "/config", "", func(r *http.Request) { r.Host = "evil.example:9337" }, 403, "UNAUTHORIZED"},
		{"form post", "POST", control.HTTPPrefix + "/models/load", `{}`, func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") }, 400, "BAD_REQUEST"},
		{"unknown field", "POST", control.HTTPPrefix + "/models/load", `{"modle":{}}`, nil, 400, "BAD_REQUEST"},
		{"no model", "POST", control.HTTPPrefix + "/models/load", `{}`, nil, 400, "BAD_REQUEST"},
		{"unknown route", "POST", control.HTTPPrefix + "/models/explode", `{}`, nil, 404, "UNKNOWN_COMMAND"},
		{"stale revision", "POST", control.HTTPPrefix + "/config", `{"expected_revision":"5","config":{}}`, nil, 409, "REVISION_CONFLICT"},
		{"no credential", "GET", control.HTTPPrefix + "/config", "", func(r *http.Request) { r.Header.Del(control.SecretHeader) }, 403, "UNAUTHORIZED"},
		{"wrong credential", "GET", control.HTTPPrefix + "/config", "", func(r *http.Request) { r.Header.Set(control.SecretHeader, strings.Repeat("0", 64)) }, 403, "UNAUTHORIZED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := do(tt.method, tt.path, tt.body, tt.mutate)
			if status != tt.status || !strings.Contains(body, `"code":"`+tt.code+`"`) {
				t.Fatalf("%d %s, want %d %s", status, body, tt.status, tt.code)
			}
		})
	}
	// localhost and [::1] are loopback names.
	for _, host := range []string{"localhost:9337", "[::1]:9337"} {
		if status, body := do("GET", control.HTTPPrefix+"/config", "", func(r *http.Request) { r.Host = host }); status != 200 {
			t.Fatalf("Host %s: %d %s", host, status, body)
		}
	}
	// The scan-refresh alias is the inventory refresh.
	if status, body := do("POST", control.HTTPPrefix+"/scan-refresh", `{}`, nil); status != 200 || !strings.Contains(body, `"disposition":"OWNER_CONTROL_REFRESH_INVENTORY_DISPOSITION_EXECUTED"`) {
		t.Fatalf("scan-refresh: %d %s", status, body)
	}
}

// TestHTTPClientOldNode: an API without the facade is CONTROL_UNSUPPORTED.
func TestHTTPClientOldNode(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"error":{"message":"no route","type":"invalid_request_error","code":"unknown_url"}}`))
	}))
	defer srv.Close()
	_, err := control.NewHTTPClient(srv.URL, control.HTTPAuth{}, nil, control.ClientTimeouts{}).GetConfig(context.Background())
	wantCode(t, err, control.ErrUnsupported)
}

// TestHTTPClientSendsAPIKey: the node's API key travels as a bearer token.
func TestHTTPClientSendsAPIKey(t *testing.T) {
	r := newRig(t)
	inner := r.Server.HTTPHandler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("Authorization") != "Bearer sekrit" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		inner.ServeHTTP(w, req)
	}))
	defer srv.Close()
	if _, err := control.NewHTTPClient(srv.URL, control.HTTPAuth{APIKey: "sekrit", Secret: r.Secret}, nil, control.ClientTimeouts{}).GetConfig(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := control.NewHTTPClient(srv.URL, control.HTTPAuth{Secret: r.Secret}, nil, control.ClientTimeouts{}).GetConfig(context.Background()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("without the key: %v", err)
	}
}

// TestAttackFacadeWithoutCredential: a local process that can reach the
// loopback port but cannot read the node's credential file gets nothing
// from the facade, reads or writes, owned node or not; one without a
// credential configured refuses everyone.
func TestAttackFacadeWithoutCredential(t *testing.T) {
	for _, tc := range []struct {
		name   string
		secret string // the node's
		sent   string
	}{
		{"none sent", controltest.Secret, ""},
		{"a guess", controltest.Secret, strings.Repeat("ab", 32)},
		{"node has none", "", ""},
		{"node has none, empty sent", "", " "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, func(c *control.Config) { c.LocalSecret = tc.secret })
			srv := r.HTTP(t)
			c := control.NewHTTPClient(srv.URL, control.HTTPAuth{Secret: tc.sent}, nil, control.ClientTimeouts{})
			ctx := context.Background()
			_, err := c.ApplyConfig(ctx, 0, &nodev1.NodeConfigSnapshot{Version: 1, ConfigToml: proto.String("[control]\nowner_keys = [\"did:key:z6Mkattacker\"]\n")})
			wantCode(t, err, control.ErrUnauthorized)
			_, err = c.Lifecycle(ctx, control.Intent{Kind: control.IntentLoad, Model: modelRef("alpha")})
			wantCode(t, err, control.ErrUnauthorized)
			_, err = c.GetConfig(ctx)
			wantCode(t, err, control.ErrUnauthorized)
			if rev, _ := r.Store.Snapshot(); rev != 0 {
				t.Fatalf("the store moved to revision %d", rev)
			}
		})
	}
}
