// Command hello is the smallest program TestMultiPlatformIndex builds into an
// image for two platforms: it prints its platform, so the amd64 one can be
// checked by running it.
package main

import (
	"fmt"
	"runtime"
)

func main() { fmt.Printf("hello from %s/%s\n", runtime.GOOS, runtime.GOARCH) }
