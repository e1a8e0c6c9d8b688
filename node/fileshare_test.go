package node

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/gguf/digest"
	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/modelfetch"
	"github.com/meshnode/meshnode/node/modelshare"
	"github.com/meshnode/meshnode/node/wire/nodev1"
	"google.golang.org/protobuf/proto"
)

// holderDir is a models dir holding a copy of the fortunes model as name.
func holderDir(t *testing.T, name string) (string, []byte) {
	t.Helper()
	model, err := os.ReadFile(fortunesPath(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), model, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, model
}

// waitHolder waits until a hears that peer serves files and holds model.
func waitHolder(t *testing.T, a, peer *Node, model string) {
	t.Helper()
	waitFor(t, "A to hear that the peer serves "+model, func() bool {
		for _, p := range a.fileHolders(mustWant(t, model)) {
			if p.ID == peer.key.ID() {
				return true
			}
		}
		return false
	})
}

func mustWant(t *testing.T, ref string) modelshare.Want {
	t.Helper()
	w, err := modelshare.ParseWant(ref)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestPullFromPeer: a node pulls a model file a peer holds over
// meshnode-file/1, on real QUIC on loopback: cut off midway (the owner's
// pull cancelled), the next pull resumes where it stopped; the file is
// verified, placed, inventoried and served; `meshcli models` lists the
// holder; a pull by weights digest finds the file by it.
func TestPullFromPeer(t *testing.T) {
	dir, model := holderDir(t, "fortunes-copy.gguf")
	// 4 MiB/s: the 15 MB transfer takes seconds, so it can be cut.
	b, _ := startNode(t, Config{ModelsDir: dir, Models: []string{ReferenceModel}, ServeFilesRate: 4 << 20})
	models := t.TempDir()
	a, _ := startNode(t, Config{ModelsDir: models, Models: []string{ReferenceModel}, Join: []string{b.invite}})
	waitHolder(t, a, b, "fortunes-copy")
	c := facadeClient(t, a)

	h, err := c.Holders(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !h.ServeFiles || len(h.Models) != 1 || h.Models[0].Model != "fortunes-copy" || h.Models[0].SizeBytes != uint64(len(model)) ||
		!slices.Equal(h.Models[0].Holders, []string{b.key.ID().String()}) {
		t.Fatalf("holdings %+v", h)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err = c.Pull(ctx, control.PullRequest{Source: "mesh:fortunes-copy"}, func(e control.PullEvent) {
		if e.Phase == "download" && e.Done >= 3<<20 {
			cancel() // the owner interrupts the pull
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted pull: %v", err)
	}
	var partial int64
	waitFor(t, "the node to stop the cut transfer", func() bool {
		st, err := os.Stat(filepath.Join(models, modelfetch.PartialDir, "fortunes-copy.gguf"))
		if err != nil {
			return false
		}
		partial = st.Size()
		return !a.fetcher().Busy("fortunes-copy.gguf")
	})
	if _, err := os.Stat(filepath.Join(models, "fortunes-copy.gguf")); !os.IsNotExist(err) {
		t.Fatal("a cut transfer reached the models dir")
	}
	if partial < 3<<20 {
		t.Fatalf("partial holds %d bytes", partial)
	}

	done, err := c.Pull(context.Background(), control.PullRequest{Source: "mesh:fortunes-copy"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if done.Resumed < 3<<20 || done.Resumed > int64(len(model)) || !strings.Contains(done.Source, b.key.ID().Short()) {
		t.Fatalf("done %+v: want a resumption from the partial's %d bytes, from B", done, partial)
	}
	if got, _ := os.ReadFile(filepath.Join(models, "fortunes-copy.gguf")); !bytes.Equal(got, model) {
		t.Fatal("the pulled file differs from the holder's")
	}
	want, err := digest.Files(dir, "fortunes-copy.gguf")
	if err != nil {
		t.Fatal(err)
	}
	if done.WeightsDigest != want.Digest.String() {
		t.Fatalf("weights digest %s, holder's %s", done.WeightsDigest, want.Digest)
	}
	if !slices.Contains(inventoryNames(a), "fortunes-copy") {
		t.Fatalf("inventory %v", inventoryNames(a))
	}

	// By weights digest, under the holder's name.
	os.Remove(filepath.Join(models, "fortunes-copy.gguf"))
	done, err = c.Pull(context.Background(), control.PullRequest{Source: "mesh:" + want.Digest.String()}, nil)
	if err != nil || done.File != "fortunes-copy.gguf" || done.Resumed != 0 {
		t.Fatalf("pull by digest: %+v, %v", done, err)
	}
	if _, err = c.Pull(context.Background(), control.PullRequest{Source: "mesh:no-such-model"}, nil); err == nil || !strings.Contains(err.Error(), "no admitted peer") {
		t.Fatalf("pull of a model nobody holds: %v", err)
	}
}

// TestAttackHostileFileHolder: a holder whose file changed on disk after it
// hashed it (same size and mtime) advertises one SHA-256 and sends other
// bytes. The pull discards them and names the peer; once an honest
// holder joins, the pull moves past the hostile one and succeeds.
func TestAttackHostileFileHolder(t *testing.T) {
	dir, model := holderDir(t, "fortunes-copy.gguf")
	hostile, _ := startNode(t, Config{ModelsDir: dir, Models: []string{ReferenceModel}})
	cache := filepath.Join(hostile.cfg.StateDir, fileHashesFile)
	waitFor(t, "the holder to hash its file", func() bool { _, err := os.Stat(cache); return err == nil })
	path := filepath.Join(dir, "fortunes-copy.gguf")
	st, _ := os.Stat(path)
	bad := bytes.Clone(model)
	bad[len(bad)/2] ^= 0x5a
	if err := os.WriteFile(path, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(path, st.ModTime(), st.ModTime())

	models := t.TempDir()
	a, _ := startNode(t, Config{ModelsDir: models, Models: []string{ReferenceModel}, Join: []string{hostile.invite}})
	waitHolder(t, a, hostile, "fortunes-copy")
	c := facadeClient(t, a)
	_, err := c.Pull(context.Background(), control.PullRequest{Source: "mesh:fortunes-copy"}, nil)
	if err == nil || !strings.Contains(err.Error(), "mesh peer "+hostile.key.ID().Short()) || !strings.Contains(err.Error(), "SHA-256") {
		t.Fatalf("pull from a hostile holder: %v, want a SHA-256 mismatch naming it", err)
	}
	if _, err := os.Stat(filepath.Join(models, "fortunes-copy.gguf")); !os.IsNotExist(err) {
		t.Fatal("wrong bytes reached the models dir")
	}
	if _, err := os.Stat(filepath.Join(models, modelfetch.PartialDir, "fortunes-copy.gguf")); !os.IsNotExist(err) {
		t.Fatal("wrong bytes were kept as a partial")
	}

	goodDir, _ := holderDir(t, "fortunes-copy.gguf")
	good, _ := startNode(t, Config{ModelsDir: goodDir, Models: []string{ReferenceModel}, Join: []string{a.invite}})
	waitHolder(t, a, good, "fortunes-copy")
	done, err := c.Pull(context.Background(), control.PullRequest{Source: "mesh:fortunes-copy"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(done.Source, good.key.ID().Short()) {
		t.Fatalf("pulled from %s, want the honest holder %s", done.Source, good.key.ID().Short())
	}
	if got, _ := os.ReadFile(filepath.Join(models, "fortunes-copy.gguf")); !bytes.Equal(got, model) {
		t.Fatal("the pulled file is not the honest holder's")
	}
}

// TestAttackFilesWithoutAccess: a holder under mesh_access = "none" refuses
// the transfer and says why; a holder with serve_files = false does not
// advertise, until its owner turns serving on through owner control,
// which takes effect at once.
func TestAttackFilesWithoutAccess(t *testing.T) {
	dir, _ := holderDir(t, "fortunes-copy.gguf")
	closed, _ := startNode(t, Config{ModelsDir: dir, Models: []string{ReferenceModel}, API: APIConfig{MeshAccess: MeshAccessNone}})
	off := false
	dir2, model := holderDir(t, "fortunes-other.gguf")
	quiet, _ := startNode(t, Config{ModelsDir: dir2, Models: []string{ReferenceModel}, ServeFiles: &off})
	models := t.TempDir()
	a, _ := startNode(t, Config{ModelsDir: models, Models: []string{ReferenceModel}, Join: []string{closed.invite, quiet.invite}})
	waitHolder(t, a, closed, "fortunes-copy")
	c := facadeClient(t, a)
	_, err := c.Pull(context.Background(), control.PullRequest{Source: "mesh:fortunes-copy"}, nil)
	if err == nil || !strings.Contains(err.Error(), `mesh_access = "none"`) || !strings.Contains(err.Error(), closed.key.ID().Short()) {
		t.Fatalf("pull from a closed holder: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(models, "*.gguf")); len(m) != 0 {
		t.Fatalf("models dir %v after a refusal", m)
	}

	waitFor(t, "A to hear the quiet holder's models", func() bool {
		p, ok := a.mesh.Peer(quiet.key.ID())
		return ok && slices.Contains(p.Announcement.GetAvailableModels(), "fortunes-other")
	})
	_, err = c.Pull(context.Background(), control.PullRequest{Source: "mesh:fortunes-other"}, nil)
	if err == nil || !strings.Contains(err.Error(), "no admitted peer that serves model files") {
		t.Fatalf("pull from a holder that serves no files: %v", err)
	}
	// Its owner turns serving on.
	qc := facadeClient(t, quiet)
	snap, err := qc.GetConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg := proto.Clone(snap.GetConfig()).(*nodev1.NodeConfigSnapshot)
	cfg.ConfigToml = proto.String("serve_files = true\n")
	res, err := qc.ApplyConfig(context.Background(), snap.GetRevision(), cfg)
	if err != nil || !res.GetSuccess() {
		t.Fatalf("apply: %v %v", res, err)
	}
	if !slices.ContainsFunc(res.GetDiagnostics(), func(d *nodev1.ConfigDiagnostic) bool {
		return strings.Contains(d.GetMessage(), "serve_files = true took effect now")
	}) {
		t.Fatalf("diagnostics %v", res.GetDiagnostics())
	}
	waitHolder(t, a, quiet, "fortunes-other")
	if _, err := c.Pull(context.Background(), control.PullRequest{Source: "mesh:fortunes-other"}, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(models, "fortunes-other.gguf")); !bytes.Equal(got, model) {
		t.Fatal("file differs")
	}

	// And off again: at once, the holder refuses (and then stops
	// advertising), whatever A still believes of it.
	snap, err = qc.GetConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cfg = proto.Clone(snap.GetConfig()).(*nodev1.NodeConfigSnapshot)
	cfg.ConfigToml = proto.String("serve_files = false\n")
	if res, err := qc.ApplyConfig(context.Background(), snap.GetRevision(), cfg); err != nil || !res.GetSuccess() {
		t.Fatalf("apply: %v %v", res, err)
	}
	os.Remove(filepath.Join(models, "fortunes-other.gguf"))
	_, err = c.Pull(context.Background(), control.PullRequest{Source: "mesh:fortunes-other"}, nil)
	if err == nil || !(strings.Contains(err.Error(), "serve_files = false") || strings.Contains(err.Error(), "no admitted peer that serves model files")) {
		t.Fatalf("pull after the owner turned serving off: %v", err)
	}
}

// TestPullMovesToAnotherHolder: the holder a transfer comes from leaves
// the mesh midway; the pull resumes from the other holder of the same
// file where it stopped, and the file is whole.
func TestPullMovesToAnotherHolder(t *testing.T) {
	dir1, model := holderDir(t, "fortunes-copy.gguf")
	dir2, _ := holderDir(t, "fortunes-copy.gguf")
	var logs1, logs2 syncBuffer
	h1, stop1 := startNodeWith(t, Config{ModelsDir: dir1, Models: []string{ReferenceModel}, ServeFilesRate: 4 << 20}, logTo(&logs1))
	h2, stop2 := startNodeWith(t, Config{ModelsDir: dir2, Models: []string{ReferenceModel}, ServeFilesRate: 4 << 20, Join: []string{h1.invite}}, logTo(&logs2))
	models := t.TempDir()
	a, _ := startNode(t, Config{ModelsDir: models, Models: []string{ReferenceModel}, Join: []string{h1.invite, h2.invite}})
	waitHolder(t, a, h1, "fortunes-copy")
	waitHolder(t, a, h2, "fortunes-copy")

	var once sync.Once
	var left *Node
	stopped := make(chan struct{})
	done, err := facadeClient(t, a).Pull(context.Background(), control.PullRequest{Source: "mesh:fortunes-copy"}, func(e control.PullEvent) {
		if e.Phase != "download" || e.Done < 3<<20 {
			return
		}
		once.Do(func() {
			stop := stop1
			left = h1
			if strings.Contains(e.Source, h2.key.ID().Short()) {
				stop, left = stop2, h2
			}
			go func() { stop(); close(stopped) }()
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	<-stopped
	other, logs := h2, &logs2
	if left == h2 {
		other, logs = h1, &logs1
	}
	if !strings.Contains(done.Source, other.key.ID().Short()) {
		t.Fatalf("finished from %s, want the holder that stayed (%s)", done.Source, other.key.ID().Short())
	}
	resumed := false
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "serving a model file to a peer") && !strings.Contains(line, "from=0 ") {
			resumed = true
		}
	}
	if !resumed {
		t.Fatalf("the holder that stayed never served from an offset:\n%s", logs.String())
	}
	if got, _ := os.ReadFile(filepath.Join(models, "fortunes-copy.gguf")); !bytes.Equal(got, model) {
		t.Fatal("the file assembled from two holders differs from theirs")
	}
}
