// Package detmath has the elementary functions whose bits a serve's
// replay depends on, computed the same on every platform: amd64 with or
// without FMA, arm64, and the purego builds: Exp, Log, Pow, Sin and Cos.
// Go's math.Exp and math.Log run assembly on amd64 and other code on
// arm64, and its Go code (Sin, Cos, Pow's parts) is compiled there with
// fused multiply-adds, so they agree only to the last bit, and a model or
// sampler built on them could give a receipt's replay on another machine
// other logits or another draw. Each function here fixes its operations:
// math.FMA where it means one rounding, an explicit conversion on every
// other product.
package detmath
