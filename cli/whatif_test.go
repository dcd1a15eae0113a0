package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/coastguard-mcnp/coastguard/enforce"
)

// what-if shows a unified diff of the NetworkPolicies' YAML, and a
// candidate that only leaves out what the apiserver defaults (a port's
// protocol) changes nothing.
func TestWhatIfYAMLDiff(t *testing.T) {
	l := fixture(t)
	cand := l.mcnps["a"][0].DeepCopy()
	require.NotNil(t, cand.Spec.Ingress[0].Ports[0].Protocol)
	cand.Spec.Ingress[0].Ports[0].Protocol = nil // TCP by default
	wi := whatIf(l, "a", cand)
	require.Len(t, wi.Clusters, 2)
	for _, c := range wi.Clusters {
		assert.Empty(t, c.Changed, c.Cluster)
		assert.Empty(t, c.Diff, c.Cluster)
	}

	l = fixture(t)
	cand = l.mcnps["a"][0].DeepCopy()
	p := intstr.FromInt32(6000)
	cand.Spec.Ingress[0].Ports[0].Port = &p
	wi = whatIf(l, "a", cand)
	name := "shop/" + enforce.GeneratedName("a", "db", 0)
	for _, c := range wi.Clusters {
		assert.Equal(t, []string{name}, c.Changed, c.Cluster)
		t.Logf("%s:\n%s", c.Cluster, c.Diff)
		assert.True(t, strings.HasPrefix(c.Diff, "--- "+name+"\n+++ "+name+"\n@@ "), c.Diff)
		assert.Contains(t, c.Diff, "\n-    - port: 5432\n+    - port: 6000\n")
		assert.NotContains(t, c.Diff, enforce.AnnotationContentHash)
		for _, line := range strings.Split(strings.TrimSuffix(c.Diff, "\n"), "\n") {
			assert.Regexp(t, `^(--- |\+\+\+ |@@ |[-+ ])`, line, "only unified diff lines")
		}
	}

	l = fixture(t)
	cand = l.mcnps["a"][0].DeepCopy()
	cand.Name = "db2"
	wi = whatIf(l, "a", cand)
	assert.False(t, wi.Exists)
	added := "shop/" + enforce.GeneratedName("a", "db2", 0)
	for _, c := range wi.Clusters {
		assert.Equal(t, []string{added}, c.Added, c.Cluster)
		assert.True(t, strings.HasPrefix(c.Diff, "--- /dev/null\n+++ "+added+"\n@@ -0,0 +1,"), c.Diff)
		assert.Contains(t, c.Diff, "\n+kind: NetworkPolicy\n")
		assert.Contains(t, c.Diff, "\n+      protocol: TCP\n")
	}
}
