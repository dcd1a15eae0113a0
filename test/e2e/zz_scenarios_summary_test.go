//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// TestScenarioZSummary runs last (go test runs tests in file order, and this
// file, zz_*, sorts after every other test file of the package): it prints
// the run's summary line, which `make e2e` greps ("e2e summary"), and names
// the failed scenarios. Scenarios filtered out by -run count as neither.
func TestScenarioZSummary(t *testing.T) {
	stats.mu.Lock()
	defer stats.mu.Unlock()
	line := fmt.Sprintf("e2e summary: clusters=%d scenarios_passed=%d scenarios_failed=%d propagation_samples=%d propagation_p50_ms=%s p99_ms=%s",
		stats.clusters, stats.passed, len(stats.failed), len(stats.latencies),
		ms(percentile(stats.latencies, 50)), ms(percentile(stats.latencies, 99)))
	// stdout, not t.Log: the line must be greppable without -v too
	fmt.Println(line)
	if len(stats.failed) > 0 {
		t.Logf("failed scenarios: %s", strings.Join(stats.failed, ", "))
	}
}
