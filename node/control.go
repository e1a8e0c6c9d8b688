package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/control/owner"
	"github.com/meshnode/meshnode/node/statedir"
	"github.com/meshnode/meshnode/node/wire/nodev1"
	"google.golang.org/protobuf/proto"
)

// Files owner control keeps in the state dir.
const (
	ownerStoreFile  = "owner-config.bin"  // the applied NodeConfigSnapshot, by revision
	ownerConfigFile = "owner-config.toml" // its config_toml, read at the next start
)

// loadOwnership reads the node's ownership certificate and the owner keys
// its config trusts. It runs before the mesh starts, so that the node's
// first announcement carries the certificate: peers under mesh_access =
// "owner" serve its requests only once they have it.
func (n *Node) loadOwnership() error {
	keys, err := n.ownerKeys()
	if err != nil {
		return err
	}
	n.ownStamp = stampOf(n.ownershipPath())
	cert, err := owner.LoadNodeCert(n.ownershipPath(), n.key.ID(), time.Now())
	if err != nil {
		n.log.Warn("running unowned: the node's ownership certificate is not usable", "err", err)
		cert = nil
	}
	n.setOwnership(cert, keys)
	return nil
}

// ownerKeys are the owners control.owner_keys names.
func (n *Node) ownerKeys() ([]owner.PublicKey, error) {
	keys := make([]owner.PublicKey, 0, len(n.cfg.Control.OwnerKeys))
	for _, k := range n.cfg.Control.OwnerKeys {
		pk, err := owner.ParsePublicKey(k)
		if err != nil {
			return nil, fmt.Errorf("control.owner_keys: %w", err)
		}
		keys = append(keys, pk)
	}
	return keys, nil
}

// setOwnership makes cert (nil: none) the node's certificate, and the
// owners it trusts those of cert and keys, for owner control and the mesh
// access policy alike.
func (n *Node) setOwnership(cert *nodev1.SignedNodeOwnership, keys []owner.PublicKey) {
	n.mu.Lock()
	n.ownership = cert
	ctl := n.ctl
	n.mu.Unlock()
	t := owner.NodeTrust(cert, keys...)
	n.trust.Store(t)
	if ctl != nil {
		ctl.SetTrust(t)
	}
}

// defaultOwnershipPoll is how often the node looks at its ownership
// certificate: one put in the state dir while it runs (meshcli auth
// sign-node -o …) takes effect within this long, without a restart.
const defaultOwnershipPoll = 2 * time.Second

// watchOwnership reloads the node's ownership certificate whenever the
// file changes, until ctx ends: the owners it trusts follow, and peers
// hear the new certificate in its next announcement. Owner control also
// looks (checkOwnership) before it refuses a handshake.
func (n *Node) watchOwnership(ctx context.Context) error {
	return pollEvery(ctx, n.ownershipPoll, defaultOwnershipPoll, n.checkOwnership)
}

// pollEvery calls check every interval (def when interval is not set)
// until ctx ends: how the node follows the files it reloads.
func pollEvery(ctx context.Context, interval, def time.Duration, check func()) error {
	if interval <= 0 {
		interval = def
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		check()
	}
}

// checkOwnership reloads the ownership certificate if its file changed
// since it was last read.
func (n *Node) checkOwnership() {
	n.ownMu.Lock()
	defer n.ownMu.Unlock()
	path := n.ownershipPath()
	if now := stampOf(path); now != n.ownStamp {
		n.ownStamp = now
		n.reloadOwnership(path)
	}
}

