package wire

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/wire/nodev1"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// TestFrameLayout checks the framing byte for byte against an encoding
// written out by hand: stream type, u32 LE length, protobuf.
func TestFrameLayout(t *testing.T) {
	want := []byte{0x07, 0x24, 0x00, 0x00, 0x00, 0x0a, 0x20} // PEER_LEAVING, length 36, field 1 (bytes) of 32
	want = append(want, bytes.Repeat([]byte{0x11}, 32)...)   // peer_id
	want = append(want, 0x10, 0x01)                          // field 2 (varint) gen = 1
	got, err := AppendStreamOpen([]byte{}, StreamPeerLeaving, samplePeerLeaving())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got  %x\nwant %x", got, want)
	}
	body, n, err := ParseStreamOpen(got, StreamPeerLeaving)
	if err != nil || n != len(want) || !bytes.Equal(body, want[5:]) {
		t.Fatalf("ParseStreamOpen = %x, %d, %v", body, n, err)
	}
}

func TestFrameRoundTrip(t *testing.T) {
	msgs := []proto.Message{
		sampleGossipFrame(), sampleRouteTableRequest(), sampleRouteTable(), samplePeerDown(),
		samplePeerLeaving(), sampleTunnelMap(), sampleMeshSubprotocolOpen(), sampleDirectPathRequest(),
		sampleRequestEnvelope(), sampleResponseEnvelope(), &nodev1.RouteTable{}, // an empty body
	}
	// All frames back to back on one stream, as a watch_config stream carries them.
	var stream []byte
	for _, m := range msgs {
		var err error
		if stream, err = AppendFrame(stream, m); err != nil {
			t.Fatal(err)
		}
	}
	r := iotest.HalfReader(bytes.NewReader(stream)) // short reads must not matter
	var buf []byte
	for i, m := range msgs {
		var err error
		buf, err = ReadFrame(context.Background(), r, buf[:0])
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		got := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(buf, got); err != nil || !proto.Equal(got, m) {
			t.Fatalf("frame %d: got %v (%v), want %v", i, got, err, m)
		}
		body, n, err := ParseFrame(stream)
		if err != nil || !bytes.Equal(body, buf) {
			t.Fatalf("frame %d: ParseFrame disagrees with ReadFrame: %v", i, err)
		}
		stream = stream[n:]
	}
	if _, err := ReadFrame(context.Background(), r, nil); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

// routeTableOfSize returns a RouteTable whose encoding is exactly n bytes
// (n >= 2^21+5): one mesh_id field with a 4-byte length.
func routeTableOfSize(n int) *nodev1.RouteTable {
	return &nodev1.RouteTable{MeshId: str(strings.Repeat("m", n-5))}
}

func TestAppendFrameLimit(t *testing.T) {
	atLimit := routeTableOfSize(MaxControlFrameBytes)
	if proto.Size(atLimit) != MaxControlFrameBytes {
		t.Fatalf("test message is %d bytes", proto.Size(atLimit))
	}
	b, err := AppendFrame(nil, atLimit)
	if err != nil || len(b) != 4+MaxControlFrameBytes {
		t.Fatalf("at the limit: %d bytes, %v", len(b), err)
	}

	dst := []byte("keep")
	got, err := AppendFrame(dst, routeTableOfSize(MaxControlFrameBytes+1))
	checkFrameError(t, err, ErrOversize, "")
	if string(got) != "keep" {
		t.Fatalf("dst changed to %d bytes on error", len(got))
	}
	got, err = AppendStreamOpen(dst, StreamRouteRequest, routeTableOfSize(MaxControlFrameBytes+1))
	checkFrameError(t, err, ErrOversize, "")
	if string(got) != "keep" {
		t.Fatalf("dst changed to %d bytes on error", len(got))
	}
	_, err = AppendRawFrame(nil, make([]byte, MaxControlFrameBytes+1))
	checkFrameError(t, err, ErrOversize, "body")
}

// countingWriter counts what reaches it.
type countingWriter struct{ n, calls int }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n += len(p)
	w.calls++
	return len(p), nil
}

