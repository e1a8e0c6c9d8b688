package control

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// HTTPPrefix is where the REST facade's routes live.
const HTTPPrefix = "/api/runtime/control"

// route is one REST facade route and the command it runs.
type route struct {
	method, path string
	cmd          wire.OwnerCommand
}

// routes are the facade's routes. Bodies and responses are the command's
// request and response messages in protojson with proto field names; the
// requester and target ids are the node's own and may be left out.
var routes = []route{
	{http.MethodGet, "/config", wire.CommandGetConfig},
	{http.MethodPost, "/config", wire.CommandApplyConfig},
	{http.MethodGet, "/config/watch", wire.CommandWatchConfig}, // ?include_snapshot=true; NDJSON
	{http.MethodPost, "/inventory/refresh", wire.CommandRefreshInventory},
	{http.MethodPost, "/scan-refresh", wire.CommandRefreshInventory}, // the operator-facing alias
	{http.MethodPost, "/models/load", wire.CommandLoadModel},
	{http.MethodPost, "/models/unload", wire.CommandUnloadModel},
	{http.MethodPost, "/models/ensure", wire.CommandEnsureModel},
	{http.MethodPost, "/models/drain", wire.CommandDrainModel},
}

var (
	jsonOut = protojson.MarshalOptions{UseProtoNames: true}
	// The facade is strict about what it is sent, so a typo is an error;
	// clients are lenient about what newer nodes answer.
	jsonStrict  = protojson.UnmarshalOptions{}
	jsonLenient = protojson.UnmarshalOptions{DiscardUnknown: true}
)

// forwardedHeader marks a request relayed through the mesh (it is
// api.ForwardedHeader); such a request comes from a peer, never the owner.
const forwardedHeader = "X-Meshnode-Forwarded-By"

// HTTPHandler is the loopback-only REST facade for this node's own owner
// control. Every request must carry the node's local control credential
// (Config.LocalSecret, kept in SecretFile) in SecretHeader: any local
// user can reach a loopback port, but only the node's own user and root
// can read the credential, owned node or not. It also refuses what cannot
// come from this machine's owner: a non-loopback client, a request
// relayed through the mesh, a browser's cross-origin request (any Origin
// header) and a Host that is not a loopback name (DNS rebinding). Mount it
// on the node's API mux under HTTPPrefix, never on the handler that
// serves mesh tunnels.
func (s *Server) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range routes {
		mux.HandleFunc(rt.method+" "+HTTPPrefix+rt.path, func(w http.ResponseWriter, r *http.Request) {
			s.serveHTTP(w, r, rt.cmd)
		})
	}
	mux.HandleFunc(http.MethodPost+" "+HTTPPrefix+SplitPinsPath, s.serveSplitPins)
	mux.HandleFunc(http.MethodPost+" "+HTTPPrefix+PullPath, s.servePull)
	mux.HandleFunc(http.MethodGet+" "+HTTPPrefix+HoldersPath, s.serveHolders)
	mux.HandleFunc(HTTPPrefix+"/", func(w http.ResponseWriter, r *http.Request) {
		writeHTTPError(w, errorf(ErrUnknownCommand.Code, "no owner-control route %s %s", r.Method, r.URL.Path))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if why := notLocal(r); why != "" {
			writeHTTPError(w, errorf(ErrUnauthorized.Code, "owner control over HTTP is for this machine only: %s", why))
			return
		}
		if why := s.notCredentialed(r); why != "" {
			writeHTTPError(w, errorf(ErrUnauthorized.Code, "owner control over HTTP needs this node's local credential: %s", why))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// notLocal says why r may not come from this machine's owner, or "".
func notLocal(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return "the client is not on loopback"
	}
	if r.Header.Get(forwardedHeader) != "" {
		return "the request was relayed through the mesh"
	}
	if r.Header.Get("Origin") != "" {
		return "cross-origin browser requests are refused"
	}
	h := r.Host
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	if ip := net.ParseIP(strings.Trim(h, "[]")); h != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "the Host is not a loopback name"
	}
	return ""
}

// notCredentialed says why r does not carry the local control
// credential, or "".
func (s *Server) notCredentialed(r *http.Request) string {
	want := s.cfg.LocalSecret
	if want == "" {
		return "this node has none, so its REST facade is closed; use meshcli --endpoint"
	}
	got := r.Header.Get(SecretHeader)
	if got == "" {
		return "send the contents of " + SecretFile + " from the node's state dir in " + SecretHeader +
			" (meshcli does, run as the node's user or root, or with --control-secret)"
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return "the " + SecretHeader + " sent is not this node's (the node writes a new one at every start)"
	}
	return ""
}

// maxHTTPBody bounds a request body as the wire bounds a frame.
const maxHTTPBody = wire.MaxControlFrameBytes

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request, cmd wire.OwnerCommand) {
	req := &nodev1.OwnerControlRequest{RequestId: s.localIDs.Next()}
	inner := commandField(req.ProtoReflect(), cmd).Mutable()
	if r.Method == http.MethodPost {
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			writeHTTPError(w, errorf(ErrBadRequest.Code, "Content-Type %q: send application/json", ct))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxHTTPBody))
		if err != nil {
			writeHTTPError(w, errorf(ErrBadRequest.Code, "reading the body: %v", err))
			return
		}
		if err := jsonStrict.Unmarshal(body, inner.Message().Interface()); err != nil {
			writeHTTPError(w, errorf(ErrBadRequest.Code, "body is not a %s: %v", inner.Message().Descriptor().Name(), err))
			return
		}
	}
	if cmd == wire.CommandWatchConfig {
		include, _ := strconv.ParseBool(r.URL.Query().Get("include_snapshot"))
		req.WatchConfig.IncludeSnapshot = include
	}
	self := protoreflect.ValueOfBytes(s.cfg.Self[:])
	m := inner.Message()
	m.Set(m.Descriptor().Fields().ByName("requester_node_id"), self)
	m.Set(m.Descriptor().Fields().ByName("target_node_id"), self)
	if err := wire.ValidateOwnerControlEnvelope(wire.RequestEnvelope(req)); err != nil {
		writeHTTPError(w, errorf(ErrBadRequest.Code, "%v", err))
		return
	}
	if cmd == wire.CommandWatchConfig {
		s.serveHTTPWatch(w, r, req)
		return
	}
	resp, e := s.execute(r.Context(), req)
	if e != nil {
		writeHTTPError(w, e)
		return
	}
	if env, replaced := wire.ResponseEnvelope(resp); replaced {
		writeHTTPError(w, fromWire(env.GetError()))
		return
	}
	b, err := jsonOut.Marshal(commandField(resp.ProtoReflect(), cmd).Message().Interface())
	if err != nil {
		writeHTTPError(w, errorf(ErrUnavailable.Code, "encoding the response: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}

// serveHTTPWatch streams the watch as newline-delimited JSON, one
// OwnerControlWatchConfigResponse a line, until the client goes.
func (s *Server) serveHTTPWatch(w http.ResponseWriter, r *http.Request, req *nodev1.OwnerControlRequest) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "application/x-ndjson")
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.base, cancel)()
	_ = s.watch(ctx, req, func(resp *nodev1.OwnerControlResponse) error {
		b, err := jsonOut.Marshal(resp.GetWatchConfig())
		if err != nil {
			return err
		}
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	})
}

