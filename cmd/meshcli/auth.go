package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/meshnode/meshnode/node/control/owner"
	"github.com/meshnode/meshnode/node/identity"
)

func authCommand() *cli.Command {
	ttl := &cli.DurationFlag{Name: "ttl", Value: owner.DefaultTTL, Usage: "how long the certificate is valid"}
	return &cli.Command{
		Name:  "auth",
		Usage: "manage the owner key and ownership certificates",
		Description: "The owner key signs ownership certificates and nothing else. A node trusts the owner keys in\n" +
			"its config and presents its own certificate; meshcli presents a certificate for its own client\n" +
			"identity, so the owner key never takes part in a connection.",
		Subcommands: []*cli.Command{
			{
				Name:  "init",
				Usage: "create the owner key and meshcli's client identity where missing, and (re)issue its certificate",
				Flags: []cli.Flag{ttl, &cli.StringFlag{Name: "label", Usage: "label of the client certificate (default meshcli@HOSTNAME)"}},
				Action: func(c *cli.Context) error {
					dir, err := ownerDir(c)
					if err != nil {
						return err
					}
					e := envOf(c)
					label := c.String("label")
					if label == "" {
						host, _ := os.Hostname()
						label = "meshcli@" + host
					}
					r, err := dir.Init(owner.InitOptions{Now: e.now(), TTL: c.Duration("ttl"), Label: label, Rand: e.rand})
					if err != nil {
						return err
					}
					w := e.stdout
					t := newTable(w, "Owner", r.Owner.String(), did(r.CreatedOwner, dir.Path(owner.OwnerKeyFile)))
					t.row("Client", r.Client.String(), did(r.CreatedClient, dir.Path(owner.ClientKeyFile)))
					t.row("Certificate", "valid until "+r.Expires.Format(time.RFC3339), did(r.IssuedCert, dir.Path(owner.ClientCertFile)))
					t.flush()
					fmt.Fprintf(w, "\nTo own a node, add your owner key to its config:\n\n  [control]\n  owner_keys = [%q]\n\n", r.Owner.String())
					fmt.Fprintf(w, "and give it a certificate: meshcli auth sign-node NODE_ID -o node.ownership\n(NODE_ID is what `meshnode id` prints on that machine).\n")
					return nil
				},
			},
			{
				Name:      "sign-node",
				Usage:     "issue a certificate that binds NODE_ID (hex or did:key) to your owner key",
				ArgsUsage: "NODE_ID",
				Flags: []cli.Flag{
					ttl,
					&cli.StringFlag{Name: "label", Usage: "a name for the node (public: the node advertises its certificate)"},
					&cli.StringFlag{Name: "hostname", Usage: "hostname hint (public too)"},
					&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the certificate to `FILE` instead of stdout"},
				},
				Action: signNode,
			},
			{
				Name:  "status",
				Usage: "show the owner key, the client identity and whether its certificate is valid",
				Action: func(c *cli.Context) error {
					dir, key, err := ownerKey(c)
					if err != nil {
						return err
					}
					w := envOf(c).stdout
					t := newTable(w, "Owner", owner.KeyOf(key).String(), dir.Path(owner.OwnerKeyFile))
					client, cert, cerr := dir.Client(envOf(c).now())
					if cerr == nil {
						t.row("Client", client.ID().String(), dir.Path(owner.ClientKeyFile))
						t.row("Certificate", "valid until "+owner.Expires(cert).Format(time.RFC3339), dir.Path(owner.ClientCertFile))
					}
					t.flush()
					return cerr
				},
			},
		},
	}
}

// did says what init did with a file.
func did(created bool, path string) string {
	if created {
		return "created " + path
	}
	return "kept " + path
}

func signNode(c *cli.Context) error {
	if c.NArg() != 1 {
		return errors.New("sign-node takes one NODE_ID (see meshcli auth sign-node --help)")
	}
	node, err := parseNodeID(c.Args().First())
	if err != nil {
		return err
	}
	_, key, err := ownerKey(c)
	if err != nil {
		return err
	}
	e := envOf(c)
	now := e.now()
	cert, err := owner.Issue(key, owner.Options{Endpoint: node, IssuedAt: now, ExpiresAt: now.Add(c.Duration("ttl")),
		Label: c.String("label"), HostnameHint: c.String("hostname"), Rand: e.rand})
	if err != nil {
		return err
	}
	if out := c.String("output"); out != "" {
		if err := owner.Save(out, cert); err != nil {
			return err
		}
		_, err = fmt.Fprintf(e.stdout, "wrote %s: node %s owned by %s until %s\n", out, node.Short(), cert.GetOwnerId(),
			owner.Expires(cert).Format(time.RFC3339))
		return err
	}
	b, err := owner.MarshalPEM(cert)
	if err != nil {
		return err
	}
	_, err = e.stdout.Write(b)
	return err
}

// parseNodeID reads a node id as `meshnode id` prints it: hex or did:key.
func parseNodeID(s string) (identity.EndpointID, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "did:") {
		return identity.ParseDIDKey(s)
	}
	return identity.ParseEndpointID(s)
}

// ownerKey loads the owner key from the config dir.
func ownerKey(c *cli.Context) (owner.Dir, *identity.Key, error) {
	dir, err := ownerDir(c)
	if err != nil {
		return "", nil, err
	}
	key, err := dir.OwnerKey()
	return dir, key, err
}
