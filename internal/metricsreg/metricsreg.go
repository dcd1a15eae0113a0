// Package metricsreg is the project's one policy for registering
// Prometheus collectors, used by every package that exports metrics:
//
//   - a nil Registerer registers nothing (tests and the simulator run
//     without metrics);
//   - a component that is legitimately created more than once per registry
//     (a store reopened in the same process, several gossip nodes of a
//     test sharing one registry) uses Register, which reuses the collector
//     already registered under the same descriptors, so the exported series
//     keeps counting instead of a private, invisible copy;
//   - every other component uses All, which refuses a second registration;
//   - any error is returned, never ignored and never a panic: a name clash
//     is a programming error the caller surfaces (coastguardd exits with it).
package metricsreg

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c with reg under the policy above and returns the
// collector to use: c itself, or the one already registered.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("register metric: %w", err)
}

// Into is Register for a collector held in a variable or field: *c is
// registered, and replaced by the collector already registered if there
// is one.
func Into[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	got, err := Register(reg, *c)
	*c = got
	return err
}

// All registers every collector of cs in order and returns the first
// error, a collector already registered included (unless it is the very
// same collector): for components created once per registry.
func All(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		err := reg.Register(c)
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) && are.ExistingCollector == c {
			continue
		}
		if err != nil {
			return fmt.Errorf("register metric: %w", err)
		}
	}
	return nil
}
