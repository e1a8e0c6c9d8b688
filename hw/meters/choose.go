package meters

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshnode/meshnode/hw"
)

// choose probes the candidates that have a counter and picks the meter.
func choose(ctx context.Context, cfg Config, forced []string, cands []candidate, plat platform, log *slog.Logger) *Selection {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	need := plat.need
	rep := Report{Need: need, NeedWhy: plat.why, Forced: forced != nil}
	byName := map[string]*candidate{}
	var probed []*candidate
	for i := range cands {
		c := &cands[i]
		byName[c.name] = c
		if c.counter != nil {
			probed = append(probed, c)
		}
	}
	estimatorOnly := slices.Equal(forced, []string{Estimator})
	live := map[string]hw.Liveness{}
	if len(probed) > 0 && !estimatorOnly {
		for i, l := range probe(ctx, cfg, probed) {
			live[probed[i].name] = l
		}
	}

	// Pick: the forced set, or the first covering set of live counters in
	// order of preference, singles before pairs.
	var chosen []string
	var why string
	switch {
	case estimatorOnly:
		why = "forced by config"
	case forced != nil:
		chosen, why = checkSet(forced, byName, live, need)
		if chosen == nil {
			why = "forced meter " + strings.Join(forced, "+") + " not usable: " + why
		} else {
			why = "forced by config"
		}
	default:
		chosen, why = best(byName, live, need)
	}

	sel := &Selection{clock: cfg.Clock, log: log}
	model := estimatorModel(cfg, chosen, live, plat.soc)
	if chosen == nil {
		sel.Meter = hw.NewEstimatorMeter(model, cfg.Clock)
		rep.Selected = Estimator
	} else {
		parts := make([]hw.Counter, len(chosen))
		for i, n := range chosen {
			c := byName[n]
			parts[i] = c.counter
			if c.serve != nil {
				sel.serves = append(sel.serves, c.serve)
			}
		}
		sel.counter = hw.Combine(parts...)
		sel.Meter = hw.NewCounterMeter(sel.counter, model, cfg.Clock, log)
		rep.Selected = sel.counter.Name()
		rep.MinWindow = sel.counter.MinWindow()
	}
	rep.Why, rep.Estimator = why, model
	rep.Serves = serveGrades(sel.counter, chosen, live)

	for _, c := range cands {
		rep.Counters = append(rep.Counters, counterReport(c, live, log))
		switch {
		case c.close == nil:
		case slices.Contains(chosen, c.name):
			sel.closers = append(sel.closers, c.close)
		default:
			c.close() // not chosen: release it now
		}
	}
	sel.Report = rep
	log.Info("energy meter selected", "meter", rep.Selected, "need", need, "window", rep.MinWindow, "estimator", model.String(), "why", why)
	return sel
}

// counterReport is one counter's line, logging once why a counter that
// exists is not used.
func counterReport(c candidate, live map[string]hw.Liveness, log *slog.Logger) CounterReport {
	r := CounterReport{Name: c.name, Detail: c.detail}
	switch {
	case c.counter == nil && c.absent:
		r.State, r.Reason = StateAbsent, errText(c.err)
		log.Debug("energy counter absent", "counter", c.name, "reason", r.Reason)
	case c.counter == nil:
		r.State, r.Reason = StateUnusable, errText(c.err)
		log.Warn("energy counter present but unusable: serves are not graded by it", "counter", c.name, "err", c.err)
	default:
		r.Domains, r.Window = c.counter.Domains(), c.counter.MinWindow()
		l, probed := live[c.name]
		switch {
		case !probed:
			r.State, r.Reason = StateNotProbed, "not probed: the meter is forced to the estimator"
		case l.Live:
			r.State, r.Reason, r.Liveness = StateLive, l.Reason, &l
		default:
			r.State, r.Reason, r.Liveness = StateNotLive, l.Reason, &l
			log.Warn("energy counter is not live: serves are not graded by it", "counter", c.name, "reason", l.Reason)
		}
	}
	return r
}

// byDevices are the device sets a backend runs on today: the CPU, and the
// CPU with a GPU (CUDA, Metal).
var byDevices = []hw.Domain{hw.DomainCPU, hw.DomainCPU | hw.DomainGPU}

