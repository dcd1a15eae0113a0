package crdt

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAffectedScopes(t *testing.T) {
	ch := []Change{
		{Key: Key{"b", KindPod, "ns2/p"}},
		{Key: Key{"a", KindPod, "ns1/p"}},
		{Key: Key{"a", KindPod, "ns1/q"}},
		{Key: Key{"a", KindNamespace, "ns3"}},
		{Key: Key{"a", KindCluster, ""}},
		{Key: Key{"b", KindPolicy, "ns/pol"}},
		{Key: Key{"b", KindPolicy, "ns/pol"}},
		{Key: Key{"c", KindReport, "b/ns/pol"}},
	}
	ns, pol, cl := AffectedScopes(ch)
	assert.Equal(t, []ScopeKey{{"a", "ns1"}, {"a", "ns3"}, {"b", "ns2"}}, ns)
	assert.Equal(t, []Key{{"b", KindPolicy, "ns/pol"}}, pol)
	assert.Equal(t, []string{"a"}, cl)
	assert.Equal(t, []Key{{"b", KindPolicy, "ns/pol"}}, ReportedPolicies(ch))
	ns, pol, cl = AffectedScopes(nil)
	assert.Empty(t, ns)
	assert.Empty(t, pol)
	assert.Empty(t, cl)
}
