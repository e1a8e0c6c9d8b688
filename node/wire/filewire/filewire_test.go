package filewire

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/wire"
)

func sampleFile(name string) File {
	f := File{Name: name, Size: 15_512_672}
	for i := range f.SHA256 {
		f.SHA256[i], f.Weights[i] = byte(i), byte(255-i)
	}
	return f
}

func samples() []Message {
	var w [32]byte
	w[0], w[31] = 0xaa, 0x55
	return []Message{
		&Get{Name: "qwen2.5-0.5b-q4_k_m.gguf", Offset: 1 << 33},
		&Get{Weights: w},
		&List{},
		&Listing{},
		&Listing{Files: []File{sampleFile("a.gguf"), sampleFile("b.gguf")}},
		&Header{File: sampleFile("a.gguf"), Offset: 4096},
		&Error{Code: CodeRefused, Text: `this node serves no files to mesh peers (serve_files = false)`},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, m := range samples() {
		b, err := Append([]byte("prefix"), m)
		if err != nil {
			t.Fatalf("%v: %v", m.Kind(), err)
		}
		got, n, err := Parse(b[len("prefix"):])
		if err != nil || n != len(b)-len("prefix") {
			t.Fatalf("%v: parse: %v (%d of %d bytes)", m.Kind(), err, n, len(b))
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("%v: got %+v, want %+v", m.Kind(), got, m)
		}
		var buf bytes.Buffer
		if err := Write(context.Background(), &buf, m); err != nil {
			t.Fatal(err)
		}
		if r, err := Read(context.Background(), &buf); err != nil || !reflect.DeepEqual(r, m) {
			t.Fatalf("%v: Read %+v, %v", m.Kind(), r, err)
		}
	}
}

// TestRefusals: what a peer must never send is refused, each with a
// *wire.FrameError naming the field; an encoder refuses to write it.
func TestRefusals(t *testing.T) {
	for _, m := range []Message{
		&Get{Name: "../etc/passwd"},
		&Get{Name: ".hidden.gguf"},
		&Get{Name: strings.Repeat("a", MaxName+1)},
		&Get{Name: "a\x00b"},
		&Header{File: sampleFile("a.gguf"), Offset: 15_512_673},
		&Error{Text: "no code"},
		&Error{Code: CodeBad, Text: strings.Repeat("x", MaxErrorText+1)},
		&Listing{Files: make([]File, MaxFiles+1)},
	} {
		if b, err := Append([]byte{1, 2}, m); err == nil || len(b) != 2 {
			t.Errorf("%v %+v encoded", m.Kind(), m)
		}
	}
	frame := func(body ...byte) []byte {
		return append(binary.LittleEndian.AppendUint32(nil, uint32(len(body))), body...)
	}
	get, _ := Append(nil, &Get{Name: "a.gguf"})
	for name, b := range map[string][]byte{
		"empty body":        frame(),
		"unknown kind":      frame(0x7f),
		"bad by":            frame(byte(KindGet), 3, 0, 0, 0, 0, 0, 0, 0, 0),
		"trailing byte":     frame(append(bytes.Clone(get[4:]), 0)...),
		"name past body":    frame(byte(KindGet), byName, 200, 'a'),
		"count past bytes":  frame(byte(KindListing), 0xff, 0x03),
		"count over limit":  frame(byte(KindListing), 0x01, 0x04),
		"zero error code":   frame(byte(KindError), 0, 0, 0, 0),
		"long error":        frame(byte(KindError), 1, 0, 0xff, 0xff),
		"non-UTF-8 error":   frame(byte(KindError), 1, 0, 1, 0, 0xff),
		"oversize frame":    binary.LittleEndian.AppendUint32(nil, wire.MaxControlFrameBytes+1),
		"truncated header":  frame(byte(KindHeader), 6, 'a', '.', 'g', 'g', 'u', 'f'),
		"slash in get name": frame(byte(KindGet), byName, 3, 'a', '/', 'b', 0, 0, 0, 0, 0, 0, 0, 0),
	} {
		_, _, err := Parse(b)
		var fe *wire.FrameError
		if !errors.As(err, &fe) {
			t.Errorf("%s: got %v, want a *wire.FrameError", name, err)
		}
	}
}

// FuzzParse: on every input Parse must not panic, must fail only with a
// *wire.FrameError of a decoding kind, must allocate no more than about
// twice the input, and what it accepts must encode back to exactly the
// bytes it took.
func FuzzParse(f *testing.F) {
	for _, s := range samples() {
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
