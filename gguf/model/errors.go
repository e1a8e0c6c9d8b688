package model

import (
	"errors"
	"fmt"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrUnsupported: the file holds an architecture, a tensor type or a
	// feature this package does not run. The wrapping error names it.
	ErrUnsupported = errors.New("model: unsupported")
	// ErrInvalid: the file's hyperparameters or tensors contradict each
	// other (a missing tensor, a wrong shape, an impossible size).
	ErrInvalid = errors.New("model: invalid model file")
	// ErrContext: the sequence would not fit the session's context.
	ErrContext = errors.New("model: context length exceeded")
	// ErrToken: a token id outside the vocabulary.
	ErrToken = errors.New("model: token id out of range")
	// ErrRange: a layer range that is empty or outside the model.
	ErrRange = errors.New("model: bad layer range")
	// ErrStage: the call needs a part of the model this stage does not
	// run (token ids on a later stage, logits on an earlier one, a whole
	// forward pass on any stage).
	ErrStage = errors.New("model: not this stage's part of the model")
)

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsupported, fmt.Sprintf(format, args...))
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// stageErr says which part of the model a stage lacks for what.
func (m *Model) stageErr(what string) error {
	return fmt.Errorf("%w: %s, on a stage running layers %v of %d", ErrStage, what, m.Range(), m.cfg.Layers)
}
