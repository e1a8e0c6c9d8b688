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
	"net/http/httptrace"
	"net/http/httputil"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/node/identity"
)

// meshProxy relays a request to the first host of its model that takes
// it, over the mesh's HTTP tunnel, and streams the answer back as it
// arrives (no buffering: SSE tokens pass straight through).
type meshProxy struct {
	rp  *httputil.ReverseProxy
	log *slog.Logger
}

type (
	hostsKey  struct{} // the hosts to try, best first
	hostKey   struct{} // the host of one attempt
	placedKey struct{} // the *Placement the hosts came from, if any
)

func newMeshProxy(self identity.EndpointID, mesh Mesh, logger *slog.Logger) *meshProxy {
	p := &meshProxy{log: logger}
	transport := &http.Transport{
		// Every attempt gets its own tunnel stream, to the host on its
		// context.
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			h, _ := ctx.Value(hostKey{}).(identity.EndpointID)
			c, err := mesh.DialHTTP(ctx, h)
			if err != nil {
				return nil, dialError{err}
			}
			return c, nil
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
			// This node's key means nothing there, in either header it
			// is taken from.
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("X-Api-Key")
		},
		Transport:     &failover{next: transport, log: logger},
		FlushInterval: -1,
		// The host that answered, for the request's event.
		ModifyResponse: func(resp *http.Response) error {
			if h, ok := resp.Request.Context().Value(hostKey{}).(identity.EndpointID); ok {
				updateRecord(resp.Request.Context(), func(ev *RequestEvent) { ev.Peer = h.String() })
			}
			return nil
		},
		// A relayed answer cut mid-way is reported here, in the node's
		// log rather than the standard logger's.
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client left
			}
			logger.Warn("api: relay through the mesh failed", "err", err)
			if errors.Is(err, errNoHostTook) {
				// Nothing reached any host (each was unreachable or turned
				// the tunnel down, as a host or this node does while
				// shutting down): the request may simply be sent again.
				e := Errorf(http.StatusServiceUnavailable, "server_error", "mesh_unreachable",
					"no host of the model could take the request: %v", err)
				e.RetryAfter = time.Second
				writeError(w, e)
				return
			}
			writeError(w, Errorf(http.StatusBadGateway, "server_error", "mesh_unreachable",
				"relaying to the model's host failed: %v", err))
		},
	}
	return p
}

// relay answers r from the first host that takes it. The answer streams
// through w, whose writes are bounded so that a local client that stops
// reading cannot hold the tunnel, and the peer's generation, open.
// placed, when the hosts come from a placement, is told of each attempt
// and of the receipt its answer carried; route, when set, goes to the host
// in PlacementHeader.
func (p *meshProxy) relay(w *stallGuard, r *http.Request, body []byte, hosts []identity.EndpointID, placed *Placement, route string) {
	ctx := context.WithValue(r.Context(), hostsKey{}, hosts)
	if placed != nil {
		ctx = context.WithValue(ctx, placedKey{}, placed)
	}
	out := r.Clone(ctx)
	out.Header.Del(PlacementHeader)
	if route != "" {
		out.Header.Set(PlacementHeader, route)
	}
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	out.ContentLength = int64(len(body))
	out.Header.Set("Content-Length", strconv.Itoa(len(body)))
	p.rp.ServeHTTP(w, out)
}

// RefusedHeader on a host's 403 says that its mesh access policy refused
// the relaying node before anything was served, so that the relay may ask
// another host of the model.
const RefusedHeader = "X-Meshnode-Refused"

const refusedMeshAccess = "mesh_access"

// failover sends a request to its hosts in turn, best first, moving on
// from a host that cannot be reached, that turns the tunnel down, or whose
// mesh access policy refuses this node (RefusedHeader): each way the
// request never reached a model, so another host may serve it; the last
// host's refusal is what the client gets. A host that sent any other
// response, or failed in any other way, ends the relay: the request may be
// running there.
type failover struct {
	next http.RoundTripper
	log  *slog.Logger
}

