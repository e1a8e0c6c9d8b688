package spec

// calibration learns, for one request, how often a draft of each
// confidence stands: the draft model's probability for its own pick says
// how sure the draft is, not how often the target agrees — a more
// quantised copy of the target is right at 0.3 as at 0.9, a smaller model
// trained apart is right less often than it thinks. Counts per band of
// confidence start from a prior that takes the draft at its word, or at
// the window's acceptance estimate where that is higher, and follow what
// the request's verified drafts show, so a draft's confidence is priced
// at what it has been worth. The floor matters for a draft unsure of
// itself but right: its bands would otherwise start near their low
// confidence, and a band is tested only where the drafts before it in
// its window were taken — in a short request, never enough to learn that
// it stands (the built-in Q8_0 drafting for its 1B inflation, modeled
// over three 64-token requests: 2.9× without the floor, 4.5× with it).
// The counts come from the request's own rounds, so a replay makes the
// same decisions.
type calibration struct {
	proposed, accepted [calBands]float64
}

const (
	// calBands divides confidence [0, 1] into bands of equal width.
	calBands = 8
	// calPrior is the prior's weight in drafts: a band moves toward what
	// its drafts do after a few of them.
	calPrior = 2
	// calDecay halves a band's counts once it has this many drafts, so
	// the estimate follows the text.
	calDecay = 32
	// calExplore is how many of its drafts a band must have had tested
	// before its estimate may refuse one.
	calExplore = 3
)

// band is conf's band; a confidence of 0 (unknown, or below the lowest
// band's top) is the lowest band.
func band(conf float64) int {
	return min(max(int(conf*calBands), 0), calBands-1)
}

// stands is the estimated probability that a draft of confidence conf
// stands, given that the drafts before it in its window stood; floor is
// the least its band's prior may be (the window's acceptance estimate).
func (c *calibration) stands(conf, floor float64) float64 {
	b := band(conf)
	prior := max((float64(b)+0.5)/calBands, floor)
	return float64(float64(calPrior*prior)+c.accepted[b]) / float64(calPrior+c.proposed[b])
}

// unexplored reports whether conf's band has had fewer than calExplore
// drafts tested.
func (c *calibration) unexplored(conf float64) bool {
	return c.proposed[band(conf)] < calExplore
}

// record counts a verified window's drafts: each up to and including the
// first rejected one was tested on its own (those after it fell with it,
// and say nothing of their confidence).
func (c *calibration) record(drafts []Draft, accepted int) {
	for i, d := range drafts {
		if i > accepted {
			return
		}
		b := band(d.Conf)
		c.proposed[b]++
		if i < accepted {
			c.accepted[b]++
		}
		if c.proposed[b] >= calDecay {
			c.proposed[b], c.accepted[b] = c.proposed[b]/2, c.accepted[b]/2
		}
	}
}
