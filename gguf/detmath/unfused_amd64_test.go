//go:build amd64 && !amd64.v3 && !amd64.v4

package detmath

// mathUnfused: Go's own math (sin, cos) is compiled without fused
// multiply-adds here, so it is what Sin and Cos must equal.
const mathUnfused = true
