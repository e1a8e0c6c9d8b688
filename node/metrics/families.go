package metrics

// family is one metric family: its name, its type and its HELP text.
type family struct {
	name, typ, help string
}

// The node's metric families. Names follow Prometheus' conventions: the
// meshnode_ prefix, base units (seconds, bytes, joules), _total on
// counters. docs/metrics.md lists each (TestFamiliesDocumented).
const (
	familyRequests         = "meshnode_requests_total"
	familyQueueDepth       = "meshnode_queue_depth"
	familyRunning          = "meshnode_generations_running"
	familyPromptTokens     = "meshnode_prompt_tokens_total"
	familyCompletionTokens = "meshnode_completion_tokens_total"
	familySpecDrafts       = "meshnode_spec_draft_tokens_total"
	familySpecAccepted     = "meshnode_spec_accepted_tokens_total"
	familyTTFT             = "meshnode_time_to_first_token_seconds"
	familyITL              = "meshnode_inter_token_latency_seconds"
	familyReceipts         = "meshnode_receipts_total"
	familyJoules           = "meshnode_energy_joules_total"
	familyJoulesPerToken   = "meshnode_energy_per_token_joules"
	familyPeers            = "meshnode_peers"
	familyPeerRTT          = "meshnode_peer_rtt_seconds"
	familyTunnelBytes      = "meshnode_tunnel_bytes_total"
	familyFsync            = "meshnode_journal_fsync_seconds"
	familyModelLoad        = "meshnode_model_load_seconds"
	familyBuildInfo        = "meshnode_build_info"
)

// families are every family the node writes, in the order docs/metrics.md
// lists them.
var families = []family{
	{familyRequests, "counter", "Generation requests answered, by model, route (local, peer, mesh) and HTTP status."},
	{familyQueueDepth, "gauge", "Generation requests admitted and waiting for a slot, by model."},
	{familyRunning, "gauge", "Generations holding a slot, by model."},
	{familyPromptTokens, "counter", "Prompt tokens of the generations served here, by model."},
	{familyCompletionTokens, "counter", "Completion tokens of the generations served here, by model."},
	{familySpecDrafts, "counter", "Draft tokens speculative decoding proposed and the model verified (receipts' spec_proposed), by model."},
	{familySpecAccepted, "counter", "Draft tokens the model accepted (receipts' spec_accepted), by model."},
	{familyTTFT, "histogram", "Time from a request's arrival to its first generated token, by model."},
	{familyITL, "histogram", "Time between consecutive generated tokens, by model."},
	{familyReceipts, "counter", "Receipts sealed, by energy provenance grade."},
	{familyJoules, "counter", "Energy of the serves sealed in receipts, in joules, by energy provenance grade."},
	{familyJoulesPerToken, "histogram", "Energy per accepted token of each sealed receipt, in joules, by energy provenance grade."},
	{familyPeers, "gauge", "Admitted mesh peers."},
	{familyPeerRTT, "gauge", "Round-trip time to each admitted peer (the first 32 by short node id), in seconds."},
	{familyTunnelBytes, "counter", "Bytes through the mesh's HTTP tunnels, in (received) and out (sent)."},
	{familyFsync, "histogram", "Duration of each fsync of the steward's journal and of its checkpoint."},
	{familyModelLoad, "gauge", "Duration of the last load of each model, in seconds."},
	{familyBuildInfo, "gauge", "Always 1; its version label is the node's version."},
}

// lookup is the family called name.
func lookup(name string) (family, bool) {
	for _, f := range families {
		if f.name == name {
			return f, true
		}
	}
	return family{}, false
}

// Bucket upper bounds, in the families' units.
var (
	// Time to first token: a small model's prompt on a GPU (milliseconds)
	// to a long prompt queued behind others on a CPU (a minute).
	ttftBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	// Inter-token latency: speculated tokens (well under a millisecond)
	// to a large model on a CPU (seconds).
	itlBuckets = []float64{.001, .0025, .005, .01, .025, .05, .075, .1, .25, .5, 1, 2.5}
	// Journal fsync: NVMe (100 µs) to a stalled SD card (a second).
	fsyncBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}
	// Joules per token: 10 µJ (a small model on a GPU) to 10 J.
	joulesPerTokenBuckets = []float64{1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
)
