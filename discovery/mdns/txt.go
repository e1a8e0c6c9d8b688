package mdns

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/meshnode/meshnode/node/mesh"
)

// An Advert is what a node announces in its TXT record, in upstream
// mesh-llm's keys:
//
//	svc=mesh-llm        always; anything else is not a mesh-llm node
//	schema=1            the TXT schema
//	version=<text>      the software version
//	mesh_id=<text>      the mesh the node belongs to, when it has one
//	ep_addr=<json>      the endpoint address: id and direct addresses
//	tok_fp=<32 hex>     fingerprint of the node's invite token (never the token)
//	vram=<bytes>        capability hint: GPU memory, decimal
//	serving=<a|b|...>   capability hint: models served now
//
// Values are bytes; the lengths below keep every string inside DNS's
// 255-byte limit and the whole record (at most 848 bytes with every key at
// its limit) well under the 1300 bytes RFC 6763 §6.2 sets as the most a
// TXT record should take.
type Advert struct {
	Version  string
	MeshID   string
	Endpoint mesh.EndpointAddr
	TokenFP  string
	VRAM     uint64
	Serving  []string
}

// TXT schema and limits.
const (
	svcName = "mesh-llm"
	// SchemaVersion is the TXT schema this package reads and writes.
	SchemaVersion = 1
	// MaxValue bounds one value (upstream's limit).
	MaxValue = 220
	// MaxVersion bounds the version string; a longer one is cut.
	MaxVersion = 64
	// MaxServing bounds the models listed in serving.
	MaxServing = 8

	// Bounds on a record read from the network: RFC 6762's largest
	// packet (9000 bytes) could hold no more strings than this.
	maxTXTStrings = 64
	maxTXTBytes   = 9000
	maxDNSString  = 255
)

// Errors of ParseTXT.
var (
	// ErrNotMeshLLM: the record is not a mesh-llm announcement (no
	// svc=mesh-llm). Such records are skipped silently.
	ErrNotMeshLLM = errors.New("mdns: not a mesh-llm announcement")
	// ErrSchema: a mesh-llm announcement in a schema this version does
	// not read.
	ErrSchema = errors.New("mdns: unsupported TXT schema")
	// ErrBadTXT: a known key's value is malformed, or the record breaks
	// its bounds.
	ErrBadTXT = errors.New("mdns: malformed TXT record")
)

// TXT encodes a as TXT strings, raw bytes each. Optional hints that do not
// fit are left out rather than cut: a truncated model name would name a
// model nobody serves. Endpoint addresses beyond what fits are dropped,
// the first kept; relay URLs are never announced.
func (a Advert) TXT() ([]string, error) {
	if err := checkText("mesh_id", a.MeshID, MaxValue); err != nil {
		return nil, err
	}
	if a.TokenFP != "" && !isFingerprint(a.TokenFP) {
		return nil, fmt.Errorf("%w: tok_fp %q: want 32 lowercase hex digits", ErrBadTXT, a.TokenFP)
	}
	_, ep, err := fitEndpoint(a.Endpoint)
	if err != nil {
		return nil, err
	}
	txt := []string{"svc=" + svcName, "schema=" + strconv.Itoa(SchemaVersion)}
	if v := cutText(a.Version, MaxVersion); v != "" {
		txt = append(txt, "version="+v)
	}
	if a.MeshID != "" {
		txt = append(txt, "mesh_id="+a.MeshID)
	}
	txt = append(txt, "ep_addr="+ep)
	if a.TokenFP != "" {
		txt = append(txt, "tok_fp="+a.TokenFP)
	}
	if a.VRAM > 0 {
		txt = append(txt, "vram="+strconv.FormatUint(a.VRAM, 10))
	}
	if s := packServing(a.Serving); s != "" {
		txt = append(txt, "serving="+s)
	}
	return txt, nil
}

// fitEndpoint returns e with its relays dropped and as many of its direct
// addresses, in order, as fit in MaxValue, and its compact JSON.
func fitEndpoint(e mesh.EndpointAddr) (mesh.EndpointAddr, string, error) {
	e = mesh.EndpointAddr{ID: e.ID, Addrs: e.Addrs}
	for {
		b, err := json.Marshal(e)
		if err != nil {
			return e, "", fmt.Errorf("mdns: encode ep_addr: %w", err)
		}
		// An id alone is 82 bytes, so no addresses always fits.
		if len(b) <= MaxValue || len(e.Addrs) == 0 {
			return e, string(b), nil
		}
		e.Addrs = e.Addrs[:len(e.Addrs)-1]
	}
}

// packServing joins model names with '|' for as many as fit, skipping
// names that are empty, not valid text, or contain the separator.
func packServing(models []string) string {
	var b strings.Builder
	n := 0
	for _, m := range models {
		if n == MaxServing {
			break
		}
		if m == "" || strings.Contains(m, "|") || checkText("serving", m, MaxValue) != nil {
			continue
		}
		sep := 0
		if n > 0 {
			sep = 1
		}
		if b.Len()+sep+len(m) > MaxValue {
			continue
		}
		if sep == 1 {
			b.WriteByte('|')
		}
		b.WriteString(m)
		n++
	}
	return b.String()
}

