package api

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/node/identity"
)

// ForwardedHeader marks a request relayed through the mesh: its value is
// the id of the node that relayed it. A node serves such a request locally
// or not at all, so a request never loops between nodes.
const ForwardedHeader = "X-Meshnode-Forwarded-By"

// Config tunes the API server.
type Config struct {
	// Version is the software's, for GET /api/version.
	Version string
	// APIKey, when set, is required as "Authorization: Bearer KEY" on
	// every endpoint but /health. The node requires one when the API is
	// bound beyond loopback.
	APIKey string
	// MaxBodyBytes bounds a request body (413 beyond it). Default 4 MiB.
	MaxBodyBytes int64
	// Concurrency is how many generations run at once per model; 0: the
	// model's slots (SlotModel), 1 for a model that names none.
	// QueueDepth is how many more may wait for a slot (default 512; -1:
	// none) and QueueWait how long each may wait (default 60 s); a
	// request beyond the queue, or that waited QueueWait, is refused with
	// 429 and Retry-After.
	Concurrency int
	QueueDepth  int
	QueueWait   time.Duration
	// LoadChanged, when set, is called with a model's name as its
	// generations come to take every slot or fill its queue, and as they
	// fall back from either, so that the node can tell its peers at once
	// rather than at its next gossip. It is called on the request's
	// goroutine and must not block.
	LoadChanged func(model string)
	// PrepareConcurrency is how many prompts are prepared (rendered,
	// tokenized and checked against the context) at once, over every
	// model (default half the CPUs, at least 1). A request is prepared
	// while it holds its place in the queue, before it takes a slot.
	PrepareConcurrency int
	// RetryAfter is the Retry-After a 429 carries (default 1 s).
	RetryAfter time.Duration
	// StreamWriteTimeout bounds each write of a streamed or relayed
	// response (default 30 s): a client that accepts nothing for that long
	// loses its stream, and the generation it held stops.
	StreamWriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection that has carried no
	// request for this long (default 2 min).
	IdleTimeout time.Duration
	// BodyTimeout bounds reading a request body (default 30 s; 408 beyond
	// it), so that a client trickling one cannot hold its handler.
	BodyTimeout time.Duration
	// AllowedHosts are names besides IP addresses, localhost and this
	// machine's hostname that requests may carry in Host ("*": any); the
	// rest are refused, against DNS rebinding (browser.go).
	AllowedHosts []string
	// AllowedOrigins are the web origins ("http://localhost:3000"; "*":
	// any) whose pages may use the API, with CORS answers; requests from
	// other pages are refused.
	AllowedOrigins []string
	// Routes are more handlers, by ServeMux pattern, served behind the
	// API key on the main listener only (never to mesh peers): the owner
	// control facade, say.
	Routes map[string]http.Handler
	// MeshAccess decides which mesh peers' tunnelled requests are served
	// (MeshHandler). Nil refuses them all.
	MeshAccess PeerPolicy
	// Public are handlers, by ServeMux pattern, served on the main
	// listener without the API key (still behind the browser guard):
	// files that hold no data, the web console's page, which then asks
	// for the key itself, since a browser cannot send it on a navigation.
	Public map[string]http.Handler
	// Observer, when set, hears of every generation request once it is
	// answered, on either listener (RequestEvent).
	Observer RequestObserver
}

// PeerPolicy is the node's policy for requests mesh peers tunnel to it.
// The API key does not apply to them (a relaying node never forwards its
// client's), so this is what stands in its place.
type PeerPolicy interface {
	// AllowPeer returns nil when peer's requests may be served, else why
	// not; the reason is sent back to the peer in a 403, so it must name
	// the policy and what this peer lacks.
	AllowPeer(peer identity.EndpointID) error
}

