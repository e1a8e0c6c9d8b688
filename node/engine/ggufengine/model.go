// Package ggufengine serves GGUF models as mesh/1 engines: it loads a
// model file onto the CPU backend, exposes its tokenizer, chat template and
// context length for the API layer, and implements engine.Engine, whose
// Serve decodes greedily or samples as the request says, stops at EOS,
// stop strings or max_tokens, and reuses the KV cache of the conversation a
// prompt continues.
//
// Precision names (the receipt's precision, mesh/1 §6.1) follow the file's
// type, general.file_type: F32 fp32, F16 fp16, BF16 bf16, Q8_0 int8, the
// 6-, 5-, 4-, 3- and 2-bit quantisations int6, int5, int4, int3 and int2
// (Q4_K_M is int4 though some of its tensors are Q6_K: the weights digest
// pins every tensor's exact type). Activations enter the matrix products
// as 8-bit (Q8_0, Q8_K) for the quantised types, fp16 for F16; the KV cache
// is fp16 by default.
package ggufengine

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/backend"
	"github.com/meshnode/meshnode/gguf/chat"
	"github.com/meshnode/meshnode/gguf/digest"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node/receipt"
)

// Config is how one model is served.
type Config struct {
	// Name is the model's name and the engine's recipe; default: the
	// file's name without .gguf.
	Name string
	// Fidelity is the advertised level (mesh/1 §3.2).
	Fidelity receipt.Fidelity
	// UJPerToken is the modelled energy per token the router's estimate
	// uses (§4); a model, never a measurement.
	UJPerToken uint64
	// Threads is the CPU threads the forward pass uses; 0: one per CPU.
	Threads int
	// Context is each sequence's context length; 0: the model's trained
	// context, capped so that the KV caches fit MemoryBytes/4, or at
	// model.DefaultContext when MemoryBytes is 0.
	Context int
	// MemoryBytes is the machine's memory, which bounds the default
	// context (0: unknown).
	MemoryBytes uint64
	// KV is the KV cache type, "f16" (default) or "f32".
	KV string
	// Batch is the most tokens one forward step evaluates, over every
	// serve it carries; 0: model.DefaultBatch (raised, if need be, to
	// fit every slot's decode token and a prompt chunk).
	Batch int
	// PrefillChunk is the least share of a step that waiting prompts get
	// while it also carries decode tokens (they get as many tokens as the
	// step decodes when that is more); 0: DefaultPrefillChunk.
	PrefillChunk int
	// Sessions is the number of slots: the sequences kept at once, one
	// per concurrent serve (idle ones keep their KV cache for a
	// conversation's next turn); 0: as many as the KV caches of a whole
	// context each fit in a quarter of MemoryBytes, between 1 and
	// MaxSlots (DefaultSessions when MemoryBytes is 0).
	Sessions int
	// Log receives load and serve messages; nil discards them.
	Log *slog.Logger
	// Backend is where the forward pass runs: BackendAuto (""; the GPU
	// where the CUDA backend can run the model, else the CPU),
	// BackendCPU or BackendCUDA. See backend.go.
	Backend string
	// Draft turns on speculative decoding: the path of a GGUF draft
	// model with the same vocabulary (a smaller model of the family, or a
	// more quantised copy), or DraftLookup for prompt lookup. Empty: off.
	Draft string
	// DraftMax is the most tokens drafted per step; 0:
	// spec.DefaultMaxWindow.
	DraftMax int
	// DraftCost is c, a drafted token's cost relative to a target token,
	// which sizes the windows (spec.Window); 0: the draft file's size
	// over the target's (the bytes a token reads). A fixed figure, so
	// that the speculation of a seeded sampled serve replays.
	DraftCost float64
	// DraftThreshold stops a round's drafting where the draft model's
	// top probability falls below it; 0: no fixed threshold, each draft
	// weighed by how often drafts of its confidence have stood in the
	// request and by what it costs (spec.Window.Draft); negative: never.
	DraftThreshold float64
	// DraftPricesFromFiles prices greedy serves' windows as sampled ones
	// are — the files' sizes and spec.DefaultRowCost — instead of timing
	// this machine's steps at load: windows decided the same on every
	// machine and under any load (a loaded machine's timings can price
	// every window out), and no measuring at load.
	DraftPricesFromFiles bool
}

