package meters

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshnode/meshnode/hw"
)

// Counter states in a report.
const (
	StateAbsent    = "absent"     // nothing of this kind on the machine
	StateUnusable  = "unusable"   // present, but cannot be opened or read
	StateNotLive   = "not live"   // readable, but not seen advancing under load
	StateLive      = "live"       // seen advancing under load
	StateNotProbed = "not probed" // the meter was forced to the estimator
)

// Report is what `meshnode meters` prints: every counter looked for, what
// became of it, and the meter chosen.
type Report struct {
	// Need is what the machine showed a request may use, and why: the
	// counters are chosen to cover it. Each serve is then graded by the
	// devices its own backend runs on (Serves), which the machine may not
	// have shown (a CUDA GPU whose NVML is missing).
	Need    hw.Domain `json:"need"`
	NeedWhy string    `json:"need_why"`
	// Counters are in the order they were looked for.
	Counters []CounterReport `json:"counters"`
	// Selected is the meter's name ("rapl+nvml", "estimator").
	Selected string `json:"selected"`
	// Forced is true when config chose the meter.
	Forced bool `json:"forced"`
	// Why explains the choice.
	Why string `json:"why"`
	// MinWindow is the selected meter's window: shorter spans are
	// Estimator. Zero for the estimator.
	MinWindow time.Duration `json:"min_window_ns"`
	// Estimator bills short spans, failed reads, and everything when no
	// counter is selected.
	Estimator hw.PowerModel `json:"estimator"`
	// Serves says how a serve is graded by the devices its backend runs
	// on: a serve on the CPU, and one on the CPU and a GPU (CUDA, Metal).
	// A receipt's grade is its serve's line here, or Estimator for a span
	// shorter than MinWindow or one a part stalled across.
	Serves []ServeGrade `json:"serves"`
}

// ServeGrade is how the selected meter grades a serve on some devices.
type ServeGrade struct {
	// Uses is the devices the serve's backend runs on.
	Uses hw.Domain `json:"uses"`
	// Grade is the best a span can get: "HwShunt" or "Estimator".
	Grade string `json:"grade"`
	// Why explains the grade.
	Why string `json:"why"`
	// DependsOn lists the counter parts that must advance across a span
	// for it to be HwShunt (see hw.Depends).
	DependsOn []string `json:"depends_on,omitempty"`
}

// CounterReport is one counter's line.
type CounterReport struct {
	Name    string        `json:"name"`
	State   string        `json:"state"`
	Domains hw.Domain     `json:"domains"`
	Window  time.Duration `json:"window_ns"`
	// Detail says what was found: zones, devices, rails.
	Detail string `json:"detail,omitempty"`
	// Reason says why it is in its state.
	Reason string `json:"reason,omitempty"`
	// Liveness is what the probe saw, with each part's own verdict and
	// domains in Liveness.Parts (one part, named for the counter, where
	// the counter reads one source).
	Liveness *hw.Liveness `json:"liveness,omitempty"`
}

// Grade says how the selected meter grades spans.
func (r Report) Grade() string {
	if r.Selected == Estimator {
		return "every span is Estimator"
	}
	return fmt.Sprintf("HwShunt for spans of %v or longer on devices the counters cover (below); shorter spans are Estimator", r.MinWindow)
}

// WriteText prints the report for people.
func (r Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "a request uses:\t%v (%s)\n\n", r.Need, r.NeedWhy)
	fmt.Fprintln(tw, "COUNTER\tSTATE\tCOVERS\tWINDOW\tDETAIL")
	for _, c := range r.Counters {
		covers, window := "-", "-"
		if c.Domains != 0 {
			covers = c.Domains.String()
		}
		if c.Window > 0 {
			window = c.Window.String()
		}
		var detail []string
		for _, s := range []string{c.Detail, c.Reason} {
			if s != "" {
				detail = append(detail, s)
			}
		}
		if l := c.Liveness; l != nil && (l.IdleWatts > 0 || l.BusyWatts > 0) {
			detail = append(detail, fmt.Sprintf("idle %.1f W, busy %.1f W", l.IdleWatts, l.BusyWatts))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Name, c.State, covers, window, strings.Join(detail, "; "))
		// A counter of several parts lists each: one frozen GPU or DRAM
		// zone is why the counter is not live, or why a span stalled.
		if l := c.Liveness; l != nil && (len(l.Parts) > 1 || len(l.Parts) == 1 && l.Parts[0].Name != c.Name) {
			for _, p := range l.Parts {
				state := StateNotLive
				if p.Live {
					state = StateLive
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\t\t%s\n", p.Name, state, p.Domains, p.Reason)
			}
		}
	}
	how := "automatic"
	if r.Forced {
		how = "forced by config"
	}
	fmt.Fprintf(tw, "\nselected:\t%s (%s: %s)\n", r.Selected, how, r.Why)
	fmt.Fprintf(tw, "grading:\t%s\n", r.Grade())
	fmt.Fprintf(tw, "estimator:\t%s\n", r.Estimator)
	if len(r.Serves) > 0 {
		fmt.Fprintln(tw)
	}
	for _, g := range r.Serves {
		fmt.Fprintf(tw, "a serve on %v\t%s\t%s\n", g.Uses, g.Grade, g.Why)
	}
	return tw.Flush()
}
