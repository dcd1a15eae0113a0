package enforce

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The names of issue 13: an MCNP whose name looks like another MCNP's part
// suffix, and cluster IDs and names that share a dotted join, all stay
// distinct and DNS-safe.
func TestGeneratedNameCollisionFree(t *testing.T) {
	long := strings.Repeat("x", 250)
	type id struct {
		origin, name string
		part         int
	}
	ids := []id{
		{"eu-1", "big", 0}, {"eu-1", "big", 1}, {"eu-1", "big-p2", 0},
		{"eu-1", "big.p2-3675f42a7e", 0}, {"eu-1", "big-p2-" + nameHash("eu-1", "big", 1), 0},
		{"eu", "1.big", 0}, {"eu.1", "big", 0}, {"a-b", "c", 0}, {"a", "b-c", 0},
		{"eu-1", long, 0}, {"eu-1", long + "c", 0}, {"eu-1", long, 1}, {"eu-2", long, 0},
	}
	seen := map[string]id{}
	for _, x := range ids {
		n := GeneratedName(x.origin, x.name, x.part)
		require.Empty(t, validation.IsDNS1123Subdomain(n), n)
		require.LessOrEqual(t, len(n), 253)
		prev, dup := seen[n]
		require.False(t, dup, "%v and %v share %s", prev, x, n)
		seen[n] = x
		require.Equal(t, n, GeneratedName(x.origin, x.name, x.part), "deterministic")
	}
	require.True(t, strings.HasPrefix(GeneratedName("eu-2", "payments", 0), "mcnp-eu-2.payments-"))
	require.True(t, strings.HasPrefix(GeneratedName("eu-2", "payments", 2), "mcnp-eu-2.payments-p3-"))
}