// DefaultSessions is the slots of a model whose memory is unknown, and
// the count the default context is sized for.
const DefaultSessions = 4

// MaxSlots bounds the slots sized from memory.
const MaxSlots = 64

// Model is a loaded GGUF model: the file, its weights on the CPU backend,
// its tokenizer and chat template, and the engine that serves it.
type Model struct {
	name    string
	path    string
	file    *gguf.File
	be      backend.Backend
	model   *model.Model
	tok     *tokenizer.Tokenizer
	tmpl    *chat.Template
	facts   gguf.Facts
	weights receipt.Weights
	ctx     int
	draft   *spec.Drafter // nil: no speculation
	con     *Constrainer  // the vocabulary for constrained decoding
	dry     *DRYVocab     // DRY's sequence breakers, read from tok
	eng     *Engine
	// pooling is how embeddings pool, or poolingErr why there are none.
	pooling    Pooling
	poolingErr error
	// rank is a reranker's head (rank pooling), or rankErr why a file
	// whose pooling is rank cannot score; rerankTemplate is its prompt
	// for a pair (tokenizer.chat_template.rerank).
	rank           *rankHead
	rankErr        error
	rerankTemplate string
	log            *slog.Logger
}

// Load opens the GGUF file at path and prepares it for serving. Every byte
// of the file is hashed for the weights digest (§3.6), streamed rather
// than through the mapping, so the weights' pages come in only as the
// forward pass reads them.
func Load(path string, cfg Config) (*Model, error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	m := &Model{path: path, file: f, facts: f.Facts(), log: log}
	ok := false
	defer func() {
		if !ok {
			m.Close()
		}
	}()
	m.name = cfg.Name
	if m.name == "" {
		m.name = gguf.ModelKey(path)
	}
	if m.tok, err = tokenizer.FromGGUF(f.Metadata); err != nil {
		return nil, fmt.Errorf("ggufengine: %s: %w", path, err)
	}
	m.dry = NewDRYVocab(m.tok)
	if m.tmpl, err = chat.FromGGUF(f.Metadata); err != nil {
		return nil, fmt.Errorf("ggufengine: %s: %w", path, err)
	}
	m.pooling, m.poolingErr = embeddingPooling(f.Metadata)
	if m.be, m.model, cfg.MemoryBytes, err = loadOnBackend(f, cfg, log); err != nil {
		return nil, fmt.Errorf("ggufengine: %s: %w", path, err)
	}
	mc := m.model.Config()
	m.rank, m.rankErr = loadRankHead(f, mc.Embd)
	m.rerankTemplate, _ = f.Metadata.String(rerankTemplateKey)
	if m.tok.NumTokens() > mc.VocabSize {
		return nil, fmt.Errorf("ggufengine: %s: the tokenizer has %d tokens, the model %d", path, m.tok.NumTokens(), mc.VocabSize)
	}

	m.con = NewConstrainer(m.tok, mc.VocabSize)

	sum, err := digest.Files(filepath.Dir(path), filepath.Base(path))
	if err != nil {
		return nil, fmt.Errorf("ggufengine: %w", err)
	}
	m.weights = receipt.Weights{Digest: receipt.ContentID(sum.Digest), Precision: Precision(m.facts.QuantizationType)}

	kv, err := model.ParseKVType(cfg.KV)
	if err != nil {
		return nil, fmt.Errorf("ggufengine: %w", err)
	}
	var sessions int
	m.ctx, sessions = slots(cfg, mc, kv)
	opt := model.SessionOptions{Context: m.ctx, Batch: cfg.Batch, KV: kv}
	if cfg.Draft != "" {
		if m.draft, err = loadDraft(m, cfg); err != nil {
			return nil, fmt.Errorf("ggufengine: %s: %w", path, err)
		}
	}
	// After the draft: its weights count in what the CPU keeps cached.
	start := time.Now()
	if err := m.model.WarmUp(context.Background()); err != nil {
		log.Warn("warm-up failed; the first request pays what it would have", "model", m.name, "err", err)
	}
	warm := time.Since(start).Round(time.Millisecond)
	if m.draft != nil {
		// What drafting and verifying cost on this machine, for greedy
		// serves' windows (spec.Drafter.Window).
		info := []any{"model", m.name, "draft", cfg.Draft, "id", m.draft.ID(), "cost", m.draft.Cost(), "max_window", m.draft.Max()}
		start = time.Now()
		if cfg.DraftPricesFromFiles {
			log.Info("speculative decoding", info...)
		} else if prices, err := m.draft.Measure(context.Background(), m.model); err != nil {
			// Not fatal: the windows keep the files' prices.
			log.Warn("speculative decoding: prices not measured; greedy windows priced by the files' sizes", "model", m.name, "draft", cfg.Draft, "err", err)
		} else {
			log.Info("speculative decoding", append(info, "measured_cost", fmt.Sprintf("%.3f", prices.Cost),
				"measured_row_cost", fmt.Sprintf("%.3f", prices.Row), "measured_steps", fmt.Sprintf("%.2f", prices.Steps),
				"measured_catch_up", fmt.Sprintf("%.3f", prices.CatchUp), "measured_first", fmt.Sprintf("%.3f", prices.First),
				"sampled_cost", fmt.Sprintf("%.3f", prices.SampledCost), "sampled_row_cost", fmt.Sprintf("%.3f", prices.SampledRow),
				"sampled_first", fmt.Sprintf("%.3f", prices.SampledFirst), "sampled_catch_up", fmt.Sprintf("%.3f", prices.SampledCatchUp),
				"sampled_speculates", m.draft.SampledID() != "",
				"measure_took", time.Since(start).Round(time.Millisecond))...)
		}
	}
	if m.eng, err = newEngine(m, cfg, opt, sessions); err != nil {
		return nil, err
	}
	log.Info("model loaded", "model", m.name, "arch", mc.Arch, "type", m.facts.QuantizationType,
		"params", m.facts.ParameterSize, "context", m.ctx, "slots", sessions, "kv", kv, "backend", m.be.Name(), "threads", m.be.Threads(),
		"digest", m.weights.Digest.String(), "hashed_mbps", int(sum.MBps()), "head_shadow_bytes", m.model.ShadowBytes(), "warm_up", warm)
	ok = true
	return m, nil
}

