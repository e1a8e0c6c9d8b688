// Package stage runs one model split into layer stages across mesh
// nodes, over meshnode-stage/1 (package stagewire, docs/stage-protocol.md).
//
// A Server serves the stages a node is asked to load: it finds its own
// copy of the model by weights digest (Models; Files over GGUF paths),
// loads only the blocks of the stage (model.LoadStage), keeps a KV
// session per request, and for each Activation runs its blocks and sends
// the hidden rows to the next stage, or, on the last stage, the greedy
// token or the logits straight back to the head. Register serves it on a mesh node's SUBPROTOCOL
// streams, to admitted peers only.
//
// A Pipeline is the head: it runs the first stage itself, loads the
// others (the last first), and drives batched steps and trims through
// the chain. With f32 hidden rows its logits are the single-node model's
// bit for bit. A step's sequence may ask for its output after each of its
// last n positions (Seq.Rows: a speculative window, which the head
// verifies and trims), one round trip for the window.
//
// Each stage meters a request on its own node's meter from its first
// Activation to its Finish and answers the Finish with a report of its
// part signed under its node key (receipt.StageReport); Pipeline.Finish
// collects and checks them for the serve's receipt (engine.Split).
//
// The ranges are placed by node/stageplan; the node drives a Pipeline
// through node/engine/splitengine, and places the model again when a
// stage is lost (a Step then fails with ErrStageLost; docs/mesh.md,
// "Split models").
package stage
