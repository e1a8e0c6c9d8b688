package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward/change"
	"github.com/meshnode/meshnode/node/wire/nodev1"
	"google.golang.org/protobuf/proto"
)

// BuiltinModelFile is the built-in default model, served when no model is
// configured: a tiny llama-architecture model trained for meshnode on
// Debian's fortunes (models/README.md).
const BuiltinModelFile = "meshnode-fortunes-q8_0.gguf"

// builtinModelPaths are where the built-in default model is looked for, in
// order: beside the binary as packages install it (../share/meshnode/models
// from the binary's directory); the packages' place; and models/ under the
// working directory, for `go run` in a checkout. $MESHNODE_DEFAULT_MODEL,
// when set, is the only place looked ("none": serve the reference engine).
func builtinModelPaths() []string {
	if p := os.Getenv("MESHNODE_DEFAULT_MODEL"); p != "" {
		return []string{p}
	}
	var paths []string
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			paths = append(paths, filepath.Join(filepath.Dir(exe), "..", "share", "meshnode", "models", BuiltinModelFile))
		}
	}
	paths = append(paths,
		filepath.Join("/usr/share/meshnode/models", BuiltinModelFile),
		filepath.Join("models", BuiltinModelFile))
	return paths
}

// modelSpec is one model to load: where it is and how it is served.
type modelSpec struct {
	ModelConfig
	builtin bool
}

// modelSpecs turns the configuration into the list of models to load. An
// entry of `models` names a file: a path, or a name in the models dir
// (with or without .gguf).
func (c *Config) modelSpecs() ([]modelSpec, error) {
	var specs []modelSpec
	for _, m := range c.Models {
		path, err := c.findModel(m)
		if err != nil {
			return nil, err
		}
		specs = append(specs, modelSpec{ModelConfig: ModelConfig{Path: path}})
	}
	for _, m := range c.Model {
		path, err := c.findModel(m.Path)
		if err != nil {
			return nil, err
		}
		m.Path = path
		specs = append(specs, modelSpec{ModelConfig: m})
	}
	seen := map[string]string{}
	for i := range specs {
		if specs[i].Name == "" {
			specs[i].Name = gguf.ModelKey(specs[i].Path)
		}
		if prev, dup := seen[specs[i].Name]; dup {
			return nil, fmt.Errorf("model name %q is used by both %s and %s: give one a name", specs[i].Name, prev, specs[i].Path)
		}
		seen[specs[i].Name] = specs[i].Path
	}
	return specs, nil
}

func (c *Config) findModel(ref string) (string, error) {
	candidates := []string{ref}
	if !filepath.IsAbs(ref) && !strings.ContainsRune(ref, os.PathSeparator) {
		candidates = append(candidates, filepath.Join(c.ModelsDir, ref), filepath.Join(c.ModelsDir, ref+".gguf"))
	}
	for _, p := range candidates {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("model %q: no such file (looked in %s)", ref, strings.Join(candidates, ", "))
}

// ErrOutsideModelsDir marks a model owner control named that is not a
// file of the models dir.
var ErrOutsideModelsDir = errors.New("not a model in the models dir")

// modelInDir is the file model name refers to in the models dir (name, or
// name.gguf), resolved through symlinks, which must not lead out of the
// dir. name is a name, never a path: owner control sends it, and may
// load nothing else.
func (c *Config) modelInDir(name string) (string, error) {
	if !IsModelName(name) {
		return "", fmt.Errorf("model %q: %w: models are named by file name, not by path", name, ErrOutsideModelsDir)
	}
	dir, err := filepath.EvalSymlinks(c.ModelsDir)
	if err != nil {
		return "", fmt.Errorf("model %q: models dir: %w", name, err)
	}
	for _, p := range []string{filepath.Join(dir, name), filepath.Join(dir, name+".gguf")} {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		if rel, err := filepath.Rel(dir, real); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return "", fmt.Errorf("model %q: %w: %s leads to %s", name, ErrOutsideModelsDir, p, real)
		}
		if st, err := os.Stat(real); err == nil && st.Mode().IsRegular() {
			return real, nil
		}
	}
	return "", fmt.Errorf("model %q: %w: no such file in %s", name, ErrOutsideModelsDir, c.ModelsDir)
}

// builtinSpec finds the built-in default model, or reports false.
func builtinSpec() (modelSpec, bool) {
	for _, p := range builtinModelPaths() {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return modelSpec{ModelConfig: ModelConfig{Path: p, Name: gguf.ModelKey(p)}, builtin: true}, true
		}
	}
	return modelSpec{}, false
}

