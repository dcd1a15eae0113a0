package gossip

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

func TestClusterVerdicts(t *testing.T) {
	t0 := time.Unix(10_000, 0)
	const timeout = time.Minute
	status := map[string]ClusterStatus{
		"self":    {LastAlive: t0.Add(-time.Hour)},               // own cluster: always alive
		"alive":   {Alive: true, AliveMembers: 2, LastAlive: t0}, // a member is alive
		"fresh":   {LastAlive: t0.Add(-timeout + time.Second)},   // dead, not for long
		"expired": {LastAlive: t0.Add(-timeout)},                 // dead for ReconnectTimeout
		"retired": {LastAlive: t0.Add(-time.Hour)},               // already retired
		"nostate": {LastAlive: t0.Add(-time.Hour)},               // nothing in state
	}
	digest := crdt.Digest{
		"self": {Max: 5}, "alive": {Max: 5}, "fresh": {Max: 5}, "expired": {Max: 7},
		"retired": {Max: 9, Retired: 9},
	}
	got := map[string]clusterVerdict{}
	for _, v := range clusterVerdicts("self", status, digest, t0, timeout) {
		got[v.cluster] = v
	}
	require.Len(t, got, len(status))
	require.Equal(t, clusterAlive, got["self"].state)
	require.Equal(t, clusterAlive, got["alive"].state)
	require.Equal(t, clusterStale, got["fresh"].state)
	require.Nil(t, got["fresh"].retire, "retired before ReconnectTimeout")
	require.Equal(t, clusterStale, got["expired"].state)
	require.Equal(t, &crdt.Retire{Origin: "expired", UpTo: 7}, got["expired"].retire)
	require.Equal(t, clusterGone, got["retired"].state)
	require.Equal(t, clusterGone, got["nostate"].state)
	for _, c := range []string{"self", "alive", "retired", "nostate"} {
		require.Nil(t, got[c].retire, c)
	}
}

// The retirer on an injected clock: a cluster that stops having alive
// members is stale at once, retired exactly when ReconnectTimeout has
// passed since it was last alive, and only once; a cluster that comes back
// in time is never retired.
func TestRetirerInjectedClock(t *testing.T) {
	const timeout = 10 * time.Minute
	now := time.Unix(20_000, 0)
	ms := newMembers("me", true)
	digest := crdt.Digest{"dead": {Max: 4}, "back": {Max: 6}}
	var retired []crdt.Retire
	m, err := newMetrics(nil, func() float64 { return 0 })
	require.NoError(t, err)
	r := &retirer{
		self: "own", timeout: timeout, now: func() time.Time { return now },
		digest: func() crdt.Digest { return digest }, status: ms.noticeOrigins,
		retire: func(rt crdt.Retire) bool {
			retired = append(retired, rt)
			digest[rt.Origin] = crdt.OriginDigest{Max: rt.UpTo, Retired: rt.UpTo}
			return true
		},
		m: m, log: slog.New(slog.DiscardHandler),
	}
	stale := func(c string) float64 { return testutil.ToFloat64(m.clusterStale.WithLabelValues(c)) }

	r.round() // both clusters are known from state only: their clocks start now
	require.Empty(t, retired)
	require.Equal(t, 1.0, stale("dead"))
	require.Equal(t, 2.0, testutil.ToFloat64(m.clusters.WithLabelValues("stale")))

	now = now.Add(timeout / 2)
	ms.observe(mlNode("b-1"), "back", "", 0, true, now) // "back" restarts in time
	r.round()
	require.Empty(t, retired)
	require.Equal(t, 0.0, stale("back"))

	now = now.Add(timeout/2 - time.Second)
	r.round()
	require.Empty(t, retired, "retired before ReconnectTimeout")

	now = now.Add(time.Second)
	r.round()
	require.Equal(t, []crdt.Retire{{Origin: "dead", UpTo: 4}}, retired)
	require.Equal(t, 1.0, testutil.ToFloat64(m.retirements.WithLabelValues("reconnect_timeout")))

	now = now.Add(timeout)
	r.round()
	require.Len(t, retired, 1, "a retired cluster is not retired again")
	require.Equal(t, 1.0, testutil.ToFloat64(m.clusters.WithLabelValues("alive")))
	require.Equal(t, 0.0, testutil.ToFloat64(m.clusters.WithLabelValues("stale")))
}

// A takeover's seal is routine wherever it arrives, the own cluster's
// standbys included (they logged an error on every failover); only the
// mesh's unsigned retirement of our own cluster is an error.
func TestRetireLog(t *testing.T) {
	seal := crdt.MakeVersion(3, 0) - 1
	require.True(t, seal.EpochEnd())
	require.False(t, crdt.MakeVersion(3, 7).EpochEnd())
	for _, c := range []struct {
		r     crdt.Retire
		level slog.Level
		msg   string
	}{
		{crdt.Retire{Origin: "a", UpTo: seal, Sig: []byte{1}}, slog.LevelInfo, "sealed"},
		{crdt.Retire{Origin: "a", UpTo: seal}, slog.LevelInfo, "sealed"}, // an unsigned mesh seals unsigned
		{crdt.Retire{Origin: "b", UpTo: seal, Sig: []byte{1}}, slog.LevelInfo, "sealed"},
		{crdt.Retire{Origin: "a", UpTo: crdt.MakeVersion(3, 7)}, slog.LevelError, "retired by the mesh"},
		{crdt.Retire{Origin: "a", UpTo: crdt.MakeVersion(3, 7), Sig: []byte{1}}, slog.LevelInfo, "decommission"},
		{crdt.Retire{Origin: "b", UpTo: crdt.MakeVersion(3, 7)}, slog.LevelInfo, "cluster retired"},
	} {
		level, msg := retireLog("a", c.r)
		require.Equal(t, c.level, level, "%+v", c.r)
		require.Contains(t, msg, c.msg, "%+v", c.r)
	}
}