// slots resolves Config.Context and Config.Sessions: each sequence's
// context, then how many sequences' KV caches fit the memory they may
// take (a quarter of the machine's).
func slots(cfg Config, mc model.Config, kv model.KVType) (ctx, n int) {
	sized := cfg.Sessions
	if sized <= 0 {
		sized = DefaultSessions
	}
	ctx = contextLength(cfg, mc, kv, sized)
	switch {
	case cfg.Sessions > 0:
		return ctx, cfg.Sessions
	case cfg.MemoryBytes == 0:
		return ctx, DefaultSessions
	}
	fit := cfg.MemoryBytes / 4 / (uint64(ctx) * kvBytesPerPosition(mc, kv))
	return ctx, int(max(1, min(MaxSlots, fit)))
}

// kvBytesPerPosition is what one position of a sequence takes in the KV
// cache: keys and values of every layer that has its own (gemma4's
// KV-sharing layers have none, and its layers' heads differ).
func kvBytesPerPosition(mc model.Config, kv model.KVType) uint64 {
	elem := uint64(2)
	if kv == model.KVF32 {
		elem = 4
	}
	var elems uint64
	for l := range mc.Layers {
		elems += uint64(mc.LayerKVElems(l))
	}
	return elem * elems
}

// contextLength resolves Config.Context (see there) for sessions
// sequences.
func contextLength(cfg Config, mc model.Config, kv model.KVType, sessions int) int {
	if cfg.Context > 0 {
		return min(cfg.Context, mc.TrainContext)
	}
	if cfg.MemoryBytes == 0 {
		return min(mc.TrainContext, model.DefaultContext)
	}
	fit := cfg.MemoryBytes / 4 / uint64(sessions) / kvBytesPerPosition(mc, kv)
	return int(max(1, min(uint64(mc.TrainContext), fit)))
}