// commandField is the field of a request or response that holds cmd.
func commandField(m protoreflect.Message, cmd wire.OwnerCommand) fieldRef {
	return fieldRef{m, m.Descriptor().Fields().ByNumber(protoreflect.FieldNumber(cmd))}
}

type fieldRef struct {
	m  protoreflect.Message
	fd protoreflect.FieldDescriptor
}

func (f fieldRef) Mutable() protoreflect.Value { return f.m.Mutable(f.fd) }
func (f fieldRef) Message() protoreflect.Message {
	return f.m.Get(f.fd).Message()
}

// httpError is the facade's error body.
type httpError struct {
	Error struct {
		Code            string  `json:"code"`
		Message         string  `json:"message"`
		RequestID       uint64  `json:"request_id,omitempty"`
		CurrentRevision *uint64 `json:"current_revision,omitempty"`
	} `json:"error"`
}

func httpStatus(c nodev1.OwnerControlErrorCode) int {
	switch c {
	case ErrBadRequest.Code, ErrTargetMismatch.Code, ErrInvalidHandshake.Code:
		return http.StatusBadRequest
	case ErrUnauthorized.Code:
		return http.StatusForbidden
	case ErrRevisionConflict.Code:
		return http.StatusConflict
	case ErrUnknownCommand.Code, ErrUnsupported.Code:
		return http.StatusNotFound
	}
	return http.StatusServiceUnavailable
}

func writeHTTPError(w http.ResponseWriter, e *Error) {
	var body httpError
	body.Error.Code, body.Error.Message, body.Error.RequestID = CodeName(e.Code), e.Message, e.RequestID
	if e.Code == ErrRevisionConflict.Code {
		rev := e.CurrentRevision
		body.Error.CurrentRevision = &rev
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus(e.Code))
	_ = json.NewEncoder(w).Encode(body)
}

// parseHTTPError reads an error body the facade wrote, or reports false.
func parseHTTPError(b []byte) (*Error, bool) {
	var body httpError
	if json.Unmarshal(b, &body) != nil {
		return nil, false
	}
	code, ok := ParseCodeName(body.Error.Code)
	if !ok {
		return nil, false
	}
	e := &nodev1.OwnerControlError{Code: code, Message: body.Error.Message, CurrentRevision: body.Error.CurrentRevision}
	return fromWire(e), true
}
