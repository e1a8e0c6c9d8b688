package node

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
)

// localModel is a model this node serves: the engine the steward routes
// to, and the text side the API needs around it.
type localModel interface {
	// Name is what clients ask for; it is also the engine's recipe.
	Name() string
	Engine() engine.Engine
	// Prompt renders a chat (through the model's template) or passes raw
	// text through, and tokenizes it as the model expects. A prompt that
	// needs more than limit tokens is refused with a *promptTooLongError
	// as soon as that is known, before or while it is tokenized, so that
	// a huge prompt costs little more than reading it.
	Prompt(g *api.Generation, limit int) (text string, ids []uint32, err error)
	// Decoder returns a streaming detokenizer for one generation.
	Decoder() decoder
	ContextLength() int
	// Facts describes the model for gossip and /v1/models; nil for a model
	// that is not a GGUF file.
	Facts() *gguf.Facts
	// Backend names the kernels it runs on ("cpu", "cuda", "metal"): the steward
	// backend is named for it.
	Backend() string
	// Size is the model's size on disk in bytes, and Path its file ("" and
	// 0 when it has none).
	Size() int64
	Path() string
	Close() error
}

// promptTooLongError refuses a prompt that needs more tokens than it may
// have. AtLeast is as far as the count got: the whole count, or a lower
// bound where counting stopped early.
type promptTooLongError struct {
	AtLeast, Limit int
}

func (e *promptTooLongError) Error() string {
	return fmt.Sprintf("the prompt needs at least %d tokens, more than the %d it may have", e.AtLeast, e.Limit)
}

// tokenizeWithin tokenizes text, refusing it with a *promptTooLongError
// once it is known to need more than limit tokens: from its length alone
// before any work (tokenizer.MinTokens), or while it is encoded
// (tokenizer.EncodeLimit), so that neither the time nor the memory of
// encoding a huge prompt is spent.
func tokenizeWithin(tok *tokenizer.Tokenizer, text string, opt tokenizer.EncodeOptions, limit int) ([]uint32, error) {
	if n := tok.MinTokens(text, opt); n > limit {
		return nil, &promptTooLongError{AtLeast: n, Limit: limit}
	}
	ids, complete := tok.EncodeLimit(text, opt, limit)
	if !complete || len(ids) > limit {
		return nil, &promptTooLongError{AtLeast: len(ids), Limit: limit}
	}
	return ids, nil
}

// checkPromptIDs refuses a prompt given as token ids that a model of
// vocab tokens cannot be given, or that needs more than limit tokens.
func checkPromptIDs(ids []uint32, vocab, limit int) error {
	if len(ids) > limit {
		return &promptTooLongError{AtLeast: len(ids), Limit: limit}
	}
	for i, id := range ids {
		if int64(id) >= int64(vocab) {
			return fmt.Errorf("prompt token %d (at %d) is outside the vocabulary of %d", id, i, vocab)
		}
	}
	return nil
}

// decoder turns token ids into text as they arrive, holding back bytes
// of a character split across tokens.
type decoder interface {
	Next(tok uint32) string
	Flush() string
}

// referenceModel serves mesh/1's deterministic reference engine as model
// "mesh-reference": the node's answer when it has no GGUF to serve. It has
// no vocabulary, so it reads text as bytes and writes its tokens as words
// of a fixed lexicon; the words mean nothing, the receipt does.
type referenceModel struct {
	eng *engine.Reference
}

func newReferenceModel(fidelity receipt.Fidelity, ujPerToken uint64) *referenceModel {
	return &referenceModel{eng: engine.NewReference(engine.ReferenceConfig{Fidelity: fidelity, UJPerToken: ujPerToken})}
}

func (m *referenceModel) Name() string          { return engine.ReferenceRecipe }
func (m *referenceModel) Engine() engine.Engine { return m.eng }
func (m *referenceModel) ContextLength() int    { return 1 << 16 }
func (m *referenceModel) Facts() *gguf.Facts    { return nil }
func (m *referenceModel) Size() int64           { return 0 }
func (m *referenceModel) Path() string          { return "" }
func (m *referenceModel) Backend() string       { return "cpu" }
func (m *referenceModel) Close() error          { return nil }
func (m *referenceModel) Decoder() decoder      { return referenceDecoder{} }

func (m *referenceModel) Prompt(g *api.Generation, limit int) (string, []uint32, error) {
	if g.PromptIDs != nil {
		// Its vocabulary is the bytes.
		return "", g.PromptIDs, checkPromptIDs(g.PromptIDs, 256, limit)
	}
	if g.Suffix != "" || g.Infill != nil {
		return "", nil, errNoFIM
	}
	text := g.Prompt
	if g.Messages != nil {
		text = transcript(g.Messages)
	}
	if !utf8.ValidString(text) {
		return "", nil, fmt.Errorf("prompt is not valid UTF-8")
	}
	if len(text) > limit { // a token per byte
		return "", nil, &promptTooLongError{AtLeast: len(text), Limit: limit}
	}
	ids := make([]uint32, len(text))
	for i := 0; i < len(text); i++ {
		ids[i] = uint32(text[i])
	}
	return text, ids, nil
}

// transcript is the plain chat rendering for models without a template:
// one "role: content" line per message, then the assistant's turn.
func transcript(msgs []api.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(m.Content)
		b.WriteString("\n")
	}
	b.WriteString("assistant:")
	return b.String()
}

// referenceLexicon renders reference tokens: 64 short words, so output
// reads as a stream of words whatever the ids.
var referenceLexicon = strings.Fields(`mesh node joule token steward receipt route seal
	chain ledger meter watt quantum edge silicon model prompt answer signal relay
	peer gossip tunnel budget ceiling floor fidelity grant witness journal nonce
	digest weight layer tensor kernel cache prefix stream packet frame socket
	window counter sample probe estimate measure honest proof record epoch clock
	cycle spark current volt charge field wave pulse light bit byte`)

type referenceDecoder struct{}

func (referenceDecoder) Next(tok uint32) string {
	return " " + referenceLexicon[int(tok)%len(referenceLexicon)]
}

func (referenceDecoder) Flush() string { return "" }
