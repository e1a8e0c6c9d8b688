// Package metrics keeps the node's Prometheus metrics and writes them in
// the text exposition format for GET /metrics (docs/metrics.md).
//
// A Metrics owns its own metric set, never the library's global one, so
// that two nodes in one process (the tests) count apart and nothing is
// registered before a node is built. The rest of the node calls its typed
// methods (ObserveRequest, ObserveTTFT, …) through small observer
// interfaces declared where they are used, or hands it functions it reads
// at scrape time (Sources): the api, steward, mesh and journal packages
// never see the metrics library.
package metrics

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
)

// Bounds on label values that outside parties choose, so that no client or
// peer can grow the metrics without end.
const (
	// MaxModels is how many distinct model labels the node keeps; the
	// rest are counted under OtherModel.
	MaxModels = 64
	// MaxPeers is how many peers get their own RTT gauge: the first by
	// short node id, so that the set stays stable between scrapes.
	MaxPeers = 32
)

// OtherModel labels the models past MaxModels.
const OtherModel = "_other"

// Routes of a request (the requests_total route label).
const (
	RouteLocal = "local" // served on this node for a client of its API
	RoutePeer  = "peer"  // relayed to the peer that served it
	RouteMesh  = "mesh"  // served on this node for a peer that relayed it here
)

// Queue is one model's admission queue at scrape time.
type Queue struct {
	Model   string
	Running int // generations holding a slot
	Waiting int // admitted, waiting for a slot
}

// Peer is one admitted mesh peer at scrape time.
type Peer struct {
	ID  string        // its short node id
	RTT time.Duration // zero until measured
}

// Sources are read at every scrape: the node sets them once the parts
// they read exist. A nil source writes nothing.
type Sources struct {
	Queues func() []Queue
	Peers  func() []Peer
	// Tunnel is the bytes the mesh's HTTP tunnels received and sent.
	Tunnel func() (in, out uint64)
}

// Metrics is one node's metrics. It is safe for concurrent use.
type Metrics struct {
	set     *vm.Set
	version string

	mu      sync.Mutex
	sources Sources
	models  map[string]*modelMetrics // by label, MaxModels at most
}

// modelMetrics are one model's series, each made on first use and kept
// so that a per-token observation builds no metric name.
type modelMetrics struct {
	label     string
	ttft, itl *vm.PrometheusHistogram
	tokens    [2]*vm.Counter // prompt, completion
	spec      [2]*vm.Counter // drafts, accepted
	load      *vm.Gauge
}

// New returns empty metrics for a node of the given version.
func New(version string) *Metrics {
	return &Metrics{set: vm.NewSet(), version: version, models: map[string]*modelMetrics{}}
}

// SetSources replaces what is read at scrape time.
func (m *Metrics) SetSources(s Sources) {
	m.mu.Lock()
	m.sources = s
	m.mu.Unlock()
}

// modelLocked returns the series of model, kept under OtherModel once
// MaxModels models have their own. m.mu is held.
func (m *Metrics) modelLocked(name string) *modelMetrics {
	if mm, ok := m.models[name]; ok {
		return mm
	}
	if len(m.models) >= MaxModels {
		name = OtherModel
		if mm, ok := m.models[name]; ok {
			return mm
		}
	}
	mm := &modelMetrics{label: name}
	m.models[name] = mm
	return mm
}

// modelLabel is name as the model label has it: itself, or OtherModel
// past MaxModels.
func (m *Metrics) modelLabel(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.modelLocked(name).label
}

// histogram returns model's histogram in field, made on first use.
func (m *Metrics) histogram(model string, field func(*modelMetrics) **vm.PrometheusHistogram, family string, buckets []float64) *vm.PrometheusHistogram {
	m.mu.Lock()
	defer m.mu.Unlock()
	mm := m.modelLocked(model)
	h := field(mm)
	if *h == nil {
		*h = m.set.GetOrCreatePrometheusHistogramExt(family+labels("model", mm.label), buckets)
	}
	return *h
}

