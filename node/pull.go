package node

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/hfhub"
	"github.com/meshnode/meshnode/node/modelfetch"
)

// meshSourcePrefix marks a pull from a mesh peer: "mesh:NAME" or
// "mesh:WEIGHTS_DIGEST".
const meshSourcePrefix = "mesh:"

// fetcher is the node's one modelfetch.Fetcher over its models dir, so
// that two pulls of one file never run at once.
func (n *Node) fetcher() *modelfetch.Fetcher {
	n.fetchOnce.Do(func() {
		n.fetch = &modelfetch.Fetcher{Dir: n.cfg.ModelsDir, Logger: n.log}
	})
	return n.fetch
}

// Pull implements control.Puller: the file the request names is fetched
// into the models dir, resumably and verified (modelfetch), from the hub,
// a URL, or a mesh peer.
func (r *ownerRuntime) Pull(ctx context.Context, req control.PullRequest, progress func(control.PullEvent)) (control.PullEvent, error) {
	return r.n.pull(ctx, req, progress)
}

func (n *Node) pull(ctx context.Context, req control.PullRequest, progress func(control.PullEvent)) (control.PullEvent, error) {
	src, name, err := n.pullSource(ctx, req)
	if err != nil {
		return control.PullEvent{}, err
	}
	file, err := modelfetch.CheckName(cmp.Or(req.Name, name))
	if err != nil {
		return control.PullEvent{}, fmt.Errorf("%w: %w", control.ErrBadPull, err)
	}
	f := n.fetcher()
	model := ModelName(file)
	if h := n.pullHook; h != nil {
		send := progress
		progress = func(e control.PullEvent) { h(e); send(e) }
	}
	progress(control.PullEvent{Phase: control.PullResolve, File: file, Model: model, Source: src.Origin()})
	n.log.Info("pulling a model", "file", file, "from", src.Origin())
	start := time.Now()
	fetch := func(src modelfetch.Source) (modelfetch.Result, error) {
		return f.Fetch(ctx, file, src, func(p modelfetch.Progress) {
			if p.Phase == modelfetch.PhaseDone {
				return // the facade sends the done event, after the inventory scan
			}
			progress(control.PullEvent{Phase: p.Phase, File: file, Model: model, Source: src.Origin(), Done: p.Done, Total: p.Total,
				Rate: p.Rate, ETASeconds: p.ETA.Seconds(), Resumed: p.Resumed})
		})
	}
	var res modelfetch.Result
	if ms, ok := src.(*meshSource); ok {
		res, err = n.meshPull(ctx, ms, fetch)
	} else {
		res, err = fetch(src)
	}
	if err != nil {
		n.log.Warn("pull failed", "file", file, "from", src.Origin(), "err", err)
		if errors.Is(err, modelfetch.ErrExists) || errors.Is(err, modelfetch.ErrBusy) || errors.Is(err, modelfetch.ErrBadName) {
			err = fmt.Errorf("%w: %w", control.ErrBadPull, err)
		}
		return control.PullEvent{}, err
	}
	n.log.Info("model pulled", "file", res.Path, "from", src.Origin(), "bytes", res.Size, "resumed_from", res.Resumed,
		"sha256", hex.EncodeToString(res.SHA256[:]), "weights_digest", res.Weights.String(), "took", time.Since(start).Round(time.Millisecond))
	return control.PullEvent{File: file, Model: model, Source: src.Origin(), Done: res.Size, Total: res.Size, Resumed: res.Resumed,
		SHA256: hex.EncodeToString(res.SHA256[:]), WeightsDigest: res.Weights.String()}, nil
}

// pullSource is the source req names and the file name it suggests.
func (n *Node) pullSource(ctx context.Context, req control.PullRequest) (modelfetch.Source, string, error) {
	if ref, ok := strings.CutPrefix(req.Source, meshSourcePrefix); ok {
		src, err := n.newMeshSource(ref, req.SHA256)
		if err != nil {
			return nil, "", err
		}
		name := src.want.Name
		if name == "" {
			// By weights digest: the file keeps its holder's name, under
			// which the digest is computed.
			if _, err := src.Describe(ctx); err != nil {
				return nil, "", err
			}
			name = src.cur.File().Name
		}
		return src, name, nil
	}
	hub := &hfhub.Client{
		Endpoint:  cmp.Or(req.Endpoint, os.Getenv("HF_ENDPOINT"), hfhub.DefaultEndpoint),
		Token:     cmp.Or(req.Token, os.Getenv("HF_TOKEN")),
		UserAgent: "meshnode/" + Version,
	}
	ref, err := hfhub.ParseRef(req.Source, hub.Endpoint)
	if err == nil {
		return hub.Source(ref, req.SHA256), path.Base(ref.File), nil
	}
	if strings.HasPrefix(req.Source, "https://") || strings.HasPrefix(req.Source, "http://") {
		// A URL off the hub: the token is the hub's, never sent elsewhere.
		u := &hfhub.Client{UserAgent: hub.UserAgent}
		name := path.Base(strings.SplitN(strings.SplitN(req.Source, "?", 2)[0], "#", 2)[0])
		return u.URLSource(req.Source, req.SHA256), name, nil
	}
	return nil, "", fmt.Errorf("%w: %w", control.ErrBadPull, err)
}
