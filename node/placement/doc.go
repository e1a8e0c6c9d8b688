// Package placement chooses which node of the mesh serves a request.
//
// Every host of the requested model, this node and its peers, is weighed
// by the steward's rules (node/steward: admissible by fidelity floor and
// joule ceiling, then the cheapest expected joules), with the round trip
// and the queue wait priced in against the request's latency budget
// (Weigh; the formula is in docs/mesh.md#placement). A host whose queue is
// full is passed over, so a busy node spills to a peer instead of
// answering 429.
//
// The figures weighed are what each host gossips about itself
// (nodev1.MeshnodeModelLoad): its rolling measured µJ per prompt and per
// output token with the provenance grade of the receipts they came from
// (Window keeps this node's), its output rate, and its slots and queue.
// A peer's figures are claims: Placer checks them against the signed
// receipts the peer returns (Observe) and prices a peer whose receipts
// exceed its claims by more than the tolerance at what the receipts show.
// A claim graded by a live hardware counter is preferred over an
// estimator-graded one of equal value, and to keep many nodes from picking
// the same cheapest host at once, hosts within a band of the best are
// drawn at random, weighted by their free slots, after counting the
// requests this node already has in flight to each.
package placement
