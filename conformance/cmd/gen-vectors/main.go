// Command gen-vectors writes meshnode's mesh/1 conformance vectors: the
// reference serve's signed core and envelope, and meta.json with every
// input and expected id.
//
//	go run ./conformance/cmd/gen-vectors conformance/v1
package main

import (
	"fmt"
	"os"

	"github.com/meshnode/meshnode/conformance"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen-vectors <dir>")
		os.Exit(2)
	}
	v, err := conformance.ReferenceV1()
	if err == nil {
		err = v.WriteDir(os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen-vectors:", err)
		os.Exit(1)
	}
}
