package enforce

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A headless Service whose backends an egress rule admits only in part is
// neither an address rule nor Degraded: clients reach each backend by its
// own IP, and the pod rules admit exactly the backends the rule names
// (docs/SEMANTICS.md "Headless Services"). A ClusterIP carried by a
// headless entry is ignored.
func TestServiceHeadlessPartialIsNotDegraded(t *testing.T) {
	inv := svcInv(t)
	replica := pod("shop", "db-1", l("role", "db", "tier", "replica"), "10.2.0.11")
	replica.Ports = []Port{{Name: "pg", Port: 5432}}
	inv.SetPod("eu-2", replica)
	inv.SetService("eu-2", Service{Namespace: "shop", Name: "db", Headless: true, ClusterIPs: []string{"10.97.0.20"},
		Selector: l("role", "db"), Ports: []ServicePort{{Name: "pg", Port: 5432, TargetPortName: "pg"}}})
	res := evalWeb(t, inv, "{tier: primary}", "[{port: pg}]")
	require.Equal(t, []string{"10.2.0.10/32 TCP:5432"}, addressRules(res), "only the admitted backend's pod IP")
	require.Empty(t, res.Degraded)

	// the same Service with a ClusterIP fails closed and says so
	inv.SetService("eu-2", Service{Namespace: "shop", Name: "db", ClusterIPs: []string{"10.97.0.20"},
		Selector: l("role", "db"), Ports: []ServicePort{{Name: "pg", Port: 5432, TargetPortName: "pg"}}})
	res = evalWeb(t, inv, "{tier: primary}", "[{port: pg}]")
	require.Equal(t, ReasonServicePartiallyAdmitted, res.Degraded)

	// every backend admitted: still no address rule for the headless one
	inv.SetService("eu-2", Service{Namespace: "shop", Name: "db", Headless: true, ClusterIPs: []string{"10.97.0.20"},
		Selector: l("role", "db"), Ports: []ServicePort{{Name: "pg", Port: 5432, TargetPortName: "pg"}}})
	res = evalWeb(t, inv, "{role: db}", "[{port: pg}]")
	require.Equal(t, []string{"10.2.0.10/32 TCP:5432", "10.2.0.11/32 TCP:5432"}, addressRules(res))
	require.Empty(t, res.Degraded)
}
