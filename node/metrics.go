package node

import (
	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/metrics"
	"github.com/meshnode/meshnode/node/receipt"
)

// requestObservers tells each of its observers of every request event:
// the web console's feed and the metrics.
type requestObservers []api.RequestObserver

func (o requestObservers) ObserveRequest(ev api.RequestEvent) {
	for _, x := range o {
		x.ObserveRequest(ev)
	}
}

// requestMetrics counts each generation request the API answered.
type requestMetrics struct{ n *Node }

func (r requestMetrics) ObserveRequest(ev api.RequestEvent) {
	route := metrics.RouteLocal
	switch {
	case ev.RelayedFor != "":
		route = metrics.RouteMesh
	case ev.Route == "peer":
		route = metrics.RoutePeer
	}
	r.n.metrics.ObserveRequest(r.modelLabel(ev.Model), route, ev.Status)
}

// modelLabel is model when this node serves it or knows a peer that does,
// else "": a label per name a client makes up would grow without bound.
func (r requestMetrics) modelLabel(model string) string {
	if model == "" {
		return ""
	}
	if _, ok := r.n.models.get(model); ok {
		return model
	}
	if r.n.mesh != nil && len(r.n.mesh.PeersHosting(model)) > 0 {
		return model
	}
	return ""
}

// sealMetrics tells the metrics of each receipt the steward hands out.
type sealMetrics struct{ m *metrics.Metrics }

func (s sealMetrics) ObserveSealed(sealed *receipt.Sealed) {
	r := &sealed.Receipt
	s.m.ObserveEnergy(r.Energy.Provenance().String(), r.Energy.UJ(), uint64(r.TokensAccepted))
}

// metricSources are what /metrics reads at each scrape: the API's queues,
// the mesh's peers and its tunnels' bytes.
func metricSources(srv *api.Server, mn *mesh.Node) metrics.Sources {
	return metrics.Sources{
		Queues: func() []metrics.Queue {
			var qs []metrics.Queue
			for _, q := range srv.Queues() {
				qs = append(qs, metrics.Queue{Model: q.Model, Running: q.Running, Waiting: q.Waiting})
			}
			return qs
		},
		Peers: func() []metrics.Peer {
			var ps []metrics.Peer
			for _, p := range mn.Peers() {
				ps = append(ps, metrics.Peer{ID: p.ID.Short(), RTT: p.RTT})
			}
			return ps
		},
		Tunnel: mn.TunnelBytes,
	}
}
