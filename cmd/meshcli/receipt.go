package main

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/receipt"
)

func receiptCommand() *cli.Command {
	return &cli.Command{
		Name:  "receipt",
		Usage: "check mesh/1 receipts",
		Subcommands: []*cli.Command{{
			Name:      "verify",
			Usage:     "verify a receipt envelope and, given its steward's log, its place in the hash chain",
			ArgsUsage: "FILE",
			Description: "FILE holds one receipt: a response's usage.energy object (or the whole response), the\n" +
				"envelope in hex, or the raw COSE_Sign1 bytes. --log names the steward's receipt log from\n" +
				"genesis: one envelope a line, in hex or as a JSON object with envelope_hex.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "log", Usage: "the steward's receipt log `FILE`"},
				&cli.StringFlag{Name: "steward", Usage: "require this steward (did:key)"},
			},
			Action: verifyReceipt,
		}},
	}
}

// maxReceiptFile bounds what is read of a receipt or log file.
const maxReceiptFile = 64 << 20

func verifyReceipt(c *cli.Context) error {
	if c.NArg() != 1 {
		return errors.New("receipt verify takes one FILE (see meshcli receipt verify --help)")
	}
	raw, err := readBounded(c.Args().First())
	if err != nil {
		return err
	}
	env, err := envelopeOf(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", c.Args().First(), err)
	}
	var want ed25519.PublicKey
	if s := c.String("steward"); s != "" {
		id, err := identity.ParseDIDKey(s)
		if err != nil {
			return fmt.Errorf("--steward: %w", err)
		}
		want = id.PublicKey()
	}
	sealed, err := receipt.Open(env, want)
	if err != nil {
		return fmt.Errorf("%s: %w", c.Args().First(), err)
	}
	w := envOf(c).stdout
	r := &sealed.Receipt
	t := newTable(w, "Receipt", sealed.ID.String())
	t.row("Steward", r.Steward)
	pos := fmt.Sprintf("%d", r.Sequence)
	if r.Prev != nil {
		pos += ", prev " + short(r.Prev.String())
	}
	t.row("Sequence", pos)
	t.row("Served", r.Recipe+" on "+r.Backend)
	t.row("Tokens", fmt.Sprintf("%d in, %d out, %d accepted", r.TokensIn, r.TokensOut, r.TokensAccepted))
	t.row("Energy", fmt.Sprintf("%d µJ (%s)", r.Energy.UJ(), r.Energy.Provenance()))
	fid := "floor " + r.FidelityFloor.String()
	if r.Fidelity != nil {
		fid = fmt.Sprintf("%s delivered, %s advertised, %s", r.Fidelity.Delivered, r.Fidelity.Advertised, fid)
	}
	if r.FidelityMet {
		fid += ": met"
	} else {
		fid += ": not met"
	}
	t.row("Fidelity", fid)
	t.row("Signature", "valid")
	if path := c.String("log"); path != "" {
		pos, n, err := placeInLog(path, sealed)
		if err != nil {
			t.flush()
			return err
		}
		t.row("Chain", fmt.Sprintf("entry %d of %d in %s; every link verifies", pos, n, path))
	}
	return t.flush()
}

// placeInLog verifies the log from genesis under sealed's steward and
// finds sealed in it.
func placeInLog(path string, sealed *receipt.Sealed) (index, n int, err error) {
	envs, err := readLog(path)
	if err != nil {
		return 0, 0, err
	}
	steward, err := identity.ParseDIDKey(sealed.Receipt.Steward)
	if err != nil {
		return 0, 0, err
	}
	if _, err := receipt.VerifyLog(envs, receipt.Head{}, steward.PublicKey()); err != nil {
		return 0, 0, fmt.Errorf("log %s: %w", path, err)
	}
	for i, env := range envs {
		if receipt.Sum(env) == sealed.ID {
			return i, len(envs), nil
		}
	}
	return 0, 0, fmt.Errorf("log %s: the receipt is not in it (it holds %s, all verified)", path, plural(len(envs), "receipt"))
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxReceiptFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxReceiptFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxReceiptFile)
	}
	return b, nil
}

// envelopeOf finds the envelope in a receipt file.
func envelopeOf(b []byte) ([]byte, error) {
	text := bytes.TrimSpace(b)
	switch {
	case len(text) > 0 && text[0] == '{':
		var doc struct {
			EnvelopeHex string `json:"envelope_hex"`
			Usage       struct {
				Energy struct {
					EnvelopeHex string `json:"envelope_hex"`
				} `json:"energy"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(text, &doc); err != nil {
			return nil, fmt.Errorf("not a receipt in JSON: %w", err)
		}
		h := doc.EnvelopeHex
		if h == "" {
			h = doc.Usage.Energy.EnvelopeHex
		}
		if h == "" {
			return nil, errors.New("the JSON has no envelope_hex (nor usage.energy.envelope_hex)")
		}
		return decodeHex(h)
	case isHex(text):
		return decodeHex(string(text))
	}
	return b, nil
}

func decodeHex(s string) ([]byte, error) {
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("envelope hex: %w", err)
	}
	return b, nil
}

func isHex(b []byte) bool {
	if len(b) == 0 || len(b)%2 != 0 {
		return false
	}
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// readLog reads a receipt log: one envelope a line, hex or a JSON object
// carrying envelope_hex. Blank lines are skipped.
func readLog(path string) ([][]byte, error) {
	b, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	var envs [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, maxReceiptFile)
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		env, err := envelopeOf(text)
		if err == nil && !isHex(text) && text[0] != '{' {
			err = errors.New("want hex or a JSON object")
		}
		if err != nil {
			return nil, fmt.Errorf("log %s line %d: %w", path, line, err)
		}
		envs = append(envs, env)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("log %s: %w", path, err)
	}
	return envs, nil
}
