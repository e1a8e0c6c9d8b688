// Package change is a backend's weights change record (mesh-spec §6.5): a
// hash-chained sequence of plan and weights entries, each sealed as a
// mesh/1 envelope under the steward key, with the rules that refuse an
// entry, the weights a record puts in effect, and the coverage lookup that
// tells whether a receipt was served on recorded weights.
package change
