package node

import (
	"context"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/placement"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// placed is the node's part in mesh-wide placement (docs/mesh.md#placement):
// what it measured serving each model, which it gossips, and the Placer
// that weighs every host of a model when a request arrives.
type placed struct {
	placer  *placement.Placer
	mu      sync.Mutex
	windows map[string]*placement.Window
	// api is the API server once it runs: it knows the models' queues.
	api atomic.Pointer[api.Server]
	// loadMoved is signalled when a model's slots or queue fill or come
	// free (api.Config.LoadChanged), for pushLoads.
	loadMoved chan struct{}
}

func newPlaced() *placed {
	return &placed{placer: placement.New(placement.Config{}), windows: map[string]*placement.Window{},
		loadMoved: make(chan struct{}, 1)}
}

// loadChanged is api.Config.LoadChanged: it never blocks.
func (p *placed) loadChanged(string) {
	select {
	case p.loadMoved <- struct{}{}:
	default:
	}
}

// pushGap is the least time between two announcements pushLoads sends.
const pushGap = 100 * time.Millisecond

// pushLoads gossips the node's announcement at once when a model's slots
// or queue fill or come free, rather than at the next gossip interval
// (15 s by default), so that peers do not place on a full queue or shun
// a free one for long; at most once per pushGap, however busy.
func (n *Node) pushLoads(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-n.place.loadMoved:
		}
		if err := n.mesh.UpdateSelf(); err != nil {
			n.log.Debug("placement: announcing a load change", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pushGap):
		}
	}
}

// window is model's window of served receipts.
func (p *placed) window(model string) *placement.Window {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.windows[model]
	if w == nil {
		w = &placement.Window{}
		p.windows[model] = w
	}
	return w
}

// record adds a sealed serve of model that took took to its window.
func (p *placed) record(model string, r *receipt.Receipt, took time.Duration) {
	p.window(model).Add(placement.Sample{
		PromptTokens: r.TokensIn, OutputTokens: r.TokensOut, UJ: r.Energy.UJ(),
		Grade: placement.GradeOf(r.Energy.Provenance()), Took: took,
	})
}

// figures is what this node advertises for the model in, with load its
// queue: the window's measured rates once it has receipts, else the
// engine's modelled µJ per token for both, graded Estimator.
func (p *placed) figures(model string, in *instance, load api.LocalLoad) placement.Figures {
	eng := in.m.Engine()
	w := p.window(model)
	f := placement.Figures{
		TokensPerSecondMilli: w.TokensPerSecondMilli(),
		Slots:                uint32(load.Slots), FreeSlots: uint32(load.Free),
		Queued: uint32(load.Queued), QueueLimit: uint32(load.QueueLimit),
		Fidelity: uint8(min(eng.Fidelity(), receipt.F4)),
	}
	a, b, grade, n := w.Energy()
	if n == 0 {
		a, b, grade = eng.UJPerToken()*1000, eng.UJPerToken()*1000, placement.GradeEstimator
	}
	f.UJPerPromptTokenMilli, f.UJPerOutputTokenMilli, f.Grade, f.Receipts = a, b, grade, uint32(n)
	return f
}

// modelLoads are the MeshnodeModelLoad entries of this node's
// announcement, one per model it serves now; none until the API runs.
func (n *Node) modelLoads(hosted []string) []*nodev1.MeshnodeModelLoad {
	if n.place == nil {
		return nil
	}
	srv := n.place.api.Load()
	if srv == nil {
		return nil
	}
	var out []*nodev1.MeshnodeModelLoad
	for _, name := range hosted {
		in, ok := n.models.get(name)
		if !ok {
			continue
		}
		load, ok := srv.Load(name)
		if !ok {
			continue
		}
		l := wireLoad(name, n.place.figures(name, in, load))
		if n.claimHook != nil {
			n.claimHook(l)
		}
		out = append(out, l)
	}
	return out
}

func wireLoad(model string, f placement.Figures) *nodev1.MeshnodeModelLoad {
	return &nodev1.MeshnodeModelLoad{
		ModelName:                  model,
		UjPerPromptTokenMilli:      f.UJPerPromptTokenMilli,
		UjPerOutputTokenMilli:      f.UJPerOutputTokenMilli,
		EnergyGrade:                nodev1.MeshnodeEnergyGrade(f.Grade),
		Receipts:                   f.Receipts,
		OutputTokensPerSecondMilli: f.TokensPerSecondMilli,
		Slots:                      f.Slots,
		FreeSlots:                  f.FreeSlots,
		Queued:                     f.Queued,
		QueueLimit:                 f.QueueLimit,
		Fidelity:                   uint32(f.Fidelity),
	}
}

// peerFigures are the figures a peer's own announcement gives for model;
// ok is false when it gives none (a mesh-llm peer, or an older meshnode).
func peerFigures(a *nodev1.PeerAnnouncement, model string) (f placement.Figures, ok bool) {
	for _, l := range a.GetMeshnodeModelLoad() {
		if l.GetModelName() != model {
			continue
		}
		g := placement.Grade(l.GetEnergyGrade())
		if g > placement.GradeHwShunt {
			g = placement.GradeUnknown // a grade this node does not know
		}
		return placement.Figures{
			UJPerPromptTokenMilli: l.GetUjPerPromptTokenMilli(), UJPerOutputTokenMilli: l.GetUjPerOutputTokenMilli(),
			Grade: g, Receipts: l.GetReceipts(), TokensPerSecondMilli: l.GetOutputTokensPerSecondMilli(),
			Slots: l.GetSlots(), FreeSlots: l.GetFreeSlots(), Queued: l.GetQueued(), QueueLimit: l.GetQueueLimit(),
			Fidelity: uint8(l.GetFidelity()),
		}, true
	}
	return placement.Figures{}, false
}

