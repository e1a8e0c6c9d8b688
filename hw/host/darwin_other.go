//go:build !darwin

package host

import (
	"errors"

	"github.com/meshnode/meshnode/hw"
)

func darwinFacts(*hw.Facts) error { return errors.New("host: not macOS") }