func (f *failover) RoundTrip(req *http.Request) (*http.Response, error) {
	hosts, _ := req.Context().Value(hostsKey{}).([]identity.EndpointID)
	placed, _ := req.Context().Value(placedKey{}).(*Placement)
	var errs []error
	untouched := true // no host got any of the request's answer or failed it otherwise
	for i, h := range hosts {
		var answered atomic.Bool
		ctx := httptrace.WithClientTrace(context.WithValue(req.Context(), hostKey{}, h),
			&httptrace.ClientTrace{GotFirstResponseByte: func() { answered.Store(true) }})
		out := req.Clone(ctx)
		if i > 0 {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			out.Body = body
		}
		done := func(string) {}
		if placed != nil && placed.Sent != nil {
			done = placed.Sent(h)
		}
		resp, err := f.next.RoundTrip(out)
		if err == nil && i < len(hosts)-1 && req.GetBody != nil && req.Context().Err() == nil {
			switch {
			case resp.StatusCode == http.StatusForbidden && resp.Header.Get(RefusedHeader) == refusedMeshAccess:
				// Its mesh access policy turned this node down before
				// serving anything: another host of the model may take it.
				resp.Body.Close()
				done("")
				f.log.Debug("api: host's mesh access policy refused the relayed request, trying the next", "peer", h.Short())
				continue
			case resp.StatusCode == http.StatusTooManyRequests && placed != nil:
				// Its queue was full (its gossip had not caught up): the
				// request ran nowhere, so it spills to the next host.
				resp.Body.Close()
				done("")
				f.log.Debug("api: host's queue is full, trying the next", "peer", h.Short())
				continue
			}
		}
		if err == nil {
			resp.Body = newReceiptTap(resp.Body, done)
			return resp, nil
		}
		done("")
		errs = append(errs, fmt.Errorf("%s: %w", h.Short(), err))
		if answered.Load() || !(errors.As(err, new(dialError)) || refused(err)) {
			untouched = false
			break
		}
		if req.Context().Err() != nil || req.GetBody == nil {
			break
		}
		f.log.Debug("api: host did not take the relayed request, trying the next", "peer", h.Short(), "err", err)
	}
	if len(errs) == 0 {
		return nil, errors.New("no host of the model to relay to")
	}
	if untouched {
		return nil, fmt.Errorf("%w: %w", errNoHostTook, errors.Join(errs...))
	}
	return nil, fmt.Errorf("no host of the model took the request: %w", errors.Join(errs...))
}

// errNoHostTook says that every host of the model was tried and none took
// the request: each was unreachable or refused the tunnel before any byte.
var errNoHostTook = errors.New("no host of the model took the request")

// dialError marks a failure to open the tunnel at all.
type dialError struct{ err error }

func (e dialError) Error() string { return e.err.Error() }
func (e dialError) Unwrap() error { return e.err }

// refused reports whether err says that a host turned the tunnel down
// before relaying any of it (mesh.ErrTunnelRefused, found by its method).
func refused(err error) bool {
	var r interface{ TunnelRefused() bool }
	return errors.As(err, &r) && r.TunnelRefused()
}

