package quant

// useSIMD selects the assembly kernels (simdDots) where the CPU has what
// they need; tests switch it off to hold them to the Go kernels.
var useSIMD = haveSIMD
