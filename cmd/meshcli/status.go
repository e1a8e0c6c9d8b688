package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// statusDoc is what meshcli reads of GET /api/status (node.Status).
type statusDoc struct {
	NodeID  string `json:"node_id"`
	DID     string `json:"did"`
	Version string `json:"version"`
	Uptime  string `json:"uptime"`
	Steward struct {
		Sequence uint64 `json:"next_sequence"`
		Last     string `json:"last_envelope"`
	} `json:"steward"`
	Models []struct {
		Name      string `json:"name"`
		Context   int    `json:"context"`
		SizeBytes uint64 `json:"size_bytes"`
		// Draft is the speculative proposer configured (node.ModelStatus),
		// Speculation how its windows are priced (node.SpecStatus).
		Draft       string   `json:"draft"`
		Speculation *specDoc `json:"speculation"`
		// Split is the plan of a model split across peers (node.SplitStatus).
		Split *splitDoc `json:"split"`
	} `json:"models"`
	// NoModel, from a node that serves no model, says how to get one.
	NoModel string    `json:"no_model"`
	Peers   []peerDoc `json:"peers"`
	Meter   struct {
		Selected string `json:"selected"`
		Why      string `json:"why"`
	} `json:"meter"`
	// Grants is the steward's grant state (steward.GrantStatus): whether
	// it honours grants, and the serves left unresolved by a stop mid-serve,
	// which an operator settles (mesh/1 §2.2).
	Grants struct {
		Honoured   bool `json:"honoured"`
		Unresolved []struct {
			RequestID string `json:"request_id"`
			Caller    string `json:"caller"`
			Backend   string `json:"backend"`
			CeilingUJ uint64 `json:"ceiling_uj"`
			At        string `json:"authorised_at"`
		} `json:"unresolved"`
	} `json:"grants"`
}

// specDoc is how a model's draft is priced (node.SpecStatus).
type specDoc struct {
	Prices         string  `json:"prices"`
	MeasuredAt     string  `json:"measured_at"`
	Cost           float64 `json:"cost"`
	Row            float64 `json:"row"`
	CatchUp        float64 `json:"catch_up"`
	First          float64 `json:"first"`
	SampledCost    float64 `json:"sampled_cost"`
	SampledRow     float64 `json:"sampled_row"`
	SampledFirst   float64 `json:"sampled_first"`
	SampledCatchUp float64 `json:"sampled_catch_up"`
	SampledDraft   string  `json:"sampled_draft"`
}

// String is the pricing on one line: the greedy and sampled prices, and
// what sampled requests do with them.
func (s *specDoc) String() string {
	greedy := fmt.Sprintf("c %.2f, v %.2f", s.Cost, s.Row)
	if s.CatchUp > 0 {
		greedy += fmt.Sprintf(", catch-up %.2f", s.CatchUp)
	}
	if s.First > 0 {
		greedy += fmt.Sprintf(", first step +%.2f", s.First)
	}
	sampledPrices := fmt.Sprintf("c %.2f, v %.2f", s.SampledCost, s.SampledRow)
	if s.SampledFirst > 0 {
		sampledPrices += fmt.Sprintf(", first step +%.2f", s.SampledFirst)
	}
	if s.SampledCatchUp > 0 {
		sampledPrices += fmt.Sprintf(", catch-up %.2f", s.SampledCatchUp)
	}
	sampled := "sampled requests sample plainly (the prices say speculation cannot pay)"
	if s.SampledDraft != "" {
		sampled = "sampled requests name " + s.SampledDraft
	}
	prices := s.Prices
	if s.MeasuredAt != "" {
		prices += " at " + s.MeasuredAt
	}
	return fmt.Sprintf("prices %s (greedy %s; sampled %s); %s", prices, greedy, sampledPrices, sampled)
}

// splitDoc is a split model's plan: its state and stages.
type splitDoc struct {
	State  string `json:"state"`
	Stages []struct {
		Node        string `json:"node"`
		Layers      string `json:"layers"`
		MemoryBytes uint64 `json:"memory_bytes"`
	} `json:"stages"`
	Pins []string `json:"pins"`
}

type peerDoc struct {
	ID        string   `json:"id"`
	Addrs     []string `json:"addrs"`
	RTTMillis float64  `json:"rtt_ms,omitempty"`
	Models    []string `json:"models"`
	Admission string   `json:"admission"`
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show the local node: identity, meter, steward head, models, peers",
		Flags: []cli.Flag{jsonFlag},
		Action: func(c *cli.Context) error {
			if c.Bool("json") {
				var raw map[string]any
				if err := getJSON(c, "/api/status", &raw); err != nil {
					return err
				}
				return printJSON(envOf(c).stdout, raw)
			}
			var st statusDoc
			if err := getJSON(c, "/api/status", &st); err != nil {
				return err
			}
			return printStatus(c, &st)
		},
	}
}