// reloadOwnership takes the certificate now at path. One that others
// could change, or that does not certify this node now, changes nothing
// (the node logs why); a removed one leaves the node unowned.
func (n *Node) reloadOwnership(path string) {
	if err := statedir.Check(statedir.Item{Path: path, Kind: statedir.File}); err != nil {
		n.log.Warn("ownership certificate not loaded: the file could be changed by others", "file", path, "err", err)
		return
	}
	cert, err := owner.LoadNodeCert(path, n.key.ID(), time.Now())
	if err != nil {
		n.log.Warn("ownership certificate not loaded; the node's owners stay as they were", "file", path, "err", err)
		return
	}
	keys, _ := n.ownerKeys() // parsed at start
	n.mu.Lock()
	had := n.ownership != nil
	n.mu.Unlock()
	n.setOwnership(cert, keys)
	n.announceChange()
	switch {
	case cert == nil && had:
		n.log.Warn("ownership certificate removed: the node trusts only control.owner_keys now", "file", path, "trusted_owners", n.trust.Load().Len())
	case cert != nil:
		n.log.Info("ownership certificate loaded: its owner controls this node now", "file", path, "owner", owner.OwnerOf(cert).String())
		if tok, err := os.ReadFile(filepath.Join(n.cfg.StateDir, control.EndpointFile)); err == nil {
			n.log.Info("manage this node with: meshcli --endpoint " + strings.TrimSpace(string(tok)))
		}
	}
}

// startControl serves owner control (mesh-llm-control/1) on the mesh's
// QUIC listener, for the owners loadOwnership found: the owner-managed
// config store, the model inventory and the lifecycle reconciler. It
// returns the REST facade's handler, for the API to mount on loopback.
func (n *Node) startControl(ctx context.Context, stack *closers, run func(string, func(context.Context) error, context.Context)) (*control.Server, error) {
	n.mu.Lock()
	owned := n.ownership != nil
	n.mu.Unlock()
	rt := &ownerRuntime{n: n}
	store, err := control.OpenFileStore(filepath.Join(n.cfg.StateDir, ownerStoreFile), n.configSnapshot(), rt)
	if err != nil {
		return nil, err
	}
	trust := n.trust.Load()
	// The REST facade's credential: only this node's user and root can
	// read it, and so only they can drive the node from this machine.
	secret, err := control.WriteSecret(n.cfg.StateDir)
	if err != nil {
		return nil, err
	}
	recon := control.NewReconciler(rt, control.ReconcilerConfig{
		DrainTimeout:    n.cfg.Control.DrainTimeout.Duration,
		DrainTimeoutMax: n.cfg.Control.DrainTimeoutMax.Duration,
		Logger:          n.log,
	})
	run("control reconciler", recon.Serve, ctx)
	srv, err := control.NewServer(control.Config{
		Self:        n.key.ID(),
		Hostname:    n.hardware.Hostname,
		Trust:       trust,
		Store:       store,
		Scanner:     rt,
		Lifecycle:   recon,
		Splits:      rt,
		Pulls:       rt,
		LocalSecret: secret,
		Recheck:     n.checkOwnership,
		Logger:      n.log,
	})
	if err != nil {
		return nil, err
	}
	stack.push("owner control", func() error { srv.Close(); return nil })
	n.mu.Lock()
	n.ctl = srv // from now on, setOwnership reaches it too
	n.mu.Unlock()
	n.mesh.HandleControl(srv.ServeConn)
	tok, err := control.WriteEndpointFile(n.cfg.StateDir, n.mesh.EndpointAddr())
	if err != nil {
		n.log.Warn("could not write the control endpoint token", "err", err)
	}
	n.log.Info("owner control", "owned", owned, "trusted_owners", trust.Len(),
		"endpoint_token_file", filepath.Join(n.cfg.StateDir, "control.token"))
	if tok != "" && trust.Len() > 0 {
		n.log.Info("manage this node with: meshcli --endpoint " + tok)
	} else if trust.Len() == 0 {
		n.log.Info("this node has no owner yet: to own it, run `meshcli auth sign-node " + n.key.ID().String() + " -o " + n.ownershipPath() +
			"` as the node's user; it takes the certificate while it runs")
	}
	return srv, nil
}

