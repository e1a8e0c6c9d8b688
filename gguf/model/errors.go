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
)

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsupported, fmt.Sprintf(format, args...))
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
