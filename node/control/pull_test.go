package control_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/control"
)

// fakePuller pulls "owner/repo/m.gguf" in three steps; "owner/repo/bad"
// is refused before any progress and "owner/repo/cut" fails midway.
type fakePuller struct{ got control.PullRequest }

func (f *fakePuller) Pull(ctx context.Context, req control.PullRequest, progress func(control.PullEvent)) (control.PullEvent, error) {
	f.got = req
	if req.Source == "owner/repo/bad" {
		return control.PullEvent{}, fmt.Errorf("%w: %q names no file", control.ErrBadPull, req.Source)
	}
	progress(control.PullEvent{Phase: control.PullResolve, File: "m.gguf", Source: req.Source})
	for i := int64(1); i <= 3; i++ {
		progress(control.PullEvent{Phase: "download", File: "m.gguf", Done: i * 100, Total: 300})
		if i == 2 && req.Source == "owner/repo/cut" {
			return control.PullEvent{}, errors.New("the connection ended at byte 200 of 300")
		}
	}
	return control.PullEvent{File: "m.gguf", Model: "m", Total: 300, SHA256: strings.Repeat("ab", 32)}, nil
}

// TestPullFacade: a pull streams its progress and ends with the done
// event, after which the node scans its inventory; a request the node
// refuses is BAD_REQUEST before any progress; a failure midway ends the
// stream with its reason; without the credential nothing is pulled.
func TestPullFacade(t *testing.T) {
	fake := &fakePuller{}
	r := newRig(t, func(c *control.Config) { c.Pulls = fake })
	c, _ := facade(t, r)
	ctx := context.Background()

	scans, _ := r.Scanner.Counts()
	var seen []control.PullEvent
	done, err := c.Pull(ctx, control.PullRequest{Source: "owner/repo/m.gguf", Token: "hf_x"}, func(e control.PullEvent) { seen = append(seen, e) })
	if err != nil {
		t.Fatal(err)
	}
	if done.Phase != control.PullDone || done.Model != "m" || done.SHA256 != strings.Repeat("ab", 32) {
		t.Fatalf("done event %+v", done)
	}
	if len(seen) != 4 || seen[0].Phase != control.PullResolve || seen[3].Done != 300 {
		t.Fatalf("progress %+v", seen)
	}
	if fake.got.Token != "hf_x" {
		t.Fatalf("the token did not reach the puller: %+v", fake.got)
	}
	if after, _ := r.Scanner.Counts(); after != scans+1 {
		t.Fatalf("inventory scans %d → %d: a pull must rescan the models dir", scans, after)
	}

	_, err = c.Pull(ctx, control.PullRequest{Source: "owner/repo/bad"}, nil)
	wantCode(t, err, control.ErrBadRequest)
	if !strings.Contains(err.Error(), "names no file") {
		t.Fatalf("refusal %v lacks its reason", err)
	}
	seen = nil
	_, err = c.Pull(ctx, control.PullRequest{Source: "owner/repo/cut"}, func(e control.PullEvent) { seen = append(seen, e) })
	wantCode(t, err, control.ErrUnavailable)
	if !strings.Contains(err.Error(), "byte 200 of 300") || len(seen) != 3 {
		t.Fatalf("cut pull: %v after %d events", err, len(seen))
	}
	_, err = c.Pull(ctx, control.PullRequest{}, nil)
	wantCode(t, err, control.ErrBadRequest)

	srv := r.HTTP(t)
	anon := control.NewHTTPClient(srv.URL, control.HTTPAuth{}, srv.Client(), control.ClientTimeouts{})
	fake.got = control.PullRequest{}
	_, err = anon.Pull(ctx, control.PullRequest{Source: "owner/repo/m.gguf"}, nil)
	wantCode(t, err, control.ErrUnauthorized)
	if fake.got.Source != "" {
		t.Fatal("an uncredentialed request reached the puller")
	}

	// A node without a puller says so.
	plain := newRig(t)
	pc, _ := facade(t, plain)
	_, err = pc.Pull(ctx, control.PullRequest{Source: "owner/repo/m.gguf"}, nil)
	wantCode(t, err, control.ErrUnavailable)
}
