// Package api is meshnode's HTTP surface on localhost: the OpenAI-compatible
// endpoints (/v1/chat/completions, /v1/completions, /v1/responses,
// /v1/models), the mesh/1 steward endpoints (/v1/mesh/steward,
// /v1/mesh/witness) and the node's own (/api/status, /api/invite,
// /api/receipts, /health). It tells an observer of each generation request
// it answered (RequestObserver: the web console's live log), and serves
// handlers the node adds, behind the API key or, for files that hold no
// data, without it.
//
// The package knows HTTP shapes, streaming, limits and routing; it knows
// nothing of tokenizers, engines or receipts. A request for a model served
// here goes to a [Model]; one for a model another node hosts is relayed
// through the mesh's HTTP tunnel to that node, unbuffered, and a request
// that arrived through a tunnel is only ever served locally.
package api