func (c *Config) defaults() {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 4 << 20
	}
	if c.Concurrency < 0 {
		c.Concurrency = 0
	}
	if c.QueueDepth < 0 {
		c.QueueDepth = 0
	} else if c.QueueDepth == 0 {
		c.QueueDepth = DefaultQueueDepth
	}
	if c.QueueWait <= 0 {
		c.QueueWait = DefaultQueueWait
	}
	if c.PrepareConcurrency <= 0 {
		c.PrepareConcurrency = max(1, runtime.GOMAXPROCS(0)/2)
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = time.Second
	}
	if c.StreamWriteTimeout <= 0 {
		c.StreamWriteTimeout = 30 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 2 * time.Minute
	}
	if c.BodyTimeout <= 0 {
		c.BodyTimeout = 30 * time.Second
	}
}

// Queue defaults: ollama's queue depth (OLLAMA_MAX_QUEUE), and a wait
// long enough for a queue of generations on a small machine yet bounded,
// so that a client is told to come back rather than left hanging.
const (
	DefaultQueueDepth = 512
	DefaultQueueWait  = 60 * time.Second
)

// SlotModel is a Model that runs several generations at once: its slots
// are how many (the GGUF engine's sequences batched in each step). The
// server lets that many run when Config.Concurrency is 0.
type SlotModel interface {
	Model
	Slots() int
}

// Server serves the API.
type Server struct {
	cfg      Config
	self     identity.EndpointID
	registry Registry
	mesh     Mesh // nil: no mesh, local models only
	node     Node
	log      *slog.Logger
	now      func() time.Time
	after    func(time.Duration) <-chan time.Time // the queue's wait; tests replace it

	mu     sync.Mutex
	limits map[string]*limiter
	tasks  atomic.Int64  // the tasks numbered for GET /slots
	prep   chan struct{} // the preparations running, PrepareConcurrency at most

	proxy *meshProxy
}

// New builds a server for node self. mesh may be nil.
func New(cfg Config, self identity.EndpointID, registry Registry, mesh Mesh, node Node, logger *slog.Logger, now func() time.Time) *Server {
	cfg.defaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	s := &Server{cfg: cfg, self: self, registry: registry, mesh: mesh, node: node, log: logger, now: now, after: time.After, limits: map[string]*limiter{},
		prep: make(chan struct{}, cfg.PrepareConcurrency)}
	if mesh != nil {
		s.proxy = newMeshProxy(self, mesh, logger)
	}
	return s
}

// Handler returns the API's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.observed(s.handleChat))
	mux.HandleFunc("POST /v1/completions", s.observed(s.handleCompletions))
	mux.HandleFunc("POST /v1/responses", s.observed(s.handleResponses))
	mux.HandleFunc("POST /v1/messages", s.observed(s.handleMessages))
	mux.HandleFunc("POST /v1/messages/count_tokens", s.handleCountTokens)
	mux.HandleFunc("POST /completion", s.observed(s.handleLlamaCompletion))
	mux.HandleFunc("POST /infill", s.observed(s.handleInfill))
	mux.HandleFunc("POST /v1/embeddings", s.handleEmbeddings)
	mux.HandleFunc("POST /embedding", s.handleLlamaEmbedding)
	mux.HandleFunc("POST /embeddings", s.handleLlamaEmbedding)
	for _, p := range []string{"/v1/rerank", "/rerank", "/v1/reranking", "/reranking"} { // llama-server's names
		mux.HandleFunc("POST "+p, s.handleRerank)
	}
	mux.HandleFunc("POST /tokenize", s.handleTokenize)
	mux.HandleFunc("POST /detokenize", s.handleDetokenize)
	mux.HandleFunc("POST /apply-template", s.handleApplyTemplate)
	mux.HandleFunc("GET /tokenizer_info", s.handleTokenizerInfo)
	mux.HandleFunc("GET /props", s.handleProps)
	mux.HandleFunc("POST /props", s.handleSetProps)
	mux.HandleFunc("GET /slots", s.handleSlots)
	mux.HandleFunc("POST /slots/{id}", s.handleSlotAction)
	mux.HandleFunc("POST /v1/chat/completions/control", s.handleChatControl)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /v1/models/{model...}", s.handleModel)
	s.ollamaRoutes(mux, false)
	mux.HandleFunc("GET /v1/mesh/steward", s.handleSteward)
	mux.HandleFunc("POST /v1/mesh/witness", s.handleWitness)
	mux.HandleFunc("POST /v1/mesh/replay", s.handleReplay)
	mux.HandleFunc("GET /v1/mesh/receipts", s.handleReceipts)
	mux.HandleFunc("GET /api/receipts", s.handleRecentReceipts)
	mux.HandleFunc("GET /api/status", s.handleStatus)
	mux.HandleFunc("GET /api/invite", s.handleInvite)
	for pattern, h := range s.cfg.Routes {
		mux.Handle(pattern, h)
	}
	for _, p := range []string{"/health", "/v1/health"} { // llama-server's web UI asks the second
		mux.HandleFunc("GET "+p, func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		unrouted(w, r, mux, "no route for %s %s")
	})
	if len(s.cfg.Public) == 0 {
		return errorDialects(s.guardBrowser(s.authenticate(mux)))
	}
	outer := http.NewServeMux()
	for pattern, h := range s.cfg.Public {
		outer.Handle(pattern, h)
	}
	outer.Handle("/", s.authenticate(mux))
	return errorDialects(s.guardBrowser(outer))
}

