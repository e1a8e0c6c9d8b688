package node

import _ "embed"

// ExampleConfig is the commented default configuration that `meshnode
// config example` prints and the Linux packages install.
//
//go:embed config.example.toml
var ExampleConfig string
