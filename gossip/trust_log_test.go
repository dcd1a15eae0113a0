package gossip

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// duplicateKeys returns the top-level keys that occur more than once in one
// JSON log line. encoding/json keeps the last of duplicate keys silently, so
// the line is read token by token.
func duplicateKeys(t *testing.T, line string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	tok, err := dec.Token()
	require.NoError(t, err)
	require.Equal(t, json.Delim('{'), tok, "a JSON object per line")
	seen := map[string]bool{}
	var dups []string
	for dec.More() {
		k, err := dec.Token()
		require.NoError(t, err)
		key := k.(string)
		if seen[key] {
			dups = append(dups, key)
		}
		seen[key] = true
		var skip json.RawMessage
		require.NoError(t, dec.Decode(&skip))
	}
	return dups
}

// The daemon's logger carries its own cluster ID ("cluster"); the trust
// log lines name the other cluster under another key, so no line carries
// "cluster" twice (a JSON consumer would keep only one of them).
func TestTrustLogLinesHaveNoDuplicateKeys(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil)).With("cluster", "self")
	own, _, _ := ed25519.GenerateKey(rand.Reader)
	good, goodPriv, _ := ed25519.GenerateKey(rand.Reader)
	rogue, roguePriv, _ := ed25519.GenerateKey(rand.Reader)
	failPersist := func(origin string, _ []byte) error {
		if origin == "self" {
			return nil
		}
		return errors.New("disk full")
	}
	tr, err := NewTrust(nil, false, "self", own, failPersist, log)
	require.NoError(t, err)

	msg := []byte("m")
	require.NoError(t, tr.Verify("b", good, msg, ed25519.Sign(goodPriv, msg))) // pin on first use, persist fails
	require.Error(t, tr.Verify("b", rogue, msg, ed25519.Sign(roguePriv, msg))) // key mismatch, loud

	var lines int
	for {
		line, err := buf.ReadString('\n')
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		lines++
		require.Empty(t, duplicateKeys(t, line), "duplicate keys in %s", line)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		require.Equal(t, "self", m["cluster"], "the daemon's own cluster: %s", line)
		require.Equal(t, "b", m["remote_cluster"], "the other cluster: %s", line)
	}
	require.Equal(t, 3, lines, "pinned, could not persist, refusing")
}
