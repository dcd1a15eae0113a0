package daemon

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// ReasonPartialView is the Degraded reason a cluster reports on every MCNP
// while its empty-view gate is closed.
const ReasonPartialView = "PartialView"

// GateInput is everything the empty-view gate decision depends on.
type GateInput struct {
	Now time.Time
	// Since is when the gate closed (the start of the leadership term).
	Since time.Time
	// Timeout bounds how long the gate stays closed (0: no bound).
	Timeout time.Duration
	Self    string
	// Known are the clusters this daemon knows of: origins of its store,
	// Submariner Cluster objects, clusters of gossip members.
	Known []string
	// Covered are the clusters for which an anti-entropy exchange with one
	// of their members, received at or after Since, is fully applied in the
	// local store (the local digest is not behind the digest that member
	// sent, for every origin in it).
	Covered map[string]bool
	// Retired clusters (decommissioned, retirement watermark reached) are
	// not waited for.
	Retired map[string]bool
	// SelfSynced: this cluster's own inventory has been written.
	SelfSynced bool
	// Decommissioning releases the gate: the cluster removes its policies
	// on purpose.
	Decommissioning bool
}

// GateDecision is the result of DecideGate.
type GateDecision struct {
	Open bool
	// Reason: "decommission", "covered", "timeout" when open; "partial
	// view" when closed.
	Reason string
	// Missing lists the clusters not yet covered (sorted).
	Missing []string
}

func (d GateDecision) String() string {
	if d.Open {
		return "open (" + d.Reason + ")"
	}
	return fmt.Sprintf("closed: waiting for %s", strings.Join(d.Missing, ", "))
}

// DecideGate decides whether the enforcer may delete or shrink generated
// NetworkPolicies. It may once the daemon's view is complete: its own
// inventory is written and every known cluster other than itself (and not
// retired) is covered by an applied anti-entropy exchange since the gate
// closed; or when the timeout has passed; or on decommission.
func DecideGate(in GateInput) GateDecision {
	if in.Decommissioning {
		return GateDecision{Open: true, Reason: "decommission"}
	}
	var missing []string
	if !in.SelfSynced {
		missing = append(missing, in.Self+" (own inventory)")
	}
	seen := map[string]bool{}
	for _, c := range in.Known {
		if c == "" || c == in.Self || seen[c] || in.Retired[c] {
			continue
		}
		seen[c] = true
		if !in.Covered[c] {
			missing = append(missing, c)
		}
	}
	sort.Strings(missing)
	if len(missing) == 0 {
		return GateDecision{Open: true, Reason: "covered"}
	}
	if in.Timeout > 0 && !in.Now.Before(in.Since.Add(in.Timeout)) {
		return GateDecision{Open: true, Reason: "timeout", Missing: missing}
	}
	return GateDecision{Open: false, Reason: "partial view", Missing: missing}
}

// coverage records, per cluster, the last digest a member of that cluster
// sent us, to decide what anti-entropy has covered.
type coverage struct {
	mu sync.Mutex
	// recent holds, per cluster, the last digests received from its
	// members, oldest first (at most keepDigests).
	recent map[string][]receivedDigest
}

// keepDigests bounds the digests kept per cluster. Coverage is judged
// against the oldest digest received since the gate closed, not the newest:
// under steady churn the newest digest is always a little ahead of the local
// store, and a gate that chased it would stay closed until its timeout.
const keepDigests = 16

type receivedDigest struct {
	at     time.Time
	digest crdt.Digest
}

func newCoverage() *coverage { return &coverage{recent: map[string][]receivedDigest{}} }

// observe records a digest received from a member of cluster.
func (c *coverage) observe(cluster string, d crdt.Digest, at time.Time) {
	if cluster == "" {
		return
	}
	cp := make(crdt.Digest, len(d))
	for o, od := range d {
		cp[o] = od
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recent[cluster] = append(c.recent[cluster], receivedDigest{at: at, digest: cp})
	if r := c.recent[cluster]; len(r) > keepDigests {
		c.recent[cluster] = r[len(r)-keepDigests:]
	}
}

// first returns, per cluster, the oldest kept digest received at or after
// since.
func (c *coverage) first(since time.Time) map[string]receivedDigest {
	out := map[string]receivedDigest{}
	for cluster, r := range c.recent {
		for _, rd := range r {
			if !rd.at.Before(since) {
				out[cluster] = rd
				break
			}
		}
	}
	return out
}

// covered returns the clusters covered since the gate closed: a member of
// the cluster sent a digest at or after since and every origin in the first
// such digest is applied locally (local not behind it); or, for a cluster with no alive
// member (alive reports it; nil: every cluster is alive), some peer's digest since then lists the
// cluster's origin and the local store is not behind it for that origin.
func (c *coverage) covered(since time.Time, local crdt.Digest, alive func(cluster string) bool) map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]bool{}
	firsts := c.first(since)
	for _, rd := range firsts {
		for o, od := range rd.digest {
			if alive == nil || alive(o) {
				continue
			}
			ld, present := local[o]
			if !crdt.OriginBehind(ld, present, od) {
				out[o] = true
			}
		}
	}
	for cluster, rd := range firsts {
		ok := true
		for o, od := range rd.digest {
			ld, present := local[o]
			if crdt.OriginBehind(ld, present, od) {
				ok = false
				break
			}
		}
		out[cluster] = ok
	}
	return out
}
