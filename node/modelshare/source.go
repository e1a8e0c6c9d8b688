package modelshare

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/meshnode/meshnode/gguf/digest"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/modelfetch"
	"github.com/meshnode/meshnode/node/wire/filewire"
)

// Dialer opens a meshnode-file/1 stream to peer.
type Dialer func(ctx context.Context, peer identity.EndpointID) (io.ReadWriteCloser, error)

// writeCloser is a stream whose sending side can end alone (the
// request is all we send).
type writeCloser interface{ CloseWrite() error }

// requestTimeout bounds a request's round trip: the answer's frame, not
// the bytes after it (a holder may hash a big file first).
const requestTimeout = 2 * time.Minute

// Want names the file a PeerSource fetches: Name, or else Weights.
type Want struct {
	Name    string
	Weights [32]byte
}

func (w Want) String() string {
	if w.Name != "" {
		return w.Name
	}
	return "weights digest " + hex.EncodeToString(w.Weights[:])
}

// matches reports whether f is the file w names (a name with or without
// .gguf).
func (w Want) matches(f filewire.File) bool {
	if w.Name == "" {
		return f.Weights == w.Weights
	}
	return f.Name == w.Name || f.Name == w.Name+".gguf"
}

// PeerSource is a file one mesh peer holds, as a modelfetch.Source and
// modelfetch.Checker: its size and SHA-256 are those the peer advertises
// in its Listing, and the file fetched must also have the weights digest
// the peer advertised.
type PeerSource struct {
	Dial Dialer
	Peer identity.EndpointID
	Want Want

	file filewire.File
}

// File is the file the peer advertised, once Describe found it.
func (s *PeerSource) File() filewire.File { return s.file }

// Origin names the peer.
func (s *PeerSource) Origin() string { return "mesh peer " + s.Peer.Short() }

// ErrPeer marks an answer a peer gave: a refusal, a file it does not hold.
var ErrPeer = errors.New("the peer refused")

// Describe lists the peer's files and finds the one wanted.
func (s *PeerSource) Describe(ctx context.Context) (modelfetch.Meta, error) {
	files, err := List(ctx, s.Dial, s.Peer)
	if err != nil {
		return modelfetch.Meta{}, err
	}
	for _, f := range files {
		if s.Want.matches(f) {
			s.file = f
			return modelfetch.Meta{Size: int64(f.Size), SHA256: f.SHA256, Version: hex.EncodeToString(f.SHA256[:])}, nil
		}
	}
	return modelfetch.Meta{}, modelfetch.Permanent(fmt.Errorf("%s: %w: it holds no %s", s.Origin(), ErrPeer, s.Want))
}

// List asks peer for the files it serves.
func List(ctx context.Context, dial Dialer, peer identity.EndpointID) ([]filewire.File, error) {
	st, err := dial(ctx, peer)
	if err != nil {
		return nil, modelfetch.Permanent(fmt.Errorf("mesh peer %s: %w", peer.Short(), err))
	}
	defer st.Close()
	m, err := request(ctx, st, &filewire.List{})
	if err != nil {
		return nil, fmt.Errorf("mesh peer %s: %w", peer.Short(), err)
	}
	l, ok := m.(*filewire.Listing)
	if !ok {
		return nil, modelfetch.Permanent(fmt.Errorf("mesh peer %s: %w: answered List with a %v", peer.Short(), modelfetch.ErrSource, m.Kind()))
	}
	return l.Files, nil
}

// servesNone is err, as a permanent ErrPeer where the peer does not
// serve model files: its owner turned serve_files off since it last said
// so in gossip (or it is a node without meshnode-file/1), which its reset
// says, met writing the request or reading the answer.
func servesNone(err error) error {
	if errors.Is(err, mesh.ErrSubprotocolUnsupported) {
		return modelfetch.Permanent(fmt.Errorf("%w: it serves no model files now (serve_files = false): %w", ErrPeer, err))
	}
	return err
}

// request sends req and reads the answer's frame; an Error answer is
// ErrPeer, permanent.
func request(ctx context.Context, st io.ReadWriter, req filewire.Message) (filewire.Message, error) {
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if err := filewire.Write(rctx, st, req); err != nil {
		return nil, servesNone(err)
	}
	if wc, ok := st.(writeCloser); ok {
		wc.CloseWrite()
	}
	m, err := filewire.Read(rctx, st)
	if err != nil {
		return nil, servesNone(err)
	}
	if e, ok := m.(*filewire.Error); ok {
		return nil, modelfetch.Permanent(fmt.Errorf("%w: %v", ErrPeer, e))
	}
	return m, nil
}

// Open asks the peer for the file's bytes from offset.
func (s *PeerSource) Open(ctx context.Context, offset int64, m modelfetch.Meta, _ string) (modelfetch.Chunk, error) {
	st, err := s.Dial(ctx, s.Peer)
	if err != nil {
		// The peer left, or no longer admits us: another holder may
		// have the file.
		return modelfetch.Chunk{}, modelfetch.Permanent(fmt.Errorf("%s: %w", s.Origin(), err))
	}
	ans, err := request(ctx, st, &filewire.Get{Name: s.file.Name, Offset: uint64(offset)})
	if err != nil {
		st.Close()
		return modelfetch.Chunk{}, fmt.Errorf("%s: %w", s.Origin(), err)
	}
	h, ok := ans.(*filewire.Header)
	if !ok {
		st.Close()
		return modelfetch.Chunk{}, modelfetch.Permanent(fmt.Errorf("%s: %w: answered Get with a %v", s.Origin(), modelfetch.ErrSource, ans.Kind()))
	}
	if h.File != s.file {
		st.Close()
		return modelfetch.Chunk{}, modelfetch.Permanent(fmt.Errorf("%s: %w: %s changed on the peer since it was listed", s.Origin(), modelfetch.ErrSource, s.file.Name))
	}
	left := int64(h.File.Size - h.Offset)
	return modelfetch.Chunk{Body: &body{r: io.LimitReader(st, left), c: st}, Start: int64(h.Offset)}, nil
}

// Check holds the fetched file to the weights digest the peer advertised:
// the digest is over the file under the holder's name.
func (s *PeerSource) Check(r modelfetch.Result) error {
	w, err := digest.Root([]digest.Entry{{Path: s.file.Name, Sum: r.BLAKE3}})
	if err != nil {
		return err
	}
	if w != s.file.Weights {
		return &modelfetch.HashError{Origin: s.Origin(), What: "weights digest", Want: hex.EncodeToString(s.file.Weights[:]), Got: w.String()}
	}
	return nil
}

// body is a transfer's bytes; closing it ends the stream.
type body struct {
	r io.Reader
	c io.Closer
}

func (b *body) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *body) Close() error               { return b.c.Close() }

// ParseWant reads a mesh file reference: a weights digest (64 hex
// digits) or a file name.
func ParseWant(ref string) (Want, error) {
	if len(ref) == 64 {
		if b, err := hex.DecodeString(strings.ToLower(ref)); err == nil {
			var w Want
			copy(w.Weights[:], b)
			return w, nil
		}
	}
	name := ref
	if !strings.HasSuffix(strings.ToLower(name), ".gguf") {
		name += ".gguf"
	}
	if _, err := filewire.Append(nil, &filewire.Get{Name: name}); err != nil {
		return Want{}, fmt.Errorf("%q is neither a weights digest (64 hex digits) nor a model file name: %w", ref, err)
	}
	return Want{Name: strings.TrimSuffix(name, ".gguf")}, nil
}