// ObserveRequest counts one generation request by the model it named
// ("" when it named none the node knows), how it was routed (RouteLocal,
// RoutePeer, RouteMesh) and the HTTP status it was answered with.
func (m *Metrics) ObserveRequest(model, route string, status int) {
	if model != "" {
		model = m.modelLabel(model)
	}
	m.set.GetOrCreateCounter(familyRequests + labels("model", model, "route", route, "status", strconv.Itoa(status))).Inc()
}

// ObserveTokens counts a served generation's prompt and completion tokens.
func (m *Metrics) ObserveTokens(model string, prompt, completion int) {
	m.addPair(model, func(mm *modelMetrics) *[2]*vm.Counter { return &mm.tokens }, familyPromptTokens, familyCompletionTokens, prompt, completion)
}

// ObserveSpeculation counts a served generation's speculative drafts: the
// tokens proposed and verified, and those the model accepted (their
// ratio is the share of drafts that stood).
func (m *Metrics) ObserveSpeculation(model string, proposed, accepted int) {
	m.addPair(model, func(mm *modelMetrics) *[2]*vm.Counter { return &mm.spec }, familySpecDrafts, familySpecAccepted, proposed, accepted)
}

// addPair adds a and b to model's two counters in field, of families fa
// and fb, made on first use.
func (m *Metrics) addPair(model string, field func(*modelMetrics) *[2]*vm.Counter, fa, fb string, a, b int) {
	m.mu.Lock()
	mm := m.modelLocked(model)
	c := field(mm)
	if c[0] == nil {
		l := labels("model", mm.label)
		c[0], c[1] = m.set.GetOrCreateCounter(fa+l), m.set.GetOrCreateCounter(fb+l)
	}
	ca, cb := c[0], c[1]
	m.mu.Unlock()
	ca.Add(a)
	cb.Add(b)
}

// ObserveTTFT records a generation's time to its first token, from the
// request's arrival.
func (m *Metrics) ObserveTTFT(model string, d time.Duration) {
	m.histogram(model, func(mm *modelMetrics) **vm.PrometheusHistogram { return &mm.ttft }, familyTTFT, ttftBuckets).Update(d.Seconds())
}

// ObserveInterToken records the time between two consecutive tokens of
// a generation.
func (m *Metrics) ObserveInterToken(model string, d time.Duration) {
	m.histogram(model, func(mm *modelMetrics) **vm.PrometheusHistogram { return &mm.itl }, familyITL, itlBuckets).Update(d.Seconds())
}

// ObserveEnergy records one sealed receipt's energy (µJ, as receipts
// carry it) by its provenance grade, and its energy per accepted token
// when it accepted any.
func (m *Metrics) ObserveEnergy(provenance string, uj uint64, acceptedTokens uint64) {
	l := labels("provenance", provenance)
	m.set.GetOrCreateCounter(familyReceipts + l).Inc()
	m.set.GetOrCreateFloatCounter(familyJoules + l).Add(float64(uj) / 1e6)
	if acceptedTokens > 0 {
		m.set.GetOrCreatePrometheusHistogramExt(familyJoulesPerToken+l, joulesPerTokenBuckets).
			Update(float64(uj) / float64(acceptedTokens) / 1e6)
	}
}

// ObserveSync records one fsync of the steward's journal ("journal") or
// of its checkpoint ("checkpoint").
func (m *Metrics) ObserveSync(file string, d time.Duration) {
	m.set.GetOrCreatePrometheusHistogramExt(familyFsync+labels("file", file), fsyncBuckets).Update(d.Seconds())
}

// ObserveModelLoad records how long the last load of model took.
func (m *Metrics) ObserveModelLoad(model string, d time.Duration) {
	m.mu.Lock()
	mm := m.modelLocked(model)
	if mm.load == nil {
		mm.load = m.set.GetOrCreateGauge(familyModelLoad+labels("model", mm.label), nil)
	}
	g := mm.load
	m.mu.Unlock()
	g.Set(d.Seconds())
}

