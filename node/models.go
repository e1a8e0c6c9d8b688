package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward/change"
	"github.com/meshnode/meshnode/node/wire/nodev1"
	"google.golang.org/protobuf/proto"
)

// BuiltinModelFile is the built-in default model, served when no model is
// configured: a tiny llama-architecture model trained for meshnode on
// Debian's fortunes (models/README.md).
const BuiltinModelFile = "meshnode-fortunes-q8_0.gguf"

// BuiltinModelName is the built-in default model's name: its file's base
// name, as every model is named.
var BuiltinModelName = ModelName(BuiltinModelFile)

// ReferenceModel names mesh/1's deterministic reference engine where a
// model name goes (models, --model, [[model]] path): it answers with
// words derived from hashes, not language, and is there for tests and
// conformance checks. A node serves it only when its config names it.
const ReferenceModel = engine.ReferenceRecipe

// ModelName is what a model file is served as: its base name without
// .gguf ("/models/qwen2.5-0.5b.gguf" is "qwen2.5-0.5b"). Every model is
// named this way (or by its configured name), never by a path.
func ModelName(file string) string { return gguf.ModelKey(file) }

// sourceFile is this file's path as the compiler saw it: absolute in a
// binary built from a checkout without -trimpath (`go run`, `go build`,
// `go install`), so that such a binary finds the built-in model in the
// checkout that built it wherever it runs from.
var _, sourceFile, _, _ = runtime.Caller(0)

// builtinModelPaths are where the built-in default model is looked for,
// in order. $MESHNODE_DEFAULT_MODEL, when set, is the only place looked
// ("none": nowhere, so that only configured models are served).
// Otherwise: the models dir and the state dir; beside the executable (in
// its dir, its models/, ../models/ for a checkout's bin/, and
// ../share/meshnode/models for an install prefix); the checkout that
// built it; models/ under the working directory; and the install
// prefixes the packages and tarballs use.
func (c *Config) builtinModelPaths() []string {
	if p := os.Getenv("MESHNODE_DEFAULT_MODEL"); p != "" {
		if p == "none" {
			return nil
		}
		return []string{p}
	}
	var dirs []string
	if c.ModelsDir != "" {
		dirs = append(dirs, c.ModelsDir)
	}
	if c.StateDir != "" {
		dirs = append(dirs, c.StateDir)
	}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		bin := filepath.Dir(exe)
		dirs = append(dirs, bin, filepath.Join(bin, "models"), filepath.Join(bin, "..", "models"),
			filepath.Join(bin, "..", "share", "meshnode", "models"))
	}
	if filepath.IsAbs(sourceFile) {
		// sourceFile is <checkout>/node/models.go.
		dirs = append(dirs, filepath.Join(filepath.Dir(filepath.Dir(sourceFile)), "models"))
	}
	dirs = append(dirs, "models", "/usr/local/share/meshnode/models", "/usr/share/meshnode/models")
	if runtime.GOOS == "darwin" {
		dirs = append(dirs, "/opt/homebrew/share/meshnode/models")
	}
	var paths []string
	for _, d := range dirs {
		p := filepath.Join(d, BuiltinModelFile)
		if !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
	}
	return paths
}

// NoModelHint says how to get a model to a node that serves none.
func (c *Config) NoModelHint() string {
	return fmt.Sprintf("this node serves no model. To serve one, put a GGUF file in the models dir (%s) and run "+
		"`meshcli load NAME` (NAME: its file name without .gguf), or start meshnode with --model FILE. "+
		"The built-in model, %s, ships in the packages (/usr/share/meshnode/models) and in the source tree (models/); "+
		"meshnode finds it there, beside its executable, or where MESHNODE_DEFAULT_MODEL names it",
		c.ModelsDir, BuiltinModelFile)
}

// modelSpec is one model to load: where it is and how it is served.
type modelSpec struct {
	ModelConfig
	// draftPath is Draft resolved: a file in the models dir, or "lookup".
	draftPath string
	builtin   bool
	// reference is the reference engine (ReferenceModel), which has no file.
	reference bool
}

// modelSpecs turns the configuration into the list of models to load. An
// entry of `models` names a file: a path, a name in the models dir (with
// or without .gguf), or the built-in default's name; or ReferenceModel.
func (c *Config) modelSpecs() ([]modelSpec, error) {
	var specs []modelSpec
	for _, m := range c.Models {
		s, err := c.specOf(ModelConfig{Path: m})
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	}
	for _, m := range c.Model {
		s, err := c.specOf(m)
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	}
	seen := map[string]string{}
	for _, s := range specs {
		where := s.Path
		if s.reference {
			where = "the reference engine"
		}
		if prev, dup := seen[s.Name]; dup {
			return nil, fmt.Errorf("model name %q is used by both %s and %s: give one a name", s.Name, prev, where)
		}
		seen[s.Name] = where
	}
	return specs, nil
}

// specOf resolves one configured model. It is named by its configured
// name, else by its file's base name (ModelName), never by the path it
// was given.
func (c *Config) specOf(m ModelConfig) (modelSpec, error) {
	if m.Path == ReferenceModel {
		if m.Name != "" && m.Name != ReferenceModel {
			return modelSpec{}, fmt.Errorf("model %q: the reference engine is always named %s", m.Name, ReferenceModel)
		}
		m.Name = ReferenceModel
		return modelSpec{ModelConfig: m, reference: true}, nil
	}
	path, builtin, err := c.findModel(m.Path)
	if err != nil {
		return modelSpec{}, err
	}
	m.Path = path
	if m.Name == "" {
		m.Name = ModelName(path)
	}
	draft, err := c.draftOf(m)
	if err != nil {
		return modelSpec{}, err
	}
	return modelSpec{ModelConfig: m, draftPath: draft, builtin: builtin}, nil
}

