package node

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/receipt"
)

// registry is the API's view of models: this node's, then those its
// peers host.
type registry struct{ n *Node }

func (r *registry) Local(name string) (api.Model, bool) {
	in, ok := r.n.models.get(name)
	if !ok {
		return nil, false
	}
	return &servedModel{in: in, steward: r.n.steward, defaults: generationDefaults{
		maxTokens:      r.n.cfg.API.MaxTokens,
		fidelityFloor:  receipt.Fidelity(r.n.cfg.Steward.FidelityFloor),
		jouleCeilingUJ: r.n.cfg.Steward.JouleCeilingUJ,
	}}, true
}

func (r *registry) List() []api.ModelInfo {
	self := r.n.key.ID()
	var out []api.ModelInfo
	local := map[string]bool{}
	for _, name := range r.n.models.names() {
		out = append(out, api.ModelInfo{ID: name, Local: true, Owner: self})
		local[name] = true
	}
	remote := map[string][]identity.EndpointID{}
	for _, p := range r.n.mesh.Peers() {
		for _, name := range p.Models() {
			if !local[name] {
				remote[name] = append(remote[name], p.ID)
			}
		}
	}
	names := make([]string, 0, len(remote))
	for name := range remote {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		hosts := r.n.mesh.PeersHosting(name)
		info := api.ModelInfo{ID: name, Owner: remote[name][0]}
		for _, h := range hosts {
			info.Hosts = append(info.Hosts, h.ID)
		}
		if len(info.Hosts) > 0 {
			info.Owner = info.Hosts[0]
		}
		out = append(out, info)
	}
	return out
}

// meshRelay is the API's relay through the mesh.
type meshRelay struct{ m *mesh.Node }

func (r meshRelay) HostsOf(model string) []identity.EndpointID {
	peers := r.m.PeersHosting(model)
	ids := make([]identity.EndpointID, len(peers))
	for i, p := range peers {
		ids[i] = p.ID
	}
	return ids
}

func (r meshRelay) DialHTTP(ctx context.Context, peer identity.EndpointID) (net.Conn, error) {
	return r.m.DialHTTP(ctx, peer)
}

// apiNode answers the API's node and steward endpoints.
type apiNode struct{ n *Node }

func (a *apiNode) StewardDID() string             { return a.n.steward.DID() }
func (a *apiNode) Invite() string                 { return a.n.invite }
func (a *apiNode) Status(ctx context.Context) any { return a.n.Status() }

// Witness checks a receipt shown back to the steward (mesh/1 §2.2): it
// must be one this steward sealed, and the journal must hold it.
func (a *apiNode) Witness(ctx context.Context, body []byte) (bool, error) {
	var w struct {
		EnvelopeHex string `json:"envelope_hex"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return false, api.Errorf(http.StatusBadRequest, "invalid_request_error", "invalid_request",
			"witness body must be the usage.energy object: {\"receipt\": ..., \"envelope_hex\": ...}: %v", err)
	}
	env, err := hex.DecodeString(strings.TrimSpace(w.EnvelopeHex))
	if err != nil || len(env) == 0 {
		return false, api.Errorf(http.StatusBadRequest, "invalid_request_error", "invalid_request", "envelope_hex is missing or not hex")
	}
	sealed, err := receipt.Open(env, a.n.key.Public())
	if err != nil {
		return false, api.Errorf(http.StatusBadRequest, "invalid_request_error", "not_our_receipt",
			"the envelope is not a receipt this steward sealed: %v", err)
	}
	return a.n.journal.holds(sealed), nil
}

// memoryJournal records the receipts the steward hands out, so that a
// witness can ask whether one is held. It lives as long as the process:
// the durable file journal replaces it.
type memoryJournal struct {
	mu   sync.Mutex
	held map[receipt.ContentID]uint64
}

func newMemoryJournal() *memoryJournal { return &memoryJournal{held: map[receipt.ContentID]uint64{}} }

func (j *memoryJournal) Sealed(s *receipt.Sealed) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.held[s.ID] = s.Receipt.Sequence
	return nil
}

func (j *memoryJournal) holds(s *receipt.Sealed) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	seq, ok := j.held[s.ID]
	return ok && seq == s.Receipt.Sequence
}
