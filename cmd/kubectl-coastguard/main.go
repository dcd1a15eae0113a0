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
	os.Exit(run())
}

// run executes the command tree and returns the exit code; it is separate
// from main so that its deferred stop runs before os.Exit.
func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := cli.NewCommands().ExecuteContext(ctx)
	if err != nil && err.Error() != "" {
		fmt.Fprintln(os.Stderr, "error:", err)
	}
	return cli.ExitCode(err)
}
