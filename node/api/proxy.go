package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"

	"github.com/meshnode/meshnode/node/identity"
)

// meshProxy relays a request to the first reachable peer that hosts its
// model, over the mesh's HTTP tunnel, and streams the answer back as it
// arrives (no buffering: SSE tokens pass straight through).
type meshProxy struct {
	rp  *httputil.ReverseProxy
	log *slog.Logger
}

type hostsKey struct{}

func newMeshProxy(self identity.EndpointID, mesh Mesh, logger *slog.Logger) *meshProxy {
	p := &meshProxy{log: logger}
	transport := &http.Transport{
		// Every relayed request gets its own tunnel stream; the hosts to
		// try ride on the request's context, best first.
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			hosts, _ := ctx.Value(hostsKey{}).([]identity.EndpointID)
			var errs []error
			for _, h := range hosts {
				c, err := mesh.DialHTTP(ctx, h)
				if err == nil {
					return c, nil
				}
				logger.Debug("api: tunnel dial failed, trying the next host", "peer", h.Short(), "err", err)
				errs = append(errs, fmt.Errorf("%s: %w", h.Short(), err))
			}
			return nil, fmt.Errorf("no host of the model is reachable: %w", errors.Join(errs...))
		},
		DisableKeepAlives:  true,
		DisableCompression: true,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "meshnode.internal"
			pr.Out.Host = "meshnode.internal"
			pr.Out.Header.Set(ForwardedHeader, self.String())
			pr.Out.Header.Del("Authorization") // this node's key means nothing there
		},
		Transport:     transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client left
			}
			logger.Warn("api: relay through the mesh failed", "err", err)
			writeError(w, Errorf(http.StatusBadGateway, "server_error", "mesh_unreachable",
				"relaying to the model's host failed: %v", err))
		},
	}
	return p
}

// relay answers r from the first host that takes it. The answer streams
// through w, whose writes are bounded so that a local client that stops
// reading cannot hold the tunnel, and the peer's generation, open.
func (p *meshProxy) relay(w *stallGuard, r *http.Request, body []byte, hosts []identity.EndpointID) {
	out := r.Clone(context.WithValue(r.Context(), hostsKey{}, hosts))
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	out.Header.Set("Content-Length", strconv.Itoa(len(body)))
	p.rp.ServeHTTP(w, out)
}

// MeshHandler is the handler behind the mesh's HTTP tunnel: requests other
// nodes relay here. They are served locally or not at all, need no API key
// (the mesh admitted the peer), and reach only the generation endpoints and
// the model list.
func (s *Server) MeshHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	mux.HandleFunc("POST /v1/completions", s.handleCompletions)
	mux.HandleFunc("POST /v1/responses", s.handleResponses)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		unrouted(w, r, mux, "%s %s is not served to mesh peers")
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(ForwardedHeader) == "" {
			r.Header.Set(ForwardedHeader, "mesh")
		}
		mux.ServeHTTP(w, r)
	})
}
