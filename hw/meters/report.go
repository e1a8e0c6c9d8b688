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
	// Need is what a figure must cover to be HwShunt, and why.
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
	Reason   string       `json:"reason,omitempty"`
	Liveness *hw.Liveness `json:"liveness,omitempty"`
}

// Grade says how the selected meter grades spans.
func (r Report) Grade() string {
	if r.Selected == Estimator {
		return "every span is Estimator"
	}
	return fmt.Sprintf("HwShunt for spans of %v or longer; shorter spans are Estimator", r.MinWindow)
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
	}
	how := "automatic"
	if r.Forced {
		how = "forced by config"
	}
	fmt.Fprintf(tw, "\nselected:\t%s (%s: %s)\n", r.Selected, how, r.Why)
	fmt.Fprintf(tw, "grading:\t%s\n", r.Grade())
	fmt.Fprintf(tw, "estimator:\t%s\n", r.Estimator)
	return tw.Flush()
}
