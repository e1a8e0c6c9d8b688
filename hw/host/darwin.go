//go:build darwin

package host

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/meshnode/meshnode/hw"
)

func darwinFacts(f *hw.Facts) error {
	brand, err := unix.Sysctl("machdep.cpu.brand_string")
	if err != nil {
		return fmt.Errorf("sysctl machdep.cpu.brand_string: %w", err)
	}
	memsize, err := unix.SysctlUint64("hw.memsize")
	if err != nil {
		return fmt.Errorf("sysctl hw.memsize: %w", err)
	}
	model, _ := unix.Sysctl("hw.model")
	level, err := unix.SysctlUint32("kern.memorystatus_level")
	if err != nil {
		level = 101 // unknown: leave AvailableBytes zero
	}
	appleFacts(f, brand, model, memsize, level)
	return nil
}
