package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward/grant"
)

// grantKeyFile is the grant key's name in the config dir. It is not the
// owner key, which signs ownership certificates and nothing else.
const grantKeyFile = "grant.key"

func grantCommand() *cli.Command {
	keyFlag := &cli.StringFlag{Name: "key", Usage: "the signing key `FILE` (default: grant.key in the config dir)"}
	outFlag := &cli.StringFlag{Name: "out", Usage: "write to `FILE` instead of stdout"}
	return &cli.Command{
		Name:  "grant",
		Usage: "issue JCP grants and present them with requests (mesh/1 §2)",
		Description: "A grant hands a joule budget to a subject. A steward spends a chain of grants whose leaf names\n" +
			"it as subject, for the leaf's issuer, once per presentation. Issue a grant straight to the\n" +
			"steward (--subject steward) and present it yourself, or to another key that issues a child.",
		Subcommands: []*cli.Command{
			{
				Name:   "key",
				Usage:  "create the grant key where missing and print its did:key",
				Flags:  []cli.Flag{keyFlag},
				Action: grantKey,
			},
			{
				Name:  "issue",
				Usage: "sign a grant (a child of --parent, or a root) and write the chain it ends",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "subject", Required: true, Usage: "who the grant is for: a `DID`, or \"steward\" for the node at --api"},
					&cli.Uint64Flag{Name: "budget-uj", Required: true, Usage: "the budget in µJ"},
					&cli.DurationFlag{Name: "expires", Value: 24 * time.Hour, Usage: "how long the grant lasts"},
					&cli.StringFlag{Name: "resource", Usage: "resource `PATTERN` (default " + grant.AnyRequest + ", or the parent's)"},
					&cli.StringSliceFlag{Name: "action", Usage: "permitted `ACTION` (repeatable; default infer)"},
					&cli.StringSliceFlag{Name: "model-in", Usage: "ModelIn caveat: permitted weights `DIGEST` (repeatable)"},
					&cli.Uint64Flag{Name: "max-cost-uj", Usage: "MaxCostUj caveat: the most one serve may cost, in µJ"},
					&cli.StringFlag{Name: "parent", Usage: "the parent chain `FILE` this grant extends"},
					keyFlag, outFlag,
				},
				Action: grantIssue,
			},
			{
				Name:      "present",
				Usage:     "sign a presentation of a chain for a request body and write the body with jcp_presentation",
				ArgsUsage: "BODY",
				Description: "BODY is a /v1/chat/completions, /v1/completions or /v1/responses request body, which must\n" +
					"name metadata.joule_ceiling_uj. The presentation is signed for the request the body derives\n" +
					"(granted_serve_request); send the written body unchanged.",
				Flags:  []cli.Flag{&cli.StringFlag{Name: "chain", Required: true, Usage: "the chain `FILE` (from grant issue)"}, keyFlag, outFlag},
				Action: grantPresent,
			},
			{
				Name:      "show",
				Usage:     "print a chain file's grants",
				ArgsUsage: "CHAIN",
				Action:    grantShow,
			},
		},
	}
}

// grantKeyPath is --key, or grant.key in the config dir.
func grantKeyPath(c *cli.Context) (string, error) {
	if k := c.String("key"); k != "" {
		return k, nil
	}
	dir, err := ownerDir(c)
	if err != nil {
		return "", err
	}
	return dir.Path(grantKeyFile), nil
}

func loadGrantKey(c *cli.Context) (*identity.Key, error) {
	path, err := grantKeyPath(c)
	if err != nil {
		return nil, err
	}
	k, err := identity.LoadKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no grant key at %s: run `meshcli grant key` first", path)
	}
	return k, err
}

func grantKey(c *cli.Context) error {
	path, err := grantKeyPath(c)
	if err != nil {
		return err
	}
	k, err := identity.LoadKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		if k, err = identity.GenerateKey(envOf(c).rand); err != nil {
			return err
		}
		pem, err := k.MarshalPEM()
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if _, err := f.Write(pem); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	fmt.Fprintf(envOf(c).stdout, "%s\t%s\n", k.DIDKey(), path)
	return nil
}

