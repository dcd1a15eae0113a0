package daemon

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// --fault-clock-offset: the wall clock the daemon shares (entry stamps,
// LastSeen, lost-origin records) is the host's shifted by the offset.
func TestNowAppliesClockOffset(t *testing.T) {
	for _, off := range []time.Duration{0, 90 * time.Minute, -45 * time.Second} {
		d := &Daemon{opts: Options{ClockOffset: off}}
		got := time.Until(d.now())
		require.InDelta(t, float64(off), float64(got), float64(time.Second), "offset %s", off)
	}
}
