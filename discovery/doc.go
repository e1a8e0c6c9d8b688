// Package discovery finds peers for a node's mesh and keeps the ones it was
// told about joined.
//
// Peers come from two places: invite tokens given to the node (package
// discovery/token decodes them) and mDNS sightings on the LAN (package
// discovery/mdns). Both end at a Joiner, which dials them through the mesh:
// a token's peer is kept joined for the node's life, redialled with backoff
// whenever it is not admitted; a sighting is dialled while it keeps being
// seen, and never while the mesh already holds that peer.
package discovery