// peerPlacement is what p advertises for placement, per model, with this
// node's view of its claims.
func (n *Node) peerPlacement(p mesh.Peer) []PeerPlacement {
	if n.place == nil {
		return nil
	}
	var out []PeerPlacement
	for _, l := range p.Announcement.GetMeshnodeModelLoad() {
		f, _ := peerFigures(p.Announcement, l.GetModelName())
		out = append(out, PeerPlacement{
			Model: l.GetModelName(), UJPerPromptToken: float64(f.UJPerPromptTokenMilli) / 1000,
			UJPerOutputToken: float64(f.UJPerOutputTokenMilli) / 1000, EnergyGrade: f.Grade.String(), Receipts: f.Receipts,
			OutputTokensPerSecond: float64(f.TokensPerSecondMilli) / 1000,
			Slots:                 f.Slots, FreeSlots: f.FreeSlots, Queued: f.Queued,
			Trust:    n.place.placer.Trust(p.ID, l.GetModelName()),
			InFlight: n.place.placer.InFlight(p.ID),
		})
	}
	return out
}

// Place implements api.Placer: every host of g's model, this node (when
// local) and the peers that host it, weighed by the node's Placer. It
// places nothing when no peer hosts the model.
func (r meshRelay) Place(g *api.Generation, local bool, load api.LocalLoad) *api.Placement {
	n := r.n
	if n == nil || n.place == nil || n.placeByRTT {
		return nil
	}
	peers := r.m.PeersHosting(g.Model)
	if len(peers) == 0 {
		return nil
	}
	var hosts []placement.Host
	if local {
		if in, ok := n.models.get(g.Model); ok {
			f := n.place.figures(g.Model, in, load)
			hosts = append(hosts, placement.Host{ID: n.key.ID(), Self: true, Figures: &f})
		}
	}
	claims := make(map[identity.EndpointID]placement.Figures, len(peers))
	for _, p := range peers {
		h := placement.Host{ID: p.ID, RTT: p.RTT}
		if f, ok := peerFigures(p.Announcement, g.Model); ok {
			h.Figures = &f
			claims[p.ID] = f
		}
		hosts = append(hosts, h)
	}
	d := n.place.placer.Weigh(g.Model, n.placementRequest(g), hosts)
	model := g.Model
	return &api.Placement{Hosts: d.Hosts(), Route: d.Line, Detail: d,
		Sent: func(peer identity.EndpointID) func(string) {
			end := n.place.placer.Begin(peer)
			claim, claimed := claims[peer]
			return func(envelopeHex string) {
				end()
				if claimed && envelopeHex != "" {
					n.checkClaim(peer, model, claim, envelopeHex)
				}
			}
		}}
}

// checkClaim compares the receipt a peer sealed for a request this node
// sent it with the figures it advertised when the request was sent. A
// receipt that does not verify under the peer's key, or is for another
// model, proves nothing and is only logged.
func (n *Node) checkClaim(peer identity.EndpointID, model string, claim placement.Figures, envelopeHex string) {
	env, err := hex.DecodeString(envelopeHex)
	if err != nil {
		return
	}
	s, err := receipt.Open(env, peer.PublicKey())
	if err != nil {
		n.log.Warn("placement: a peer's receipt does not verify under its key", "peer", peer.Short(), "err", err)
		return
	}
	r := &s.Receipt
	if r.Recipe != model {
		n.log.Warn("placement: a peer's receipt is for another model", "peer", peer.Short(), "model", model, "recipe", r.Recipe)
		return
	}
	n.place.placer.Observe(peer, model, claim, r.TokensIn, r.TokensOut, r.Energy.UJ())
}

// placementRequest is g as placement prices it: its prompt's length
// estimated at a token per 4 characters (it is tokenized only where it is
// served), and the node's defaults where g sets none.
func (n *Node) placementRequest(g *api.Generation) placement.Request {
	chars := utf8.RuneCountInString(g.Prompt) + utf8.RuneCountInString(g.Suffix)
	if in := g.Infill; in != nil {
		chars += utf8.RuneCountInString(in.Prefix) + utf8.RuneCountInString(in.Suffix)
		for _, c := range in.Extra {
			chars += utf8.RuneCountInString(c.Text)
		}
	}
	for _, m := range g.Messages {
		chars += utf8.RuneCountInString(m.Content)
	}
	tokens := (chars+3)/4 + len(g.PromptIDs) // token ids are counted, not estimated
	req := placement.Request{
		PromptTokens:   uint32(min(tokens, 1<<30)),
		MaxTokens:      uint32(max(0, min(g.MaxTokens, 1<<30))),
		FidelityFloor:  uint8(n.cfg.Steward.FidelityFloor),
		JouleCeilingUJ: n.cfg.Steward.JouleCeilingUJ,
	}
	if req.MaxTokens == 0 {
		req.MaxTokens = uint32(max(0, n.cfg.API.MaxTokens))
	}
	if g.FidelityFloor != nil {
		req.FidelityFloor = uint8(min(*g.FidelityFloor, 4))
	}
	if g.JouleCeilingUJ != nil {
		req.JouleCeilingUJ = *g.JouleCeilingUJ
	}
	if b := g.LatencyBudgetMS; b != nil {
		req.Budget = time.Duration(*b) * time.Millisecond
	}
	return req
}
