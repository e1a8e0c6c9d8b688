// Package metricstest reads the Prometheus text exposition format
// (version 0.0.4) strictly, for tests that scrape a node's /metrics: a
// malformed line, a family split apart, a series given twice, a TYPE after
// its samples or a histogram whose buckets do not add up is an error, not
// a value.
package metricstest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// MaxLine bounds one line of an exposition.
const MaxLine = 64 << 10

// Sample is one series' value.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Scrape is a parsed exposition.
type Scrape struct {
	Samples []Sample
	// Types and Help are each family's TYPE and HELP, where given.
	Types map[string]string
	Help  map[string]string
}

// Parse reads an exposition strictly.
func Parse(r io.Reader) (*Scrape, error) {
	p := parser{s: &Scrape{Types: map[string]string{}, Help: map[string]string{}}, seen: map[string]bool{}, series: map[string]bool{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), MaxLine)
	n := 0
	for sc.Scan() {
		n++
		if err := p.line(sc.Text()); err != nil {
			return nil, fmt.Errorf("line %d %q: %w", n, sc.Text(), err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	if err := p.s.checkHistograms(); err != nil {
		return nil, err
	}
	return p.s, nil
}

type parser struct {
	s      *Scrape
	family string          // the family of the lines being read
	seen   map[string]bool // families whose lines have begun
	series map[string]bool // every series given, by name and labels
}

var errSyntax = errors.New("malformed")

func (p *parser) line(l string) error {
	if l == "" {
		return fmt.Errorf("%w: empty line", errSyntax)
	}
	if strings.HasPrefix(l, "#") {
		return p.comment(l)
	}
	sm, err := parseSample(l)
	if err != nil {
		return err
	}
	fam := p.familyOf(sm.Name)
	if err := p.enter(fam); err != nil {
		return err
	}
	key := sm.Name + canonical(sm.Labels)
	if p.series[key] {
		return fmt.Errorf("series %s given twice", key)
	}
	p.series[key] = true
	if t := p.s.Types[fam]; (t == "counter" || t == "histogram") && (sm.Value < 0 || math.IsNaN(sm.Value)) {
		return fmt.Errorf("%s %s: value %v", t, sm.Name, sm.Value)
	}
	p.s.Samples = append(p.s.Samples, sm)
	return nil
}

// enter moves to family fam's lines: it is an error to come back to a
// family whose lines have ended.
func (p *parser) enter(fam string) error {
	if fam == p.family {
		return nil
	}
	if p.seen[fam] {
		return fmt.Errorf("family %s split apart", fam)
	}
	p.family = fam
	p.seen[fam] = true
	return nil
}

func (p *parser) comment(l string) error {
	fields := strings.SplitN(l, " ", 4)
	if len(fields) < 3 || fields[0] != "#" || (fields[1] != "HELP" && fields[1] != "TYPE") {
		return nil // a plain comment
	}
	name := fields[2]
	if !validName(name) {
		return fmt.Errorf("%w: metric name %q", errSyntax, name)
	}
	if p.seen[name] && p.family != name {
		return fmt.Errorf("%s for %s after its samples", fields[1], name)
	}
	rest := ""
	if len(fields) == 4 {
		rest = fields[3]
	}
	switch fields[1] {
	case "TYPE":
		if _, ok := p.s.Types[name]; ok {
			return fmt.Errorf("TYPE of %s given twice", name)
		}
		if p.family == name && p.hasSamples(name) {
			return fmt.Errorf("TYPE of %s after its samples", name)
		}
		switch rest {
		case "counter", "gauge", "histogram", "summary", "untyped":
		default:
			return fmt.Errorf("%w: type %q", errSyntax, rest)
		}
		p.s.Types[name] = rest
	case "HELP":
		if _, ok := p.s.Help[name]; ok {
			return fmt.Errorf("HELP of %s given twice", name)
		}
		p.s.Help[name] = rest
	}
	return p.enter(name)
}

func (p *parser) hasSamples(fam string) bool {
	for _, s := range p.s.Samples {
		if p.familyOf(s.Name) == fam {
			return true
		}
	}
	return false
}

// familyOf is the family a sample name belongs to: a histogram's or a
// summary's _bucket, _sum and _count belong to it.
func (p *parser) familyOf(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if t := p.s.Types[base]; t == "histogram" || (t == "summary" && suffix != "_bucket") {
				return base
			}
		}
	}
	return name
}

// parseSample reads `name{label="value",…} value [timestamp]`.
func parseSample(l string) (Sample, error) {
	end := strings.IndexAny(l, "{ ")
	if end < 0 {
		return Sample{}, fmt.Errorf("%w: no value", errSyntax)
	}
	sm := Sample{Name: l[:end], Labels: map[string]string{}}
	if !validName(sm.Name) {
		return Sample{}, fmt.Errorf("%w: metric name %q", errSyntax, sm.Name)
	}
	rest := l[end:]
	if rest[0] == '{' {
		var err error
		if rest, err = parseLabels(rest[1:], sm.Labels); err != nil {
			return Sample{}, err
		}
	}
	fields := strings.Split(strings.TrimPrefix(rest, " "), " ")
	if !strings.HasPrefix(rest, " ") || len(fields) < 1 || len(fields) > 2 {
		return Sample{}, fmt.Errorf("%w: want one space, a value and at most a timestamp", errSyntax)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return Sample{}, fmt.Errorf("%w: value %q", errSyntax, fields[0])
	}
	if len(fields) == 2 {
		if _, err := strconv.ParseInt(fields[1], 10, 64); err != nil {
			return Sample{}, fmt.Errorf("%w: timestamp %q", errSyntax, fields[1])
		}
	}
	sm.Value = v
	return sm, nil
}

// parseLabels reads `label="value",…}` into into and returns what
// follows the closing brace. Blanks may stand around the labels, as
// Prometheus' own parser takes them.
func parseLabels(s string, into map[string]string) (string, error) {
	for {
		s = strings.TrimLeft(s, " \t")
		if strings.HasPrefix(s, "}") {
			return s[1:], nil
		}
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return "", fmt.Errorf("%w: label without a value", errSyntax)
		}
		name := s[:eq]
		if !validLabel(name) {
			return "", fmt.Errorf("%w: label name %q", errSyntax, name)
		}
		if _, dup := into[name]; dup {
			return "", fmt.Errorf("label %s given twice", name)
		}
		s = s[eq+1:]
		if !strings.HasPrefix(s, `"`) {
			return "", fmt.Errorf("%w: label %s: value not quoted", errSyntax, name)
		}
		var v strings.Builder
		i := 1
		for ; ; i++ {
			if i >= len(s) {
				return "", fmt.Errorf("%w: label %s: unterminated value", errSyntax, name)
			}
			c := s[i]
			if c == '"' {
				break
			}
			if c == '\n' {
				return "", fmt.Errorf("%w: label %s: raw newline", errSyntax, name)
			}
			if c == '\\' {
				i++
				if i >= len(s) {
					return "", fmt.Errorf("%w: label %s: unterminated escape", errSyntax, name)
				}
				switch s[i] {
				case '\\', '"':
					c = s[i]
				case 'n':
					c = '\n'
				default:
					return "", fmt.Errorf("%w: label %s: escape \\%c", errSyntax, name, s[i])
				}
			}
			v.WriteByte(c)
		}
		into[name] = v.String()
		s = strings.TrimLeft(s[i+1:], " \t")
		switch {
		case strings.HasPrefix(s, ","):
			s = s[1:]
		case strings.HasPrefix(s, "}"):
		default:
			return "", fmt.Errorf("%w: after label %s", errSyntax, name)
		}
	}
}

