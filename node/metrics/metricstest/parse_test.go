package metricstest_test

import (
	"bytes"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/metrics"
	"github.com/meshnode/meshnode/node/metrics/metricstest"
)

// exposition is what a node's metrics write after a few observations.
func exposition() []byte {
	m := metrics.New("test")
	m.ObserveRequest("m", metrics.RouteLocal, 200)
	m.ObserveTTFT("m", time.Millisecond)
	m.ObserveEnergy("Estimator", 1000, 2)
	var b bytes.Buffer
	m.WritePrometheus(&b)
	return b.Bytes()
}

// TestParseRejects: each malformed exposition is refused, naming why.
func TestParseRejects(t *testing.T) {
	for _, c := range []struct{ name, text, why string }{
		{"empty line", "a 1\n\nb 2\n", "empty line"},
		{"no value", "a\n", "no value"},
		{"bad name", "1a 1\n", "metric name"},
		{"bad value", "a one\n", "value"},
		{"two spaces", "a  1\n", "value"},
		{"unquoted label", "a{b=c} 1\n", "not quoted"},
		{"unterminated label", "a{b=\"c} 1\n", "unterminated"},
		{"bad escape", "a{b=\"\\t\"} 1\n", "escape"},
		{"label twice", "a{b=\"1\",b=\"2\"} 1\n", "twice"},
		{"series twice", "a{b=\"1\"} 1\na{b=\"1\"} 2\n", "given twice"},
		{"family split", "a 1\nb 1\na{x=\"1\"} 1\n", "split apart"},
		{"TYPE after samples", "a 1\n# TYPE a counter\n", "after its samples"},
		{"TYPE twice", "# TYPE a counter\n# TYPE a counter\n", "twice"},
		{"unknown type", "# TYPE a meter\n", "type"},
		{"negative counter", "# TYPE a counter\na -1\n", "value"},
		{"histogram without +Inf", "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", "+Inf"},
		{"histogram not cumulative", "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n", "fewer"},
		{"histogram count disagrees", "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n", "_count"},
		{"histogram without sum", "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 2\n", "_sum"},
		{"line too long", "a{b=\"" + strings.Repeat("x", metricstest.MaxLine) + "\"} 1\n", "too long"},
	} {
		_, err := metricstest.Parse(strings.NewReader(c.text))
		if err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: err = %v, want one saying %q", c.name, err, c.why)
		}
	}
}

// TestParseReads: a well-formed exposition's values, labels, types and
// help come back as written.
func TestParseReads(t *testing.T) {
	s, err := metricstest.Parse(strings.NewReader("# HELP a An a.\n# TYPE a counter\na{x=\"q\\\"\\\\\\n\", y=\"2\"} 3 1700000000\nb +Inf\n"))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := s.Value("a", "x", "q\"\\\n", "y", "2"); !ok || v != 3 {
		t.Fatalf("a = %v, %v", v, ok)
	}
	if s.Types["a"] != "counter" || s.Help["a"] != "An a." || s.Sum("a", "y", "2") != 3 {
		t.Fatalf("parsed %+v", s)
	}
	if _, err := metricstest.Parse(bytes.NewReader(exposition())); err != nil {
		t.Fatalf("a node's exposition: %v", err)
	}
}

// FuzzParse: Parse never panics, and every sample it takes, written out
// again, reads back the same.
func FuzzParse(f *testing.F) {
	f.Add(exposition())
	f.Add([]byte("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1.5\nh_count 2\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := metricstest.Parse(bytes.NewReader(b))
		if err != nil {
			return
		}
		samples := slices.Clone(s.Samples)
		slices.SortStableFunc(samples, func(a, b metricstest.Sample) int { return strings.Compare(a.Name, b.Name) })
		var out bytes.Buffer
		for _, sm := range samples {
			out.WriteString(sm.Name + "{")
			for i, k := range slices.Sorted(maps.Keys(sm.Labels)) {
				if i > 0 {
					out.WriteByte(',')
				}
				v := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(sm.Labels[k])
				out.WriteString(k + `="` + v + `"`)
			}
			out.WriteString("} " + strconv.FormatFloat(sm.Value, 'g', -1, 64) + "\n")
		}
		again, err := metricstest.Parse(&out)
		if err != nil {
			t.Fatalf("the samples written again do not parse: %v\n%s", err, out.String())
		}
		for _, sm := range samples {
			v, ok := again.Value(sm.Name, pairs(sm.Labels)...)
			if !ok || !(v == sm.Value || math.IsNaN(v) && math.IsNaN(sm.Value)) {
				t.Fatalf("%s%v: %v, read again %v (%v)", sm.Name, sm.Labels, sm.Value, v, ok)
			}
		}
	})
}

func pairs(m map[string]string) []string {
	var kv []string
	for k, v := range m {
		kv = append(kv, k, v)
	}
	return kv
}
