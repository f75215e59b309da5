// Command apidocs writes the API reference, docs/api/<kind>.md, for each
// kind the operator serves: a hand-written introduction (hack/apidocs/intro:
// what the kind is for, its admission rules in words, its deletion), the
// conditions and reasons declared in its Go API package (their constants and
// doc comments), and every field of its storage version's CRD schema — the
// text `kubectl explain` shows — with type, default and validation.
// `make generate` runs it; verify-generate fails when a page is stale.
//
// Usage: apidocs [-root DIR] [-out DIR]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/stackflow-io/stackflow/hack/apidocs/apiref"
)

func main() {
	root := flag.String("root", ".", "the repository")
	out := flag.String("out", "docs/api", "directory of the pages")
	flag.Parse()
	for _, k := range apiref.Kinds {
		page, err := apiref.Page(k, *root)
		if err != nil {
			fmt.Fprintf(os.Stderr, "apidocs: %s: %v\n", k.Kind, err)
			os.Exit(1)
		}
		if err := os.WriteFile(filepath.Join(*out, k.File), []byte(page), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "apidocs: %v\n", err)
			os.Exit(1)
		}
	}
}
