package daemon

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

func TestDecideGate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	base := GateInput{Now: t0.Add(time.Second), Since: t0, Timeout: time.Minute, Self: "eu-1",
		Known: []string{"eu-1", "eu-2", "us-1"}, SelfSynced: true}
	with := func(f func(*GateInput)) GateInput { in := base; f(&in); return in }
	cases := []struct {
		name    string
		in      GateInput
		open    bool
		reason  string
		missing []string
	}{
		{"nothing covered", base, false, "partial view", []string{"eu-2", "us-1"}},
		{"one of two covered", with(func(in *GateInput) { in.Covered = map[string]bool{"eu-2": true} }), false, "partial view", []string{"us-1"}},
		{"compared but not applied does not count", with(func(in *GateInput) { in.Covered = map[string]bool{"eu-2": true, "us-1": false} }), false, "partial view", []string{"us-1"}},
		{"all covered", with(func(in *GateInput) { in.Covered = map[string]bool{"eu-2": true, "us-1": true} }), true, "covered", nil},
		{"own inventory not yet written", with(func(in *GateInput) {
			in.Covered = map[string]bool{"eu-2": true, "us-1": true}
			in.SelfSynced = false
		}), false, "partial view", []string{"eu-1 (own inventory)"}},
		{"alone", with(func(in *GateInput) { in.Known = []string{"eu-1"} }), true, "covered", nil},
		{"retired cluster not waited for", with(func(in *GateInput) {
			in.Covered = map[string]bool{"eu-2": true}
			in.Retired = map[string]bool{"us-1": true}
		}), true, "covered", nil},
		{"timeout", with(func(in *GateInput) { in.Now = t0.Add(time.Minute) }), true, "timeout", []string{"eu-2", "us-1"}},
		{"no timeout configured", with(func(in *GateInput) { in.Timeout = 0; in.Now = t0.Add(time.Hour) }), false, "partial view", []string{"eu-2", "us-1"}},
		{"decommission releases", with(func(in *GateInput) { in.Decommissioning = true }), true, "decommission", nil},
		{"duplicates and empty ids", with(func(in *GateInput) { in.Known = []string{"", "eu-2", "eu-2"} }), false, "partial view", []string{"eu-2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := DecideGate(tc.in)
			assert.Equal(t, tc.open, d.Open, d.String())
			assert.Equal(t, tc.reason, d.Reason)
			assert.Equal(t, tc.missing, d.Missing)
		})
	}
}

// Coverage means applied: a digest from eu-2 covers it only once the local
// digest has caught up with every origin in it, and only if it arrived after
// the gate closed.
func TestCoverageRequiresAppliedEntries(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := newCoverage()
	remote := crdt.Digest{"eu-2": {Max: 10}, "us-1": {Max: 4}}
	c.observe("eu-2", remote, t0.Add(time.Second))
	c.observe("us-1", crdt.Digest{"us-1": {Max: 4}}, t0.Add(-time.Second)) // before the gate closed

	local := crdt.Digest{"eu-2": {Max: 10}} // us-1 entries not applied yet
	cov := c.covered(t0, local, nil)
	assert.False(t, cov["eu-2"], "digest compared but us-1 entries missing")
	assert.False(t, cov["us-1"], "stale exchange does not count")

	local["us-1"] = crdt.OriginDigest{Max: 4}
	cov = c.covered(t0, local, nil)
	assert.True(t, cov["eu-2"])
	_, seen := cov["us-1"]
	require.False(t, seen)

	remote["eu-2"] = crdt.OriginDigest{Max: 99} // the caller's map is copied
	assert.True(t, c.covered(t0, local, nil)["eu-2"])
}

// A cluster without alive members is covered by a peer's digest of its
// origin, once applied; a live cluster must answer for itself.
func TestCoverageOfUnreachableCluster(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := newCoverage()
	c.observe("eu-2", crdt.Digest{"eu-2": {Max: 3}, "us-1": {Max: 7}}, t0.Add(time.Second))
	local := crdt.Digest{"eu-2": {Max: 3}, "us-1": {Max: 7}}
	aliveUS := func(string) bool { return true }
	downUS := func(o string) bool { return o != "us-1" }
	assert.False(t, c.covered(t0, local, aliveUS)["us-1"], "us-1 is alive: its own member must send a digest")
	assert.True(t, c.covered(t0, local, downUS)["us-1"])
	local["us-1"] = crdt.OriginDigest{Max: 6}
	assert.False(t, c.covered(t0, local, downUS)["us-1"], "not applied yet")
}

// Under steady churn every new digest of eu-2 is a little ahead of the local
// store. Coverage is judged against the first digest received since the
// gate closed, so the gate opens once that one is applied instead of chasing
// the newest until its timeout.
func TestCoverageUnderChurnUsesFirstDigestSinceClose(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := newCoverage()
	c.observe("eu-2", crdt.Digest{"eu-2": {Max: 1}}, t0.Add(-time.Second)) // before the gate closed
	for i := 1; i <= 40; i++ {
		c.observe("eu-2", crdt.Digest{"eu-2": {Max: crdt.Version(10 + i)}}, t0.Add(time.Duration(i)*time.Second))
	}
	// Only the newest keepDigests are kept; the oldest of those since t0 is
	// the target: Max 10+40-keepDigests+1.
	target := crdt.Version(10 + 40 - keepDigests + 1)
	local := crdt.Digest{"eu-2": {Max: target - 1}}
	assert.False(t, c.covered(t0, local, nil)["eu-2"], "behind even the oldest kept digest")
	local["eu-2"] = crdt.OriginDigest{Max: target}
	assert.True(t, c.covered(t0, local, nil)["eu-2"], "caught up with a digest received since the gate closed, though newer ones are ahead")
	assert.False(t, c.covered(t0.Add(time.Hour), local, nil)["eu-2"], "nothing received since a later close")
}

// While the gate is closed, gossip is asked for exactly the clusters the
// gate waits for: never this cluster itself (its own inventory is not an
// anti-entropy matter); a digest that arrives meanwhile wakes the gate.
func TestGateWantForGossip(t *testing.T) {
	d := &Daemon{opts: Options{ClusterID: "eu-1", Registry: prometheus.NewRegistry()}}
	require.NoError(t, d.initSafety())
	require.Empty(t, d.wantDigests())
	missing := DecideGate(GateInput{Now: time.Unix(1, 0), Since: time.Unix(1, 0), Self: "eu-1",
		Known: []string{"eu-1", "eu-2", "us-1"}}).Missing
	require.Equal(t, []string{"eu-1 (own inventory)", "eu-2", "us-1"}, missing)
	d.setGateWant(missing)
	require.Equal(t, []string{"eu-2", "us-1"}, d.wantDigests())

	d.gateClosed.Store(true)
	d.observeDigest("eu-2", crdt.Digest{})
	select {
	case <-d.gateWake:
	default:
		t.Fatal("a digest received while the gate is closed must wake the gate loop")
	}
	d.gateClosed.Store(false)
	d.observeDigest("us-1", crdt.Digest{})
	require.Empty(t, d.gateWake, "an open gate is not woken")
}
