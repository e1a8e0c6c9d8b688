package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// PullPath is the REST facade's route, under HTTPPrefix, that fetches a
// model file into the node's models dir (POST, a PullRequest; the answer
// is newline-delimited JSON, one PullEvent a line, the last of phase
// "done" or "error"). Like SplitPinsPath it is meshnode's own command, with
// no mesh-llm-control/1 message: served on the facade only.
const PullPath = "/models/pull"

// PullRequest is the body of POST /models/pull.
type PullRequest struct {
	// Source is what to fetch: a hub file ("owner/repo/file.gguf",
	// "owner/repo@revision/dir/file.gguf", or its URL under the hub
	// endpoint), a plain https URL (with SHA256), or a file a mesh peer
	// holds: "mesh:NAME" or "mesh:WEIGHTS_DIGEST" (64 hex digits).
	Source string `json:"source"`
	// Name is the file name in the models dir (".gguf" added when
	// missing); default: the source's file name.
	Name string `json:"name,omitempty"`
	// SHA256 is the digest the owner expects (64 hex digits); a hub that
	// lists another is refused. Required for a URL off the hub.
	SHA256 string `json:"sha256,omitempty"`
	// Token is a hub token for private or gated repos (meshcli sends its
	// HF_TOKEN); the node's own HF_TOKEN is used when it is empty.
	Token string `json:"token,omitempty"`
	// Endpoint is the hub (meshcli sends its HF_ENDPOINT); the node's own
	// HF_ENDPOINT, else https://huggingface.co, when it is empty.
	Endpoint string `json:"endpoint,omitempty"`
}

// Pull phases, besides modelfetch's download and verify.
const (
	PullResolve = "resolve"
	PullDone    = "done"
	PullFailed  = "error"
)

// PullEvent is one line of a pull's answer.
type PullEvent struct {
	// Phase is resolve, download, verify, done or error.
	Phase string `json:"phase"`
	// File is the file's name in the models dir; Model the name it is
	// served and loaded by.
	File  string `json:"file,omitempty"`
	Model string `json:"model,omitempty"`
	// Source names where the bytes come from (the hub file, the peer).
	Source string `json:"source,omitempty"`
	// Done and Total are bytes; Rate bytes per second; ETASeconds the
	// time left at that rate.
	Done       int64   `json:"done,omitempty"`
	Total      int64   `json:"total,omitempty"`
	Rate       float64 `json:"rate,omitempty"`
	ETASeconds float64 `json:"eta_seconds,omitempty"`
	// Resumed is how many bytes an earlier, cut-off pull had fetched.
	Resumed int64 `json:"resumed,omitempty"`
	// SHA256 and WeightsDigest (hex) are the verified file's, on done.
	SHA256        string `json:"sha256,omitempty"`
	WeightsDigest string `json:"weights_digest,omitempty"`
	// Error says why the pull failed, on error.
	Error *PullError `json:"error,omitempty"`
}

// PullError is a failed pull, as the facade's errors are coded.
type PullError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Puller fetches model files into the node's models dir. Pull reports
// progress through progress (from Pull's goroutine) and returns the done
// event. A request the owner must change (a bad source or name, a file
// the models dir has already, a refused hash) wraps ErrBadPull.
type Puller interface {
	Pull(ctx context.Context, req PullRequest, progress func(PullEvent)) (PullEvent, error)
}

// ErrBadPull is what a Puller's errors wrap for a pull the owner must
// change (BAD_REQUEST on the facade).
var ErrBadPull = errors.New("bad pull request")

func (s *Server) servePull(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Pulls == nil {
		writeHTTPError(w, errorf(ErrUnavailable.Code, "this node does not pull models"))
		return
	}
	var req PullRequest
	if !decodeFacadeJSON(w, r, &req, "a pull request") {
		return
	}
	if req.Source == "" {
		writeHTTPError(w, errorf(ErrBadRequest.Code, "name the source: owner/repo/file.gguf, a hub URL, or mesh:NAME"))
		return
	}
	// The answer streams from the first event on; an error before it is
	// an HTTP error, after it the last line.
	var mu sync.Mutex
	started := false
	flusher, _ := w.(http.Flusher)
	emit := func(ev PullEvent) {
		mu.Lock()
		defer mu.Unlock()
		if !started {
			started = true
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
		}
		b, _ := json.Marshal(ev)
		w.Write(append(b, '\n'))
		if flusher != nil {
			flusher.Flush()
		}
	}
	done, err := s.cfg.Pulls.Pull(r.Context(), req, emit)
	if err != nil {
		code := ErrUnavailable.Code
		if errors.Is(err, ErrBadPull) {
			code = ErrBadRequest.Code
		}
		mu.Lock()
		before := !started
		mu.Unlock()
		if before {
			writeHTTPError(w, errorf(code, "%v", err))
			return
		}
		emit(PullEvent{Phase: PullFailed, Error: &PullError{Code: CodeName(code), Message: err.Error()}})
		return
	}
	// The inventory picks the new file up now, and gossip with it.
	if s.inv != nil {
		if _, _, err := s.inv.refresh(r.Context()); err != nil {
			s.log.Warn("inventory scan after a pull failed", "err", err)
		}
	}
	done.Phase = PullDone
	emit(done)
}

