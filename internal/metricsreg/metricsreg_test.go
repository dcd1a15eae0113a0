package metricsreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func counter() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "coastguard_test_total", Help: "test"})
}

func TestRegisterReusesTheExportedCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := Register(reg, counter())
	require.NoError(t, err)
	b, err := Register(reg, counter())
	require.NoError(t, err)
	b.Inc()
	require.Equal(t, 1.0, testutil.ToFloat64(a), "the second component must count into the exported series")
}

func TestRegisterReportsAClash(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := Register(reg, counter())
	require.NoError(t, err)
	clash := prometheus.NewGauge(prometheus.GaugeOpts{Name: "coastguard_test_total", Help: "other help"})
	_, err = Register(reg, clash)
	require.Error(t, err)
}

func TestAllRefusesASecondRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := counter()
	require.NoError(t, All(reg, c))
	require.NoError(t, All(reg, c), "the same collector twice is idempotent")
	require.Error(t, All(reg, counter()), "a second component on one registry is a wiring error")
}

func TestNilRegistryRegistersNothing(t *testing.T) {
	c, err := Register(nil, counter())
	require.NoError(t, err)
	c.Inc()
	require.NoError(t, All(nil, counter()))
}

func TestIntoReplacesWithTheExportedCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := counter()
	require.NoError(t, Into(reg, &a))
	b := counter()
	require.NoError(t, Into(reg, &b))
	b.Inc()
	require.Equal(t, 1.0, testutil.ToFloat64(a), "b must now be the exported collector")
}
