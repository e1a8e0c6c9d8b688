//go:build (!amd64 && !arm64) || purego

package quant

// HaveBand: no band kernels without the assembly.
func HaveBand(Type) bool { return false }

// SetBandTails: no band kernels without the assembly.
func SetBandTails(bool) (restore func()) { return func() {} }

// SetOneRowBand: no band kernels without the assembly.
func SetOneRowBand(int) (restore func()) { return func() {} }

// SetFloatRows: no float row kernels without the assembly.
func SetFloatRows(bool) (restore func()) { return func() {} }

// SetStreamAhead: no band kernels without the assembly.
func SetStreamAhead(bool) (restore func()) { return func() {} }

// PackedBytes: nothing is packed here.
func PackedBytes(*Packed) (tiles, bands []byte) { return nil, nil }
