// Package gguf reads and writes GGUF model files (v2 and v3): the metadata
// key-value section with values of every type, the tensor index, and the
// tensor data, which Open maps read-only into memory so tensors are slices
// of the file rather than copies on the Go heap. Every length the file
// declares is bounded before use; a corrupt or truncated file gets a
// *FormatError naming what is wrong and where.
//
// Facts summarises the model a file holds (architecture, sizes, tokenizer,
// quantisation); sub-package quant holds the tensor element formats.
package gguf

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// File is a parsed GGUF file. Tensor data slices point into the file's
// mapping and are valid until Close.
type File struct {
	// Version is the GGUF version, 2 or 3.
	Version uint32
	// Metadata is the key-value section.
	Metadata *Metadata
	// Tensors is the tensor index in file order.
	Tensors []TensorInfo
	// Alignment is the data alignment (general.alignment, default 32).
	Alignment uint64
	// DataOffset is where the data section starts in the file.
	DataOffset uint64

	path   string
	data   []byte
	byName map[string]int
	unmap  func() error
	mapped bool
}

// Open maps the file at path read-only and parses it. On Linux and macOS the
// file is memory-mapped (shared, so processes serving one model share its
// pages); elsewhere it is read into memory. A mapped file must not be
// truncated while open: reading a page past its new end faults.
func Open(path string) (*File, error) {
	data, unmap, mapped, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err) // err names the path
	}
	f, err := parse(data)
	if err != nil {
		if unmap != nil {
			unmap()
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.path, f.unmap, f.mapped = path, unmap, mapped
	return f, nil
}

// Parse parses a GGUF file held in memory. The File refers to b (it does not
// copy it), so b must not change while the File is in use.
func Parse(b []byte) (*File, error) { return parse(b) }

func parse(b []byte) (*File, error) {
	h, err := parseHeader(b)
	if err != nil {
		return nil, err
	}
	f := &File{
		Version:    h.version,
		Metadata:   h.md,
		Tensors:    h.tensors,
		Alignment:  h.alignment,
		DataOffset: h.dataOffset,
		data:       b,
		byName:     make(map[string]int, len(h.tensors)),
	}
	for i, t := range h.tensors {
		f.byName[t.Name] = i
	}
	return f, nil
}

// Path is the path the File was opened from ("" for Parse).
func (f *File) Path() string { return f.path }

// Size is the file's size in bytes.
func (f *File) Size() int64 { return int64(len(f.data)) }

// Mapped reports whether the tensor data is a memory mapping of the file
// (false for Parse, and for Open on systems without mmap).
func (f *File) Mapped() bool { return f.mapped }

// Tensor looks a tensor up by name.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// TensorShaped finds the tensor name and checks that its dims are
// exactly want (ggml's ne, row length first; trailing 1s are the same
// shape), returning its data; ok is false where the file has none. A
// loader wraps the error in its own kind.
func (f *File) TensorShaped(name string, want ...int) (t TensorInfo, data []byte, ok bool, err error) {
	t, ok = f.Tensor(name)
	if !ok {
		return t, nil, false, nil
	}
	dims := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		dims[i] = int(d)
	}
	for len(dims) > len(want) && dims[len(dims)-1] == 1 {
		dims = dims[:len(dims)-1]
	}
	if !slices.Equal(dims, want) {
		return t, nil, true, &shapeError{name, t.Dims, want}
	}
	if data, err = f.TensorData(t); err != nil {
		return t, nil, true, fmt.Errorf("tensor %s: %w", name, err)
	}
	return t, data, true, nil
}

// shapeError says which tensor has which shape; it is ErrShape.
type shapeError struct {
	name string
	dims []int64
	want []int
}

func (e *shapeError) Error() string {
	return fmt.Sprintf("tensor %s has shape %v, want %v", e.name, e.dims, e.want)
}

func (e *shapeError) Unwrap() error { return ErrShape }

// TensorData returns the bytes of tensor t, a slice of the mapping (not a
// copy) that is valid until Close. t must come from this File's index.
func (f *File) TensorData(t TensorInfo) ([]byte, error) {
	if f.data == nil {
		return nil, ErrClosed
	}
	i, ok := f.byName[t.Name]
	if !ok {
		return nil, fmt.Errorf("gguf: no tensor %q in this file", t.Name)
	}
	t = f.Tensors[i] // the parsed entry, whose bounds were checked
	start := f.DataOffset + t.Offset
	return f.data[start : start+t.Size : start+t.Size], nil
}

// Bytes returns the whole file (the mapping), valid until Close; the weights
// digest hashes it without another read.
func (f *File) Bytes() []byte { return f.data }

// Close releases the mapping. Slices returned by TensorData and Bytes must
// not be used afterwards.
func (f *File) Close() error {
	f.data = nil
	if f.unmap == nil {
		return nil
	}
	unmap := f.unmap
	f.unmap = nil
	return unmap()
}

// ModelKey is the name a model file goes by: its base name without the
// .gguf extension.
func ModelKey(path string) string {
	if path == "" {
		return ""
	}
	base := filepath.Base(path)
	if ext := filepath.Ext(base); strings.EqualFold(ext, ".gguf") {
		base = base[:len(base)-len(ext)]
	}
	return base
}