// Precision names the arithmetic of a file type (see the package doc).
func Precision(fileType string) string {
	t := strings.ToUpper(fileType)
	switch {
	case t == "F32":
		return "fp32"
	case t == "F16":
		return "fp16"
	case t == "BF16":
		return "bf16"
	case t == "Q8_0":
		return "int8"
	case strings.HasPrefix(t, "Q6_"):
		return "int6"
	case strings.HasPrefix(t, "Q5_"):
		return "int5"
	case strings.HasPrefix(t, "Q4_"), strings.HasPrefix(t, "IQ4_"):
		return "int4"
	case strings.HasPrefix(t, "Q3_"), strings.HasPrefix(t, "IQ3_"):
		return "int3"
	case strings.HasPrefix(t, "Q2_"), strings.HasPrefix(t, "IQ2_"):
		return "int2"
	case t == "":
		return "unknown"
	}
	return strings.ToLower(t)
}

// Name is the model's name, also the engine's recipe.
func (m *Model) Name() string { return m.name }

// Path is the file the model was loaded from.
func (m *Model) Path() string { return m.path }

// Engine returns the model's engine.
func (m *Model) Engine() *Engine { return m.eng }

// Tokenizer returns the model's tokenizer.
func (m *Model) Tokenizer() *tokenizer.Tokenizer { return m.tok }

// Template returns the model's chat template (a plain transcript when the
// file has none).
func (m *Model) Template() *chat.Template { return m.tmpl }

// Tokenize encodes text as llama.cpp's llama_tokenize does: with
// addSpecial, BOS (and EOS) where the vocabulary asks for them; with
// parseSpecial, control-token texts in the input become those tokens (set
// it for text a chat template produced, not for raw user text).
func (m *Model) Tokenize(text string, addSpecial, parseSpecial bool) []uint32 {
	return m.tok.Encode(text, tokenizer.EncodeOptions{AddSpecial: addSpecial, ParseSpecial: parseSpecial})
}

// ApplyChat renders a conversation through the model's chat template,
// ending with the opening of the assistant's turn.
func (m *Model) ApplyChat(messages []chat.Message) (string, error) {
	return m.tmpl.Apply(messages, true)
}

// NewDecoder returns a streaming detokeniser for one generation's output
// (the tokens continue the prompt's text).
func (m *Model) NewDecoder() *tokenizer.Decoder {
	return m.tok.NewDecoder(tokenizer.DecodeOptions{Continue: true})
}

// Slots is how many serves the engine runs at once (Config.Sessions).
func (m *Model) Slots() int { return m.eng.Slots() }

// ContextLength is the most tokens (prompt and output) one sequence holds.
func (m *Model) ContextLength() int { return m.ctx }

// Config returns the architecture's hyperparameters.
func (m *Model) Config() model.Config { return m.model.Config() }

// Backend names where the forward pass runs: "cpu" or "cuda".
func (m *Model) Backend() string { return m.be.Name() }

// Threads is the CPU threads the forward pass runs on.
func (m *Model) Threads() int { return m.be.Threads() }

// Facts describes the file (for gossip and /v1/models).
func (m *Model) Facts() gguf.Facts { return m.facts }

// Size is the file's size in bytes.
func (m *Model) Size() int64 { return m.file.Size() }

// Constrainer is the model's vocabulary for grammar-constrained decoding.
func (m *Model) Constrainer() *Constrainer { return m.con }

// Draft names the model's speculative proposer as a sampled request
// names it (receipt.Sampling.Draft): DraftLookup, or the draft model's
// weights digest; empty when the model does not speculate.
func (m *Model) Draft() string {
	if m.draft == nil {
		return ""
	}
	return m.draft.ID()
}

// SampledDraft is what a new sampled request to the model names as its
// draft (spec.Drafter.SampledID): Draft with the sampled prices measured
// at load, which price its windows; Draft alone where none were measured;
// or "" where sampled speculation cannot pay here, so that it samples
// plainly. A request that names Draft, with any prices or none,
// speculates with it whatever this says: a replay of a serve that did.
func (m *Model) SampledDraft() string {
	if m.draft == nil {
		return ""
	}
	return m.draft.SampledID()
}

// DraftPrices are the prices the draft's windows are priced by, and
// when they were measured (spec.Drafter.Pricing; zero: the files'
// prices); nothing without a draft.
func (m *Model) DraftPrices() (spec.Prices, time.Time) { return m.draft.Pricing() }

// Close releases the backend's workers and the file's mapping. The model
// and its engine must not be used afterwards.
func (m *Model) Close() error {
	if m.eng != nil {
		m.eng.close()
	}
	m.draft.Close()
	if m.be != nil {
		m.be.Close()
	}
	return m.file.Close()
}
