//go:build !amd64 || amd64.v3 || amd64.v4

package detmath

// mathUnfused: Go's math is compiled with fused multiply-adds here.
const mathUnfused = false
