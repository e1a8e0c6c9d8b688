package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node"
	"github.com/meshnode/meshnode/node/control"
	"github.com/meshnode/meshnode/node/control/owner"
)

const envKey = "env"

func envOf(c *cli.Context) *env { return c.App.Metadata[envKey].(*env) }

func defaultConfigDir() string {
	d, err := owner.DefaultDir()
	if err != nil {
		return "$XDG_CONFIG_HOME/meshcli"
	}
	return string(d)
}

// ownerDir is the owner's config directory.
func ownerDir(c *cli.Context) (owner.Dir, error) {
	if d := c.String("config-dir"); d != "" {
		return owner.Dir(d), nil
	}
	return owner.DefaultDir()
}

// getJSON fetches path from the local node's API into out.
func getJSON(c *cli.Context, path string, out any) error {
	return callJSON(c, "--api", c.String("api"), http.MethodGet, path, nil, out)
}

// callJSON sends method path to the node API at base, with body as JSON
// when it is not nil, and decodes a 200 answer into out; flag names the
// option that set base, for errors.
func callJSON(c *cli.Context, flag, base, method, path string, body []byte, out any) error {
	if flag == "--api" && c.String("endpoint") != "" {
		// --endpoint reaches owner control, which carries no API: reading
		// the local API instead would answer about another node.
		return fmt.Errorf("`%s` reads a node's HTTP API (--api), which --endpoint (owner control) does not reach: "+
			"leave out --endpoint (and unset MESHCLI_ENDPOINT) and run it on that node's machine or point --api at its API; "+
			"over owner control, `meshcli --endpoint TOKEN config get` shows the models a node serves and `scan-refresh` those on its disk", c.Command.HelpName)
	}
	e := envOf(c)
	base = strings.TrimRight(base, "/")
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(c.Context, method, base+path, rd)
	if err != nil {
		return fmt.Errorf("%s %q: %w", flag, base, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if k := c.String("api-key"); k != "" {
		req.Header.Set("Authorization", "Bearer "+k)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("no node is answering at %s (is meshnode running? see %s)", base, flag)
		}
		return fmt.Errorf("%s %s: %w", method, base+path, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, base+path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var apiErr struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(answer, &apiErr) == nil && apiErr.Error.Message != "" {
			return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, apiErr.Error.Message)
		}
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if err := json.Unmarshal(answer, out); err != nil {
		return fmt.Errorf("%s %s: the node's answer does not decode: %w", method, path, err)
	}
	return nil
}

// controller is owner control of the node meshcli drives: the one named
// by --endpoint, over QUIC as the owner's client identity, or else the
// local node through its REST facade.
func controller(c *cli.Context) (control.Controller, error) {
	e := envOf(c)
	tok := c.String("endpoint")
	if tok == "" {
		secret, err := localSecret(c)
		if err != nil {
			return nil, err
		}
		return control.NewHTTPClient(c.String("api"), control.HTTPAuth{APIKey: c.String("api-key"), Secret: secret}, e.http, e.timeouts), nil
	}
	addr, err := control.ParseEndpoint(tok)
	if err != nil {
		return nil, fmt.Errorf("--endpoint: %w", err)
	}
	dir, err := ownerDir(c)
	if err != nil {
		return nil, err
	}
	key, cert, err := dir.Client(e.now())
	if err != nil {
		return nil, err
	}
	return control.Dial(c.Context, addr, control.ClientConfig{Key: key, Ownership: cert, Timeouts: e.timeouts})
}

// withController runs f with the controller and closes it after.
func withController(c *cli.Context, f func(control.Controller) error) error {
	ctl, err := controller(c)
	if err != nil {
		return err
	}
	defer ctl.Close()
	err = f(ctl)
	if errors.Is(err, control.ErrUnauthorized) && c.String("endpoint") == "" && c.String("control-secret") == "" {
		// The facade turned down the credential found, or its absence.
		err = fmt.Errorf("%w (meshcli looked for %s in %s)", err, control.SecretFile, strings.Join(secretDirs(), ", "))
	}
	return err
}

// secretDirs are the state dirs meshcli looks in for the local node's
// control credential: $MESHNODE_STATE_DIR, this user's default state dir
// (or systemd's $STATE_DIRECTORY) and the Linux service's.
func secretDirs() []string {
	var dirs []string
	for _, d := range []string{os.Getenv("MESHNODE_STATE_DIR"), node.DefaultStateDir(), node.ServiceStateDir} {
		if d != "" && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// localSecret is the local node's control credential: the file
// --control-secret names (an error if it cannot be read), else the first
// readable one in secretDirs, else none (the node will refuse, and
// withController says where meshcli looked).
func localSecret(c *cli.Context) (string, error) {
	if p := c.String("control-secret"); p != "" {
		s, err := control.ReadSecret(p)
		if err != nil {
			return "", fmt.Errorf("--control-secret: %w", err)
		}
		return s, nil
	}
	for _, d := range secretDirs() {
		if s, err := control.ReadSecret(filepath.Join(d, control.SecretFile)); err == nil {
			return s, nil
		}
	}
	return "", nil
}

var jsonFlag = &cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"}

// printJSON writes v, indented.
func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// protoJSON is a message as the REST facade writes it, indented.
var protoJSON = protojson.MarshalOptions{UseProtoNames: true, Multiline: true, Indent: "  "}

func printProto(w io.Writer, m proto.Message) error {
	b, err := protoJSON.Marshal(m)
	if err != nil {
		return err
	}
	// protojson varies its spacing at random to stop people depending on
	// it; a round through encoding/json makes output stable.
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	return printJSON(w, v)
}

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cols ...string) { fmt.Fprintln(t.tw, strings.Join(cols, "\t")) }

func (t *table) flush() error { return t.tw.Flush() }

// humanBytes is a size in binary units.
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// short abbreviates a hex id as identity.EndpointID.Short does.
func short(id string) string {
	// A did:key's prefix and multicodec are the same for every Ed25519
	// key; the part that tells keys apart comes after them.
	if rest, ok := strings.CutPrefix(id, "did:key:z6Mk"); ok {
		return "z6Mk" + short(rest)
	}
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// compactJSON strips protojson's deliberately unstable spacing.
func compactJSON(b []byte) []byte {
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return b
	}
	return out.Bytes()
}
