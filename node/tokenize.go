package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"

	"github.com/meshnode/meshnode/gguf/chat"
	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node/api"
)

// tokenizing is a local model with a GGUF vocabulary (served whole or
// split), whose tokenizer the API lends out, and its chat template.
type tokenizing interface {
	Tokenizer() *tokenizer.Tokenizer
	Template() *chat.Template
}

// tokenizerOf is the model's tokenizer, or the API's answer for a model
// that has none (the reference engine hashes ids and has no text).
func (s *servedModel) tokenizerOf() (*tokenizer.Tokenizer, error) {
	if t, ok := s.in.m.(tokenizing); ok {
		return t.Tokenizer(), nil
	}
	e := api.Errorf(http.StatusBadRequest, "invalid_request_error", "unsupported_model", "model %q has no tokenizer (only a GGUF model has one)", s.in.m.Name())
	e.Param = "model"
	return nil, e
}

// Tokenize implements api.TokenizingModel.
func (s *servedModel) Tokenize(text string, addSpecial, parseSpecial bool) ([]uint32, error) {
	tok, err := s.tokenizerOf()
	if err != nil {
		return nil, err
	}
	return tok.Encode(text, tokenizer.EncodeOptions{AddSpecial: addSpecial, ParseSpecial: parseSpecial}), nil
}

// Piece implements api.TokenizingModel: llama.cpp's token_to_piece with
// special tokens rendered.
func (s *servedModel) Piece(id uint32) ([]byte, error) {
	tok, err := s.tokenizerOf()
	if err != nil {
		return nil, err
	}
	if n := tok.NumTokens(); int64(id) >= int64(n) {
		return nil, fmt.Errorf("token %d is outside the vocabulary of %d", id, n)
	}
	p, err := tok.Piece(id, true)
	return []byte(p), err
}

// TokenizerInfo implements api.TokenizingModel.
func (s *servedModel) TokenizerInfo() (api.TokenizerInfo, error) {
	tok, err := s.tokenizerOf()
	if err != nil {
		return api.TokenizerInfo{}, err
	}
	text := func(id uint32) *string {
		if t, err := tok.Text(id); err == nil { // NoToken is out of range
			return &t
		}
		return nil
	}
	info := api.TokenizerInfo{Class: "gguf", BOSToken: text(tok.BOS()), EOSToken: text(tok.EOS()), UNKToken: text(tok.UNK()),
		AddBOS: tok.AddsBOS(), ModelMaxLength: s.in.m.ContextLength(), VocabSize: tok.NumTokens()}
	// The template the file carries (one llama.cpp reads as a built-in
	// format included), not a format's bare name or the plain
	// transcript, which stand for no template text.
	// An embedding model has none.
	if tmpl := s.in.m.(tokenizing).Template(); tmpl != nil {
		if src := tmpl.Source(); tmpl.Kind() != "transcript" && tmpl.Kind() != "builtin:"+src {
			info.ChatTemplate = &src
		}
	}
	return info, nil
}

// Tokenizer implements tokenizing.
func (sm *splitModel) Tokenizer() *tokenizer.Tokenizer { return sm.tok }

// Template implements tokenizing.
func (sm *splitModel) Template() *chat.Template { return sm.tmpl }

// Template implements tokenizing.
func (g *ggufModel) Template() *chat.Template { return g.m.Template() }

// Render implements api.TemplateModel: the prompt text Prepare would
// tokenize for g and its length in tokens, however long (a prompt past
// the context is shown, not refused: nothing is served).
func (s *servedModel) Render(ctx context.Context, g *api.Generation) (string, int, error) {
	_, leave, err := s.in.gate.enter(ctx)
	if err != nil {
		return "", 0, s.draining(err)
	}
	defer leave()
	text, ids, err := s.in.m.Prompt(g, math.MaxInt)
	if e := (*api.Error)(nil); errors.As(err, &e) {
		return "", 0, e // the model's own answer (an embedding model's refusal)
	}
	if err != nil {
		return "", 0, api.Errorf(http.StatusBadRequest, "invalid_request_error", "invalid_prompt", "%v", err)
	}
	return text, len(ids), nil
}
