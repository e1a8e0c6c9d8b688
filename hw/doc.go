// Package hw says what the machine is and what it spends.
//
// Every serve is metered through a [Meter]: the steward opens a [Span]
// immediately before the engine runs and closes it when the engine returns.
// The [Energy] a span yields carries an honest [Provenance] (mesh/1 §3.3),
// and its constructors make the provenance coupling impossible to violate:
// a hardware-graded figure always has a measurement, an estimate never
// pretends to have one.
//
// Counters live in sub-packages, one per source (RAPL, NVML, IOReport,
// Jetson INA3221); this package holds what they share.
package hw