// MeshHandler is the handler behind the mesh's HTTP tunnels (ServeMesh):
// requests other nodes relay here. They are served locally or not at all,
// and reach only the generation, embedding and rerank endpoints, the tokenizer's
// and llama-server's model descriptions (/props) and the model list. The
// API key
// does not apply (the relaying node never forwards its client's); instead
// the peer that opened the tunnel, as its QUIC connection proved it, must
// pass Config.MeshAccess, or the request is refused with 403
// mesh_access_denied. A request that did not come through the mesh's
// listener has no peer and is refused too.
func (s *Server) MeshHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.observed(s.handleChat))
	mux.HandleFunc("POST /v1/completions", s.observed(s.handleCompletions))
	mux.HandleFunc("POST /v1/responses", s.observed(s.handleResponses))
	mux.HandleFunc("POST /v1/messages", s.observed(s.handleMessages))
	mux.HandleFunc("POST /v1/messages/count_tokens", s.handleCountTokens)
	mux.HandleFunc("POST /completion", s.observed(s.handleLlamaCompletion))
	mux.HandleFunc("POST /infill", s.observed(s.handleInfill))
	mux.HandleFunc("POST /v1/embeddings", s.handleEmbeddings)
	for _, p := range []string{"/v1/rerank", "/rerank", "/v1/reranking", "/reranking"} { // llama-server's names
		mux.HandleFunc("POST "+p, s.handleRerank)
	}
	mux.HandleFunc("POST /tokenize", s.handleTokenize)
	mux.HandleFunc("POST /detokenize", s.handleDetokenize)
	mux.HandleFunc("POST /apply-template", s.handleApplyTemplate)
	mux.HandleFunc("GET /tokenizer_info", s.handleTokenizerInfo)
	mux.HandleFunc("GET /props", s.handleProps)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /v1/models/{model...}", s.handleModel)
	s.ollamaRoutes(mux, true)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		unrouted(w, r, mux, "%s %s is not served to mesh peers")
	})
	return errorDialects(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer, ok := meshPeer(r.Context())
		if !ok {
			writeError(w, Errorf(http.StatusForbidden, "invalid_request_error", "mesh_access_denied",
				"the request did not arrive over a mesh tunnel, so the peer that sent it is unknown"))
			return
		}
		if err := s.allowPeer(peer); err != nil {
			s.log.Info("api: mesh peer refused", "peer", peer.Short(), "method", r.Method, "path", r.URL.Path, "why", err)
			w.Header().Set(RefusedHeader, refusedMeshAccess)
			writeError(w, Errorf(http.StatusForbidden, "invalid_request_error", "mesh_access_denied", "%v", err))
			return
		}
		// The relaying node sets this header to its id; whatever it says,
		// it now names the peer the connection proved, for anything that
		// reads it. It only ever marks a request as relayed (so that it is
		// not relayed again), never who may be served.
		r.Header.Set(ForwardedHeader, peer.String())
		mux.ServeHTTP(w, r)
	}))
}

func (s *Server) allowPeer(peer identity.EndpointID) error {
	if s.cfg.MeshAccess == nil {
		return errors.New("this node has no policy for mesh peers' requests, so it serves none")
	}
	return s.cfg.MeshAccess.AllowPeer(peer)
}

// envelopeMarker starts the envelope_hex member of a usage.energy object
// as the API encodes it (encoding/json writes no spaces).
const envelopeMarker = `"envelope_hex":"`

// maxEnvelopeHex bounds the envelope a tap keeps: a receipt with a split
// serve's stage reports is a few KiB.
const maxEnvelopeHex = 1 << 20

// receiptTap passes a relayed answer through and picks the last
// envelope_hex out of it as it goes (the answer may be a stream, so it is
// never buffered), then hands it to done when the answer ends: at its end,
// its failure or its closing, whichever comes first.
type receiptTap struct {
	io.ReadCloser
	done  func(envelopeHex string)
	once  sync.Once
	match int  // bytes of envelopeMarker matched
	in    bool // inside the hex value
	hex   []byte
	got   string
}

func newReceiptTap(rc io.ReadCloser, done func(string)) *receiptTap {
	return &receiptTap{ReadCloser: rc, done: done}
}

func (t *receiptTap) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	t.scan(p[:n])
	if err != nil {
		t.end()
	}
	return n, err
}

func (t *receiptTap) Close() error {
	err := t.ReadCloser.Close()
	t.end()
	return err
}

func (t *receiptTap) end() { t.once.Do(func() { t.done(t.got) }) }

func (t *receiptTap) scan(b []byte) {
	for _, c := range b {
		if t.in {
			switch {
			case c == '"':
				t.got, t.in = string(t.hex), false
			case len(t.hex) < maxEnvelopeHex && ('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'):
				t.hex = append(t.hex, c)
			default: // not an envelope after all
				t.in = false
			}
			continue
		}
		switch {
		case c == envelopeMarker[t.match]:
			t.match++
		case c == envelopeMarker[0]:
			t.match = 1
		default:
			t.match = 0
		}
		if t.match == len(envelopeMarker) {
			t.in, t.match, t.hex = true, 0, t.hex[:0]
		}
	}
}
