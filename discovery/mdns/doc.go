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
// Announcing uses hashicorp/mdns's responder, one per interface, each
// joined to the mDNS group on its interface. Browsing is a small one-shot
// querier of its own (query.go): hashicorp/mdns's client joins the group on
// the system's default multicast interface only, and gives up IPv4
// altogether where there is none (a LAN with no default route).
package mdns
