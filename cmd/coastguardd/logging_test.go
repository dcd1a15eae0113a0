package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"
)

// lineKeys returns every key of a JSON log line at every depth, in order,
// with repeats (encoding/json's map decoding would hide them).
func lineKeys(t *testing.T, line string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	var keys []string
	var walk func() // one value
	walk = func() {
		tok, err := dec.Token()
		require.NoError(t, err, line)
		switch tok {
		case json.Delim('{'):
			for dec.More() {
				k, err := dec.Token()
				require.NoError(t, err, line)
				keys = append(keys, k.(string))
				walk()
			}
			_, err = dec.Token()
			require.NoError(t, err)
		case json.Delim('['):
			for dec.More() {
				walk()
			}
			_, err = dec.Token()
			require.NoError(t, err)
		}
	}
	walk()
	return keys
}

var lowerCamel = regexp.MustCompile(`^[a-z][a-zA-Z0-9]*$`)

// checkConventions fails for a line with a repeated top-level key, a key
// that is not lowerCamelCase, or a duration written as a number.
func checkConventions(t *testing.T, line string) {
	t.Helper()
	seen := map[string]bool{}
	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(line), &top), line)
	for _, k := range lineKeys(t, line) {
		assert.Regexp(t, lowerCamel, k, "key %q in %s", k, line)
		if _, isTop := top[k]; isTop {
			assert.False(t, seen[k], "key %q twice in %s", k, line)
			seen[k] = true
		}
	}
	for k, v := range top {
		if strings.HasSuffix(strings.ToLower(k), "duration") || strings.HasSuffix(k, "Timeout") {
			assert.True(t, strings.HasPrefix(string(v), `"`), "%s is a number, not a duration string: %s", k, line)
		}
	}
}

// The daemon's logger writes Kubernetes-style lines whatever the call
// site wrote: camelCase keys, durations with units, no repeated key (the
// daemon's logger carries With("cluster", self); a call site naming a
// remote cluster "cluster" again used to produce a line with two).
func TestLoggerFollowsConventions(t *testing.T) {
	var buf bytes.Buffer
	log := newLoggerTo(&buf, slog.LevelDebug).With("cluster", "eu-1")
	log.Info("store loaded", "duration", 310608*time.Nanosecond, "unclean_shutdown", false, "reset-origins", []string{"a"})
	log.With("component", "gossip").Warn("pinned a cluster's signing key on first use", "cluster", "eu-2", "remote_cluster", "eu-2")
	log.WithGroup("lease").Info("observed leader", "lease_name", "coastguard-eu-1", "renew_deadline", 10*time.Second)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 3)
	for _, l := range lines {
		checkConventions(t, l)
	}
	assert.Contains(t, lines[0], `"duration":"310.608µs"`)
	assert.Contains(t, lines[0], `"uncleanShutdown":false`)
	assert.Contains(t, lines[0], `"resetOrigins":["a"]`)
	assert.Contains(t, lines[1], `"cluster":"eu-1"`)
	assert.Contains(t, lines[1], `"cluster2":"eu-2"`)
	assert.Contains(t, lines[1], `"remoteCluster":"eu-2"`)
	assert.Contains(t, lines[2], `"lease":{"leaseName":"coastguard-eu-1","renewDeadline":"10s"}`)
}

// client-go's klog lines, routed through the daemon's logger, follow them
// too.
func TestKlogLinesFollowConventions(t *testing.T) {
	var buf bytes.Buffer
	routeKlog(newLoggerTo(&buf, slog.LevelInfo))
	defer klog.SetSlogLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	klog.InfoS("attempting to acquire leader lease", "lease", "ns/x", "retry_period", 2*time.Second)
	klog.Flush()
	line := strings.TrimSpace(buf.String())
	require.NotEmpty(t, line)
	checkConventions(t, line)
	assert.Contains(t, line, `"retryPeriod":"2s"`)
	assert.Contains(t, line, `"source":"client-go"`, "the routed logger's own key, not renamed")
}

// The checker catches each violation.
func TestCheckConventionsCatchesViolations(t *testing.T) {
	for _, bad := range []string{
		`{"msg":"x","cluster":"a","cluster":"b"}`,
		`{"msg":"x","remote_cluster":"a"}`,
		`{"msg":"x","duration":310608}`,
	} {
		ft := &testing.T{}
		done := make(chan struct{})
		go func() { defer close(done); checkConventions(ft, bad) }()
		<-done
		assert.True(t, ft.Failed(), bad)
	}
}