// configSnapshot is the configuration owner control reports before the
// owner has applied one: the models the node serves.
func (n *Node) configSnapshot() *nodev1.NodeConfigSnapshot {
	s := &nodev1.NodeConfigSnapshot{Version: 1}
	for _, in := range n.models.all() {
		s.Models = append(s.Models, &nodev1.NodeModelEntry{Model: in.m.Name(), CtxSize: proto.Uint32(uint32(in.m.ContextLength()))})
	}
	return s
}

// ownerRuntime is the node as owner control drives it: the config applier, the
// inventory scanner, and the models it loads, unloads and drains.
type ownerRuntime struct{ n *Node }

func diag(sev nodev1.ConfigDiagnosticSeverity, code nodev1.ConfigDiagnosticCode, path, format string, args ...any) *nodev1.ConfigDiagnostic {
	d := &nodev1.ConfigDiagnostic{Code: code, Severity: sev, Source: nodev1.ConfigDiagnosticSource_CONFIG_DIAGNOSTIC_SOURCE_VALIDATION,
		Message: fmt.Sprintf(format, args...)}
	if path != "" {
		d.Path = proto.String(path)
	}
	return d
}

const (
	sevError   = nodev1.ConfigDiagnosticSeverity_CONFIG_DIAGNOSTIC_SEVERITY_ERROR
	sevWarning = nodev1.ConfigDiagnosticSeverity_CONFIG_DIAGNOSTIC_SEVERITY_WARNING
	sevInfo    = nodev1.ConfigDiagnosticSeverity_CONFIG_DIAGNOSTIC_SEVERITY_INFO
)

// Validate implements control.Applier: every model must be one the node
// can load, config_toml must be a meshnode config, and what meshnode does
// not do (plugins, pinned GPUs, projectors) is flagged.
func (r *ownerRuntime) Validate(cfg *nodev1.NodeConfigSnapshot) []*nodev1.ConfigDiagnostic {
	var diags []*nodev1.ConfigDiagnostic
	seen := map[string]bool{}
	for i, m := range cfg.GetModels() {
		path := fmt.Sprintf("models[%d].model", i)
		name := m.GetModel()
		switch {
		case name == "":
			diags = append(diags, diag(sevError, nodev1.ConfigDiagnosticCode_CONFIG_DIAGNOSTIC_CODE_MISSING_REQUIRED_VALUE, path, "a model entry names no model"))
		case seen[canonicalModelName(name)]:
			diags = append(diags, diag(sevError, nodev1.ConfigDiagnosticCode_CONFIG_DIAGNOSTIC_CODE_INVALID_VALUE, path, "model %q is listed twice", name))
		case !r.n.canLoad(name):
			diags = append(diags, diag(sevError, nodev1.ConfigDiagnosticCode_CONFIG_DIAGNOSTIC_CODE_INVALID_VALUE, path,
				"model %q is not in the models dir (%s)", name, r.n.cfg.ModelsDir))
		}
		seen[canonicalModelName(name)] = true
		if m.Mmproj != nil || m.GetMmprojRef().GetDeclaredRef() != "" {
			diags = append(diags, diag(sevWarning, nodev1.ConfigDiagnosticCode_CONFIG_DIAGNOSTIC_CODE_UNSUPPORTED_FIELD,
				fmt.Sprintf("models[%d].mmproj", i), "multimodal projectors are not supported; ignored"))
		}
	}
	if len(cfg.GetPlugins()) > 0 {
		diags = append(diags, diag(sevWarning, nodev1.ConfigDiagnosticCode_CONFIG_DIAGNOSTIC_CODE_UNSUPPORTED_FIELD, "plugins",
			"meshnode runs no plugins; ignored"))
	}
	if cfg.GetGpu().GetAssignment() == nodev1.GpuAssignment_GPU_ASSIGNMENT_PINNED {
		diags = append(diags, diag(sevWarning, nodev1.ConfigDiagnosticCode_CONFIG_DIAGNOSTIC_CODE_UNSUPPORTED_FIELD, "gpu.assignment",
			"GPUs are assigned automatically; pinning is ignored"))
	}
	if t := cfg.GetConfigToml(); t != "" {
		if _, err := r.n.cfg.Staged([]byte(t)); err != nil {
			diags = append(diags, diag(sevError, nodev1.ConfigDiagnosticCode_CONFIG_DIAGNOSTIC_CODE_INVALID_VALUE, "config_toml", "%v", err))
		}
	}
	return diags
}