// ContentType is the text exposition format's media type.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Handler serves the metrics: GET /metrics.
func (m *Metrics) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ContentType)
		m.WritePrometheus(w)
	})
}

// WritePrometheus writes every metric in the text exposition format: the
// node's own, each family under its HELP and TYPE lines, then the Go
// runtime's and the process's (its file descriptors included) as the
// library writes them.
func (m *Metrics) WritePrometheus(w io.Writer) {
	var b bytes.Buffer
	m.set.WritePrometheus(&b)
	m.writeSources(&b)
	fmt.Fprintf(&b, "%s%s 1\n", familyBuildInfo, labels("version", m.version))
	var out bytes.Buffer
	annotate(&out, b.Bytes())
	vm.WriteGoMetrics(&out)
	vm.WriteProcMetrics(&out)
	vm.WriteFDMetrics(&out)
	_, _ = w.Write(out.Bytes())
}

// writeSources writes what the sources say now, each family's lines
// together.
func (m *Metrics) writeSources(b *bytes.Buffer) {
	m.mu.Lock()
	src := m.sources
	m.mu.Unlock()
	if src.Queues != nil {
		qs := src.Queues()
		slices.SortFunc(qs, func(a, b Queue) int { return strings.Compare(a.Model, b.Model) })
		for _, q := range qs {
			fmt.Fprintf(b, "%s%s %d\n", familyQueueDepth, labels("model", m.modelLabel(q.Model)), q.Waiting)
		}
		for _, q := range qs {
			fmt.Fprintf(b, "%s%s %d\n", familyRunning, labels("model", m.modelLabel(q.Model)), q.Running)
		}
	}
	if src.Peers != nil {
		ps := src.Peers()
		fmt.Fprintf(b, "%s %d\n", familyPeers, len(ps))
		slices.SortFunc(ps, func(a, b Peer) int { return strings.Compare(a.ID, b.ID) })
		n := 0
		for _, p := range ps {
			if p.RTT <= 0 {
				continue // not measured yet
			}
			if n++; n > MaxPeers {
				break
			}
			fmt.Fprintf(b, "%s%s %g\n", familyPeerRTT, labels("peer", p.ID), p.RTT.Seconds())
		}
	}
	if src.Tunnel != nil {
		in, out := src.Tunnel()
		fmt.Fprintf(b, "%s%s %d\n", familyTunnelBytes, labels("direction", "in"), in)
		fmt.Fprintf(b, "%s%s %d\n", familyTunnelBytes, labels("direction", "out"), out)
	}
}

// annotate copies the node's series to w, each family preceded by its
// HELP and TYPE lines. (The library can write TYPE lines too, but only
// by a switch global to the process, and with no help text.)
func annotate(w *bytes.Buffer, series []byte) {
	prev := ""
	for line := range strings.SplitSeq(strings.TrimSuffix(string(series), "\n"), "\n") {
		if line == "" || line[0] == '#' {
			continue // the library's own metadata, were it switched on
		}
		name := line[:strings.IndexAny(line, "{ ")]
		f, ok := familyOf(name)
		if ok && f.name != prev {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", f.name, f.help, f.name, f.typ)
			prev = f.name
		}
		w.WriteString(line)
		w.WriteByte('\n')
	}
}

// familyOf is the family a series of the given name belongs to.
func familyOf(name string) (family, bool) {
	if f, ok := lookup(name); ok {
		return f, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f, ok := lookup(base); ok && f.typ == "histogram" {
				return f, true
			}
		}
	}
	return family{}, false
}

// labels renders label pairs (name, value, name, value…) as a series'
// label set, values escaped as the text format requires.
func labels(kv ...string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv[i])
		b.WriteString(`="`)
		b.WriteString(labelEscaper.Replace(kv[i+1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
