package host

import (
	"strings"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/metal/mtl"
)

// metalFacts refines an Apple Silicon GPU's facts with what Metal says of
// it: its name, whether its memory is unified, and its working set
// (recommendedMaxWorkingSetSize), which is also what the driver holds
// back from the system's memory (ReservedBytes, the figure gossip
// carries).
func metalFacts(g *hw.GPU, info mtl.Info) {
	if info.Name != "" {
		g.Name = info.Name
		if !strings.Contains(info.Name, "GPU") {
			g.Name += " GPU"
		}
	}
	g.Unified = info.Unified
	g.WorkingSetBytes = info.WorkingSet
	if info.WorkingSet > 0 && info.WorkingSet < g.VRAMBytes {
		g.ReservedBytes = g.VRAMBytes - info.WorkingSet
	}
}
