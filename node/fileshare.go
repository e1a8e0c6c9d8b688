package node

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/modelfetch"
	"github.com/meshnode/meshnode/node/modelshare"
	"github.com/meshnode/meshnode/node/wire/filewire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// fileHashesFile caches the hashes of the models dir's files that the
// node serves to its peers, by size and mtime (modelshare.Catalog).
const fileHashesFile = "model-hashes.json"

// startFileShare makes the node serve the model files of its models dir
// to admitted peers on meshnode-file/1, under its mesh access policy,
// paced by serve_files_rate, while serve_files is on (setServeFiles
// turns it on and off live).
func (n *Node) startFileShare(ctx context.Context, access *meshAccess, run func(string, func(context.Context) error, context.Context)) {
	rate := int64(n.cfg.ServeFilesRate)
	n.share = &modelshare.Server{
		Catalog: &modelshare.Catalog{Dir: n.cfg.ModelsDir, CacheFile: filepath.Join(n.cfg.StateDir, fileHashesFile), Logger: n.log},
		Allow:   access.AllowPeer,
		Serving: n.serveFiles.Load,
		Limit:   modelshare.NewBucket(rate, min(rate, 1<<20), nil, nil),
		Logger:  n.log.With("component", "files"),
	}
	n.setServeFiles(*n.cfg.ServeFiles)
	if *n.cfg.ServeFiles {
		// Hash what peers may ask for once, off the start path: a big
		// file takes a while, and the cache keeps it across restarts.
		run("model file hashes", func(ctx context.Context) error {
			_, err := n.share.Catalog.List(ctx)
			return err
		}, ctx)
	}
	n.log.Info("model files for peers", "serve_files", *n.cfg.ServeFiles, "rate_bytes_per_s", rate)
}

// setServeFiles turns serving files to peers on or off now, and says so
// in gossip (the subprotocol is advertised only while it is on).
func (n *Node) setServeFiles(on bool) {
	if n.share == nil || n.mesh == nil {
		return
	}
	n.serveFiles.Store(on)
	var h mesh.SubprotocolHandler
	if on {
		h = func(ctx context.Context, peer identity.EndpointID, s *quic.Stream) {
			n.share.ServeStream(ctx, peer, s)
			s.CancelRead(mesh.StreamCodeDone)
			s.Close()
		}
	}
	if err := n.mesh.HandleSubprotocol(filewire.Advertisement(), h); err != nil {
		n.log.Warn("serving model files", "err", err)
	}
	n.announceChange()
}

// fileDialer opens meshnode-file/1 streams to peers.
func (n *Node) fileDialer() modelshare.Dialer {
	return func(ctx context.Context, peer identity.EndpointID) (io.ReadWriteCloser, error) {
		return n.mesh.OpenSubprotocol(ctx, peer, filewire.Name, filewire.Major)
	}
}

// servesFiles reports whether an announcement advertises meshnode-file/1.
func servesFiles(p mesh.Peer) bool {
	return slices.ContainsFunc(p.Announcement.GetSubprotocols(), func(s *nodev1.MeshSubprotocol) bool {
		return s.GetName() == filewire.Name && s.GetMajor() == filewire.Major
	})
}

// fileHolders are the admitted peers that serve files and, for a want by
// name, list that model on their disk; lowest round trip first.
func (n *Node) fileHolders(want modelshare.Want) []mesh.Peer {
	var out []mesh.Peer
	for _, p := range n.mesh.Peers() {
		if !servesFiles(p) {
			continue
		}
		if want.Name != "" && !slices.Contains(p.Announcement.GetAvailableModels(), ModelName(want.Name)) {
			continue
		}
		out = append(out, p)
	}
	slices.SortStableFunc(out, func(a, b mesh.Peer) int { return cmp.Compare(a.RTT, b.RTT) })
	return out
}

// meshSource is a file the mesh holds: the first holder that lists it
// serves it, and a holder that goes away mid-transfer is replaced by the
// next that holds the same bytes (the same SHA-256), the transfer
// resuming where it stopped.
type meshSource struct {
	n      *Node
	ref    string
	want   modelshare.Want
	sha    string
	skip   map[identity.EndpointID]bool
	tried  map[identity.EndpointID]bool
	cur    *modelshare.PeerSource
	failed []string
}

func (n *Node) newMeshSource(ref, sha256Hex string) (*meshSource, error) {
	want, err := modelshare.ParseWant(ref)
	if err != nil {
		return nil, fmt.Errorf("%w: %s%s: %w", control.ErrBadPull, meshSourcePrefix, ref, err)
	}
	if n.mesh == nil {
		return nil, fmt.Errorf("%s%s: the node is not in a mesh", meshSourcePrefix, ref)
	}
	return &meshSource{n: n, ref: ref, want: want, sha: strings.ToLower(sha256Hex), skip: map[identity.EndpointID]bool{}}, nil
}