func TestWriteFrameOversizeWritesNothing(t *testing.T) {
	var w countingWriter
	err := WriteFrame(context.Background(), &w, routeTableOfSize(MaxControlFrameBytes+1))
	checkFrameError(t, err, ErrOversize, "")
	err = WriteStreamOpen(context.Background(), &w, StreamRouteRequest, routeTableOfSize(MaxControlFrameBytes+1))
	checkFrameError(t, err, ErrOversize, "")
	if w.n != 0 {
		t.Fatalf("%d bytes written", w.n)
	}
	// And a good frame goes out in one Write.
	if err := WriteStreamOpen(context.Background(), &w, StreamGossip, sampleGossipFrame()); err != nil || w.calls != 1 {
		t.Fatalf("err %v, %d writes", err, w.calls)
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// endless yields zeros forever.
type endless struct{}

func (endless) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func header(size uint32) []byte { return binary.LittleEndian.AppendUint32(nil, size) }

func TestReadFrameOversizeReadsOnlyPrefix(t *testing.T) {
	for _, size := range []uint32{MaxControlFrameBytes + 1, 1 << 31, ^uint32(0)} {
		cr := &countingReader{r: io.MultiReader(bytes.NewReader(header(size)), endless{})}
		_, err := ReadFrame(context.Background(), cr, nil)
		checkFrameError(t, err, ErrOversize, "length prefix")
		if cr.n != 4 {
			t.Fatalf("declared %d: read %d bytes, want only the 4-byte prefix", size, cr.n)
		}
	}
	// Nothing is allocated for the body: only the error itself.
	hdr := header(^uint32(0))
	var r bytes.Reader
	allocs := testing.AllocsPerRun(100, func() {
		r.Reset(hdr)
		_, _ = ReadFrame(context.Background(), &r, nil)
	})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 100 {
		r.Reset(hdr)
		_, _ = ReadFrame(context.Background(), &r, nil)
	}
	runtime.ReadMemStats(&after)
	if perRead := (after.TotalAlloc - before.TotalAlloc) / 100; allocs > 8 || perRead > 1024 { // the error and its text, nothing sized by the prefix
		t.Fatalf("an oversize declaration costs %v allocations, %d bytes", allocs, perRead)
	}
}

func TestReadFrameAtLimit(t *testing.T) {
	body := bytes.Repeat([]byte{0x42}, MaxControlFrameBytes)
	got, err := ReadFrame(context.Background(), io.MultiReader(bytes.NewReader(header(MaxControlFrameBytes)), bytes.NewReader(body)), nil)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("a body of exactly MaxControlFrameBytes: %d bytes, %v", len(got), err)
	}
}

// TestReadFrameMemoryFollowsData: a peer that declares 8 MiB and sends a
// few bytes does not make us hold 8 MiB.
func TestReadFrameMemoryFollowsData(t *testing.T) {
	in := append(header(MaxControlFrameBytes), make([]byte, 1000)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadFrame(context.Background(), bytes.NewReader(in), nil)
	runtime.ReadMemStats(&after)
	checkFrameError(t, err, ErrTruncated, "body")
	if used := after.TotalAlloc - before.TotalAlloc; used > 2*readChunk {
		t.Fatalf("allocated %d bytes for 1000 received", used)
	}
}

func TestReadFrameTruncated(t *testing.T) {
	full, _ := AppendFrame(nil, samplePeerDown())
	for _, tc := range []struct {
		name  string
		in    []byte
		field string
	}{
		{"half a prefix", full[:2], "length prefix"},
		{"prefix only", full[:4], "body"},
		{"half a body", full[:20], "body"},
		{"one byte short", full[:len(full)-1], "body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadFrame(context.Background(), bytes.NewReader(tc.in), nil)
			checkFrameError(t, err, ErrTruncated, tc.field)
			if !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				t.Fatalf("%v: want io.ErrUnexpectedEOF and not io.EOF", err)
			}
			_, _, err = ParseFrame(tc.in)
			checkFrameError(t, err, ErrTruncated, tc.field)
		})
	}
	if _, err := ReadFrame(context.Background(), bytes.NewReader(nil), nil); err != io.EOF {
		t.Fatalf("empty stream: %v, want io.EOF", err)
	}
	_, _, err := ParseFrame(append(header(MaxControlFrameBytes+1), 0))
	checkFrameError(t, err, ErrOversize, "length prefix")
}

// A reader error that is not EOF passes through, wrapped, and is not
// mistaken for truncation.
func TestReadFrameIOError(t *testing.T) {
	boom := errors.New("stream reset")
	_, err := ReadFrame(context.Background(), iotest.ErrReader(boom), nil)
	if !errors.Is(err, boom) || errors.Is(err, ErrTruncated) {
		t.Fatalf("got %v", err)
	}
}

func TestReadFrameDeadline(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := ReadFrame(ctx, a, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want context.DeadlineExceeded", err)
	}

	// The deadline is cleared afterwards: a later read without one waits
	// for its data.
	frame, _ := AppendFrame(nil, samplePeerDown())
	go func() {
		time.Sleep(50 * time.Millisecond)
		_, _ = b.Write(frame)
	}()
	got, err := ReadFrame(context.Background(), a, nil)
	if err != nil || !bytes.Equal(got, frame[4:]) {
		t.Fatalf("read after a timed-out read: %x, %v", got, err)
	}
}

func TestReadFrameCancel(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err := ReadFrame(ctx, a, nil) // blocks in Read until cancel
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	_, err = ReadStreamType(ctx, a)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("ReadStreamType: got %v, want context.Canceled", err)
	}
}

// cancelAfter is a plain reader (no deadlines) that cancels a context once
// n bytes have been read.
type cancelAfter struct {
	r      io.Reader
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.n -= n; c.n <= 0 {
		c.cancel()
	}
	return n, err
}

func TestReadFramePlainReaderContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cr := &countingReader{r: endless{}}
	if _, err := ReadFrame(ctx, cr, nil); !errors.Is(err, context.Canceled) || cr.n != 0 {
		t.Fatalf("cancelled before reading: %v after %d bytes", err, cr.n)
	}

	// Cancelled mid-body: noticed between reads.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	in := io.MultiReader(bytes.NewReader(header(4*readChunk)), endless{})
	if _, err := ReadFrame(ctx, &cancelAfter{r: in, n: readChunk, cancel: cancel}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled mid-body: %v", err)
	}
}

func TestWriteFrameDeadline(t *testing.T) {
	a, b := net.Pipe() // nobody reads b, so writes to a block
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	err := WriteFrame(ctx, a, samplePeerDown())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want context.DeadlineExceeded", err)
	}
}

func TestReadStreamType(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want StreamType
		kind error
	}{
		{[]byte{0x01, 0xff}, StreamGossip, nil},
		{[]byte{0x04}, StreamTunnelHTTP, nil},
		{[]byte{0x0e}, StreamDirectPathRequest, nil},
		{[]byte{0x00}, 0x00, ErrWrongStreamType},
		{[]byte{0x0b}, StreamConfigSubscribe, ErrWrongStreamType},
		{[]byte{0x0c}, StreamConfigPush, ErrWrongStreamType},
		{[]byte{0x0f}, 0x0f, ErrWrongStreamType},
		{[]byte{0xff}, 0xff, ErrWrongStreamType},
		{nil, 0, ErrTruncated},
	} {
		cr := &countingReader{r: bytes.NewReader(tc.in)}
		got, err := ReadStreamType(context.Background(), cr)
		checkFrameError(t, err, tc.kind, "stream type")
		if got != tc.want || cr.n > 1 {
			t.Fatalf("%x: got %v after %d bytes, want %v", tc.in, got, cr.n, tc.want)
		}
	}
}

func TestStreamOpenTypes(t *testing.T) {
	for typ := range 256 {
		st := StreamType(typ)
		_, err := AppendStreamOpen(nil, st, samplePeerDown())
		if st.Framed() {
			checkFrameError(t, err, nil, "")
		} else {
			checkFrameError(t, err, ErrWrongStreamType, "stream type")
		}
	}
	open, _ := AppendStreamOpen(nil, StreamPeerDown, samplePeerDown())
	_, _, err := ParseStreamOpen(open, StreamPeerLeaving)
	checkFrameError(t, err, ErrWrongStreamType, "stream type")
	_, _, err = ParseStreamOpen(nil, StreamPeerDown)
	checkFrameError(t, err, ErrTruncated, "stream type")
	_, _, err = ParseStreamOpen(open[:3], StreamPeerDown)
	checkFrameError(t, err, ErrTruncated, "length prefix")
}

// TestGolden pins the exact bytes of a few stream openings and frames; a
// change here is a wire change. Regenerate with -update only on purpose.
func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  StreamType // 0: an owner-control frame, no type byte
		msg  proto.Message
	}{
		{"gossip-open", StreamGossip, sampleGossipFrame()},
		{"route-request-open", StreamRouteRequest, sampleRouteTableRequest()},
		{"tunnel-map-open", StreamTunnelMap, sampleTunnelMap()},
		{"subprotocol-open", StreamSubprotocol, sampleMeshSubprotocolOpen()},
		{"owner-control-request", 0, sampleRequestEnvelope()},
		{"owner-control-response", 0, sampleResponseEnvelope()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []byte
			var err error
			if tc.typ == 0 {
				got, err = AppendFrame(nil, tc.msg)
			} else {
				got, err = AppendStreamOpen(nil, tc.typ, tc.msg)
			}
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "golden", tc.name+".hex")
			if *update {
				writeHex(t, path, got)
			}
			want := readHex(t, path)
			if !bytes.Equal(got, want) {
				t.Fatalf("encoding changed:\ngot  %x\nwant %x", got, want)
			}
			// And the golden bytes decode to the message.
			if tc.typ != 0 {
				want = want[1:]
			}
			body, _, err := ParseFrame(want)
			if err != nil {
				t.Fatal(err)
			}
			var dec proto.Message
			switch tc.typ {
			case StreamGossip:
				dec, err = DecodeGossipFrame(body)
			case StreamRouteRequest:
				dec, err = DecodeRouteTableRequest(body)
			case StreamTunnelMap:
				dec, err = DecodeTunnelMap(body)
			case StreamSubprotocol:
				dec, err = DecodeMeshSubprotocolOpen(body)
			default:
				dec, err = DecodeOwnerControlEnvelope(body)
			}
			if err != nil || !proto.Equal(dec, tc.msg) {
				t.Fatalf("golden bytes decode to %v, %v", dec, err)
			}
		})
	}
}

func writeHex(t *testing.T, path string, b []byte) {
	t.Helper()
	var sb strings.Builder
	for len(b) > 0 {
		n := min(len(b), 32)
		sb.WriteString(hex.EncodeToString(b[:n]))
		sb.WriteByte('\n')
		b = b[n:]
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readHex(t *testing.T, path string) []byte {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := hex.DecodeString(strings.Join(strings.Fields(string(text)), ""))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}
