package api

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
)

// The API trusts the machine it runs on, and a web browser on that
// machine is the one client that will send whatever a page it visits
// asks: so the browser's own signals decide what a page may do.
//
//   - DNS rebinding: a page whose DNS name now resolves to 127.0.0.1 is
//     same-origin with the node as far as the browser knows, but it still
//     sends its own name in Host. Only names that cannot be rebound by a
//     stranger are answered: IP literals, localhost (and *.localhost),
//     this machine's hostname, and the names api.allowed_hosts lists.
//   - Cross-origin requests: a page on another origin sends Origin (on
//     every POST, and on CORS reads) or Sec-Fetch-Site. They are refused
//     unless api.allowed_origins lists the origin, which then also gets
//     CORS answers so that a browser app the owner chose can use the node.
//   - Bodies a page can send without a CORS preflight (text/plain, forms,
//     or no Content-Type at all, which fetch sends for a byte array) are
//     refused by checkJSON.

// hostAllowed reports whether host (a Host header, port and all) names
// this node in a way no web page can rebind.
func (s *Server) hostAllowed(host string) bool {
	if host == "" {
		return true // HTTP/1.0 without Host: no browser sends this
	}
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.ToLower(strings.TrimSuffix(strings.Trim(name, "[]"), "."))
	if net.ParseIP(name) != nil || name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return true
	}
	if hn, err := os.Hostname(); err == nil && hn != "" {
		hn = strings.ToLower(hn)
		if name == hn || name == hn+".local" {
			return true
		}
	}
	return slices.ContainsFunc(s.cfg.AllowedHosts, func(a string) bool {
		return a == "*" || strings.EqualFold(strings.TrimSuffix(a, "."), name)
	})
}

// originAllowed reports whether a request carrying Origin origin may be
// served: the node's own origin (the page the node itself serves), or one
// api.allowed_origins lists.
func (s *Server) originAllowed(origin, host string) bool {
	if s.listedOrigin(origin) {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && strings.EqualFold(u.Host, host)
}

// listedOrigin reports whether api.allowed_origins lists origin.
func (s *Server) listedOrigin(origin string) bool {
	return slices.ContainsFunc(s.cfg.AllowedOrigins, func(a string) bool {
		return a == "*" || strings.EqualFold(strings.TrimSuffix(a, "/"), origin)
	})
}

// guardBrowser applies the rules above before anything else, including
// the API key: a refused page learns nothing from the node.
func (s *Server) guardBrowser(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r.Host) {
			writeError(w, Errorf(http.StatusForbidden, "invalid_request_error", "host_not_allowed",
				"Host %q is not a name of this node: the API answers to IP addresses, localhost and this machine's hostname, "+
					"so that a web page that rebinds its DNS name to this machine cannot use it; list the name in api.allowed_hosts to allow it", r.Host))
			return
		}
		origin := r.Header.Get("Origin")
		switch {
		case origin != "":
			if !s.originAllowed(origin, r.Host) {
				writeError(w, Errorf(http.StatusForbidden, "invalid_request_error", "cross_origin_refused",
					"requests from web pages on %s are refused; list the origin in api.allowed_origins to allow it", origin))
				return
			}
			if s.listedOrigin(origin) {
				h := w.Header()
				h.Set("Access-Control-Allow-Origin", origin)
				h.Add("Vary", "Origin")
				if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
					h.Set("Access-Control-Allow-Methods", "GET, POST")
					h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
					h.Set("Access-Control-Max-Age", "600")
					w.WriteHeader(http.StatusNoContent)
					return
				}
			}
		case r.Header.Get("Sec-Fetch-Site") == "cross-site" || r.Header.Get("Sec-Fetch-Site") == "same-site":
			// A page's no-cors request (an <img> or <script> src) carries
			// no Origin; the browser still says where it came from.
			writeError(w, Errorf(http.StatusForbidden, "invalid_request_error", "cross_origin_refused",
				"requests from other web sites are refused; list the origin in api.allowed_origins to allow it"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// checkJSON refuses a body that is not declared JSON: text/plain, a form
// and multipart are what a web page can send cross-origin without a CORS
// preflight, and so is no Content-Type at all (fetch with a byte-array
// body). Every client of a JSON API sends application/json.
func checkJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
		return nil
	}
	if ct == "" {
		return Errorf(http.StatusUnsupportedMediaType, "invalid_request_error", "unsupported_media_type",
			"request body must be JSON: send Content-Type: application/json")
	}
	return Errorf(http.StatusUnsupportedMediaType, "invalid_request_error", "unsupported_media_type",
		"request body must be JSON: send Content-Type: application/json (got %q)", ct)
}