// unrouted answers a request no route of mux took: 405 with Allow when
// the path is served for other methods, 404 (notFound, formatted with
// the method and path) when it is not served at all.
func unrouted(w http.ResponseWriter, r *http.Request, mux *http.ServeMux, notFound string) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		// The catch-all "/" takes every method; only a route of the
		// path's own counts.
		if _, pattern := mux.Handler(&http.Request{Method: m, Host: r.Host, URL: r.URL}); pattern != "" && pattern != "/" {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		writeError(w, Errorf(http.StatusNotFound, "invalid_request_error", "unknown_url", notFound, r.Method, r.URL.Path))
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeError(w, Errorf(http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed",
		"invalid method for URL (%s %s): use %s", r.Method, r.URL.Path, strings.Join(allow, " or ")))
}

// Serve serves the API on ln until ctx is done, then stops accepting and
// lets in-flight requests finish for up to drain before closing them.
func (s *Server) Serve(ctx context.Context, ln net.Listener, drain time.Duration) error {
	return s.serve(ctx, ln, s.Handler(), drain, nil)
}

// ServeMesh serves MeshHandler on ln, the mesh's listener for the HTTP
// tunnels peers open to this node (mesh.Node.ListenHTTP), as Serve does.
// Each connection it accepts names the peer that opened it (a method
// Peer() identity.EndpointID), and every request on it is served as that
// peer's, under Config.MeshAccess.
func (s *Server) ServeMesh(ctx context.Context, ln net.Listener, drain time.Duration) error {
	return s.serve(ctx, ln, s.MeshHandler(), drain, meshConnContext)
}

// meshConnContext puts the peer a tunnel came from in its requests'
// context: the identity its QUIC connection proved, never anything the
// request itself says.
func meshConnContext(ctx context.Context, c net.Conn) context.Context {
	if t, ok := c.(interface{ Peer() identity.EndpointID }); ok {
		return context.WithValue(ctx, meshPeerKey{}, t.Peer())
	}
	return ctx
}

type meshPeerKey struct{}

// meshPeer is the peer that tunnelled the request, if it came through the
// mesh's listener.
func meshPeer(ctx context.Context) (identity.EndpointID, bool) {
	p, ok := ctx.Value(meshPeerKey{}).(identity.EndpointID)
	return p, ok
}