// Activate implements control.Applier. The model list takes effect now:
// models it adds are loaded and models it drops are unloaded. config_toml
// is written to the state dir and governs the node from its next start
// (STAGED).
func (r *ownerRuntime) Activate(ctx context.Context, cfg *nodev1.NodeConfigSnapshot) (nodev1.ConfigApplyMode, []*nodev1.ConfigDiagnostic) {
	var diags []*nodev1.ConfigDiagnostic
	want := map[string]bool{}
	for _, m := range cfg.GetModels() {
		name := canonicalModelName(m.GetModel())
		want[name] = true
		if _, loaded := r.n.models.get(name); loaded {
			continue
		}
		if _, err := r.Load(ctx, name, ""); err != nil {
			diags = append(diags, diag(sevWarning, nodev1.ConfigDiagnosticCode_CONFIG_DIAGNOSTIC_CODE_INVALID_VALUE, "models",
				"model %q did not load: %v", m.GetModel(), err))
		} else {
			diags = append(diags, diag(sevInfo, nodev1.ConfigDiagnosticCode_CONFIG_DIAGNOSTIC_CODE_UNSPECIFIED, "models", "loaded %q", m.GetModel()))
		}
	}
	for _, in := range r.n.models.all() {
		if want[in.m.Name()] {
			continue
		}
		if err := r.Unload(ctx, in.id); err != nil {
			diags = append(diags, diag(sevWarning, nodev1.ConfigDiagnosticCode_CONFIG_DIAGNOSTIC_CODE_INVALID_VALUE, "models",
				"model %q did not unload: %v", in.m.Name(), err))
		} else {
			diags = append(diags, diag(sevInfo, nodev1.ConfigDiagnosticCode_CONFIG_DIAGNOSTIC_CODE_UNSPECIFIED, "models", "unloaded %q", in.m.Name()))
		}
	}
	path := filepath.Join(r.n.cfg.StateDir, ownerConfigFile)
	current, _ := os.ReadFile(path)
	if t := cfg.GetConfigToml(); t != string(current) {
		var err error
		if t == "" {
			err = os.Remove(path)
		} else {
			err = writeFileAtomic(path, []byte(t), 0o600)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			diags = append(diags, diag(sevError, nodev1.ConfigDiagnosticCode_CONFIG_DIAGNOSTIC_CODE_UNSPECIFIED, "config_toml", "could not write %s: %v", path, err))
		}
		// serve_files takes effect now: an owner turning serving files
		// off means it at once, not at the next start.
		if next, err := r.n.cfg.Staged([]byte(t)); err == nil && r.n.share != nil && *next.ServeFiles != r.n.serveFiles.Load() {
			r.n.setServeFiles(*next.ServeFiles)
			r.n.log.Info("serve_files changed by the owner", "serve_files", *next.ServeFiles)
			diags = append(diags, diag(sevInfo, nodev1.ConfigDiagnosticCode_CONFIG_DIAGNOSTIC_CODE_UNSPECIFIED, "config_toml",
				"serve_files = %v took effect now", *next.ServeFiles))
		}
		return nodev1.ConfigApplyMode_CONFIG_APPLY_MODE_STAGED, append(diags,
			diag(sevInfo, nodev1.ConfigDiagnosticCode_CONFIG_DIAGNOSTIC_CODE_UNSPECIFIED, "config_toml", "config_toml takes effect when the node next starts"))
	}
	return nodev1.ConfigApplyMode_CONFIG_APPLY_MODE_LIVE, diags
}

