package api

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/meshnode/meshnode/node/receipt"
)

// Ollama's API (/api/chat, /api/generate, /api/embed, /api/tags,
// /api/show, /api/ps, /api/version), which many local tools speak. A
// chat or generate request is read into the same Generation the OpenAI
// endpoints make, so it is served, metered, sealed and replayed as one;
// only its shape on the wire is Ollama's (ollamastream.go writes it).

// ollamaPath reports whether p is one of Ollama's API paths, whose
// errors have Ollama's shape.
func ollamaPath(p string) bool {
	switch p {
	case "/api/chat", "/api/generate", "/api/embed", "/api/embeddings", "/api/tags", "/api/show", "/api/ps", "/api/version",
		"/api/pull", "/api/push", "/api/create", "/api/copy", "/api/delete":
		return true
	}
	return strings.HasPrefix(p, "/api/blobs/")
}

// ollamaError is Ollama's error body.
type ollamaError struct {
	Error string `json:"error"`
}

// ollamaCommon holds the fields chat and generate share.
type ollamaCommon struct {
	Model     string          `json:"model"`
	Format    json.RawMessage `json:"format"`
	Options   json.RawMessage `json:"options"`
	Stream    *bool           `json:"stream"`
	KeepAlive json.RawMessage `json:"keep_alive"`
	Think     json.RawMessage `json:"think"`

	// meshnode's, as on the OpenAI endpoints.
	Speculative *bool          `json:"speculative"`
	Metadata    map[string]any `json:"metadata"`
}

