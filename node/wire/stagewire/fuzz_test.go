package stagewire

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	"github.com/meshnode/meshnode/node/wire"
)

// fuzzParse fuzzes Parse from frames of seeds, whole and cut. On every
// input Parse must not panic, must fail only with a *wire.FrameError of
// a decoding kind, and must allocate no more than about twice the input
// (every count is checked against the bytes before allocating). What it
// accepts must encode back to exactly the bytes it took: one encoding
// per message.
func fuzzParse(f *testing.F, seeds ...Message) {
	for _, s := range seeds {
		b, err := Append(nil, s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		m, n, err := Parse(b)
		runtime.ReadMemStats(&after)
		if used := after.TotalAlloc - before.TotalAlloc; used > 2*uint64(len(b))+1<<17 {
			t.Fatalf("parsing %d bytes allocated %d", len(b), used)
		}
		if err != nil {
			var fe *wire.FrameError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T) is not a *wire.FrameError", err, err)
			}
			switch fe.Kind {
			case wire.ErrOversize, wire.ErrTruncated, wire.ErrInvalidMessage:
			default:
				t.Fatalf("failed with kind %v", fe.Kind)
			}
			return
		}
		b2, err := Append(nil, m)
		if err != nil {
			t.Fatalf("accepted %v does not encode: %v", m.Kind(), err)
		}
		if !bytes.Equal(b2, b[:n]) {
			t.Fatalf("%v re-encodes differently:\n%x\n%x", m.Kind(), b[:n], b2)
		}
	})
}

func FuzzParseLoadStage(f *testing.F) { fuzzParse(f, sampleLoadStage(), sampleLoadStageRows()) }

func FuzzParseReady(f *testing.F) { fuzzParse(f, sampleReady()) }

func FuzzParseStop(f *testing.F) { fuzzParse(f, &Stop{Stage: 1}) }

func FuzzParseInventory(f *testing.F) {
	fuzzParse(f, &InventoryRequest{}, sampleInventory(), &Inventory{})
}

func FuzzParseTrim(f *testing.F) { fuzzParse(f, sampleTrim()) }

func FuzzParseActivation(f *testing.F) {
	fuzzParse(f, sampleTokens(), sampleF32(), sampleF16(), sampleWindow())
}

func FuzzParseNextToken(f *testing.F) { fuzzParse(f, sampleNextToken(), sampleNextTokenWindow()) }

func FuzzParseLogits(f *testing.F) { fuzzParse(f, sampleLogits()) }

func FuzzParseError(f *testing.F) { fuzzParse(f, sampleError(), &Error{Code: CodeBusy}) }

func FuzzParseFinish(f *testing.F) { fuzzParse(f, sampleFinish()) }

func FuzzParseReport(f *testing.F) { fuzzParse(f, sampleReport()) }
