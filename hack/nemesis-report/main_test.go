package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReportTablesAndPlot(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	a := write("a.json", `{"seed":2,"duration":"10m0s","faults":{"partition":2,"kill -9":1},"settles":[{"fault":"partition","settled_s":1.5},{"fault":"partition","settled_s":0.5},{"fault":"kill -9","settled_s":4}]}`)
	b := write("b.json", `{"seed":1,"duration":"10m0s","faults":{"partition":1},"settles":[{"fault":"partition","settled_s":2.5}]}`)
	runs, err := load([]string{a, b})
	require.NoError(t, err)
	require.Equal(t, uint64(1), runs[0].Seed, "sorted by seed")
	var out bytes.Buffer
	by := group(runs)
	require.NoError(t, writeTables(&out, runs, by))
	s := out.String()
	require.Contains(t, s, "| 1 | 10m0s | partition 1 | 1 | 2.50 / 2.50 / 2.50 |")
	require.Contains(t, s, "| 2 | 10m0s | kill -9 1, partition 2 | 3 | 1.50 / 4.00 / 4.00 |")
	require.Contains(t, s, "| partition | 3 | 1.50 | 2.50 | 2.50 |")
	require.Contains(t, s, "| kill -9 | 1 | 4.00 | 4.00 | 4.00 |")
	svg := plot(by)
	require.Equal(t, 4, strings.Count(svg, "<circle"), "one dot per heal")
	require.Contains(t, svg, "partition (3)")
	_, err = load([]string{write("bad.json", "{")})
	require.ErrorContains(t, err, "bad.json")
}