// ollamaOptions are the options meshnode honours; any other is refused
// (ollamaOptionRefusals says why, for those Ollama defines).
type ollamaOptions struct {
	Temperature      *float64        `json:"temperature"`
	TopK             *int64          `json:"top_k"`
	TopP             *float64        `json:"top_p"`
	MinP             *float64        `json:"min_p"`
	TypicalP         *float64        `json:"typical_p"`
	Seed             *json.Number    `json:"seed"`
	NumPredict       *int            `json:"num_predict"`
	Stop             json.RawMessage `json:"stop"`
	RepeatPenalty    *float64        `json:"repeat_penalty"`
	RepeatLastN      *int            `json:"repeat_last_n"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	NumCtx           *int            `json:"num_ctx"`
	Mirostat         *int            `json:"mirostat"`
	MirostatTau      *float64        `json:"mirostat_tau"`
	MirostatEta      *float64        `json:"mirostat_eta"`
}

// ollamaOptionRefusals are Ollama's options meshnode does not honour,
// with why, and the values that ask for nothing (accepted).
var ollamaOptionRefusals = map[string]refusal{
	"tfs_z":               {"tail-free sampling is not supported (1 is accepted)", oneOf("1", "1.0")},
	"penalize_newline":    {"penalize_newline is not supported", isNull},
	"num_keep":            {"num_keep is not supported: a prompt that does not fit the context is refused, never shifted", isNull},
	"num_batch":           {"num_batch is not supported: the engine batches as the node's configuration says", isNull},
	"num_gpu":             {"num_gpu is not supported: the node places a model on its devices itself (docs/engine.md)", isNull},
	"main_gpu":            {"main_gpu is not supported: the node places a model on its devices itself (docs/engine.md)", isNull},
	"num_thread":          {"num_thread is not supported: the node sets its CPU threads at start", isNull},
	"use_mmap":            {"use_mmap is not supported: the node loads models as its configuration says", isNull},
	"use_mlock":           {"use_mlock is not supported", isNull},
	"numa":                {"numa is not supported", isNull},
	"low_vram":            {"low_vram is not supported", isNull},
	"vocab_only":          {"vocab_only is not supported", isNull},
	"f16_kv":              {"f16_kv is not supported", isNull},
	"logits_all":          {"logits_all is not supported", isNull},
	"embedding_only":      {"embedding_only is not supported", isNull},
	"rope_frequency_base": {"rope_frequency_base is not supported: the model's file sets it", isNull},
}

// apply reads the shared fields into g.
func (c *ollamaCommon) apply(g *Generation) error {
	var opts ollamaOptions
	if !isAbsent(c.Options) {
		if bytes.TrimSpace(c.Options)[0] != '{' {
			return badRequest("options", "options must be an object")
		}
		if err := decodeBody(c.Options, &opts); err != nil {
			e := asError(err)
			e.Message, e.Param = "options: "+e.Message, "options"
			return e
		}
		if err := checkOptions(c.Options); err != nil {
			return err
		}
	}
	smp := sampling{Model: c.Model, Temperature: opts.Temperature, TopP: opts.TopP, TopK: opts.TopK, MinP: opts.MinP,
		Seed: opts.Seed, Stop: opts.Stop, RepeatPenalty: opts.RepeatPenalty, RepeatLastN: opts.RepeatLastN, PresencePenalty: opts.PresencePenalty,
		FrequencyPenalty: opts.FrequencyPenalty, Metadata: c.Metadata, Speculative: c.Speculative,
		llamaFilterFields: llamaFilterFields{TypicalP: opts.TypicalP, Mirostat: opts.Mirostat, MirostatTau: opts.MirostatTau, MirostatEta: opts.MirostatEta}, maxStops: receipt.MaxStops}
	if err := smp.apply(g); err != nil {
		e := asError(err)
		if e.Param != "" && e.Param != "model" && !strings.HasPrefix(e.Param, "metadata") {
			e.Param = "options." + e.Param
		}
		return e
	}
	if n := opts.NumPredict; n != nil {
		switch {
		case *n == -1 || *n == -2:
			// Until the context is full (-2) or the model ends (-1),
			// which the context also bounds.
			g.MaxTokens = math.MaxInt32
		case *n < 1:
			return badRequest("options.num_predict", "options.num_predict must be at least 1, or -1 (until the model ends) or -2 (until the context is full); got %d", *n)
		default:
			g.MaxTokens = *n
		}
	}
	if n := opts.NumCtx; n != nil {
		if *n < 1 {
			return badRequest("options.num_ctx", "options.num_ctx must be at least 1, got %d", *n)
		}
		g.ContextLimit = *n
	}
	if err := checkKeepAlive(c.KeepAlive); err != nil {
		return err
	}
	if !isAbsent(c.Think) {
		var on bool
		var level string
		switch {
		case json.Unmarshal(c.Think, &on) == nil:
		case json.Unmarshal(c.Think, &level) == nil:
			// A level (gpt-oss's): the model's reasoning effort.
			var err error
			if g.ReasoningEffort, err = reasoningEffort("think", level); err != nil {
				return err
			}
			on = true
		default:
			return badRequest("think", `think must be true, false, or a level ("low", "medium", "high")`)
		}
		g.thinking = &thinkSwitch{param: "think", on: on}
	}
	return parseOllamaFormat(c.Format, g)
}

// checkOptions refuses the options meshnode does not honour, naming each.
func checkOptions(raw json.RawMessage) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return badRequest("options", "options must be an object")
	}
	known := jsonFields(reflect.TypeFor[ollamaOptions]())
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if known[name] {
			continue
		}
		r, ok := ollamaOptionRefusals[name]
		switch {
		case !ok:
			return badRequest("options."+name, "unknown option %q (docs/api.md lists the options meshnode honours)", name)
		case r.inert(compact(fields[name])):
			continue
		}
		return badRequest("options."+name, "options.%s", r.why)
	}
	return nil
}

// checkKeepAlive accepts a keep_alive that asks the model to stay
// loaded, for a while (a positive duration: seconds, or a Go duration
// such as "30m") or for good (a negative one). The node keeps it longer
// still: a model stays loaded until it is unloaded (meshcli unload),
// since it serves the mesh too and one client's request does not unload
// it. 0, unload it now, is refused for the same reason.
func checkKeepAlive(raw json.RawMessage) error {
	if isAbsent(raw) {
		return nil
	}
	var seconds float64
	var text string
	switch {
	case json.Unmarshal(raw, &seconds) == nil:
		if seconds != 0 {
			return nil
		}
	case json.Unmarshal(raw, &text) == nil:
		d, err := time.ParseDuration(strings.TrimSpace(text))
		if err != nil {
			return badRequest("keep_alive", "keep_alive %q is not a duration: send seconds (300), a duration (\"30m\") or a negative one (keep the model loaded)", text)
		}
		if d != 0 {
			return nil
		}
	default:
		return badRequest("keep_alive", "keep_alive must be seconds (a number) or a duration (a string such as \"30m\")")
	}
	return badRequest("keep_alive", "keep_alive 0 (unload the model now) is not supported: a node's models serve the mesh too, so one request does not unload them (meshcli unload does); a model stays loaded until then, as any other keep_alive asks")
}

// parseOllamaFormat reads format: "json" (any JSON object) or a JSON
// Schema, which the output is held to as response_format's are.
func parseOllamaFormat(raw json.RawMessage, g *Generation) error {
	raw = bytes.TrimSpace(raw)
	if isAbsent(raw) || bytes.Equal(raw, []byte(`""`)) {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s != "json" {
			return badRequest("format", `format must be "json" or a JSON Schema object, got %q`, s)
		}
		return parseResponseFormat(json.RawMessage(`{"type":"json_object"}`), g)
	}
	if raw[0] != '{' {
		return badRequest("format", `format must be "json" or a JSON Schema object`)
	}
	rf, _ := json.Marshal(map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "format", "schema": raw}})
	if err := parseResponseFormat(rf, g); err != nil {
		e := asError(err)
		e.Param = "format"
		return e
	}
	return nil
}

// ollamaMessageIn is a message of a chat request.
type ollamaMessageIn struct {
	Role      string          `json:"role"`
	Content   string          `json:"content"`
	Images    json.RawMessage `json:"images"`
	Thinking  string          `json:"thinking"`
	ToolName  string          `json:"tool_name"`
	ToolCalls []struct {
		Function struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

type ollamaChatRequest struct {
	ollamaCommon
	Messages []ollamaMessageIn `json:"messages"`
	Tools    json.RawMessage   `json:"tools"`

	tools toolChoice
}

type ollamaGenerateRequest struct {
	ollamaCommon
	Prompt   string          `json:"prompt"`
	Suffix   string          `json:"suffix"`
	System   string          `json:"system"`
	Raw      bool            `json:"raw"`
	Template json.RawMessage `json:"template"`
	Context  json.RawMessage `json:"context"`
	Images   json.RawMessage `json:"images"`
}

func parseOllamaChat(body []byte) (*Generation, *ollamaChatRequest, error) {
	var req ollamaChatRequest
	if err := decodeBody(body, &req); err != nil {
		return nil, nil, err
	}
	if err := checkFields(body, &req, "POST /api/chat"); err != nil {
		return nil, nil, err
	}
	g := &Generation{Body: body}
	if err := req.apply(g); err != nil {
		return nil, nil, err
	}
	if len(req.Messages) == 0 {
		return nil, nil, badRequest("messages", "messages must hold at least one message")
	}
	// Ollama's calls carry no ids: each is given one, and a tool message
	// answers the first call not yet answered (of its tool_name's, when
	// it names one).
	var open []ToolCall
	for i, m := range req.Messages {
		field := fmt.Sprintf("messages[%d]", i)
		if holdsSomething(m.Images) {
			return nil, nil, badRequest(field+".images", "%s.images: meshnode's models read text", field)
		}
		msg := Message{Role: m.Role, Content: m.Content}
		if m.Thinking != "" && m.Role != "assistant" {
			return nil, nil, badRequest(field+".thinking", "%s.thinking: only assistant messages carry thinking", field)
		}
		switch m.Role {
		case "system", "user":
		case "assistant":
			msg.Reasoning = m.Thinking
			for j, c := range m.ToolCalls {
				args := compact(c.Function.Arguments)
				if c.Function.Name == "" || len(args) == 0 || args[0] != '{' {
					return nil, nil, badRequest(field+".tool_calls", "%s.tool_calls[%d] must name its function and give its arguments as an object", field, j)
				}
				call := ToolCall{ID: fmt.Sprintf("call_%d_%d", i, j), Name: c.Function.Name, Arguments: string(args)}
				msg.ToolCalls = append(msg.ToolCalls, call)
				open = append(open, call)
			}
		case "tool":
			k := slices.IndexFunc(open, func(c ToolCall) bool { return m.ToolName == "" || c.Name == m.ToolName })
			if k < 0 {
				return nil, nil, badRequest(field, "%s is a tool result that answers no earlier assistant tool call (of tool %q)", field, m.ToolName)
			}
			msg.ToolCallID, msg.Name = open[k].ID, open[k].Name
			open = slices.Delete(open, k, k+1)
		default:
			return nil, nil, badRequest(field+".role", "%s.role %q is not one of system, user, assistant, tool", field, m.Role)
		}
		g.Messages = append(g.Messages, msg)
	}
	var err error
	chat := chatRequest{Tools: req.Tools}
	if req.tools, err = chat.parseTools(g); err != nil {
		return nil, nil, err
	}
	return g, &req, nil
}

func parseOllamaGenerate(body []byte) (*Generation, *ollamaGenerateRequest, error) {
	var req ollamaGenerateRequest
	if err := decodeBody(body, &req); err != nil {
		return nil, nil, err
	}
	if err := checkFields(body, &req, "POST /api/generate"); err != nil {
		return nil, nil, err
	}
	switch {
	case !isAbsent(req.Template) && !bytes.Equal(compact(req.Template), []byte(`""`)):
		return nil, nil, badRequest("template", "template is not supported: a prompt goes through the model's own chat template (or none, with raw)")
	case holdsSomething(req.Context):
		return nil, nil, badRequest("context", "context (the token ids of an earlier exchange) is not supported: send the conversation to /api/chat")
	case holdsSomething(req.Images):
		return nil, nil, badRequest("images", "images: meshnode's models read text")
	}
	g := &Generation{Body: body}
	if err := req.apply(g); err != nil {
		return nil, nil, err
	}
	switch {
	case req.Suffix != "":
		// Fill in the middle, through the model's FIM tokens, as
		// completions' suffix is.
		if req.System != "" {
			return nil, nil, badRequest("system", "system cannot be combined with suffix: fill in the middle has no place for it")
		}
		g.Prompt, g.Suffix = req.Prompt, req.Suffix
	case req.Raw:
		if req.System != "" {
			return nil, nil, badRequest("system", "system cannot be combined with raw: a raw prompt goes to the model as it is")
		}
		g.Prompt = req.Prompt
	default:
		// Ollama puts a prompt through the model's chat template, as a
		// user's message after the system's.
		if req.System != "" {
			g.Messages = append(g.Messages, Message{Role: "system", Content: req.System})
		}
		g.Messages = append(g.Messages, Message{Role: "user", Content: req.Prompt})
	}
	if req.Prompt == "" && req.Suffix == "" {
		return nil, nil, badRequest("prompt", "prompt is required (an empty one, which Ollama answers by loading the model, has nothing to load here: models are loaded with meshcli load)")
	}
	return g, &req, nil
}

// streaming is Ollama's default: true unless stream is false.
func (c *ollamaCommon) streaming() bool { return c.Stream == nil || *c.Stream }

func (s *Server) handleOllamaChat(w http.ResponseWriter, r *http.Request) {
	var req *ollamaChatRequest
	m, g, ok := s.accept(w, r, func(body []byte) (g *Generation, err error) {
		g, req, err = parseOllamaChat(body)
		return g, err
	})
	if !ok {
		return
	}
	if err := applyThinking(m, g); err != nil {
		writeError(w, err)
		return
	}
	// Ollama's tool choice is auto: a call format, no grammar.
	format, _, err := setupTools(m, g)
	if err != nil {
		writeError(w, err)
		return
	}
	st := s.newOllamaStream(g, false)
	st.channels, st.calls = readersFor(m, g, req.tools.active(), format, "")
	s.serveOllama(w, r, m, g, st, req.streaming())
}

func (s *Server) handleOllamaGenerate(w http.ResponseWriter, r *http.Request) {
	var req *ollamaGenerateRequest
	m, g, ok := s.accept(w, r, func(body []byte) (g *Generation, err error) {
		g, req, err = parseOllamaGenerate(body)
		return g, err
	})
	if !ok {
		return
	}
	if err := applyThinking(m, g); err != nil {
		writeError(w, err)
		return
	}
	st := s.newOllamaStream(g, true)
	if g.Messages != nil {
		st.channels = newChannels(m, g, nil)
	}
	s.serveOllama(w, r, m, g, st, req.streaming())
}

// serveOllama answers g: a stream of NDJSON chunks, or one object.
func (s *Server) serveOllama(w http.ResponseWriter, r *http.Request, m Model, g *Generation, st *ollamaStream, stream bool) {
	if !stream {
		s.answerWhole(w, r, m, g, st, func() any { return st.whole })
		return
	}
	st.sse = s.newSSEWriter(w)
	st.sse.ndjson = true
	s.generate(w, r, m, g, st, st.sse)
}

// ollamaModel is a model as /api/tags and /api/ps list it.
type ollamaModel struct {
	Name       string             `json:"name"`
	Model      string             `json:"model"`
	ModifiedAt string             `json:"modified_at,omitempty"`
	Size       int64              `json:"size,omitempty"`
	Digest     string             `json:"digest,omitempty"`
	Details    ollamaModelDetails `json:"details"`
	// meshnode's: whether this node serves it, else the peers that do.
	Local bool     `json:"local"`
	Hosts []string `json:"hosts,omitempty"`
}

type ollamaModelDetails struct {
	Format            string   `json:"format"`
	Family            string   `json:"family,omitempty"`
	Families          []string `json:"families,omitempty"`
	ParameterSize     string   `json:"parameter_size,omitempty"`
	QuantizationLevel string   `json:"quantization_level,omitempty"`
}

// ollamaModelOf describes a model as Ollama's lists do, from what this
// node knows of it: a local GGUF model's file (d, where described), a
// peer's name only.
func (s *Server) ollamaModelOf(info ModelInfo) (o ollamaModel, d ModelDescription, described bool) {
	o = ollamaModel{Name: info.ID, Model: info.ID, Local: info.Local, Details: ollamaModelDetails{Format: "gguf"}}
	for _, h := range info.Hosts {
		o.Hosts = append(o.Hosts, h.String())
	}
	if d, described = s.described(info.ID); described {
		o.Size, o.Digest = d.SizeBytes, d.Digest
		if !d.ModifiedAt.IsZero() {
			o.ModifiedAt = d.ModifiedAt.UTC().Format(time.RFC3339Nano)
		}
		o.Details.Family, o.Details.ParameterSize, o.Details.QuantizationLevel = d.Architecture, d.ParameterSize, d.Quantization
		if d.Architecture != "" {
			o.Details.Families = []string{d.Architecture}
		}
		if d.Format != "" {
			o.Details.Format = d.Format
		}
	}
	return o, d, described
}

// described is what the file of model id says of it, where this node
// serves it and it describes itself (DescribedModel).
func (s *Server) described(id string) (ModelDescription, bool) {
	if m, ok := s.registry.Local(id); ok {
		if dm, ok := m.(DescribedModel); ok {
			return dm.Describe(), true
		}
	}
	return ModelDescription{}, false
}

// handleOllamaTags is GET /api/tags: the models served here and in the
// mesh.
func (s *Server) handleOllamaTags(w http.ResponseWriter, r *http.Request) {
	models := []ollamaModel{}
	for _, info := range s.registry.List() {
		o, _, _ := s.ollamaModelOf(info)
		models = append(models, o)
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}

// handleOllamaPs is GET /api/ps: the models loaded on this node (all of
// them stay loaded until unloaded).
func (s *Server) handleOllamaPs(w http.ResponseWriter, r *http.Request) {
	models := []ollamaModel{}
	for _, info := range s.registry.List() {
		if info.Local {
			o, _, _ := s.ollamaModelOf(info)
			models = append(models, o)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}

// handleOllamaVersion is GET /api/version: meshnode's version.
func (s *Server) handleOllamaVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": s.cfg.Version})
}

// handleOllamaShow is POST /api/show: a model served here, described.
func (s *Server) handleOllamaShow(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	var req struct {
		Model   string `json:"model"`
		Name    string `json:"name"` // the older field
		Verbose bool   `json:"verbose"`
	}
	if err := decodeBody(body, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := checkFields(body, &req, "POST /api/show"); err != nil {
		writeError(w, err)
		return
	}
	name := cmp.Or(req.Model, req.Name)
	if name == "" {
		writeError(w, badRequest("model", "model is required"))
		return
	}
	m, handled := s.route(w, r, name, body)
	if handled {
		return
	}
	o, d, described := s.ollamaModelOf(ModelInfo{ID: name, Local: true})
	show := map[string]any{"details": o.Details, "modelfile": "", "parameters": "", "modified_at": o.ModifiedAt}
	caps := []string{"completion"}
	if _, ok := m.(EmbeddingModel); ok {
		caps = append(caps, "embedding")
	}
	if em, ok := m.(EncoderModel); ok {
		if ec, enc := em.EncoderCapabilities(); enc {
			caps = append([]string{}, ec...) // it generates nothing
		}
	}
	if tm, ok := m.(ToolModel); ok {
		if _, ok := tm.ToolFormat(); ok {
			caps = append(caps, "tools")
		}
	}
	if reasons(m) {
		caps = append(caps, "thinking")
	}
	show["capabilities"] = caps
	if described {
		show["template"] = d.Template
		mi := map[string]any{"general.architecture": d.Architecture, "general.parameter_count": d.Parameters}
		if d.Architecture != "" {
			mi[d.Architecture+".context_length"] = d.Context
		}
		show["model_info"] = mi
	}
	writeJSON(w, http.StatusOK, show)
}

// ollamaRoutes adds Ollama's API to mux; mesh peers (peers) reach its
// generation, embedding and model endpoints, as they reach OpenAI's.
func (s *Server) ollamaRoutes(mux *http.ServeMux, peers bool) {
	mux.HandleFunc("POST /api/chat", s.observed(s.handleOllamaChat))
	mux.HandleFunc("POST /api/generate", s.observed(s.handleOllamaGenerate))
	mux.HandleFunc("POST /api/embed", s.handleOllamaEmbed)
	mux.HandleFunc("POST /api/embeddings", s.handleOllamaEmbeddings)
	mux.HandleFunc("POST /api/show", s.handleOllamaShow)
	mux.HandleFunc("GET /api/tags", s.handleOllamaTags)
	if peers {
		return
	}
	mux.HandleFunc("GET /api/ps", s.handleOllamaPs)
	mux.HandleFunc("GET /api/version", s.handleOllamaVersion)
	for _, p := range []string{"POST /api/pull", "POST /api/push", "POST /api/create", "POST /api/copy", "DELETE /api/delete", "/api/blobs/"} {
		mux.HandleFunc(p, s.handleOllamaUnsupported)
	}
}

// handleOllamaUnsupported answers Ollama's model-management endpoints,
// which meshnode does its own way.
func (s *Server) handleOllamaUnsupported(w http.ResponseWriter, r *http.Request) {
	why := "meshnode manages its models with meshcli (meshcli pull OWNER/REPO/FILE.gguf, meshcli load NAME, meshcli unload NAME; docs/models.md)"
	writeError(w, Errorf(http.StatusNotImplemented, "invalid_request_error", "not_supported", "%s %s is not served: %s", r.Method, r.URL.Path, why))
}

// handleOllamaEmbeddings is POST /api/embeddings, Ollama's older
// endpoint, which tools still call: one prompt, answered
// {"embedding": [...]} with the pooled hidden states as they are, not
// scaled to unit length, as Ollama answers it; an empty prompt embeds
// nothing and is answered with an empty embedding (Ollama's clients load
// a model so).
func (s *Server) handleOllamaEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ollamaEmbedFields
		Prompt string `json:"prompt"`
	}
	body, ok := s.readOllamaEmbed(w, r, "/api/embeddings", &req, &req.ollamaEmbedFields)
	if !ok {
		return
	}
	if req.Prompt == "" {
		if _, handled := s.route(w, r, req.Model, body); !handled {
			writeJSON(w, http.StatusOK, map[string]any{"embedding": []float32{}})
		}
		return
	}
	res, handled := s.embed(w, r, &Embedding{Model: req.Model, Inputs: []EmbedInput{{Text: req.Prompt}}, Unnormalized: true}, body)
	if handled {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"embedding": res.Vectors[0]})
}

// ollamaEmbedFields are what both of Ollama's embedding endpoints take
// beside their input.
type ollamaEmbedFields struct {
	Model     string          `json:"model"`
	Options   json.RawMessage `json:"options"`
	KeepAlive json.RawMessage `json:"keep_alive"`
}

// readOllamaEmbed reads the body of a request to path into req, which
// embeds f, and checks f's fields; false: the refusal was written.
func (s *Server) readOllamaEmbed(w http.ResponseWriter, r *http.Request, path string, req any, f *ollamaEmbedFields) ([]byte, bool) {
	body, err := s.readBody(w, r)
	if err == nil {
		err = decodeBody(body, req)
	}
	if err == nil {
		err = checkFields(body, req, "POST "+path)
	}
	switch {
	case err != nil:
	case holdsSomething(f.Options):
		err = badRequest("options", "options are not supported on %s: an embedding samples nothing", path)
	case checkKeepAlive(f.KeepAlive) != nil:
		err = checkKeepAlive(f.KeepAlive)
	case f.Model == "":
		err = badRequest("model", "model is required")
	}
	if err != nil {
		writeError(w, err)
		return nil, false
	}
	return body, true
}

// handleOllamaEmbed is POST /api/embed: input (a string or strings)
// embedded as /v1/embeddings embeds it.
func (s *Server) handleOllamaEmbed(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ollamaEmbedFields
		Input      json.RawMessage `json:"input"`
		Truncate   *bool           `json:"truncate"`
		Dimensions *int            `json:"dimensions"`
	}
	body, ok := s.readOllamaEmbed(w, r, "/api/embed", &req, &req.ollamaEmbedFields)
	if !ok {
		return
	}
	// Ollama's truncate, true by default: an input past the context is
	// cut to fit, not refused.
	e := &Embedding{Model: req.Model, Truncate: req.Truncate == nil || *req.Truncate}
	var err error
	if e.Inputs, err = embedInputs(req.Input); err != nil {
		writeError(w, err)
		return
	}
	if d := req.Dimensions; d != nil {
		if *d < 1 {
			writeError(w, badRequest("dimensions", "dimensions must be at least 1, got %d", *d))
			return
		}
		e.Dimensions = *d
	}
	start := s.now()
	res, handled := s.embed(w, r, e, body)
	if handled {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"model": e.Model, "embeddings": res.Vectors,
		"total_duration": int64(s.now().Sub(start)), "prompt_eval_count": res.PromptTokens})
}

// ContextModel is a Model that tells its context length, in tokens
// (llama.cpp's n_ctx, in every /completion answer): without the rest of
// its description, whose file it reads.
type ContextModel interface {
	ContextLength() int
}

// DescribedModel is a Model that describes its file, for Ollama's
// /api/tags and /api/show.
type DescribedModel interface {
	Describe() ModelDescription
}

// ModelDescription is what a model's file says of it.
type ModelDescription struct {
	Format        string // "gguf"
	Architecture  string // general.architecture
	Context       int
	Parameters    uint64
	ParameterSize string // Parameters for people: "14M"
	Quantization  string // llama.cpp's file type name: "Q8_0"
	SizeBytes     int64
	Digest        string // the weights' content address, hex
	ModifiedAt    time.Time
	Template      string // the chat template the file carries
}
