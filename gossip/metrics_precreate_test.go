package gossip

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Every refusal an alert watches reads 0 from the start, so that
// increase() sees the first one (an absent series has no increase).
func TestDropReasonsReadZeroFromTheStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := newMetrics(reg, func() float64 { return 0 })
	require.NoError(t, err)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "coastguard_gossip_dropped_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "reason" {
					seen[l.GetValue()] = true
				}
			}
		}
	}
	for _, r := range []string{crdt.ReasonKeyMismatch, crdt.ReasonBadSignature, crdt.ReasonUnsigned, crdt.ReasonUnknownKey,
		crdt.ReasonUnprovenWatermark, crdt.ReasonUnprovenReset, crdt.ReasonRetireRefused, dropDecrypt, dropCompressed} {
		require.True(t, seen[r], "reason %s is not pre-created (seen: %s)", r, strings.Join(keys(seen), ","))
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
