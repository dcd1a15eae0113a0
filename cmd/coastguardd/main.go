// Command coastguardd is the coastguard daemon and its operator tools.
//
//	coastguardd [run] [flags]      run the daemon (default)
//	coastguardd render ...         translate MCNPs + inventory offline
//	coastguardd decommission ...   retire this cluster from the cluster set
package main

import (
	"fmt"
	"os"
)

// subcommands maps a subcommand name to its entry point. Each returns the
// process exit code. Files in this package register themselves in init().
var subcommands = map[string]func(args []string) int{}

func main() {
	args := os.Args[1:]
	name := "run"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		name, args = args[0], args[1:]
	}
	if name == "help" || name == "--help" {
		usage()
		os.Exit(0)
	}
	fn, ok := subcommands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "coastguardd: unknown subcommand %q\n", name)
		usage()
		os.Exit(2)
	}
	os.Exit(fn(args))
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: coastguardd [run|render|decommission|help] [flags]")
	for n := range subcommands {
		fmt.Fprintf(os.Stderr, "  %s\n", n)
	}
}
