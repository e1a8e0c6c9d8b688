// Package mdns finds mesh-llm nodes on the LAN with multicast DNS, and
// announces this one, with no configuration.
//
// A node announces the DNS-SD service _mesh-llm._tcp with its QUIC port
// and a TXT record in upstream mesh-llm's keys (see Advert): its endpoint
// address, mesh id, version, an invite-token fingerprint and short
// capability hints; never a token. It browses periodically on every chosen
// interface (see Choose) and hands each node of its own mesh to a
// function, normally discovery.Joiner.Offer.
//
// Announcing uses hashicorp/mdns's responder, one per interface. Browsing
// is a small one-shot querier of its own (query.go), because
// hashicorp/mdns's client joins the multicast group on the system's
// default interface only, which fails on a LAN with no default route and
// cannot be pointed at one interface for listening.
package mdns
