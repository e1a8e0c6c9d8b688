package node

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// TestModelsDirAdvertised: the GGUF files in a node's models dir, served
// or not, reach its peers' view of it through gossip, each with its size
// and compact metadata; what it serves is listed as hosted.
func TestModelsDirAdvertised(t *testing.T) {
	src, err := os.ReadFile(fortunesPath(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, body := range map[string][]byte{"fortunes-copy.gguf": src, "broken.gguf": []byte("GGUF but not really"), "notes.txt": []byte("x")} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := startNode(t, Config{ModelsDir: dir, Models: []string{ReferenceModel}})
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	a, _ := startNode(t, Config{Join: []string{b.invite}})

	var ann *nodev1.PeerAnnouncement
	waitFor(t, "A to hear B's announcement", func() bool {
		p, ok := a.mesh.Peer(b.key.ID())
		ann = p.Announcement
		return ok && ann != nil
	})
	if got := ann.GetAvailableModels(); !slices.Equal(got, []string{"fortunes-copy"}) {
		t.Fatalf("available models %q, want the one GGUF in the models dir that parses", got)
	}
	if !slices.Contains(ann.GetHostedModels(), "mesh-reference") {
		t.Fatalf("hosted models %q, want the reference engine B serves", ann.GetHostedModels())
	}
	if size := ann.GetAvailableModelSizes()["fortunes-copy"]; size != uint64(len(src)) {
		t.Fatalf("advertised size %d, file is %d bytes", size, len(src))
	}
	md := ann.GetAvailableModelMetadata()
	if len(md) != 1 || md[0].GetModelKey() != "fortunes-copy" || md[0].GetArchitecture() != "llama" ||
		md[0].GetContextLength() != 256 || md[0].GetLayerCount() == 0 || md[0].GetVocabSize() == 0 {
		t.Fatalf("advertised metadata %v", md)
	}
}

// TestVRAMHint: the vram capability hint, in gossip and in mDNS, is the
// memory of every GPU the node has, and absent without one.
func TestVRAMHint(t *testing.T) {
	for _, tc := range []struct {
		name string
		hw   *hw.Facts
		want uint64
	}{
		{"facts unknown", nil, 0},
		{"no GPU", &hw.Facts{}, 0},
		{"two GPUs", &hw.Facts{GPUs: []hw.GPU{{VRAMBytes: 8 << 30}, {VRAMBytes: 16 << 30}}}, 24 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &Node{hardware: tc.hw}
			if got := n.mdnsHints().VRAM; got != tc.want {
				t.Errorf("mDNS vram hint %d, want %d", got, tc.want)
			}
			if got := n.announcement(0).GetVramBytes(); got != tc.want {
				t.Errorf("gossip vram_bytes %d, want %d", got, tc.want)
			}
		})
	}
}
