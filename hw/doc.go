// Package hw says what the machine is and what it spends.
//
// Every serve is metered through a [Meter]: the steward opens a [Span]
// immediately before the engine runs and closes it when the engine returns.
// The [Energy] a span yields carries an honest [Provenance] (mesh/1 §3.3),
// and its constructors make the provenance coupling impossible to violate:
// a hardware-graded figure always has a measurement, an estimate never
// pretends to have one.
//
// Counters live in sub-packages, one per source (rapl, nvml, ioreport,
// ina3221); each is a [Counter] of cumulative microjoules over the
// [Domain]s it reads, with a minimum window. This package holds what they
// share: the [CounterMeter] that grades spans by a counter under the
// window rule and falls back to a [PowerModel] estimate, [Combine] for
// counters that together cover a request, the liveness [Probe], and the
// [Facts] a node gossips about itself. Package hw/meters picks the meter;
// hw/host gathers the facts; hw/hwtest has fakes for tests.
package hw
