// Command stackflow-netprobe is the test workspace image's network probe
// (cluster tests only): it dials each NAME=HOST:PORT target once per round and
// prints the round's results as one JSON line ("ok" or the dial error), and
// optionally accepts TCP connections on -listen, so that a test reads, from
// the pod's log, what this pod reaches now.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

type round struct {
	Round   int               `json:"round"`
	Results map[string]string `json:"results"`
}

func main() {
	listen := flag.String("listen", "", "accept TCP connections on this address (and close them)")
	timeout := flag.Duration("timeout", 2*time.Second, "dial timeout")
	every := flag.Duration("every", time.Second, "pause between rounds")
	flag.Parse()
	targets := map[string]string{}
	for _, a := range flag.Args() {
		name, addr, ok := strings.Cut(a, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "target %q: want NAME=HOST:PORT\n", a)
			os.Exit(2)
		}
		targets[name] = addr
	}
	if *listen != "" {
		l, err := net.Listen("tcp", *listen)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					continue
				}
				c.Close()
			}
		}()
	}
	enc := json.NewEncoder(os.Stdout)
	for n := 1; ; n++ {
		r := round{Round: n, Results: map[string]string{}}
		for name, addr := range targets {
			c, err := net.DialTimeout("tcp", addr, *timeout)
			if err != nil {
				r.Results[name] = err.Error()
				continue
			}
			c.Close()
			r.Results[name] = "ok"
		}
		if len(targets) > 0 {
			_ = enc.Encode(r)
		}
		time.Sleep(*every)
	}
}