func (s *Server) serve(ctx context.Context, ln net.Listener, h http.Handler, drain time.Duration, connContext func(context.Context, net.Conn) context.Context) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       s.cfg.IdleTimeout, // with no ReadTimeout, none would be held to any
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ConnContext:       connContext,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if errors.Is(err, context.DeadlineExceeded) {
		s.log.Warn("api: in-flight requests outlived the drain deadline; closing them", "drain", drain)
		err = srv.Close()
	}
	if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = e
	}
	return err
}

func (s *Server) authenticate(next http.Handler) http.Handler {
	if s.cfg.APIKey == "" {
		return next
	}
	want := []byte("Bearer " + s.cfg.APIKey)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" || r.URL.Path == "/v1/health" {
			next.ServeHTTP(w, r)
			return
		}
		got := []byte(r.Header.Get("Authorization"))
		if key := r.Header.Get("X-Api-Key"); len(got) == 0 && key != "" {
			// Anthropic's SDKs send the key in x-api-key.
			got = []byte("Bearer " + key)
		}
		if subtle.ConstantTimeCompare(got, want) != 1 {
			writeError(w, Errorf(http.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
				"missing or wrong API key: send Authorization: Bearer <key> (or x-api-key: <key>)"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if err := checkJSON(r); err != nil {
		return nil, err
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout)) // a test recorder has none
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err == nil {
		_ = rc.SetReadDeadline(time.Time{})
		return body, nil
	}
	// On an error the deadline stays: the server discards what is left of
	// the body before it answers, and must not wait for it.
	var maxBytes *http.MaxBytesError
	switch {
	case errors.As(err, &maxBytes):
		return nil, err
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, Errorf(http.StatusRequestTimeout, "invalid_request_error", "request_timeout",
			"the request body did not arrive within %v", s.cfg.BodyTimeout)
	}
	return nil, badRequest("", "reading request body: %v", err)
}

// accept reads and parses a generation request and routes it: it returns
// the local model to serve it with, or false when the request has been
// answered already (an error, or relayed to the peer that hosts its model).
func (s *Server) accept(w http.ResponseWriter, r *http.Request, parse func(body []byte) (*Generation, error)) (Model, *Generation, bool) {
	received := s.now()
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err)
		return nil, nil, false
	}
	g, err := parse(body)
	if err == nil {
		body, err = s.resolveModel(g, body)
	}
	if err != nil {
		writeError(w, err)
		return nil, nil, false
	}
	updateRecord(r.Context(), func(ev *RequestEvent) { ev.Model = g.Model })
	g.Received = received
	if err := s.placedBy(r, g); err != nil {
		writeError(w, err)
		return nil, nil, false
	}
	m, handled := s.place(w, r, g, body)
	return m, g, !handled
}

// PlacementHeader carries a relaying node's placement line (the
// Placement's Route) to the host it chose, which records it in the
// receipt's route as "placed by <relaying node>: <line>".
const PlacementHeader = "X-Meshnode-Placement"

// maxPlacementHeader bounds PlacementHeader.
const maxPlacementHeader = 4096

// placedBy takes PlacementHeader from a request a peer relayed here over
// the mesh into g.Placement. Only a relaying node sets it: on a request
// that did not come over the mesh, or one that is not one line of
// printable ASCII within maxPlacementHeader bytes, it is refused.
func (s *Server) placedBy(r *http.Request, g *Generation) error {
	v, ok := r.Header[PlacementHeader]
	if !ok {
		return nil
	}
	peer, mesh := meshPeer(r.Context())
	if !mesh {
		return badRequest("", "%s is set only by a node relaying a request over the mesh", PlacementHeader)
	}
	if len(v) != 1 || len(v[0]) > maxPlacementHeader || strings.IndexFunc(v[0], func(c rune) bool { return c < 0x20 || c > 0x7e }) >= 0 {
		return badRequest("", "%s must be one line of printable ASCII of at most %d bytes", PlacementHeader, maxPlacementHeader)
	}
	g.Placement = "placed by " + peer.Short() + ": " + v[0]
	return nil
}