func printStatus(c *cli.Context, st *statusDoc) error {
	w := envOf(c).stdout
	kv := newTable(w, "Node", short(st.NodeID)+"  "+st.DID)
	kv.row("Version", st.Version+", up "+st.Uptime)
	meter := orDash(st.Meter.Selected)
	if st.Meter.Why != "" {
		meter += ": " + st.Meter.Why
	}
	kv.row("Meter", meter)
	head := fmt.Sprintf("next sequence %d", st.Steward.Sequence)
	if st.Steward.Last != "" {
		head += ", last envelope " + short(st.Steward.Last)
	}
	kv.row("Steward", head)
	grants := "honoured"
	if !st.Grants.Honoured {
		grants = "refused (the steward was shown a receipt its journal lacks, or keeps none)"
	}
	kv.row("Grants", grants)
	kv.row("Unresolved", plural(len(st.Grants.Unresolved), "serve"))
	if err := kv.flush(); err != nil {
		return err
	}
	if len(st.Grants.Unresolved) > 0 {
		fmt.Fprintln(w)
		t := newTable(w, "REQUEST", "CALLER", "BACKEND", "CEILING", "SINCE")
		for _, u := range st.Grants.Unresolved {
			t.row(short(u.RequestID), short(u.Caller), u.Backend, strconv.FormatUint(u.CeilingUJ, 10)+" µJ", orDash(u.At))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	if len(st.Models) == 0 {
		msg := "this node serves no model"
		if st.NoModel != "" {
			msg = st.NoModel
		}
		fmt.Fprintf(w, "Serving nothing: %s.\n", strings.TrimSuffix(msg, "."))
	} else {
		t := newTable(w, "SERVING", "CONTEXT", "SIZE", "DRAFT")
		for _, m := range st.Models {
			t.row(m.Name, strconv.Itoa(m.Context), humanBytes(m.SizeBytes), orDash(m.Draft))
		}
		if err := t.flush(); err != nil {
			return err
		}
		for _, m := range st.Models {
			if m.Speculation != nil {
				fmt.Fprintf(w, "\nSpeculation %s (%s): %s\n", m.Name, m.Draft, m.Speculation)
			}
		}
		for _, m := range st.Models {
			if m.Split == nil {
				continue
			}
			fmt.Fprintf(w, "\nSplit %s: %s\n", m.Name, m.Split.State)
			if len(m.Split.Pins) > 0 {
				fmt.Fprintf(w, "Pinned: %s\n", strings.Join(m.Split.Pins, " "))
			}
			if len(m.Split.Stages) == 0 {
				continue
			}
			t := newTable(w, "STAGE", "NODE", "LAYERS", "MEMORY")
			for i, s := range m.Split.Stages {
				who := short(s.Node)
				if s.Node == st.NodeID {
					who += " (this node)"
				}
				t.row(strconv.Itoa(i), who, s.Layers, humanBytes(s.MemoryBytes))
			}
			if err := t.flush(); err != nil {
				return err
			}
		}
	}
	fmt.Fprintln(w)
	return printPeers(c, st.Peers)
}

func peersCommand() *cli.Command {
	return &cli.Command{
		Name:  "peers",
		Usage: "list the local node's peers: address, round trip, admission, models",
		Flags: []cli.Flag{jsonFlag},
		Action: func(c *cli.Context) error {
			var st statusDoc
			if err := getJSON(c, "/api/status", &st); err != nil {
				return err
			}
			if c.Bool("json") {
				if st.Peers == nil {
					st.Peers = []peerDoc{}
				}
				return printJSON(envOf(c).stdout, st.Peers)
			}
			return printPeers(c, st.Peers)
		},
	}
}

func printPeers(c *cli.Context, peers []peerDoc) error {
	w := envOf(c).stdout
	if len(peers) == 0 {
		_, err := fmt.Fprintln(w, "No peers.")
		return err
	}
	t := newTable(w, "PEER", "RTT", "ADMISSION", "ADDRESS", "MODELS")
	for _, p := range peers {
		rtt := "-"
		if p.RTTMillis > 0 {
			rtt = strconv.FormatFloat(p.RTTMillis, 'f', 1, 64) + " ms"
		}
		addr := "-"
		if len(p.Addrs) > 0 {
			addr = p.Addrs[0]
			if len(p.Addrs) > 1 {
				addr += fmt.Sprintf(" (+%d)", len(p.Addrs)-1)
			}
		}
		t.row(short(p.ID), rtt, admissionWords(p.Admission), addr, orDash(strings.Join(p.Models, ", ")))
	}
	return t.flush()
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// admissionWords says a peer's admission state (node.AdmissionName, or
// the raw enum an older node reports) in words.
func admissionWords(a string) string {
	a = strings.ToLower(strings.TrimPrefix(strings.ToUpper(a), "INFERENCE_ADMISSION_STATE_"))
	switch a {
	case "accepting":
		return "accepting"
	case "accepting_deprioritized":
		return "deprioritized"
	case "remote_paused":
		return "paused (remote)"
	case "all_paused":
		return "paused"
	case "", "unspecified":
		return "unknown"
	}
	return strings.ReplaceAll(a, "_", " ")
}
