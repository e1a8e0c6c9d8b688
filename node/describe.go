package node

import (
	"os"

	"github.com/meshnode/meshnode/node/api"
)

// ContextLength implements api.ContextModel.
func (s *servedModel) ContextLength() int { return s.in.m.ContextLength() }

// Describe implements api.DescribedModel: what the model's file says of
// it, for Ollama's /api/tags and /api/show. The digest is the weights'
// content address (the receipt's weights_digest), not Ollama's SHA-256.
func (s *servedModel) Describe() api.ModelDescription {
	m := s.in.m
	d := api.ModelDescription{Context: s.ContextLength(), SizeBytes: m.Size()}
	if f := m.Facts(); f != nil {
		d.Format, d.Architecture, d.Quantization = "gguf", f.Architecture, f.QuantizationType
		d.Parameters, d.ParameterSize = f.ParameterCount, f.ParameterSize
	}
	if p := m.Path(); p != "" {
		if fi, err := os.Stat(p); err == nil {
			d.ModifiedAt = fi.ModTime()
		}
	}
	if t, ok := m.(tokenizing); ok && t.Template() != nil {
		d.Template = t.Template().Source()
	}
	if w, ok := m.Engine().Weights(); ok {
		d.Digest = w.Digest.String()
	}
	return d
}