func grantIssue(c *cli.Context) error {
	e := envOf(c)
	key, err := loadGrantKey(c)
	if err != nil {
		return err
	}
	subject := c.String("subject")
	if subject == "steward" {
		var s struct {
			Steward string `json:"steward"`
		}
		if err := getJSON(c, "/v1/mesh/steward", &s); err != nil {
			return fmt.Errorf("--subject steward: %w", err)
		}
		subject = s.Steward
	}
	iss := grant.Issuance{Issuer: key, Subject: subject, Resource: c.String("resource"), Actions: c.StringSlice("action"),
		BudgetUJ: c.Uint64("budget-uj"), Expiry: e.now().Add(c.Duration("expires")), Rand: e.rand}
	var models []receipt.ContentID
	for _, m := range c.StringSlice("model-in") {
		id, err := receipt.ParseContentID(m)
		if err != nil {
			return fmt.Errorf("--model-in: %w", err)
		}
		models = append(models, id)
	}
	if len(models) > 0 {
		iss.Caveats = append(iss.Caveats, grant.ModelIn(models...))
	}
	if c.IsSet("max-cost-uj") {
		iss.Caveats = append(iss.Caveats, grant.MaxCostUJ(c.Uint64("max-cost-uj")))
	}
	if p := c.String("parent"); p != "" {
		if iss.Parent, err = readChain(p); err != nil {
			return err
		}
	}
	chain, err := grant.Issue(iss)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(grant.ChainFile{Chain: chain}, "", "  ")
	if err != nil {
		return err
	}
	return writeOut(c, append(b, '\n'), fmt.Sprintf("grant %s (a chain of %d)", chain.Leaf().ID, len(chain)))
}

func grantPresent(c *cli.Context) error {
	if c.NArg() != 1 {
		return errors.New("grant present takes one BODY file (see meshcli grant present --help)")
	}
	key, err := loadGrantKey(c)
	if err != nil {
		return err
	}
	chain, err := readChain(c.String("chain"))
	if err != nil {
		return err
	}
	body, err := readBounded(c.Args().First())
	if err != nil {
		return err
	}
	out, id, err := grant.PresentBody(body, chain, key, envOf(c).rand)
	if err != nil {
		return fmt.Errorf("%s: %w", c.Args().First(), err)
	}
	fmt.Fprintf(envOf(c).stderr, "presented grant %s for request %s\n", chain.Leaf().ID, id)
	return writeOut(c, append(out, '\n'), "")
}

func grantShow(c *cli.Context) error {
	if c.NArg() != 1 {
		return errors.New("grant show takes one CHAIN file")
	}
	chain, err := readChain(c.Args().First())
	if err != nil {
		return err
	}
	w := envOf(c).stdout
	for i, s := range chain {
		g := s.Grant
		fmt.Fprintf(w, "%d  %s\n   issuer   %s\n   subject  %s\n   budget   %d µJ\n   expires  %s\n   permits  %s on %s\n",
			i, s.ID, g.Issuer, g.Subject, g.BudgetUJ, time.Unix(int64(g.Expiry), 0).UTC().Format(time.RFC3339),
			strings.Join(g.Capability.Actions, ","), g.Capability.Resource)
		for _, cv := range g.Caveats {
			switch {
			case cv.UJ != nil:
				fmt.Fprintf(w, "   caveat   %s %d µJ\n", cv.Type, *cv.UJ)
			default:
				fmt.Fprintf(w, "   caveat   %s %v\n", cv.Type, cv.Models)
			}
		}
	}
	return nil
}

func readChain(path string) (grant.Chain, error) {
	b, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	chain, err := grant.ParseChainFile(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return chain, nil
}

// writeOut writes b to --out (then says what it wrote) or to stdout.
func writeOut(c *cli.Context, b []byte, what string) error {
	out := c.String("out")
	if out == "" {
		_, err := envOf(c).stdout.Write(b)
		return err
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		return err
	}
	if what != "" {
		fmt.Fprintf(envOf(c).stdout, "%s written to %s\n", what, out)
	}
	return nil
}