// fidelity is the model's advertised level (default F2).
func (s *modelSpec) fidelity() receipt.Fidelity {
	if s.Fidelity != nil {
		return receipt.Fidelity(*s.Fidelity)
	}
	return DefaultFidelity
}

// scanInventory inventories *.gguf in dir for gossip and owner control:
// each file's name, size and GGUF metadata, sorted by name. A file that
// does not parse is logged and left out; a missing dir is empty; a dir
// that cannot be read is an error.
func scanInventory(ctx context.Context, dir string, log *slog.Logger) ([]*nodev1.OwnerControlInventoryEntry, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("models dir: %w", err)
	}
	var out []*nodev1.OwnerControlInventoryEntry
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if e.IsDir() || !strings.EqualFold(filepath.Ext(e.Name()), ".gguf") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		f, err := gguf.Open(path)
		if err != nil {
			log.Warn("skipping a model that does not parse", "file", path, "err", err)
			continue
		}
		name, facts := gguf.ModelKey(path), f.Facts()
		entry := &nodev1.OwnerControlInventoryEntry{
			CanonicalModelRef: name,
			TotalSizeBytes:    uint64(f.Size()),
			Metadata:          compactMetadata(name, &facts),
		}
		if facts.Name != "" {
			entry.DisplayName = proto.String(facts.Name)
		}
		out = append(out, entry)
		f.Close()
	}
	slices.SortFunc(out, func(a, b *nodev1.OwnerControlInventoryEntry) int {
		return strings.Compare(a.CanonicalModelRef, b.CanonicalModelRef)
	})
	return out, nil
}

// loadModels loads the configured models, or the built-in default, or —
// with neither — the reference engine, so that the node always serves.
func (n *Node) loadModels(stack *closers) error {
	specs, err := n.cfg.modelSpecs()
	if err != nil {
		return err
	}
	if len(specs) == 0 {
		if b, ok := builtinSpec(); ok {
			specs = []modelSpec{b}
		} else {
			n.log.Info("no model configured and the built-in default model is not installed: serving the reference engine",
				"model", "mesh-reference", "looked_in", builtinModelPaths())
			_, err := n.models.add(n.wrapped(newReferenceModel(DefaultFidelity, referenceUJPerToken)))
			return err
		}
	}
	for _, s := range specs {
		start := time.Now()
		m, err := openGGUF(s, n.cfg.Backend, n.cfg.API.Concurrency, n.hardware.Memory.TotalBytes, n.log)
		if err != nil {
			return fmt.Errorf("model %s: %w", s.Path, err)
		}
		wm := n.wrapped(m)
		if _, err := n.models.add(wm); err != nil {
			m.Close()
			return err
		}
		stack.push("model "+m.Name(), func() error { return n.closeModel(wm) })
		n.log.Info("serving model", "model", m.Name(), "file", s.Path, "builtin_default", s.builtin,
			"bytes_mapped", m.Size(), "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// wrapped is m as the test hook wrapModel makes it, or m.
func (n *Node) wrapped(m localModel) localModel {
	if n.wrapModel == nil {
		return m
	}
	return n.wrapModel(m)
}

// referenceUJPerToken is the reference engine's modelled cost: its 256
// BLAKE3 rounds per token take tens of microseconds on a CPU core.
const referenceUJPerToken = 1_000

// closeModel closes m at shutdown unless owner control has unloaded it
// already.
func (n *Node) closeModel(m localModel) error {
	if _, loaded := n.models.get(m.Name()); !loaded {
		return nil
	}
	return m.Close()
}

// recordWeights keeps a loaded model's backend under its weights change
// record (mesh/1 §6.5): the first time a backend serves, and whenever the
// file it loads holds other weights than the record has in effect (the
// model was replaced on disk, or another file was loaded under its name),
// the steward records the change, sealed and journaled, before the backend
// serves on it. From then on the steward's gate serves it only on those
// weights, and every receipt is covered by an entry.
func (n *Node) recordWeights(m localModel) error {
	w, named := m.Engine().Weights()
	if !named {
		return nil // the reference engine addresses no weights
	}
	backend := backendOf(m).Name
	if cur, ok := n.steward.WeightsInEffect(backend); ok && cur == w {
		return nil
	}
	_, err := n.steward.RecordChange(backend, change.Entry{Weights: &change.Weights{
		To: w.Digest, Precision: w.Precision, Fidelity: m.Engine().Fidelity(),
		Reason: "loaded " + filepath.Base(m.Path()),
	}})
	if err != nil {
		return fmt.Errorf("recording the weights of %s: %w", m.Name(), err)
	}
	n.log.Info("weights change recorded", "backend", backend, "digest", w.Digest.String(), "precision", w.Precision)
	return nil
}