// place routes a parsed generation: with a Placer, the node weighs every
// host of the model, itself included, and the request goes to the best:
// served here when that is this node, else relayed to the peers in the
// placement's order. Without a placement to make (no Placer, a request
// relayed here, one host only) it is routed as route does. It reports
// whether it handled the request itself (false: serve locally with the
// returned model).
func (s *Server) place(w http.ResponseWriter, r *http.Request, g *Generation, body []byte) (Model, bool) {
	pl, ok := s.mesh.(Placer)
	if !ok || s.proxy == nil || r.Header.Get(ForwardedHeader) != "" {
		return s.route(w, r, g.Model, body)
	}
	m, local := s.registry.Local(g.Model)
	var load LocalLoad
	if local {
		load = s.load(g.Model, m)
	}
	p := pl.Place(g, local, load)
	if p == nil || len(p.Hosts) == 0 {
		return s.route(w, r, g.Model, body)
	}
	g.placed, g.Placement = p, p.Route
	if p.Hosts[0] == s.self && local {
		return m, false
	}
	if peers := p.peersBut(s.self); len(peers) > 0 {
		updateRecord(r.Context(), func(ev *RequestEvent) { ev.Route = "peer" })
		s.proxy.relay(s.guard(w), r, body, peers, p, p.Route)
		return nil, true
	}
	return s.route(w, r, g.Model, body)
}

// route serves a request locally, or relays it to a peer that hosts its
// model. It reports whether it handled the request itself (false: serve
// locally with the returned model). A request relayed here is served
// here or not at all.
func (s *Server) route(w http.ResponseWriter, r *http.Request, model string, body []byte) (Model, bool) {
	if m, ok := s.registry.Local(model); ok {
		return m, false
	}
	forwarded := r.Header.Get(ForwardedHeader) != ""
	if !forwarded && s.proxy != nil {
		if hosts := s.mesh.HostsOf(model); len(hosts) > 0 {
			updateRecord(r.Context(), func(ev *RequestEvent) { ev.Route = "peer" })
			s.proxy.relay(s.guard(w), r, body, hosts, nil, "")
			return nil, true
		}
	}
	writeError(w, s.unknownModel(model, forwarded))
	return nil, true
}

// peersBut are the placement's hosts but self, in order.
func (p *Placement) peersBut(self identity.EndpointID) []identity.EndpointID {
	var out []identity.EndpointID
	for _, h := range p.Hosts {
		if h != self {
			out = append(out, h)
		}
	}
	return out
}

// Load is model's queue on this node, as placement and gossip see it: a
// request admitted and preparing takes a slot, so that Free reaches 0 and
// Queued QueueLimit exactly when the next request would be refused.
func (s *Server) Load(model string) (LocalLoad, bool) {
	m, ok := s.registry.Local(model)
	if !ok {
		return LocalLoad{}, false
	}
	return s.load(model, m), true
}

func (s *Server) load(model string, m Model) LocalLoad {
	s.mu.Lock()
	l := s.limits[model]
	s.mu.Unlock()
	slots, admitted := s.concurrency(m), 0
	if l != nil {
		slots, admitted = l.slots(), l.admittedCount()
	}
	return LocalLoad{Slots: slots, Free: max(0, slots-admitted), Queued: max(0, admitted-slots), QueueLimit: s.cfg.QueueDepth}
}

func (s *Server) unknownModel(model string, forwarded bool) *Error {
	var names []string
	for _, m := range s.registry.List() {
		if !forwarded || m.Local {
			names = append(names, m.ID)
		}
	}
	where := "in the mesh"
	if forwarded {
		where = "on this node (the request was relayed here)"
	}
	available := "available: " + strings.Join(names, ", ")
	if len(names) == 0 {
		available = "no model is available"
		if h := s.noModelHint(forwarded); h != "" {
			available += "; " + h
		}
	}
	e := Errorf(http.StatusNotFound, "invalid_request_error", "model_not_found",
		"model %q is not served %s; %s", model, where, available)
	e.Param = "model"
	return e
}