// DraftLookup is a model's draft setting for prompt lookup.
const DraftLookup = spec.DraftLookup

// draftOf resolves a model's draft: "lookup", or a model of the models
// dir by name — never a path, as owner control names models (modelInDir).
func (c *Config) draftOf(m ModelConfig) (string, error) {
	switch m.Draft {
	case "":
		return "", nil
	case DraftLookup:
		return DraftLookup, nil
	}
	p, err := c.modelInDir(m.Draft)
	if err != nil {
		return "", fmt.Errorf("model %q: draft: %w", m.Name, err)
	}
	return p, nil
}

// findModel is the file ref names: a path; else, for a name, the file of
// that name (or NAME.gguf) in the models dir; else, for the built-in
// default's name, the built-in model wherever it is found.
func (c *Config) findModel(ref string) (path string, builtin bool, err error) {
	candidates := []string{ref}
	if IsModelName(ref) {
		candidates = append(candidates, filepath.Join(c.ModelsDir, ref), filepath.Join(c.ModelsDir, ref+".gguf"))
	}
	for _, p := range candidates {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, false, nil
		}
	}
	looked := strings.Join(candidates, ", ")
	if IsModelName(ref) && ModelName(ref) == BuiltinModelName {
		if b, ok := c.builtinSpec(); ok {
			return b.Path, true, nil
		}
		looked += ", and for the built-in model in " + strings.Join(c.builtinModelPaths(), ", ")
	}
	return "", false, fmt.Errorf("model %q: no such file (looked in %s)", ref, looked)
}

// FindModel is the GGUF file ref names, as --model and `models` take it:
// a path, a file in the models dir by name (with or without .gguf), or
// the built-in default by its name. It returns the file and the name the
// model is served as.
func (c *Config) FindModel(ref string) (path, name string, err error) {
	path, _, err = c.findModel(ref)
	if err != nil {
		return "", "", err
	}
	return path, ModelName(path), nil
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
		return "", fmt.Errorf("model %q: %w: models are named by their file's base name, never by path (this one would be %q, once it is in the models dir %s)",
			name, ErrOutsideModelsDir, ModelName(name), c.ModelsDir)
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
func (c *Config) builtinSpec() (modelSpec, bool) {
	for _, p := range c.builtinModelPaths() {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return modelSpec{ModelConfig: ModelConfig{Path: p, Name: ModelName(p)}, builtin: true}, true
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

// loadModels loads the configured models, or else the built-in default.
// With neither the node serves no model, and says at WARN how to get one.
func (n *Node) loadModels(stack *closers) error {
	specs, err := n.cfg.modelSpecs()
	if err != nil {
		return err
	}
	if len(specs) == 0 {
		b, ok := n.cfg.builtinSpec()
		if !ok {
			why := "no model is configured and the built-in default model was not found: "
			if os.Getenv("MESHNODE_DEFAULT_MODEL") == "none" {
				why = "no model is configured and MESHNODE_DEFAULT_MODEL=none turns off the built-in one: "
			}
			n.log.Warn(why+n.cfg.NoModelHint(), "looked_in", n.cfg.builtinModelPaths())
			return nil
		}
		specs = []modelSpec{b}
	}
	var used int64
	for _, s := range specs {
		start := time.Now()
		split, err := n.wantSplit(s, used)
		if err != nil {
			return err
		}
		if split {
			sm, err := openSplit(s)
			if err != nil {
				return fmt.Errorf("model %s: %w", s.Path, err)
			}
			wm := n.wrapped(sm)
			if _, err := n.models.add(wm); err != nil {
				sm.Close()
				return err
			}
			n.addSplit(sm)
			stack.push("model "+sm.Name(), func() error { return n.closeModel(wm) })
			n.log.Info("serving model split across peers: placing its stages", "model", sm.Name(), "file", s.Path,
				"layers", len(sm.costs.Layers), "budget", int64(n.cfg.MemoryBudget), "split", s.Split)
			continue
		}
		m, err := n.openSpec(s, n.cfg.API.Concurrency)
		if err != nil {
			return err
		}
		wm := n.wrapped(m)
		if _, err := n.models.add(wm); err != nil {
			m.Close()
			return err
		}
		stack.push("model "+m.Name(), func() error { return n.closeModel(wm) })
		used += m.Size()
		if s.reference {
			n.log.Info("serving the reference engine, as configured: its answers are words derived from hashes, for tests", "model", m.Name())
			continue
		}
		n.log.Info("serving model", "model", m.Name(), "file", s.Path, "builtin_default", s.builtin,
			"bytes_mapped", m.Size(), "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// openSpec opens the model s names, and tells the metrics how long that
// took.
func (n *Node) openSpec(s modelSpec, sessions int) (localModel, error) {
	start := time.Now()
	m, err := n.open(s, sessions)
	if err != nil {
		return nil, err
	}
	n.metrics.ObserveModelLoad(m.Name(), time.Since(start))
	return m, nil
}

func (n *Node) open(s modelSpec, sessions int) (localModel, error) {
	if s.reference {
		uj := s.UJPerToken
		if uj == 0 {
			uj = referenceUJPerToken
		}
		return newReferenceModel(s.fidelity(), uj), nil
	}
	m, err := openGGUF(s, n.cfg.Backend, sessions, n.hardware.Memory.TotalBytes, n.log)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", s.Path, err)
	}
	return m, nil
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
