// Command kubectl-coastguard is the coastguard kubectl plugin: put it on
// PATH and run `kubectl coastguard status|explain|verdict|what-if|conflicts|decommission`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/coastguard-mcnp/coastguard/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := cli.NewCommands().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