// resolveModel names the model of a request that named none
// (soleModel), and returns its body naming it too (Generation.Body is
// set to it), so that a host it is relayed to serves that model though
// it serves several; a request that named one keeps it and its body.
func (s *Server) resolveModel(g *Generation, body []byte) ([]byte, error) {
	if strings.TrimSpace(g.Model) != "" {
		return body, nil
	}
	model, err := s.soleModel()
	if err != nil {
		return body, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return body, badRequest("", "the request body is not a JSON object: %v", err)
	}
	fields["model"] = mustJSON(model)
	g.Model, g.Body = model, mustJSON(fields)
	return g.Body, nil
}

// soleModelFor is model, or where the request names none, the node's one
// (soleModel), with body naming it (resolveModel) so that a host the
// request is relayed to serves it.
func (s *Server) soleModelFor(model string, body []byte) (string, []byte, error) {
	if model != "" {
		return model, body, nil
	}
	g := &Generation{Body: body}
	body, err := s.resolveModel(g, body)
	return g.Model, body, err
}

// soleModel is the model a request that names none is for (llama.cpp's
// endpoints, whose server holds one model): the one this node serves,
// or, serving none, the one the mesh does. With several, the request
// must name one.
func (s *Server) soleModel() (string, error) {
	var local, all []string
	for _, m := range s.registry.List() {
		all = append(all, m.ID)
		if m.Local {
			local = append(local, m.ID)
		}
	}
	switch {
	case len(local) == 1:
		return local[0], nil
	case len(local) == 0 && len(all) == 1:
		return all[0], nil
	case len(all) == 0:
		return "", badRequest("model", "model is required, and no model is available to stand in for it")
	}
	return "", badRequest("model", "model is required: this node serves several models (%s); name one", strings.Join(cmpOr(local, all), ", "))
}

// cmpOr is a if it holds anything, else b.
func cmpOr(a, b []string) []string {
	if len(a) > 0 {
		return a
	}
	return b
}

// concurrency is how many generations of m run at once.
func (s *Server) concurrency(m Model) int {
	if s.cfg.Concurrency > 0 {
		return s.cfg.Concurrency
	}
	if sm, ok := m.(SlotModel); ok {
		return max(1, sm.Slots())
	}
	return 1
}

// admit takes a place in the queue of model (served here as m); it fails
// with 429 when the queue is full.
func (s *Server) admit(model string, m Model) (*ticket, error) {
	s.mu.Lock()
	l, ok := s.limits[model]
	if !ok {
		var edge func()
		if f := s.cfg.LoadChanged; f != nil {
			edge = func() { f(model) }
		}
		l = newLimiter(s.concurrency(m), s.cfg.QueueDepth, edge)
		s.limits[model] = l
	}
	s.mu.Unlock()
	t, err := l.admit()
	if errors.Is(err, errQueueFull) {
		e := Errorf(http.StatusTooManyRequests, "rate_limit_error", "overloaded",
			"model %q is busy: %d running and %d queued; retry shortly", model, l.slots(), s.cfg.QueueDepth)
		e.RetryAfter = s.cfg.RetryAfter
		return nil, e
	}
	return t, err
}

// run waits for t's slot, at most QueueWait; a request that waited that
// long is refused as the queue's overflow is, with 429 and Retry-After.
func (s *Server) run(ctx context.Context, model string, t *ticket) error {
	err := t.run(ctx, s.after(s.cfg.QueueWait))
	if err == nil {
		s.numberTask(t)
	}
	if errors.Is(err, errQueueWait) {
		e := Errorf(http.StatusTooManyRequests, "rate_limit_error", "overloaded",
			"model %q is busy: no generation slot came free in %v; retry shortly", model, s.cfg.QueueWait)
		e.RetryAfter = s.cfg.RetryAfter
		return e
	}
	return err
}

