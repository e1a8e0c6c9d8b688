//go:build darwin

package host

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/metal/mtl"
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
	if len(f.GPUs) == 1 {
		// The GPU as Metal sees it: its name and working set.
		if d, err := mtl.SystemDefault(); err == nil {
			metalFacts(&f.GPUs[0], d.Info())
			d.Close()
		}
	}
	return nil
}