func validName(s string) bool {
	for i, c := range []byte(s) {
		if !(c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return s != ""
}

func validLabel(s string) bool { return validName(s) && !strings.Contains(s, ":") }

// canonical renders labels in name order.
func canonical(labels map[string]string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range slices.Sorted(maps.Keys(labels)) {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", k, labels[k])
	}
	b.WriteByte('}')
	return b.String()
}

// checkHistograms holds every histogram series to the format: buckets
// with le, cumulative, ending in +Inf, whose count equals _count, and a
// _sum.
func (s *Scrape) checkHistograms() error {
	for fam, t := range s.Types {
		if t != "histogram" {
			continue
		}
		type series struct {
			buckets    map[float64]float64
			count, sum *float64
		}
		byLabels := map[string]*series{}
		get := func(labels map[string]string) *series {
			k := canonical(labels)
			if byLabels[k] == nil {
				byLabels[k] = &series{buckets: map[float64]float64{}}
			}
			return byLabels[k]
		}
		for _, sm := range s.Samples {
			switch sm.Name {
			case fam + "_bucket":
				le, ok := sm.Labels["le"]
				if !ok {
					return fmt.Errorf("histogram %s: a bucket without le", fam)
				}
				ub, err := strconv.ParseFloat(le, 64)
				if err != nil {
					return fmt.Errorf("histogram %s: le %q", fam, le)
				}
				rest := maps.Clone(sm.Labels)
				delete(rest, "le")
				get(rest).buckets[ub] = sm.Value
			case fam + "_count":
				v := sm.Value
				get(sm.Labels).count = &v
			case fam + "_sum":
				v := sm.Value
				get(sm.Labels).sum = &v
			case fam:
				return fmt.Errorf("histogram %s: a sample of the family's own name", fam)
			}
		}
		for k, h := range byLabels {
			if h.count == nil || h.sum == nil {
				return fmt.Errorf("histogram %s%s: no _count or _sum", fam, k)
			}
			inf, ok := h.buckets[math.Inf(1)]
			if !ok || inf != *h.count {
				return fmt.Errorf("histogram %s%s: +Inf bucket %v, _count %v", fam, k, inf, *h.count)
			}
			prev := 0.0
			for _, ub := range slices.Sorted(maps.Keys(h.buckets)) {
				if h.buckets[ub] < prev {
					return fmt.Errorf("histogram %s%s: bucket le=%v holds %v, fewer than the one below", fam, k, ub, h.buckets[ub])
				}
				prev = h.buckets[ub]
			}
		}
	}
	return nil
}

// Value is the series name with exactly these labels (name, value, …).
func (s *Scrape) Value(name string, labels ...string) (float64, bool) {
	want := pairs(labels)
	for _, sm := range s.Samples {
		if sm.Name == name && maps.Equal(sm.Labels, want) {
			return sm.Value, true
		}
	}
	return 0, false
}

// Sum adds up every series name whose labels include these (name,
// value, …): 0 when there is none.
func (s *Scrape) Sum(name string, labels ...string) float64 {
	want := pairs(labels)
	total := 0.0
	for _, sm := range s.Samples {
		if sm.Name != name {
			continue
		}
		match := true
		for k, v := range want {
			if sm.Labels[k] != v {
				match = false
			}
		}
		if match {
			total += sm.Value
		}
	}
	return total
}

// Series are the samples called name.
func (s *Scrape) Series(name string) []Sample {
	var out []Sample
	for _, sm := range s.Samples {
		if sm.Name == name {
			out = append(out, sm)
		}
	}
	return out
}

func pairs(kv []string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}
