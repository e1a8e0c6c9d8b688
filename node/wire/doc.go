// Package wire is the mesh-llm/1 wire layer: stream types, the
// [u32 LE length][protobuf] framing shared by mesh-llm/1 control streams and
// by owner control on mesh-llm-control/1, and a decoder per message that
// bounds what it reads and validates what the protocol requires.
//
// A mesh-llm/1 stream starts with one StreamType byte. On protobuf streams
// the frames follow: ReadStreamType, then ReadFrame and a Decode function
// such as DecodeGossipFrame on the accepting side; WriteStreamOpen (or
// AppendStreamOpen) on the opening side, WriteFrame for any later frame.
// Owner-control streams carry the same frames with no type byte.
//
// No frame body exceeds MaxControlFrameBytes: a larger declared length is
// rejected before anything is allocated, and a larger message before
// anything is written. A decoder also refuses a body whose decoded form
// would take more than MaxDecodedBytes of memory, so a small frame of
// empty sub-messages cannot balloon into gigabytes.
//
// Every failure is a *FrameError whose Kind is one of ErrOversize,
// ErrBadGeneration, ErrTruncated, ErrWrongStreamType, ErrInvalidMessage or
// ErrForgedSender; test for them with errors.Is, and use errors.As for the
// message and field at fault. Checking that an id in a frame equals the
// peer's TLS identity is the mesh's job; CheckSender does the comparison.
//
// The message types themselves are generated into package nodev1.
package wire
