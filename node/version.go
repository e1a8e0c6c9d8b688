package node

// Version is the software version, set at link time by the Makefile
// (-X github.com/meshnode/meshnode/node.Version=...). It is advertised in
// gossip and reported by /api/status.
var Version = "dev"
