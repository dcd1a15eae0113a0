package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseTargets(t *testing.T) {
	ts, err := parseTargets("linux/amd64,darwin/arm64")
	require.NoError(t, err)
	assert.Equal(t, []target{{"linux", "amd64"}, {"darwin", "arm64"}}, ts)
	for _, bad := range []string{"", "linux", "linux/amd64,", "Linux/AMD64", "linux/amd64/v2"} {
		_, err := parseTargets(bad)
		assert.Error(t, err, bad)
	}
}

// The shipped krew template names every released platform; fillKrew fills
// the version and every checksum and refuses to leave a placeholder.
func TestFillKrewFromTheShippedTemplate(t *testing.T) {
	tmpl, err := os.ReadFile("../../deploy/krew/coastguard.yaml")
	require.NoError(t, err)
	sums := map[string]string{}
	for _, p := range []string{"linux_amd64", "linux_arm64", "darwin_amd64", "darwin_arm64"} {
		sums["kubectl-coastguard_"+p+".tar.gz"] = strings.Repeat(p[:1], 64)
	}
	out, err := fillKrew(string(tmpl), "v1.2.3", sums)
	require.NoError(t, err)
	assert.NotContains(t, out, "${")
	assert.Contains(t, out, "1.2.3")
	assert.Contains(t, out, strings.Repeat("d", 64))

	delete(sums, "kubectl-coastguard_darwin_arm64.tar.gz")
	_, err = fillKrew(string(tmpl), "v1.2.3", sums)
	require.ErrorContains(t, err, "SHA256_DARWIN_ARM64")

	require.NoError(t, checkKrewTemplate(string(tmpl), []target{{"linux", "amd64"}}))
	require.ErrorContains(t, checkKrewTemplate(string(tmpl), []target{{"windows", "amd64"}}), "SHA256_WINDOWS_AMD64")
}

// Archives depend on content only: two writes of the same files are
// byte-identical whatever the files' mtimes.
func TestArchivesAreReproducible(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "kubectl-coastguard")
	require.NoError(t, os.WriteFile(bin, []byte("binary"), 0o755))
	files := []archiveFile{{name: "kubectl-coastguard", path: bin, mode: 0o755}}
	a, b := filepath.Join(dir, "a.tar.gz"), filepath.Join(dir, "b.tar.gz")
	require.NoError(t, writeTarGz(a, files))
	require.NoError(t, os.Chtimes(bin, epoch.AddDate(3, 0, 0), epoch.AddDate(3, 0, 0)))
	require.NoError(t, writeTarGz(b, files))
	ab, err := os.ReadFile(a)
	require.NoError(t, err)
	bb, err := os.ReadFile(b)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(ab, bb))
}
