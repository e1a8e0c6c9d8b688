package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/chat"
	"github.com/meshnode/meshnode/gguf/chat/think"
	"github.com/meshnode/meshnode/gguf/chat/toolcall"
	"github.com/meshnode/meshnode/gguf/spec"
	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/engine/ggufengine"
)

// ggufModel is a GGUF file served by the CPU engine.
type ggufModel struct {
	m     *ggufengine.Model
	facts gguf.Facts
	draft string // the configured draft: a model's name, "lookup" or ""
}

// openGGUF loads one model: it maps the file, hashes it for the weights
// digest and prepares the engine (ggufengine logs the progress line).
func openGGUF(s modelSpec, backend string, sessions int, memBytes uint64, log *slog.Logger) (localModel, error) {
	if enc, err := ggufengine.IsEncoder(s.Path); err != nil {
		return nil, err
	} else if enc {
		return openEncoder(s, log)
	}
	ujPerToken := s.UJPerToken
	if ujPerToken == 0 {
		// No figure configured: derive one from the model's size, so the
		// router prices a bigger model dearer. A CPU reads every weight
		// byte once per token; at roughly 1 nJ per byte moved and
		// multiplied, that is the file's size in bytes / 1000, in µJ.
		st, err := os.Stat(s.Path)
		if err != nil {
			return nil, err
		}
		ujPerToken = max(1, uint64(st.Size())/1000)
	}
	m, err := ggufengine.Load(s.Path, ggufengine.Config{
		Name:        s.Name,
		Fidelity:    s.fidelity(),
		UJPerToken:  ujPerToken,
		Threads:     s.Threads,
		Context:     s.Context,
		MemoryBytes: memBytes,
		Sessions:    sessions,
		Backend:     backend,
		Log:         log,
		Draft:       s.draftPath,
		DraftMax:    s.DraftMax,
		// A split model's windows are priced by the files whatever this
		// says (its draft is not measured).
		DraftPricesFromFiles: s.DraftPrices == DraftPricesFiles,
	})
	if err != nil {
		return nil, err
	}
	return &ggufModel{m: m, facts: m.Facts(), draft: s.Draft}, nil
}

func (g *ggufModel) Name() string          { return g.m.Name() }
func (g *ggufModel) Engine() engine.Engine { return g.m.Engine() }
func (g *ggufModel) ContextLength() int    { return g.m.ContextLength() }
func (g *ggufModel) Facts() *gguf.Facts    { return &g.facts }
func (g *ggufModel) Size() int64           { return g.m.Size() }
func (g *ggufModel) Path() string          { return g.m.Path() }
func (g *ggufModel) Backend() string       { return g.m.Backend() }
func (g *ggufModel) Close() error          { return g.m.Close() }

// EmbeddingSupport implements embedder.
func (g *ggufModel) EmbeddingSupport() error {
	_, err := g.m.Pooling()
	return err
}

// Dimensions implements embedder.
func (g *ggufModel) Dimensions() int { return g.m.Dimensions() }

// Tokenizer implements embedder.
func (g *ggufModel) Tokenizer() *tokenizer.Tokenizer { return g.m.Tokenizer() }

// Embed implements embedder.
func (g *ggufModel) Embed(ctx context.Context, inputs [][]uint32) ([][]float32, error) {
	return g.m.Embed(ctx, inputs)
}

// Pooled implements embedder.
func (g *ggufModel) Pooled(ctx context.Context, inputs [][]uint32) ([][]float32, error) {
	return g.m.Pooled(ctx, inputs)
}

// Reranks implements reranker: a Qwen3-style reranker (rank pooling).
func (g *ggufModel) Reranks() bool { return g.m.Reranks() }

// RerankTemplate implements reranker.
func (g *ggufModel) RerankTemplate() string { return g.m.RerankTemplate() }

// Rank implements reranker.
func (g *ggufModel) Rank(ctx context.Context, inputs [][]uint32) ([]float32, error) {
	return g.m.Rank(ctx, inputs)
}

// Draft names the model's speculative proposer as a new sampled request
// names it, with the prices its windows are priced at: "" for none, or
// where sampled speculation does not pay here
// (ggufengine.Model.SampledDraft).
func (g *ggufModel) Draft() string { return g.m.SampledDraft() }

// DraftName is the draft as configured ("" for none).
func (g *ggufModel) DraftName() string { return g.draft }

// DraftPrices are the prices its windows are priced by, and when they
// were measured (at load; zero: the files' prices).
func (g *ggufModel) DraftPrices() (spec.Prices, time.Time) { return g.m.DraftPrices() }

