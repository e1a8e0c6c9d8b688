package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// modelList is GET /v1/models.
type modelList struct {
	Data []struct {
		ID      string   `json:"id"`
		OwnedBy string   `json:"owned_by"`
		Local   bool     `json:"local"`
		Hosts   []string `json:"hosts,omitempty"`
	} `json:"data"`
}

func modelsCommand() *cli.Command {
	return &cli.Command{
		Name:  "models",
		Usage: "list models: served here, hosted in the mesh, and on the node's disk",
		Description: "Served and hosted models come from the local node's API (--api). The on-disk inventory is a\n" +
			"fresh scan (scan-refresh) of the same node, and what mesh peers hold on their disks for others\n" +
			"to pull (meshcli pull mesh:NAME) is what the node hears from them. For a node you reach with\n" +
			"--endpoint, use `meshcli --endpoint TOKEN config get` (what it serves) and `scan-refresh` (what\n" +
			"is on its disk).",
		Flags: []cli.Flag{jsonFlag, &cli.BoolFlag{Name: "no-scan", Usage: "skip the on-disk inventory"}},
		Action: func(c *cli.Context) error {
			var list modelList
			if err := getJSON(c, "/v1/models", &list); err != nil {
				return err
			}
			var inv *nodev1.OwnerControlRefreshInventoryResponse
			var held *control.Holdings
			var invErr, heldErr error
			if !c.Bool("no-scan") {
				invErr = withController(c, func(ctl control.Controller) (err error) {
					if inv, err = ctl.RefreshInventory(c.Context); err != nil {
						return err
					}
					if hc, ok := ctl.(*control.HTTPClient); ok {
						h, err := hc.Holders(c.Context)
						held, heldErr = &h, err
						if errors.Is(err, control.ErrUnavailable) || errors.Is(err, control.ErrUnsupported) || errors.Is(err, control.ErrUnknownCommand) {
							held, heldErr = nil, nil // a node that lists no holders: nothing to say
						}
					}
					return nil
				})
			}
			w := envOf(c).stdout
			if c.Bool("json") {
				return printModelsJSON(w, list, inv, invErr, held, heldErr)
			}
			if err := printModels(w, list, inv, invErr, c.Bool("no-scan")); err != nil || (held == nil && heldErr == nil) {
				return err
			}
			return printHoldings(w, held, heldErr)
		},
	}
}

func printModels(w io.Writer, list modelList, inv *nodev1.OwnerControlRefreshInventoryResponse, invErr error, skipped bool) error {
	t := newTable(w, "MODEL", "WHERE", "HOSTS")
	for _, m := range list.Data {
		where, hosts := "mesh", make([]string, 0, len(m.Hosts))
		if m.Local {
			where = "here"
		}
		for _, h := range m.Hosts {
			hosts = append(hosts, short(h))
		}
		t.row(m.ID, where, orDash(strings.Join(hosts, ", ")))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if skipped {
		return nil
	}
	fmt.Fprintln(w)
	if invErr != nil {
		_, err := fmt.Fprintf(w, "On disk: unavailable (%s)\n", oneLine(invErr))
		return err
	}
	return printInventory(w, inv)
}

// printInventory is a refresh_inventory result as a table.
func printInventory(w io.Writer, inv *nodev1.OwnerControlRefreshInventoryResponse) error {
	if inv.GetInventory() == nil {
		_, err := fmt.Fprintln(w, "On disk: the node is too old to list its inventory (it answered with a config snapshot only).")
		return err
	}
	how := "scanned"
	if inv.GetInventory().GetDisposition() == nodev1.OwnerControlRefreshInventoryDisposition_OWNER_CONTROL_REFRESH_INVENTORY_DISPOSITION_COALESCED {
		how = "joined a scan in progress"
	}
	fmt.Fprintf(w, "On disk (%s, node %s):\n", how, short(fmt.Sprintf("%x", inv.GetSnapshot().GetNodeId())))
	if len(inv.GetInventory().GetEntries()) == 0 {
		_, err := fmt.Fprintln(w, "No models.")
		return err
	}
	t := newTable(w, "MODEL", "SIZE", "ARCH", "QUANT", "PARAMS", "CONTEXT")
	for _, e := range inv.GetInventory().GetEntries() {
		md := e.GetMetadata()
		ctx := "-"
		if md.GetContextLength() > 0 {
			ctx = strconv.Itoa(int(md.GetContextLength()))
		}
		t.row(e.GetCanonicalModelRef(), humanBytes(e.GetTotalSizeBytes()), orDash(md.GetArchitecture()),
			orDash(md.GetQuantizationType()), orDash(md.GetParameterSize()), ctx)
	}
	return t.flush()
}

// printHoldings is what mesh peers hold for others to pull.
func printHoldings(w io.Writer, held *control.Holdings, err error) error {
	fmt.Fprintln(w)
	if err != nil {
		_, err := fmt.Fprintf(w, "Held in the mesh: unavailable (%s)\n", oneLine(err))
		return err
	}
	serving := "this node serves its own to peers"
	if !held.ServeFiles {
		serving = "this node serves none of its own (serve_files = false)"
	}
	fmt.Fprintf(w, "Held in the mesh, to pull with `meshcli pull mesh:MODEL` (%s):\n", serving)
	if len(held.Models) == 0 {
		_, err := fmt.Fprintln(w, "No peer that serves model files holds any.")
		return err
	}
	t := newTable(w, "MODEL", "SIZE", "HOLDERS")
	for _, m := range held.Models {
		hs := make([]string, 0, len(m.Holders))
		for _, h := range m.Holders {
			hs = append(hs, short(h))
		}
		t.row(m.Model, humanBytes(m.SizeBytes), strings.Join(hs, ", "))
	}
	return t.flush()
}

func printModelsJSON(w io.Writer, list modelList, inv *nodev1.OwnerControlRefreshInventoryResponse, invErr error, held *control.Holdings, heldErr error) error {
	out := map[string]any{"models": list.Data}
	switch {
	case heldErr != nil:
		out["held_in_mesh_error"] = oneLine(heldErr)
	case held != nil:
		out["held_in_mesh"] = held
	}
	switch {
	case invErr != nil:
		out["inventory_error"] = oneLine(invErr)
	case inv != nil:
		b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(inv)
		if err != nil {
			return err
		}
		out["inventory"] = json.RawMessage(b)
	}
	return printJSON(w, out)
}
