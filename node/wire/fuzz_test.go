package wire

import (
	"bytes"
	"context"
	"errors"
	"io"
	"runtime"
	"testing"
	"testing/iotest"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/wire/nodev1"
)

var deterministic = proto.MarshalOptions{Deterministic: true}

// fuzzDecoder fuzzes one decoder, seeded with the encodings of seeds. On
// every input the decoder must not panic, must fail only with a
// *FrameError of a known kind, and must allocate no more than its decode
// budget allows. What it accepts must re-encode to bytes it accepts again
// as an equal message, and re-encode to the same bytes from there.
func fuzzDecoder[M proto.Message](f *testing.F, decode func([]byte) (M, error), seeds ...M) {
	for _, s := range seeds {
		b, err := deterministic.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		if len(b) > 1 {
			f.Add(b[:len(b)/2])
		}
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m M
		var err error
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		m, err = decode(b)
		runtime.ReadMemStats(&after)
		if used := after.TotalAlloc - before.TotalAlloc; used > MaxDecodedBytes {
			t.Fatalf("decoding %d bytes allocated %d", len(b), used)
		}
		if err != nil {
			var fe *FrameError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T) is not a *FrameError", err, err)
			}
			switch fe.Kind {
			case ErrOversize, ErrBadGeneration, ErrInvalidMessage:
			default:
				t.Fatalf("decoder failed with kind %v", fe.Kind)
			}
			return
		}
		b2, err := deterministic.Marshal(m)
		if err != nil {
			t.Fatalf("accepted message does not encode: %v", err)
		}
		m2, err := decode(b2)
		if err != nil {
			t.Fatalf("re-encoded message rejected: %v", err)
		}
		if !proto.Equal(m, m2) {
			t.Fatalf("decode→encode→decode changed the message:\n%v\n%v", m, m2)
		}
		b3, err := deterministic.Marshal(m2)
		if err != nil || !bytes.Equal(b2, b3) {
			t.Fatalf("encoding is not stable: %x vs %x (%v)", b2, b3, err)
		}
	})
}

func FuzzDecodeGossipFrame(f *testing.F) {
	bad := sampleGossipFrame()
	bad.Peers[0].HttpPort = nil
	loads := sampleGossipFrame()
	loads.Peers[0].MeshnodeModelLoad = sampleModelLoads()
	fuzzDecoder(f, DecodeGossipFrame, sampleGossipFrame(), bad, loads, &nodev1.GossipFrame{Gen: 1, SenderId: id(1)})
}

func FuzzDecodeRouteTableRequest(f *testing.F) {
	fuzzDecoder(f, DecodeRouteTableRequest, sampleRouteTableRequest(), &nodev1.RouteTableRequest{Gen: 1})
}

func FuzzDecodeRouteTable(f *testing.F) {
	fuzzDecoder(f, DecodeRouteTable, sampleRouteTable(), &nodev1.RouteTable{Gen: 2})
}

func FuzzDecodePeerDown(f *testing.F) {
	fuzzDecoder(f, DecodePeerDown, samplePeerDown())
}

func FuzzDecodePeerLeaving(f *testing.F) {
	fuzzDecoder(f, DecodePeerLeaving, samplePeerLeaving())
}

func FuzzDecodeTunnelMap(f *testing.F) {
	fuzzDecoder(f, DecodeTunnelMap, sampleTunnelMap())
}

func FuzzDecodeMeshSubprotocolOpen(f *testing.F) {
	fuzzDecoder(f, DecodeMeshSubprotocolOpen, sampleMeshSubprotocolOpen())
}

func FuzzDecodeDirectPathRequest(f *testing.F) {
	fuzzDecoder(f, DecodeDirectPathRequest, sampleDirectPathRequest())
}

func FuzzDecodeOwnerControlEnvelope(f *testing.F) {
	fuzzDecoder(f, DecodeOwnerControlEnvelope,
		sampleRequestEnvelope(), sampleResponseEnvelope(), HandshakeEnvelope(sampleOwnership()),
		ErrorEnvelope(nodev1.OwnerControlErrorCode_OWNER_CONTROL_ERROR_CODE_CONTROL_UNAVAILABLE, "busy", 9))
}

// streamSeeds are byte streams of frames, whole and cut.
func streamSeeds(f *testing.F) {
	var stream []byte
	for _, m := range []proto.Message{samplePeerDown(), sampleRouteTable(), &nodev1.RouteTable{}, sampleRequestEnvelope()} {
		stream, _ = AppendFrame(stream, m)
		f.Add(stream)
		f.Add(stream[:len(stream)-1])
	}
	f.Add(header(MaxControlFrameBytes + 1))
	f.Add([]byte{1, 2})
}

// FuzzParseFrame: ParseFrame either takes a whole frame that re-frames to
// the same bytes, or fails with ErrTruncated or ErrOversize.
func FuzzParseFrame(f *testing.F) {
	streamSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		body, n, err := ParseFrame(b)
		if err != nil {
			if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrOversize) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		again, err := AppendRawFrame(nil, body)
		if err != nil || !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-framing %x gave %x, %v", b[:n], again, err)
		}
	})
}

// FuzzReadFrame: reading frames off a stream, in arbitrarily short reads,
// yields what ParseFrame finds in the same bytes, and ends the way the
// bytes end: io.EOF at a frame boundary, ErrTruncated inside a frame,
// ErrOversize at a declared length over the limit.
func FuzzReadFrame(f *testing.F) {
	streamSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		r := iotest.OneByteReader(bytes.NewReader(b))
		rest := b
		var buf []byte
		for {
			var err error
			buf, err = ReadFrame(context.Background(), r, buf[:0])
			body, n, perr := ParseFrame(rest)
			switch {
			case err == io.EOF:
				if len(rest) != 0 {
					t.Fatalf("io.EOF with %d bytes left", len(rest))
				}
				return
			case err != nil:
				var fe, pe *FrameError
				if !errors.As(err, &fe) || !errors.As(perr, &pe) || fe.Kind != pe.Kind {
					t.Fatalf("ReadFrame: %v; ParseFrame: %v", err, perr)
				}
				return
			case perr != nil || !bytes.Equal(buf, body):
				t.Fatalf("ReadFrame read %x; ParseFrame %x, %v", buf, body, perr)
			}
			rest = rest[n:]
		}
	})
}

// FuzzParseStreamOpen: the opening of a stream held in a slice is the type
// byte asked for and then exactly the frame ParseFrame finds after it, or
// fails with ErrWrongStreamType, ErrTruncated or ErrOversize.
func FuzzParseStreamOpen(f *testing.F) {
	for _, m := range []proto.Message{sampleGossipFrame(), samplePeerDown()} {
		b, err := AppendStreamOpen(nil, StreamGossip, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte{byte(StreamPeerDown), 0, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		body, n, err := ParseStreamOpen(b, StreamGossip)
		if err != nil {
			if !errors.Is(err, ErrWrongStreamType) && !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrOversize) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		frame, m, perr := ParseFrame(b[1:])
		if b[0] != byte(StreamGossip) || perr != nil || n != m+1 || !bytes.Equal(body, frame) {
			t.Fatalf("ParseStreamOpen(%x) = %x, %d; type %#x, ParseFrame %x, %d, %v", b, body, n, b[0], frame, m, perr)
		}
	})
}
