// Command pulumi-resource-stackflowtest is the test resource provider plugin; see
// package provider.
package main

import (
	"fmt"
	"os"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/provider"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"

	testprovider "github.com/stackflow-io/stackflow/test/framework/provider"
)

func main() {
	err := provider.Main(testprovider.Name, func(*provider.HostClient) (pulumirpc.ResourceProviderServer, error) {
		return testprovider.New(), nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
