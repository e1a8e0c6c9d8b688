package mesh

import (
	"bytes"
	"cmp"
	"net/netip"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// Peer is a snapshot of one admitted peer.
type Peer struct {
	ID identity.EndpointID
	// Addrs are the addresses to dial it on: those it advertises, then
	// those its connections came from.
	Addrs []netip.AddrPort
	// RTT is the lower of the last gossip round trip and QUIC's smoothed
	// RTT; zero until measured.
	RTT time.Duration
	// LatencySource is LATENCY_SOURCE_DIRECT once RTT is measured on a
	// direct connection, LATENCY_SOURCE_UNKNOWN before.
	LatencySource nodev1.LatencySource
	// RTTMeasuredAt is when RTT was last measured.
	RTTMeasuredAt time.Time
	// Announcement is the peer's latest self entry from its own gossip (a
	// copy), or nil when its frames carried none.
	Announcement *nodev1.PeerAnnouncement
	AdmittedAt   time.Time
	// TunnelMap is the last TUNNEL_MAP the peer sent, or nil.
	TunnelMap *nodev1.TunnelMap
}

// Models is the set of models the peer can serve now (ServedModels).
func (p *Peer) Models() []string { return ServedModels(p.Announcement) }

// Admission is the peer's advertised inference admission state.
func (p *Peer) Admission() nodev1.InferenceAdmissionState {
	return p.Announcement.GetInferenceAdmissionState()
}

// ServedModels returns the models an announcement says its node can serve
// now, sorted: hosted_models when the node says that list is known (it may
// then be empty: a node pausing admission publishes known-empty), else
// serving_models and primary_serving, as older peers send them.
func ServedModels(a *nodev1.PeerAnnouncement) []string {
	if a == nil {
		return nil
	}
	var out []string
	if a.GetHostedModelsKnown() || len(a.GetHostedModels()) > 0 {
		out = append(out, a.GetHostedModels()...)
	} else {
		out = append(out, a.GetServingModels()...)
		out = append(out, a.GetPrimaryServing())
	}
	out = slices.DeleteFunc(out, func(s string) bool { return s == "" })
	slices.Sort(out)
	return slices.Compact(out)
}

// admissionRank orders admission states for routing; ok is false for
// states that take no remote work.
func admissionRank(s nodev1.InferenceAdmissionState) (rank int, ok bool) {
	switch s {
	case nodev1.InferenceAdmissionState_INFERENCE_ADMISSION_STATE_ACCEPTING:
		return 0, true
	case nodev1.InferenceAdmissionState_INFERENCE_ADMISSION_STATE_UNSPECIFIED:
		return 1, true // legacy peers: eligible, as upstream treats them
	case nodev1.InferenceAdmissionState_INFERENCE_ADMISSION_STATE_ACCEPTING_DEPRIORITIZED:
		return 2, true
	}
	return 0, false // REMOTE_PAUSED, ALL_PAUSED, and values we do not know
}

// rankHosts keeps the peers serving model that take remote work, ordered
// by admission state, then RTT (unmeasured last), then id.
func rankHosts(peers []Peer, model string) []Peer {
	type ranked struct {
		p    Peer
		rank int
	}
	var rs []ranked
	for _, p := range peers {
		r, ok := admissionRank(p.Admission())
		if ok && slices.Contains(p.Models(), model) {
			rs = append(rs, ranked{p, r})
		}
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		if c := cmp.Compare(a.rank, b.rank); c != 0 {
			return c
		}
		if (a.p.RTT == 0) != (b.p.RTT == 0) {
			if a.p.RTT == 0 {
				return 1
			}
			return -1
		}
		if c := cmp.Compare(a.p.RTT, b.p.RTT); c != 0 {
			return c
		}
		return bytes.Compare(a.p.ID[:], b.p.ID[:])
	})
	out := make([]Peer, len(rs))
	for i, r := range rs {
		out[i] = r.p
	}
	return out
}

// routeEntries lists a RouteEntry per (node, served model), and one with an
// empty model for a node serving nothing, sorted by id then model.
func routeEntries(anns []*nodev1.PeerAnnouncement) []*nodev1.RouteEntry {
	var out []*nodev1.RouteEntry
	for _, a := range anns {
		models := ServedModels(a)
		if len(models) == 0 {
			models = []string{""}
		}
		for _, m := range models {
			out = append(out, &nodev1.RouteEntry{EndpointId: bytes.Clone(a.GetEndpointId()), Model: m})
		}
	}
	slices.SortFunc(out, func(a, b *nodev1.RouteEntry) int {
		if c := bytes.Compare(a.EndpointId, b.EndpointId); c != 0 {
			return c
		}
		return cmp.Compare(a.Model, b.Model)
	})
	return out
}

// relayCopy copies a peer's announcement for our gossip, without the fields
// upstream sends only in a node's own entry.
func relayCopy(a *nodev1.PeerAnnouncement) *nodev1.PeerAnnouncement {
	c := proto.Clone(a).(*nodev1.PeerAnnouncement)
	c.MeshId = nil
	c.Demand = nil
	c.ExpertsSummary = nil
	return c
}