func (s *meshSource) Origin() string {
	if s.cur != nil {
		return s.cur.Origin()
	}
	return meshSourcePrefix + s.ref
}

// Describe finds the first holder that lists the file (with the SHA-256
// the owner gave, if any).
func (s *meshSource) Describe(ctx context.Context) (modelfetch.Meta, error) {
	s.cur, s.tried, s.failed = nil, map[identity.EndpointID]bool{}, nil
	return s.next(ctx, nil)
}

// next moves to the next holder; with have set, one of that exact file.
func (s *meshSource) next(ctx context.Context, have *modelfetch.Meta) (modelfetch.Meta, error) {
	holders := s.n.fileHolders(s.want)
	for _, p := range holders {
		if s.skip[p.ID] || s.tried[p.ID] {
			continue
		}
		s.tried[p.ID] = true
		ps := &modelshare.PeerSource{Dial: s.n.fileDialer(), Peer: p.ID, Want: s.want}
		m, err := ps.Describe(ctx)
		switch {
		case err != nil:
			s.failed = append(s.failed, err.Error())
			continue
		case s.sha != "" && hex.EncodeToString(m.SHA256[:]) != s.sha:
			s.failed = append(s.failed, fmt.Sprintf("%s holds it with SHA-256 %x, not %s", ps.Origin(), m.SHA256, s.sha))
			continue
		case have != nil && (m.SHA256 != have.SHA256 || m.Size != have.Size):
			s.failed = append(s.failed, fmt.Sprintf("%s holds other bytes under that name", ps.Origin()))
			continue
		}
		s.cur = ps
		return m, nil
	}
	why := "no admitted peer that serves model files lists it"
	if have != nil {
		why = "no other holder lists it"
	} else if len(holders) == 0 && s.want.Name != "" {
		why = "no admitted peer that serves model files has it on its disk (meshcli models lists what peers hold)"
	}
	if len(s.failed) > 0 {
		why = strings.Join(s.failed, "; ")
	}
	return modelfetch.Meta{}, modelfetch.Permanent(fmt.Errorf("%s%s: %s", meshSourcePrefix, s.ref, why))
}

// Open reads from the current holder; one that is gone or refuses now is
// replaced by the next holder of the same file.
func (s *meshSource) Open(ctx context.Context, offset int64, m modelfetch.Meta, v string) (modelfetch.Chunk, error) {
	for {
		c, err := s.cur.Open(ctx, offset, m, v)
		if err == nil || !modelfetch.IsPermanent(err) {
			return c, err
		}
		s.n.log.Warn("a holder of the file is unavailable: trying the next", "file", s.want.String(), "err", err)
		if _, nerr := s.next(ctx, &m); nerr != nil {
			return modelfetch.Chunk{}, modelfetch.Permanent(fmt.Errorf("%w (and no other holder: %w)", err, nerr))
		}
	}
}

// Check is the current holder's check: its weights digest.
func (s *meshSource) Check(r modelfetch.Result) error { return s.cur.Check(r) }

// meshPull pulls a file from the mesh, moving past a holder whose bytes
// fail verification (it is named in the error) to the next.
func (n *Node) meshPull(ctx context.Context, src *meshSource, fetch func(modelfetch.Source) (modelfetch.Result, error)) (modelfetch.Result, error) {
	var errs []error
	for {
		res, err := fetch(src)
		if err == nil {
			return res, nil
		}
		if !errors.Is(err, modelfetch.ErrMismatch) || src.cur == nil {
			return res, errors.Join(append(errs, err)...)
		}
		n.log.Warn("a peer sent a model file that failed verification: discarded", "peer", src.cur.Peer.Short(), "err", err)
		errs = append(errs, err)
		src.skip[src.cur.Peer] = true
	}
}

// Holders implements control.HolderLister from gossip: the models on the
// disks of the admitted peers that serve files.
func (r *ownerRuntime) Holders(ctx context.Context) (control.Holdings, error) {
	h := control.Holdings{ServeFiles: r.n.serveFiles.Load()}
	if r.n.mesh == nil {
		return h, nil
	}
	byModel := map[string]*control.HeldModel{}
	for _, p := range r.n.fileHolders(modelshare.Want{}) {
		sizes := p.Announcement.GetAvailableModelSizes()
		for _, m := range p.Announcement.GetAvailableModels() {
			e := byModel[m]
			if e == nil {
				e = &control.HeldModel{Model: m, SizeBytes: sizes[m]}
				byModel[m] = e
			}
			e.Holders = append(e.Holders, hex.EncodeToString(p.ID[:]))
		}
	}
	for _, e := range byModel {
		h.Models = append(h.Models, *e)
	}
	slices.SortFunc(h.Models, func(a, b control.HeldModel) int { return strings.Compare(a.Model, b.Model) })
	return h, nil
}
