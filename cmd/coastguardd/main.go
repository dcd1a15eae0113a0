// Command coastguardd is the coastguard daemon and its operator tools.
//
//	coastguardd [run] [flags]      run the daemon (default)
//	coastguardd render ...         translate MCNPs + inventory offline
//	coastguardd decommission ...   retire this cluster from the cluster set
//	coastguardd version            print the build version
//
// The command line is cobra/pflag. `run` binds the Go flag set of config.go
// (so --help shows every flag with its default and environment variable);
// other subcommands keep their own flag sets.
package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/coastguard-mcnp/coastguard/cli"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/coastguard-mcnp/coastguard/internal/version"
)

// subcommands maps a subcommand name to its entry point, which parses its own
// arguments (Go flag set) and returns the process exit code. Registering a
// subcommand is one line in the file that implements it:
//
//	func init() { subcommands["render"] = runRender }
//
// `--help` is passed to the subcommand's flag set, which prints every flag
// with its default; that exit is 0.
var subcommands = map[string]func(args []string) int{}

// commands holds subcommands implemented directly as cobra commands:
//
//	func init() { commands = append(commands, newVersionCmd) }
var commands []func() *cobra.Command

// subcommandShort describes the subcommands in `coastguardd --help`.
var subcommandShort = map[string]string{
	"render":       "translate MCNPs and an inventory into NetworkPolicies, offline",
	"decommission": "retire this cluster from the cluster set (run inside a daemon pod)",
	"keys":         "generate or show this cluster's Ed25519 signing key",
}

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
	added := map[string]bool{}
	for _, mk := range commands {
		c := mk()
		added[c.Name()] = true
		root.AddCommand(c)
	}
	names := make([]string, 0, len(subcommands))
	for n := range subcommands {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if !added[n] {
			root.AddCommand(passthroughCmd(n, subcommands[n]))
		}
	}
	return root
}

// passthroughCmd wraps a subcommand that parses its own flags.
func passthroughCmd(name string, fn func([]string) int) *cobra.Command {
	short := subcommandShort[name]
	if short == "" {
		short = name
	}
	return &cobra.Command{
		Use:                name + " [flags]",
		Short:              short + " (" + name + " --help lists its flags)",
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			rc := fn(args)
			if rc == 2 && wantsHelp(args) {
				rc = 0 // the flag set printed its usage on request
			}
			if rc != 0 {
				return exitError(rc)
			}
			return nil
		},
	}
}

func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "-h" || a == "-help" || a == "--help" || a == "--h" {
			return true
		}
	}
	return false
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