// Pull has the local node fetch a model file into its models dir, calling
// progress with each event the node sends, and returns the done event. A
// refusal or failure is an *Error: BAD_REQUEST for a request the owner
// must change. Only ctx bounds it: a pull of a big model takes long.
func (c *HTTPClient) Pull(ctx context.Context, req PullRequest, progress func(PullEvent)) (PullEvent, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return PullEvent{}, err
	}
	url := c.base + HTTPPrefix + PullPath
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return PullEvent{}, fmt.Errorf("control: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	c.authorize(hr)
	resp, err := c.hc.Do(hr)
	if err != nil {
		return PullEvent{}, fmt.Errorf("control: POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxHTTPBody))
		if e, ok := parseHTTPError(b); ok {
			return PullEvent{}, e
		}
		if resp.StatusCode == http.StatusNotFound {
			return PullEvent{}, &Error{Code: ErrUnsupported.Code, Message: "the node does not support pulling models (" + url + ")"}
		}
		return PullEvent{}, fmt.Errorf("control: POST %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 0, 4<<10), 64<<10)
	for lines.Scan() {
		var ev PullEvent
		if err := json.Unmarshal(lines.Bytes(), &ev); err != nil {
			return PullEvent{}, fmt.Errorf("control: pull: a line of the node's answer does not decode: %w", err)
		}
		switch ev.Phase {
		case PullDone:
			return ev, nil
		case PullFailed:
			code, ok := ParseCodeName(ev.Error.codeName())
			if !ok {
				code = ErrUnavailable.Code
			}
			return PullEvent{}, &Error{Code: code, Message: ev.Error.message()}
		}
		if progress != nil {
			progress(ev)
		}
	}
	if err := lines.Err(); err != nil {
		return PullEvent{}, fmt.Errorf("control: pull: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return PullEvent{}, err
	}
	return PullEvent{}, fmt.Errorf("control: pull: the node's answer ended before the pull did (the next pull resumes where it stopped)")
}

func (e *PullError) codeName() string {
	if e == nil {
		return ""
	}
	return e.Code
}

func (e *PullError) message() string {
	if e == nil {
		return "the pull failed, and the node said no more"
	}
	return e.Message
}

// HoldersPath is the REST facade's route, under HTTPPrefix, that says
// which mesh peers hold which model files for others to pull (GET; the
// answer is Holdings). Meshnode's own, like PullPath.
const HoldersPath = "/models/holders"

// Holdings is what the mesh holds, as this node hears it in gossip: the
// models on the disks of the admitted peers that serve files.
type Holdings struct {
	// ServeFiles is whether this node serves its own files to peers.
	ServeFiles bool        `json:"serve_files"`
	Models     []HeldModel `json:"models"`
}

// HeldModel is one model and the peers holding it.
type HeldModel struct {
	Model     string `json:"model"`
	SizeBytes uint64 `json:"size_bytes"`
	// Holders are the peers' endpoint ids, hex, lowest round trip first.
	Holders []string `json:"holders"`
}

// HolderLister says what the mesh holds.
type HolderLister interface {
	Holders(ctx context.Context) (Holdings, error)
}

func (s *Server) serveHolders(w http.ResponseWriter, r *http.Request) {
	hl, ok := s.cfg.Pulls.(HolderLister)
	if !ok {
		writeHTTPError(w, errorf(ErrUnavailable.Code, "this node does not list the mesh's model files"))
		return
	}
	h, err := hl.Holders(r.Context())
	if err != nil {
		writeHTTPError(w, errorf(ErrUnavailable.Code, "%v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(h)
}

// Holders asks the local node which peers hold which model files.
func (c *HTTPClient) Holders(ctx context.Context) (Holdings, error) {
	url := c.base + HTTPPrefix + HoldersPath
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Holdings{}, fmt.Errorf("control: %w", err)
	}
	c.authorize(hr)
	resp, err := c.hc.Do(hr)
	if err != nil {
		return Holdings{}, fmt.Errorf("control: GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxHTTPBody))
	if resp.StatusCode != http.StatusOK {
		if e, ok := parseHTTPError(b); ok {
			return Holdings{}, e
		}
		return Holdings{}, fmt.Errorf("control: GET %s: %s", url, resp.Status)
	}
	var h Holdings
	if err := json.Unmarshal(b, &h); err != nil {
		return Holdings{}, fmt.Errorf("control: the node's holdings do not decode: %w", err)
	}
	return h, nil
}