// serveGrades says how the selected counter (nil: the estimator) grades a
// serve on each of byDevices, as hw.CounterMeter's OpenFor does.
func serveGrades(counter hw.Counter, chosen []string, live map[string]hw.Liveness) []ServeGrade {
	var out []ServeGrade
	for _, uses := range byDevices {
		g := ServeGrade{Uses: uses, Grade: hw.Estimator.String()}
		switch covers := hw.Domain(0); {
		case counter == nil:
			g.Why = "no counter is selected"
		case !counter.Domains().Covers(uses):
			covers = counter.Domains()
			g.Why = fmt.Sprintf("%s covers %v, not %v (mesh/1 §3.3: a figure that does not cover the whole request is never HwShunt)",
				counter.Name(), covers, uses&^covers)
		default:
			for _, n := range chosen {
				for _, p := range live[n].Parts {
					if hw.Depends(uses, p.Domains) {
						g.DependsOn = append(g.DependsOn, p.Name)
					}
				}
			}
			g.Grade = hw.HwShunt.String()
			g.Why = fmt.Sprintf("spans of %v or longer across which each of %s advanced", counter.MinWindow(), strings.Join(g.DependsOn, ", "))
		}
		out = append(out, g)
	}
	return out
}

// probe runs the liveness probe over the candidates, with their samplers
// serving for its duration.
func probe(ctx context.Context, cfg Config, cands []*candidate) []hw.Liveness {
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	counters := make([]hw.Counter, len(cands))
	for i, c := range cands {
		counters[i] = c.counter
		if c.serve != nil {
			wg.Go(func() { c.serve(pctx) })
		}
	}
	// Let samplers start before the probe's clock moves, so that their
	// first ticks fall inside it.
	for _, c := range cands {
		if s, ok := c.counter.(interface{ Serving() bool }); ok && c.serve != nil {
			for deadline := time.Now().Add(time.Second); !s.Serving() && time.Now().Before(deadline); {
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
	res := hw.Probe(ctx, counters, hw.ProbeConfig{Clock: cfg.Clock, Burn: cfg.Burn, Duration: cfg.ProbeDuration})
	stop()
	wg.Wait()
	return res
}

// checkSet says whether the named counters are all live and together
// cover need.
func checkSet(names []string, byName map[string]*candidate, live map[string]hw.Liveness, need hw.Domain) ([]string, string) {
	var covered hw.Domain
	for _, n := range names {
		c := byName[n]
		if c == nil || c.counter == nil {
			reason := "not found"
			if c != nil && c.err != nil {
				reason = errText(c.err)
			}
			return nil, n + " unavailable (" + reason + ")"
		}
		if l := live[n]; !l.Live {
			return nil, n + " not live: " + l.Reason
		}
		covered |= c.counter.Domains()
	}
	if !covered.Covers(need) {
		return nil, fmt.Sprintf("%s covers %v, a request uses %v (mesh/1 §3.3: a partial figure is never HwShunt)", strings.Join(names, "+"), covered, need)
	}
	return names, ""
}

// best is the first set of live counters, in order of preference, that
// covers need: single counters first, then pairs.
func best(byName map[string]*candidate, live map[string]hw.Liveness, need hw.Domain) ([]string, string) {
	var ok []string
	for _, n := range preference {
		if l, probed := live[n]; probed && l.Live {
			ok = append(ok, n)
		}
	}
	for _, n := range ok {
		if set, _ := checkSet([]string{n}, byName, live, need); set != nil {
			return set, "the preferred live counter covering " + need.String()
		}
	}
	for i := range ok {
		for j := i + 1; j < len(ok); j++ {
			if set, _ := checkSet([]string{ok[i], ok[j]}, byName, live, need); set != nil {
				return set, "live counters combined to cover " + need.String()
			}
		}
	}
	if len(ok) == 0 {
		return nil, "no live energy counter"
	}
	var covered hw.Domain
	for _, n := range ok {
		covered |= byName[n].counter.Domains()
	}
	return nil, fmt.Sprintf("live counters (%s) cover %v, a request uses %v (mesh/1 §3.3: a partial figure is never HwShunt)", strings.Join(ok, ", "), covered, need)
}

// estimatorModel is the power the estimator bills by: config, else the
// chosen counters' busy power in the probe, else a default.
func estimatorModel(cfg Config, chosen []string, live map[string]hw.Liveness, soc bool) hw.PowerModel {
	if cfg.EstimatorWatts > 0 {
		return hw.PowerModel{Watts: cfg.EstimatorWatts, Source: "config"}
	}
	var busy float64
	for _, n := range chosen {
		busy += live[n].BusyWatts
	}
	if busy > 0 {
		return hw.PowerModel{Watts: busy, Source: "calibrated: busy power of " + strings.Join(chosen, "+") + " in the start-up probe"}
	}
	if soc {
		return hw.PowerModel{Watts: defaultSoCWatts, Source: "default for an SoC; set the estimator's watts in config"}
	}
	return hw.PowerModel{Watts: defaultHostWatts, Source: "default for a host; set the estimator's watts in config"}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
