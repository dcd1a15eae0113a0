// Command coastguardd is the coastguard daemon and its operator tools.
//
//	coastguardd [run] [flags]      run the daemon (default)
//	coastguardd render ...         translate MCNPs + inventory offline
//	coastguardd decommission ...   retire this cluster from the cluster set
//	coastguardd keys ...           generate, show or rotate the signing key
//	coastguardd version            print the build version
//
// Every subcommand is a cobra command with pflag flags. `run` binds the Go
// flag set of config.go (so --help shows every flag with its default and
// environment variable); the others declare typed flags (durations as
// durations). --help only prints help and exits 0, whatever the command.
//
// Exit codes: 0 success or help, 1 the command failed, 2 usage or
// configuration error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/coastguard-mcnp/coastguard/cli"
	"github.com/coastguard-mcnp/coastguard/internal/version"
)

// commands holds the subcommands; each file registers its own:
//
//	func init() { commands = append(commands, newVersionCmd) }
var commands []func() *cobra.Command

func init() {
	commands = append(commands, newRunCmd, newVersionCmd, newClusterSetCmd)
}

// newClusterSetCmd mounts the kubectl plugin's command tree (status, explain,
// verdict, what-if, conflicts, decommission) as `coastguardd clusterset ...`,
// for hosts where only the daemon binary is installed.
func newClusterSetCmd() *cobra.Command {
	c := cli.NewCommands()
	c.Use = "clusterset"
	c.Short = "the kubectl coastguard commands: status, explain, verdict, what-if, conflicts, decommission"
	return c
}

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// exitError carries a subcommand's exit code through cobra.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit %d", int(e)) }

// failed reports err (if any) as "coastguardd <command>: err" on stderr and
// returns the exit code to leave with.
func failed(cmd *cobra.Command, code int, err error) error {
	if err == nil {
		return nil
	}
	// The exit code carries the failure if stderr is gone too.
	_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "%s: %v\n", cmd.CommandPath(), err)
	return exitError(code)
}

// usageError reports a usage mistake the flag parser cannot catch, with
// the command's usage line, and exits 2.
func usageError(cmd *cobra.Command, msg string) error {
	_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "%s: %s\nUsage: %s\n", cmd.CommandPath(), msg, cmd.UseLine())
	return exitError(2)
}

func execute(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetArgs(defaultToRun(root, args))
	err := root.Execute()
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return int(ee)
	default:
		// The exit code carries the failure if stderr is gone too.
		_, _ = fmt.Fprintf(stderr, "coastguardd: %v\n", err)
		return 2
	}
}

// defaultToRun keeps `coastguardd` and `coastguardd --flag ...` meaning
// `coastguardd run ...`.
func defaultToRun(root *cobra.Command, args []string) []string {
	if len(args) == 0 {
		return []string{"run"}
	}
	first := args[0]
	if strings.HasPrefix(first, "-") && !slices.Contains([]string{"-h", "--help", "-help", "--version", "-v"}, first) {
		return append([]string{"run"}, args...)
	}
	return args
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "coastguardd",
		Short:         "coastguard: multi-cluster NetworkPolicy for Submariner cluster sets",
		Version:       version.Get(),
		SilenceUsage:  true,
		SilenceErrors: true,
		CompletionOptions: cobra.CompletionOptions{
			DisableDefaultCmd: true,
		},
	}
	for _, mk := range commands {
		root.AddCommand(mk())
	}
	return root
}

func newRunCmd() *cobra.Command {
	cf := newConfigFlags("run", os.Getenv)
	cmd := &cobra.Command{
		Use:   "run [flags]",
		Short: "run the daemon (the default command)",
		Long: "Run coastguardd. Every setting comes from, in increasing precedence: its default, " +
			"the --config file, its environment variable, its flag.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := cf.load(cmd.Flags().Changed)
			if err != nil {
				// The exit code carries the failure if stderr is gone too.
				_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "coastguardd: invalid configuration:\n%v\n", err)
				return exitError(2)
			}
			return exitError(runConfig(cfg))
		},
	}
	cmd.Flags().SortFlags = false
	cmd.Flags().AddGoFlagSet(cf.fs)
	// pflag takes a Go flag's default from its current value, which is
	// empty by design (see configFlags); show the effective default.
	cf.fs.VisitAll(func(gf *flag.Flag) {
		if pf := cmd.Flags().Lookup(gf.Name); pf != nil {
			pf.DefValue = gf.DefValue
		}
	})
	return cmd
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the coastguardd version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "coastguardd %s (revision %s, %s, %s/%s)\n",
				version.Get(), version.GetRevision(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
