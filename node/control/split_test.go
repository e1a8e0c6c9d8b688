package control_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/control"
)

// fakePinner is a node with one split model, "big", of four layers; pins
// must start past layer 0 on node "b" or "c".
type fakePinner struct {
	plan control.SplitPlan
	sets int
}

func (f *fakePinner) SetSplitPins(ctx context.Context, model string, pins []string) (control.SplitPlan, error) {
	if model != "big" {
		return control.SplitPlan{}, fmt.Errorf("model %q: %w", model, control.ErrNotSplit)
	}
	peer := "b"
	for _, p := range pins {
		if p != "c:2-4" && p != "b:2-4" {
			return control.SplitPlan{}, fmt.Errorf("%w: %s", control.ErrBadPins, p)
		}
		peer = p[:1]
	}
	f.sets++
	f.plan = control.SplitPlan{Model: model, State: "serving", Pins: pins,
		Stages: []control.SplitStage{{Node: "a", Layers: "0-2"}, {Node: peer, Layers: "2-4"}}}
	return f.plan, nil
}

// TestSplitPinsFacade: the facade sets and clears a split model's pins
// and answers with the plan; pins or a model the node refuses are
// BAD_REQUEST with its reason and change nothing; without the local
// credential, or on a node that serves no split models, nothing is done.
func TestSplitPinsFacade(t *testing.T) {
	fake := &fakePinner{}
	r := newRig(t, func(c *control.Config) { c.Splits = fake })
	c, _ := facade(t, r)
	ctx := context.Background()

	plan, err := c.SplitPins(ctx, "big", []string{"c:2-4"})
	if err != nil || plan.Stages[1].Node != "c" || !slices.Equal(plan.Pins, []string{"c:2-4"}) {
		t.Fatalf("pin: %+v, %v", plan, err)
	}
	_, err = c.SplitPins(ctx, "big", []string{"c:0-4"})
	wantCode(t, err, control.ErrBadRequest)
	if err == nil || !strings.Contains(err.Error(), "bad pins") {
		t.Errorf("bad pin: %v, want its reason", err)
	}
	_, err = c.SplitPins(ctx, "small", nil)
	wantCode(t, err, control.ErrBadRequest)
	if fake.sets != 1 || fake.plan.Stages[1].Node != "c" {
		t.Fatalf("refused pins changed the plan: %+v", fake.plan)
	}
	if plan, err = c.SplitPins(ctx, "big", nil); err != nil || plan.Stages[1].Node != "b" || len(plan.Pins) != 0 {
		t.Fatalf("unpin: %+v, %v", plan, err)
	}

	// No credential: UNAUTHORIZED, and the pinner is not asked.
	srv := r.HTTP(t)
	anon := control.NewHTTPClient(srv.URL, control.HTTPAuth{}, srv.Client(), control.ClientTimeouts{})
	_, err = anon.SplitPins(ctx, "big", []string{"c:2-4"})
	wantCode(t, err, control.ErrUnauthorized)
	if fake.sets != 2 {
		t.Errorf("an unauthorised request reached the pinner")
	}
	wrong := control.NewHTTPClient(srv.URL, control.HTTPAuth{Secret: "not-the-secret"}, srv.Client(), control.ClientTimeouts{})
	_, err = wrong.SplitPins(ctx, "big", []string{"c:2-4"})
	wantCode(t, err, control.ErrUnauthorized)

	// A node without split models.
	plain := newRig(t)
	pc, _ := facade(t, plain)
	_, err = pc.SplitPins(ctx, "big", nil)
	wantCode(t, err, control.ErrUnavailable)

	// A body with unknown fields is a typo, not a request.
	h := r.Server.HTTPHandler()
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:9337"+control.HTTPPrefix+control.SplitPinsPath, strings.NewReader(`{"model":"big","pin":["c:2-4"]}`))
	req.RemoteAddr = "127.0.0.1:40000"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(control.SecretHeader, r.Secret)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest || fake.sets != 2 {
		t.Errorf("unknown field: %d, %d sets", rec.Code, fake.sets)
	}
}
