package hw

// Devices are the domains a serve can run on. An engine reports the ones
// its backend uses (the CPU for the CPU backend; the CPU and the GPU for
// CUDA or Metal, whose host threads drive the GPU), so that each serve is
// graded by what it used rather than by the meter's guess at start-up.
const (
	// AnyDevice is what a serve is taken to use when its engine does not
	// say: a meter must cover all of it for such a serve to be HwShunt.
	AnyDevice = DomainCPU | DomainGPU | DomainANE
)

// DeviceMeter is a [Meter] that grades a span by the devices the serve
// runs on. The steward opens spans with OpenFor where its meter offers it.
type DeviceMeter interface {
	Meter
	// OpenFor starts a span for a serve on uses (zero: [AnyDevice]). The
	// span can be HwShunt only when the meter's counters cover uses and
	// every part the serve depends on (see [Depends]) advanced across it
	// (mesh/1 §3.3: a figure from a counter that does not cover the whole
	// request, or from a frozen one, is never HwShunt).
	OpenFor(uses Domain) (Span, error)
}

// Depends reports whether a serve on uses depends on a counter part that
// reads part: one reading a device the serve runs on, system memory
// (every serve's weights and activations pass through it, so a DRAM zone
// in the figure must be live), or the whole module.
func Depends(uses, part Domain) bool {
	if uses == 0 {
		uses = AnyDevice
	}
	return part&DomainModule != 0 || part&(uses|DomainDRAM) != 0
}