// Scan implements control.Scanner.
func (r *ownerRuntime) Scan(ctx context.Context) ([]*nodev1.OwnerControlInventoryEntry, error) {
	return scanInventory(ctx, r.n.cfg.ModelsDir, r.n.log)
}

// Publish implements control.Scanner: a successful scan is what gossip
// advertises as available.
func (r *ownerRuntime) Publish(entries []*nodev1.OwnerControlInventoryEntry) {
	r.n.setInventory(entries)
	r.n.announceChange()
}

// Resolve implements control.Runtime.
func (r *ownerRuntime) Resolve(ref *nodev1.OwnerControlModelRef) (control.Model, error) {
	if id := ref.GetInstanceId(); id != "" {
		in, ok := r.n.models.byID(id)
		if !ok {
			return control.Model{}, fmt.Errorf("%w: no instance %q", control.ErrUnknownModel, id)
		}
		return control.Model{CanonicalRef: in.m.Name(), InstanceID: in.id}, nil
	}
	name := canonicalModelName(ref.GetCanonicalModelRef())
	if in, ok := r.n.models.get(name); ok {
		return control.Model{CanonicalRef: name, InstanceID: in.id}, nil
	}
	_, err := r.n.specFor(name)
	if err == nil {
		return control.Model{CanonicalRef: name}, nil
	}
	loadable := "none"
	if names := r.n.loadable(); len(names) > 0 {
		loadable = strings.Join(names, ", ")
	}
	return control.Model{}, fmt.Errorf("%w: %q is not loaded and cannot be loaded: %v (loadable here: %s)", control.ErrUnknownModel, name, err, loadable)
}

// Load implements control.Runtime: the model is opened, registered with
// the steward, and announced.
func (r *ownerRuntime) Load(ctx context.Context, name, profile string) (string, error) {
	name = canonicalModelName(name)
	if in, ok := r.n.models.get(name); ok {
		return in.id, nil
	}
	spec, err := r.n.specFor(name)
	if err != nil {
		return "", fmt.Errorf("%w: %v", control.ErrUnknownModel, err)
	}
	// A model that fits no single node under the budget is served split
	// across peers, as at start.
	if split, err := r.n.wantSplit(spec, r.n.wholeModelBytes()); err != nil {
		return "", err
	} else if split {
		in, err := r.n.loadSplit(spec)
		if err != nil {
			return "", err
		}
		r.n.log.Info("model loaded by its owner, split across peers", "model", name, "instance", in.id)
		r.n.announceChange()
		return in.id, nil
	}
	m, err := r.n.openSpec(spec, r.n.cfg.API.Concurrency)
	if err != nil {
		return "", err
	}
	// The steward knows the backend and has recorded its weights before
	// the model becomes visible to requests, so that none is served on
	// weights the change record does not have in effect.
	fail := func(err error) (string, error) {
		r.n.steward.RemoveBackend(backendOf(m).Name)
		m.Close()
		return "", err
	}
	if err := r.n.steward.AddBackend(backendOf(m)); err != nil {
		m.Close()
		return "", err
	}
	if err := r.n.recordWeights(m); err != nil {
		return fail(err)
	}
	in, err := r.n.models.add(m)
	if err != nil {
		return fail(err)
	}
	r.n.log.Info("model loaded by its owner", "model", name, "instance", in.id)
	r.n.announceChange()
	return in.id, nil
}

