package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// keyMaterial matches a base64 Ed25519 seed or key (32 bytes: 43 characters
// and one '='), the form `keys generate` prints.
var keyMaterial = regexp.MustCompile(`[A-Za-z0-9+/]{43}=`)

// Every subcommand's --help (and -h) only prints help: exit 0, usage on
// stdout, nothing else done. `keys generate --help` used to print a fresh
// private key, and `keys --help` "unknown command".
func TestHelpHasNoSideEffects(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	for _, args := range [][]string{
		{"--help"}, {"-h"}, {"help"},
		{"run", "--help"},
		{"render", "--help"}, {"render", "-h"},
		{"render", "--input", dir, "--output", out, "--help"}, // would render without --help
		{"decommission", "--help"}, {"decommission", "-h"},
		{"keys"}, {"keys", "--help"}, {"keys", "-h"}, {"help", "keys"},
		{"keys", "generate", "--help"}, {"keys", "generate", "-h"}, {"help", "keys", "generate"},
		{"keys", "show", "--help"}, {"keys", "rotate", "--help"},
		{"version", "--help"},
		{"clusterset", "--help"},
	} {
		name := strings.Join(args, " ")
		rc, stdout, stderr := runCLI(args...)
		require.Equal(t, 0, rc, "%s: stderr %s", name, stderr)
		require.Contains(t, stdout, "Usage:", name)
		require.NotContains(t, stdout+stderr, "unknown command", name)
		require.NotContains(t, stdout+stderr, "Error", name)
		require.False(t, keyMaterial.MatchString(stdout+stderr), "%s printed key material:\n%s", name, stdout)
	}
	_, err := os.Stat(out)
	require.True(t, os.IsNotExist(err), "render --help wrote %s", out)
}

// Flags are typed: a duration flag takes and shows a duration, and help
// names the type.
func TestSubcommandFlagsAreTyped(t *testing.T) {
	rc, stdout, _ := runCLI("decommission", "--help")
	require.Equal(t, 0, rc)
	require.Regexp(t, `--timeout duration\s+how long to wait for the daemon \(default 1m30s\)`, stdout)
	require.Regexp(t, `--admin-addr string`, stdout)

	rc, _, stderr := runCLI("decommission", "--timeout", "90")
	require.Equal(t, 2, rc, "a duration without a unit is a usage error")
	require.Contains(t, stderr, `invalid argument "90" for "--timeout" flag`)

	rc, stdout, _ = runCLI("render", "--help")
	require.Equal(t, 0, rc)
	require.Regexp(t, `--cluster-cidrs strings`, stdout)
	require.Contains(t, stdout, "--input string")
	require.NotRegexp(t, `(?m)^\s+-input`, stdout, "no single-dash Go flag usage")
}

// The key commands do what they say, through the command line.
func TestKeysCommands(t *testing.T) {
	rc, stdout, stderr := runCLI("keys", "generate")
	require.Equal(t, 0, rc, stderr)
	require.Regexp(t, `^[A-Za-z0-9+/]{43}=\n$`, stdout)
	path := filepath.Join(t.TempDir(), "signing.key")
	require.NoError(t, os.WriteFile(path, []byte(stdout), 0o600))

	rc, line, _ := runCLI("keys", "show", "--signing-key-file", path, "--cluster-id", "eu-1")
	require.Equal(t, 0, rc)
	require.Regexp(t, `^eu-1 [A-Za-z0-9+/]{43}=\n$`, line)
	require.NotContains(t, line, strings.TrimSpace(stdout), "show prints the public key, never the seed")

	rc, rotated, _ := runCLI("keys", "rotate", "--signing-key-file", path, "--cluster-id", "eu-1")
	require.Equal(t, 0, rc)
	require.Contains(t, rotated, "endorsement ")

	for _, tc := range []struct {
		args []string
		rc   int
		want string
	}{
		{[]string{"keys", "nosuch"}, 2, `unknown command "nosuch"`},
		{[]string{"keys", "generate", "extra"}, 2, `unknown command "extra"`},
		{[]string{"keys", "show", "--signing-key-file", ""}, 2, "--signing-key-file is required"},
		{[]string{"keys", "show", "--signing-key-file", filepath.Join(t.TempDir(), "missing")}, 1, "coastguardd keys show: "},
		{[]string{"keys", "rotate", "--signing-key-file", path, "--cluster-id", ""}, 1, "--cluster-id is required"},
	} {
		t.Setenv("COASTGUARD_CLUSTER_ID", "")
		rc, _, stderr := runCLI(tc.args...)
		require.Equal(t, tc.rc, rc, "%v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.want, "%v", tc.args)
	}
}