// ParseTXT decodes a TXT record of raw strings. It follows RFC 6763 §6.4:
// keys are case-insensitive, only the first occurrence of a key counts,
// and a string with an empty key is ignored; keys it does not know are
// ignored too, so newer nodes can add some. A known key with a malformed
// value fails the whole record.
func ParseTXT(txt []string) (Advert, error) {
	var a Advert
	if len(txt) > maxTXTStrings {
		return a, fmt.Errorf("%w: %d strings, limit %d", ErrBadTXT, len(txt), maxTXTStrings)
	}
	total := 0
	kv := make(map[string]string, len(txt))
	flags := make(map[string]bool) // keys present with no '=' at all
	for _, s := range txt {
		total += 1 + len(s)
		if len(s) > maxDNSString || total > maxTXTBytes {
			return a, fmt.Errorf("%w: record exceeds DNS bounds", ErrBadTXT)
		}
		k, v, hasValue := strings.Cut(s, "=")
		k = strings.ToLower(k)
		if _, dup := kv[k]; dup || flags[k] || k == "" {
			continue
		}
		if !hasValue {
			flags[k] = true
			continue
		}
		kv[k] = v
	}
	for _, k := range []string{"schema", "version", "mesh_id", "ep_addr", "tok_fp", "vram", "serving"} {
		if flags[k] {
			return a, fmt.Errorf("%w: %s has no value", ErrBadTXT, k)
		}
	}
	if kv["svc"] != svcName {
		return a, ErrNotMeshLLM
	}
	if s := kv["schema"]; s != strconv.Itoa(SchemaVersion) {
		return a, fmt.Errorf("%w: schema %q, this node reads %d", ErrSchema, s, SchemaVersion)
	}
	var err error
	if v, ok := kv["version"]; ok {
		if err := checkText("version", v, MaxVersion); err != nil {
			return a, err
		}
		a.Version = v
	}
	if v, ok := kv["mesh_id"]; ok {
		if v == "" {
			return a, fmt.Errorf("%w: empty mesh_id", ErrBadTXT)
		}
		if err := checkText("mesh_id", v, MaxValue); err != nil {
			return a, err
		}
		a.MeshID = v
	}
	v, ok := kv["ep_addr"]
	if !ok {
		return a, fmt.Errorf("%w: no ep_addr", ErrBadTXT)
	}
	if a.Endpoint, err = decodeEndpoint(v); err != nil {
		return a, err
	}
	if v, ok := kv["tok_fp"]; ok {
		if !isFingerprint(v) {
			return a, fmt.Errorf("%w: tok_fp %q: want 32 lowercase hex digits", ErrBadTXT, cutText(v, 40))
		}
		a.TokenFP = v
	}
	if v, ok := kv["vram"]; ok {
		if v == "" || len(v) > 20 || strings.TrimLeft(v, "0123456789") != "" {
			return a, fmt.Errorf("%w: vram %q is not a byte count", ErrBadTXT, cutText(v, 40))
		}
		if a.VRAM, err = strconv.ParseUint(v, 10, 64); err != nil {
			return a, fmt.Errorf("%w: vram: %v", ErrBadTXT, err)
		}
	}
	if v, ok := kv["serving"]; ok {
		if err := checkText("serving", v, maxDNSString); err != nil {
			return a, err
		}
		for _, m := range strings.Split(v, "|") {
			if m = strings.TrimSpace(m); m != "" && len(a.Serving) < MaxServing {
				a.Serving = append(a.Serving, m)
			}
		}
	}
	return a, nil
}

// decodeEndpoint reads ep_addr: compact JSON as this package writes it,
// or base64url of that JSON as upstream writes it.
func decodeEndpoint(v string) (mesh.EndpointAddr, error) {
	raw := []byte(v)
	if !strings.HasPrefix(v, "{") {
		b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(v, "="))
		if err != nil {
			return mesh.EndpointAddr{}, fmt.Errorf("%w: ep_addr is neither JSON nor base64url JSON", ErrBadTXT)
		}
		raw = b
	}
	e, err := mesh.ParseEndpointAddr(raw)
	if err != nil {
		return mesh.EndpointAddr{}, fmt.Errorf("%w: ep_addr: %w", ErrBadTXT, err)
	}
	e.Relays = nil // never dialled
	return e, nil
}

// checkText accepts UTF-8 text of at most limit bytes with no control
// characters: what a log line or a status page can show as it is.
func checkText(key, v string, limit int) error {
	switch {
	case len(v) > limit:
		return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrBadTXT, key, len(v), limit)
	case !utf8.ValidString(v):
		return fmt.Errorf("%w: %s is not UTF-8", ErrBadTXT, key)
	case strings.ContainsFunc(v, unicode.IsControl):
		return fmt.Errorf("%w: %s has control characters", ErrBadTXT, key)
	}
	return nil
}

// cutText makes s displayable and at most limit bytes, cutting at a
// character boundary.
func cutText(s string, limit int) string {
	s = strings.ToValidUTF8(s, "")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
	for len(s) > limit {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

func isFingerprint(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