// Unload implements control.Runtime: the instance stops taking work, what
// it holds is cancelled, and once it is idle it is closed.
func (r *ownerRuntime) Unload(ctx context.Context, id string) error {
	in, ok := r.n.models.remove(id)
	if !ok {
		return fmt.Errorf("%w: no instance %q", control.ErrUnknownModel, id)
	}
	r.n.steward.RemoveBackend(backendOf(in.m).Name)
	r.n.announceChange()
	d := in.gate.drain()
	d.Cancel()
	select {
	case <-d.Idle():
	case <-ctx.Done():
		// The instance is out of service already; it is closed once its
		// cancelled work has stopped, whoever stops waiting for it.
		go func() {
			<-d.Idle()
			in.m.Close()
		}()
		return fmt.Errorf("unload %s: work did not stop in time (the model closes when it does): %w", id, ctx.Err())
	}
	r.n.log.Info("model unloaded by its owner", "model", in.m.Name(), "instance", id)
	return in.m.Close()
}

// Drain implements control.Runtime.
func (r *ownerRuntime) Drain(id string) (control.Drain, error) {
	in, ok := r.n.models.byID(id)
	if !ok {
		return nil, fmt.Errorf("%w: no instance %q", control.ErrUnknownModel, id)
	}
	return in.gate.drain(), nil
}

// canLoad reports whether name is a model the node could load: one it
// serves, one its config names, the built-in default, or a file in the
// models dir.
func (n *Node) canLoad(name string) bool {
	if _, loaded := n.models.get(name); loaded {
		return true
	}
	_, err := n.specFor(name)
	return err == nil
}

// canonicalModelName is the name a model ref given to owner control
// stands for: a name with .gguf is the same model as the name without.
func canonicalModelName(ref string) string {
	if IsModelName(ref) && strings.EqualFold(filepath.Ext(ref), ".gguf") {
		return ModelName(ref)
	}
	return ref
}

// specFor is how model name is loaded: as its config names it (a
// [[model]] table, an entry of models, whose paths are the operator's to
// choose; the reference engine only this way), as the built-in default,
// or else as the file of that name in the models dir. Owner control
// reaches only these: a name it sends is never taken as a path.
func (n *Node) specFor(name string) (modelSpec, error) {
	name = canonicalModelName(name)
	for _, m := range n.cfg.Model {
		if m.Name == name || (m.Name == "" && ModelName(m.Path) == name) {
			m.Name = name
			return n.cfg.specOf(m)
		}
	}
	for _, p := range n.cfg.Models {
		if ModelName(p) == name {
			return n.cfg.specOf(ModelConfig{Path: p})
		}
	}
	if name == ReferenceModel {
		return modelSpec{}, fmt.Errorf("model %q: the reference engine is served only when the node's config names it", name)
	}
	if name == BuiltinModelName {
		if b, ok := n.cfg.builtinSpec(); ok {
			return b, nil
		}
	}
	path, err := n.cfg.modelInDir(name)
	if err != nil {
		return modelSpec{}, err
	}
	return modelSpec{ModelConfig: ModelConfig{Path: path, Name: name}}, nil
}

// loadable lists what owner control may load by name, for errors: the
// models the config names, the built-in default where it is found, and
// the models dir's last inventory.
func (n *Node) loadable() []string {
	var names []string
	add := func(name string) {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	for _, m := range n.cfg.Model {
		add(cmp.Or(m.Name, ModelName(m.Path)))
	}
	for _, p := range n.cfg.Models {
		add(ModelName(p))
	}
	if _, ok := n.cfg.builtinSpec(); ok {
		add(BuiltinModelName)
	}
	for _, e := range n.inventorySnapshot() {
		add(e.GetCanonicalModelRef())
	}
	return names
}

// announceChange re-gossips the self announcement now, after the models
// or the inventory changed, and tells config watchers.
func (n *Node) announceChange() {
	if n.mesh == nil {
		return // not serving yet (or a test's node without a mesh)
	}
	if err := n.mesh.UpdateSelf(); err != nil {
		n.log.Warn("mesh: announcing the change", "err", err)
	}
}

// writeFileAtomic writes data to path through a synced temporary file in
// the same dir, renamed into place.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
