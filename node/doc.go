// Package node is the meshnode daemon: configuration, lifecycle and the
// wiring of its parts. Each concern lives in a sub-package (wire, mesh,
// steward, receipt, api, control, engine, identity); this package starts
// them in order and stops them in reverse.
package node