// acquire takes a generation slot for model (served here as m), waiting
// in its queue; it fails with 429 when the queue is full or the wait
// too long.
func (s *Server) acquire(ctx context.Context, model string, m Model) (release func(), err error) {
	t, err := s.admit(model, m)
	if err != nil {
		return nil, err
	}
	if err := s.run(ctx, model, t); err != nil {
		t.release()
		return nil, err
	}
	return t.release, nil
}

// prepare readies g on m under the server's preparation limit, which is
// shared by every model: preparing renders and tokenizes the prompt on the
// CPU, and many huge prompts at once must not take all of it.
func (s *Server) prepare(ctx context.Context, m Model, g *Generation) (Prepared, error) {
	select {
	case s.prep <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.prep }()
	return m.Prepare(ctx, g)
}

// newID returns an OpenAI-style object id.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// modelObject is a model as GET /v1/models lists it: OpenAI's model
// object and Anthropic's (type, display_name, created_at) in one, with
// where it is served added. Created is the model file's time where this
// node has the file.
type modelObject struct {
	ID          string   `json:"id"`
	Object      string   `json:"object"`
	Created     int64    `json:"created"`
	OwnedBy     string   `json:"owned_by"`
	Type        string   `json:"type"`
	DisplayName string   `json:"display_name"`
	CreatedAt   string   `json:"created_at,omitempty"`
	Local       bool     `json:"local"`
	Hosts       []string `json:"hosts,omitempty"`
}

func (s *Server) modelObjects() []modelObject {
	data := []modelObject{}
	for _, m := range s.registry.List() {
		o := modelObject{ID: m.ID, Object: "model", OwnedBy: m.Owner.String(), Type: "model", DisplayName: m.ID, Local: m.Local}
		for _, h := range m.Hosts {
			o.Hosts = append(o.Hosts, h.String())
		}
		if d, ok := s.described(m.ID); ok && !d.ModifiedAt.IsZero() {
			o.Created, o.CreatedAt = d.ModifiedAt.Unix(), d.ModifiedAt.UTC().Format(time.RFC3339)
		}
		data = append(data, o)
	}
	return data
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	data := s.modelObjects()
	// Anthropic's list pages: this one is the whole list.
	list := map[string]any{"object": "list", "data": data, "has_more": false}
	if len(data) > 0 {
		list["first_id"], list["last_id"] = data[0].ID, data[len(data)-1].ID
	}
	if h := s.noModelHint(r.Header.Get(ForwardedHeader) != ""); h != "" {
		list["hint"] = h
	}
	writeJSON(w, http.StatusOK, list)
}

// handleModel is OpenAI's retrieve: GET /v1/models/{model}, the one model
// object of the list, or 404 model_not_found naming those there are. A
// model's id may hold slashes (an organisation's prefix), so the pattern
// takes the rest of the path.
func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("model")
	for _, o := range s.modelObjects() {
		if o.ID == id {
			writeJSON(w, http.StatusOK, o)
			return
		}
	}
	writeError(w, s.unknownModel(id, r.Header.Get(ForwardedHeader) != ""))
}

// noModelHint is the registry's NoModelHint, if it has one; never for a
// request relayed from the mesh (the hint names the node's own paths).
func (s *Server) noModelHint(forwarded bool) string {
	if h, ok := s.registry.(NoModelHinter); ok && !forwarded {
		return h.NoModelHint()
	}
	return ""
}

func (s *Server) handleSteward(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"steward": s.node.StewardDID()})
}

