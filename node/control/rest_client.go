package control

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// HTTPClient drives the local node through its REST facade. The node
// answers for itself; requester and target are implied.
type HTTPClient struct {
	commands
	base     string
	auth     HTTPAuth
	hc       *http.Client
	timeouts ClientTimeouts
}

// HTTPAuth is what a facade client presents.
type HTTPAuth struct {
	// APIKey is the node's API key, sent as a bearer token when set.
	APIKey string
	// Secret is the node's local control credential (SecretFile), which
	// the facade requires.
	Secret string
}

// NewHTTPClient returns a client of the facade under baseURL (the node's
// API, "http://127.0.0.1:9337"); hc nil means http.DefaultClient.
func NewHTTPClient(baseURL string, auth HTTPAuth, hc *http.Client, t ClientTimeouts) *HTTPClient {
	if hc == nil {
		hc = http.DefaultClient
	}
	t.defaults()
	c := &HTTPClient{base: strings.TrimRight(baseURL, "/"), auth: auth, hc: hc, timeouts: t}
	c.t = c
	return c
}

// Close releases nothing: each call is its own HTTP request.
func (c *HTTPClient) Close() error { return nil }

func (c *HTTPClient) address() ([]byte, []byte) { return nil, nil }

func routeOf(cmd wire.OwnerCommand) route {
	for _, r := range routes {
		if r.cmd == cmd {
			return r
		}
	}
	panic(fmt.Sprintf("control: no route for %v", cmd))
}

// send issues req's HTTP request; the caller closes the body of a 200.
func (c *HTTPClient) send(ctx context.Context, req *nodev1.OwnerControlRequest) (*http.Response, error) {
	cmd := wire.RequestCommand(req)
	rt := routeOf(cmd)
	url := c.base + HTTPPrefix + rt.path
	var body io.Reader
	if rt.method == http.MethodPost {
		b, err := jsonOut.Marshal(commandField(req.ProtoReflect(), cmd).Message().Interface())
		if err != nil {
			return nil, fmt.Errorf("control: encode %v: %w", cmd, err)
		}
		body = bytes.NewReader(b)
	} else if req.GetWatchConfig().GetIncludeSnapshot() {
		url += "?include_snapshot=true"
	}
	hr, err := http.NewRequestWithContext(ctx, rt.method, url, body)
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	c.authorize(hr)
	resp, err := c.hc.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("control: %s %s: %w", rt.method, url, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if e, ok := parseHTTPError(b); ok {
		return nil, e
	}
	if resp.StatusCode == http.StatusNotFound {
		return nil, &Error{Code: ErrUnsupported.Code, Message: "the node's API has no owner-control facade (" + url + ")"}
	}
	return nil, fmt.Errorf("control: %s %s: %s: %s", rt.method, url, resp.Status, strings.TrimSpace(string(b)))
}

// authorize puts the credentials on hr.
func (c *HTTPClient) authorize(hr *http.Request) {
	if c.auth.Secret != "" {
		hr.Header.Set(SecretHeader, c.auth.Secret)
	}
	if c.auth.APIKey != "" {
		hr.Header.Set("Authorization", "Bearer "+c.auth.APIKey)
	}
}

func (c *HTTPClient) call(ctx context.Context, req *nodev1.OwnerControlRequest) (*nodev1.OwnerControlResponse, error) {
	t := c.timeouts.Lifecycle
	switch wire.RequestCommand(req) {
	case wire.CommandGetConfig, wire.CommandApplyConfig:
		t = c.timeouts.Unary
	case wire.CommandRefreshInventory:
		t = c.timeouts.Inventory
	}
	ctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	hr, err := c.send(ctx, req)
	if err != nil {
		return nil, err
	}
	defer hr.Body.Close()
	b, err := io.ReadAll(io.LimitReader(hr.Body, maxHTTPBody+1))
	if err != nil {
		return nil, fmt.Errorf("control: reading the response: %w", err)
	}
	resp := &nodev1.OwnerControlResponse{RequestId: req.GetRequestId()}
	if err := jsonLenient.Unmarshal(b, commandField(resp.ProtoReflect(), wire.RequestCommand(req)).Mutable().Message().Interface()); err != nil {
		return nil, fmt.Errorf("control: the node's %v answer does not decode: %w", wire.RequestCommand(req), err)
	}
	if err := wire.ValidateOwnerControlEnvelope(&nodev1.OwnerControlEnvelope{Gen: wire.ProtocolGeneration, Response: resp}); err != nil {
		return nil, fmt.Errorf("control: the node's answer is invalid: %w", err)
	}
	return resp, nil
}

func (c *HTTPClient) watch(ctx context.Context, req *nodev1.OwnerControlRequest) (ConfigWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	// The facade must accept within WatchAccept; after that, only ctx
	// and Close end the watch.
	accepted := make(chan struct{})
	go func() {
		t := time.NewTimer(c.timeouts.WatchAccept)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-accepted:
		}
	}()
	hr, err := c.send(ctx, req)
	if err != nil {
		close(accepted)
		cancel()
		return nil, err
	}
	w := &httpWatch{body: hr.Body, cancel: cancel, lines: bufio.NewScanner(hr.Body)}
	w.lines.Buffer(make([]byte, 0, 64<<10), maxHTTPBody+1)
	first, err := w.Next(ctx)
	close(accepted)
	if err != nil {
		w.Close()
		return nil, err
	}
	w.pending = first
	return w, nil
}

// httpWatch reads the facade's NDJSON watch stream.
type httpWatch struct {
	body    io.ReadCloser
	cancel  context.CancelFunc
	lines   *bufio.Scanner
	pending *nodev1.OwnerControlWatchConfigResponse
}

func (w *httpWatch) Next(ctx context.Context) (*nodev1.OwnerControlWatchConfigResponse, error) {
	if p := w.pending; p != nil {
		w.pending = nil
		return p, nil
	}
	stop := context.AfterFunc(ctx, w.cancel)
	defer stop()
	if !w.lines.Scan() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := w.lines.Err(); err != nil {
			return nil, fmt.Errorf("control: watch: %w", err)
		}
		return nil, fmt.Errorf("control: watch: %w", io.EOF)
	}
	resp := new(nodev1.OwnerControlWatchConfigResponse)
	if err := jsonLenient.Unmarshal(w.lines.Bytes(), resp); err != nil {
		return nil, fmt.Errorf("control: watch: a line does not decode: %w", err)
	}
	// The line has no envelope of its own; check it as the wire would.
	env := &nodev1.OwnerControlEnvelope{Gen: wire.ProtocolGeneration, Response: &nodev1.OwnerControlResponse{RequestId: 1, WatchConfig: resp}}
	if err := wire.ValidateOwnerControlEnvelope(env); err != nil {
		return nil, fmt.Errorf("control: watch: %w", err)
	}
	return resp, nil
}

func (w *httpWatch) Close() error {
	w.cancel()
	return w.body.Close()
}
