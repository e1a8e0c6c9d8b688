package toolcall

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// BenchmarkStream: the parser's cost per byte of output, fed in 4-byte
// pieces (about a token each) as a generation streams it, against the
// same text parsed whole in the same run (x_whole). A call in progress
// is re-read from its start at each piece, so a long call costs more per
// byte than text does.
func BenchmarkStream(b *testing.B) {
	var args strings.Builder
	args.WriteString(`{"items": [`)
	for i := range 60 {
		if i > 0 {
			args.WriteString(", ")
		}
		fmt.Fprintf(&args, `{"id": %d, "name": "item number %d", "tags": ["a", "b"]}`, i, i)
	}
	args.WriteString(`]}`)
	text := strings.Repeat("The weather in Paris is mild today, with a light breeze. ", 60)
	for _, tc := range []struct {
		name string
		f    Format
		out  string
	}{
		{"text", Hermes, text},
		{"hermes-call-" + fmt.Sprint(args.Len()) + "B", Hermes, "<tool_call>\n{\"name\": \"put\", \"arguments\": " + args.String() + "}\n</tool_call>"},
		{"llama3-call", Llama3, `{"name": "put", "parameters": ` + args.String() + `}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.out)))
			var streamed, whole time.Duration
			for b.Loop() {
				t0 := time.Now()
				p := NewParser(tc.f, func() string { return "call_x" })
				for i := 0; i < len(tc.out); i += 4 {
					p.Feed(tc.out[i:min(i+4, len(tc.out))])
				}
				p.Finish()
				t1 := time.Now()
				NewParser(tc.f, func() string { return "call_x" }).Parse(tc.out)
				streamed, whole = streamed+t1.Sub(t0), whole+time.Since(t1)
			}
			b.ReportMetric(float64(streamed)/float64(whole), "x_whole")
			b.ReportMetric(float64(streamed.Nanoseconds())/float64(b.N)/float64(len(tc.out)), "ns/byte_streamed")
		})
	}
}