func (s *Server) handleWitness(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	held, err := s.node.Witness(r.Context(), body)
	if err != nil {
		writeError(w, err)
		return
	}
	if !held {
		writeJSON(w, http.StatusConflict, map[string]any{"held": false,
			"message": "the steward's journal does not hold this receipt; grants are refused until an operator restores the journal"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"held": true})
}

// handleReceipts is GET /v1/mesh/receipts?from=N&limit=M: the steward's
// receipts from sequence N, at most M (default and most MaxReceiptPage).
func (s *Server) handleReceipts(w http.ResponseWriter, r *http.Request) {
	ex, ok := s.node.(ReceiptExporter)
	if !ok {
		writeError(w, Errorf(http.StatusNotFound, "invalid_request_error", "unknown_url", "this node keeps no receipt log"))
		return
	}
	q := r.URL.Query()
	for k := range q {
		if k != "from" && k != "limit" {
			writeError(w, badRequest(k, "unknown parameter %q: GET /v1/mesh/receipts takes from and limit", k))
			return
		}
	}
	from, limit := uint64(0), MaxReceiptPage
	if v := q.Get("from"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, badRequest("from", "from %q: want a receipt sequence, 0 or more", v))
			return
		}
		from = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxReceiptPage {
			writeError(w, badRequest("limit", "limit %q: want 1…%d", v, MaxReceiptPage))
			return
		}
		limit = n
	}
	page, err := ex.Receipts(from, limit)
	if err != nil {
		writeError(w, Errorf(http.StatusServiceUnavailable, "server_error", "receipt_log_unavailable", "%v", err))
		return
	}
	if page.Receipts == nil {
		page.Receipts = []json.RawMessage{}
	}
	writeJSON(w, http.StatusOK, page)
}

// MaxReceiptPage is the most receipts one GET /v1/mesh/receipts answers.
const MaxReceiptPage = 1000

// Bounds of GET /api/receipts: each receipt is decoded and its signature
// checked, so the page is kept small.
const (
	DefaultRecentReceipts = 20
	MaxRecentReceipts     = 100
)

// handleRecentReceipts is GET /api/receipts?limit=N: the steward's latest
// N receipts (default DefaultRecentReceipts), newest first, each verified.
func (s *Server) handleRecentReceipts(w http.ResponseWriter, r *http.Request) {
	rl, ok := s.node.(ReceiptLister)
	if !ok {
		writeError(w, Errorf(http.StatusNotFound, "invalid_request_error", "unknown_url", "this node keeps no receipt log"))
		return
	}
	q := r.URL.Query()
	for k := range q {
		if k != "limit" {
			writeError(w, badRequest(k, "unknown parameter %q: GET /api/receipts takes limit", k))
			return
		}
	}
	limit := DefaultRecentReceipts
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxRecentReceipts {
			writeError(w, badRequest("limit", "limit %q: want 1…%d", v, MaxRecentReceipts))
			return
		}
		limit = n
	}
	page, err := rl.RecentReceipts(limit)
	if err != nil {
		writeError(w, Errorf(http.StatusServiceUnavailable, "server_error", "receipt_log_unavailable", "%v", err))
		return
	}
	if page.Receipts == nil {
		page.Receipts = []ReceiptSummary{}
	}
	writeJSON(w, http.StatusOK, page)
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.node.Status(r.Context()))
}

func (s *Server) handleInvite(w http.ResponseWriter, r *http.Request) {
	if !isLoopback(r.RemoteAddr) {
		writeError(w, Errorf(http.StatusForbidden, "invalid_request_error", "loopback_only",
			"the invite token is served to loopback clients only"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"token": s.node.Invite()})
}

func isLoopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// errString renders an error for logs without the HTTP status prefix.
func errString(err error) string {
	if e := asError(err); e.Status != http.StatusInternalServerError {
		return fmt.Sprintf("%s (%d)", e.Message, e.Status)
	}
	return err.Error()
}

// queued reports how many generations for model are running or waiting.
func (s *Server) queued(model string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.limits[model]; ok {
		return l.admittedCount()
	}
	return 0
}