// Slots is how many generations the engine batches at once.
func (g *ggufModel) Slots() int { return g.m.Slots() }

// Prompt renders chats through the model's template (whose control tokens
// are parsed as such) and tokenizes raw text as text, refusing a prompt
// that needs more than limit tokens as soon as that is known.
func (g *ggufModel) Prompt(gen *api.Generation, limit int) (string, []uint32, error) {
	return renderPrompt(g.m.Tokenizer(), g.m.Template(), gen, limit)
}

// renderPrompt is Prompt over a model file's tokenizer and chat template,
// for a model served whole or split.
func renderPrompt(tok *tokenizer.Tokenizer, tmpl *chat.Template, gen *api.Generation, limit int) (string, []uint32, error) {
	if gen.PromptIDs != nil {
		return "", gen.PromptIDs, checkPromptIDs(gen.PromptIDs, tok.NumTokens(), limit)
	}
	if gen.Infill != nil {
		ids, err := infillPrompt(tok, gen, limit)
		return "", ids, err
	}
	if gen.Suffix != "" {
		ids, err := fillInTheMiddle(tok, gen.Prompt, gen.Suffix, limit)
		return "", ids, err
	}
	opt := tokenizer.EncodeOptions{AddSpecial: true}
	text := gen.Prompt
	if gen.Messages != nil {
		format := toolcall.Detect(tmpl)
		// A template that shows only an assistant's content (LFM2's
		// earlier ones) would drop its past calls: they go into the
		// content as the model writes them, where the format is known.
		inContent := !strings.Contains(tmpl.Source(), "tool_calls")
		msgs := make([]chat.Message, len(gen.Messages))
		for i, m := range gen.Messages {
			msgs[i] = chat.Message{Role: m.Role, Content: m.Content, Reasoning: m.Reasoning, ToolCallID: m.ToolCallID, Name: m.Name}
			var calls []toolcall.Call
			for _, c := range m.ToolCalls {
				msgs[i].ToolCalls = append(msgs[i].ToolCalls, chat.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
				calls = append(calls, toolcall.Call{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
			}
			if written, ok := toolcall.Render(format, calls); ok && inContent {
				msgs[i].Content, msgs[i].ToolCalls = m.Content+written, nil
			}
		}
		var err error
		if text, err = tmpl.Render(chat.Input{Messages: msgs, Tools: gen.Tools, AddGenerationPrompt: true, ReasoningEffort: gen.ReasoningEffort, Thinking: gen.Think,
			// A template whose calls cannot be read back is polyfilled.
			Generic: format == toolcall.Generic}); err != nil {
			var rejected *chat.RejectedError
			if errors.As(err, &rejected) {
				return "", nil, fmt.Errorf("the model's chat template rejects this conversation: %s", rejected.Reason)
			}
			return "", nil, err
		}
		// A prefill continues the rendered conversation, as a message's
		// content is read into it.
		text += gen.Prefill
		opt.ParseSpecial = true
	}
	ids, err := tokenizeWithin(tok, text, opt, limit)
	return text, ids, err
}

// fillInTheMiddle is the prompt that has the model write what goes
// between prefix and suffix, in the prefix-suffix-middle order llama.cpp's
// infill uses: BOS where the vocabulary adds it, then FIM_PRE, the
// prefix, FIM_SUF, the suffix and FIM_MID, the texts tokenized as they are
// (no control token read from them, nothing added). It needs more than
// limit tokens: a *promptTooLongError.
func fillInTheMiddle(tok *tokenizer.Tokenizer, prefix, suffix string, limit int) ([]uint32, error) {
	pre, suf, mid, ok := tok.FIM()
	if !ok {
		return nil, errNoFIM
	}
	var ids []uint32
	if tok.AddsBOS() {
		ids = append(ids, tok.BOS())
	}
	plain := tokenizer.EncodeOptions{}
	ids = append(tok.AppendEncode(append(ids, pre), prefix, plain), suf)
	ids = append(tok.AppendEncode(ids, suffix, plain), mid)
	if len(ids) > limit {
		return nil, &promptTooLongError{AtLeast: len(ids), Limit: limit}
	}
	return ids, nil
}

// errNoFIM: the model has no fill-in-the-middle tokens.
var errNoFIM = errors.New("the model has no fill-in-the-middle tokens (tokenizer.ggml.fim_pre_token_id and the like, or their texts), so it cannot take a suffix")

// newTokenDecoder is a generation's streaming detokeniser: its tokens
// continue the prompt's text.
func newTokenDecoder(tok *tokenizer.Tokenizer) decoder {
	return tokenDecoder{tok.NewDecoder(tokenizer.DecodeOptions{Continue: true})}
}

// tokenPiece is a token's bytes as its log-probability names it: its
// text, a control token's by its name; nothing for an id outside the
// vocabulary (the engine emits none).
func tokenPiece(tok *tokenizer.Tokenizer, id uint32) []byte {
	p, _ := tok.Piece(id, true)
	return []byte(p)
}

// Piece implements tokenPieces.
func (g *ggufModel) Piece(id uint32) []byte { return tokenPiece(g.m.Tokenizer(), id) }

func (g *ggufModel) Decoder() decoder { return newTokenDecoder(g.m.Tokenizer()) }

// isHarmony reports whether tok is a harmony vocabulary (gpt-oss): its
// replies come on channels (<|channel|>analysis<|message|>…). The
// tokenizer makes those markers user-defined tokens, as llama.cpp does,
// so they decode as text and the API can split the reply.
func isHarmony(tok *tokenizer.Tokenizer) bool {
	for _, m := range []string{"<|channel|>", "<|message|>"} {
		if _, ok := tok.Lookup(m); !ok {
			return false
		}
	}
	return true
}

// Harmony implements api.ReasoningModel.
func (g *ggufModel) Harmony() bool { return isHarmony(g.m.Tokenizer()) }

// Thinking is the reasoning block the model's chat template has it write
// (thinkingOf).
func (g *ggufModel) Thinking() (think.Tags, bool, bool) { return thinkingOf(g.m.Template()) }

// thinkingOf is the reasoning block of a model with template tmpl: the
// tags its template writes (think.Detect), and whether it has a switch
// for it (enable_thinking).
func thinkingOf(tmpl *chat.Template) (tags think.Tags, switchable, ok bool) {
	if tmpl == nil {
		return think.Tags{}, false, false
	}
	tags, ok = think.Detect(tmpl.Source())
	return tags, ok && tmpl.TakesThinkingSwitch(), ok
}

// ToolFormat is how the model's chat template has it write tool calls: a
// harmony model's on its commentary channel, whatever its template says.
func (g *ggufModel) ToolFormat() (toolcall.Format, bool) {
	if isHarmony(g.m.Tokenizer()) {
		return toolcall.Harmony, true
	}
	return toolcall.Detect(g.m.Template()), true
}

// ReplyDecoder is the decoder of a reply read back for calls or for a
// reasoning block.
func (g *ggufModel) ReplyDecoder(tools, thinking bool) decoder {
	return newToolDecoder(g.m.Tokenizer(), replyMarkers(g.m.Template(), tools, thinking))
}

// replyMarkers are the control tokens a chat reply is read back by: a
// format's call markers (tools) and the reasoning block's tags
// (thinking).
func replyMarkers(tmpl *chat.Template, tools, thinking bool) []string {
	var markers []string
	if tools {
		markers = toolcall.Detect(tmpl).Markers()
	}
	if tags, _, ok := thinkingOf(tmpl); ok && thinking {
		markers = append(markers, tags.Open, tags.Close)
	}
	return markers
}

// newToolDecoder is newTokenDecoder that writes the control tokens which
// mark a format's calls (toolcall.Format.Markers: [TOOL_CALLS],
// <|python_tag|>, ...) as their text, as llama.cpp does for a request
// with tools: otherwise they decode to nothing and the calls cannot be
// told from text.
func newToolDecoder(tok *tokenizer.Tokenizer, markers []string) decoder {
	keep := map[uint32]string{}
	for _, m := range markers {
		if id, ok := tok.Lookup(m); ok && tok.IsControl(id) {
			keep[id] = m
		}
	}
	d := newTokenDecoder(tok).(tokenDecoder)
	if len(keep) == 0 {
		return d
	}
	return markerDecoder{tokenDecoder: d, keep: keep}
}

type markerDecoder struct {
	tokenDecoder
	keep map[uint32]string
}

func (m markerDecoder) Next(tok uint32) string {
	if text, ok := m.keep[tok]; ok {
		return m.d.Flush() + text
	}
	return m.tokenDecoder.Next(tok)
}

// tokenDecoder adapts the tokenizer's streaming decoder; the engine only
// emits ids of its own vocabulary, so a decode error cannot happen and
// would only drop that token's text.
type tokenDecoder struct{ d *tokenizer.Decoder }

func (t tokenDecoder) Next(tok uint32) string {
	s, _ := t.d.Next(tok)
	return s
}

func (t tokenDecoder) Flush() string { return t.d.Flush() }
