package main

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
)

// The daemon's log lines follow the Kubernetes structured-logging
// conventions (one JSON object per line, "msg" a constant sentence, values
// in key/value pairs):
//   - keys are lowerCamelCase: call sites may write snake_case
//     ("remote_cluster"), the handler writes "remoteCluster";
//   - a duration is a string with its unit ("1.5s"), not nanoseconds;
//   - a key appears once per line: a key repeated by a call site after a
//     logger's With (say "cluster") is written as "cluster2", never twice.
//
// Metric labels are not log keys and keep Prometheus' snake_case.

// newLoggerTo is the daemon's logger writing JSON lines to w at level.
func newLoggerTo(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(&conventionHandler{inner: slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})})
}

// conventionHandler applies the conventions above before its inner
// handler (which never sees With attributes: they are merged per record).
type conventionHandler struct {
	inner slog.Handler
	attrs []slog.Attr // from With, in order
	group bool        // a WithGroup was applied: attrs then belong to the group
}

func (h *conventionHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *conventionHandler) WithAttrs(as []slog.Attr) slog.Handler {
	if h.group {
		return &conventionHandler{inner: h.inner.WithAttrs(convertAll(as)), group: true}
	}
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

func (h *conventionHandler) WithGroup(name string) slog.Handler {
	inner := h.inner.WithAttrs(uniqueAttrs(h.attrs)).WithGroup(camelKey(name))
	return &conventionHandler{inner: inner, group: true}
}

func (h *conventionHandler) Handle(ctx context.Context, r slog.Record) error {
	all := make([]slog.Attr, 0, len(h.attrs)+r.NumAttrs())
	all = append(all, h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		all = append(all, a)
		return true
	})
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	if h.group {
		out.AddAttrs(convertAll(all)...)
	} else {
		out.AddAttrs(uniqueAttrs(all)...)
	}
	return h.inner.Handle(ctx, out)
}

// uniqueAttrs converts attrs and renames a repeated key k to k2, k3, ...
func uniqueAttrs(as []slog.Attr) []slog.Attr {
	conv := convertAll(as)
	// the keys the JSON handler writes itself (no AddSource: "source" is free)
	seen := map[string]int{slog.TimeKey: 1, slog.LevelKey: 1, slog.MessageKey: 1}
	for i := range conv {
		k := conv[i].Key
		seen[k]++
		if n := seen[k]; n > 1 {
			conv[i].Key = k + strconv.Itoa(n)
		}
	}
	return conv
}

func convertAll(as []slog.Attr) []slog.Attr {
	out := make([]slog.Attr, 0, len(as))
	for _, a := range as {
		if a.Equal(slog.Attr{}) {
			continue
		}
		out = append(out, convertAttr(a))
	}
	return out
}

func convertAttr(a slog.Attr) slog.Attr {
	a.Key = camelKey(a.Key)
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindDuration:
		a.Value = slog.StringValue(v.Duration().String())
	case slog.KindGroup:
		a.Value = slog.GroupValue(convertAll(v.Group())...)
	default:
		a.Value = v
	}
	return a
}

// camelKey turns snake_case or kebab-case into lowerCamelCase; a key
// without separators is kept as written ("leaseTransitions").
func camelKey(k string) string {
	if !strings.ContainsAny(k, "_-") {
		return k
	}
	var b strings.Builder
	up := false
	for i, r := range k {
		switch {
		case r == '_' || r == '-':
			up = i > 0
		case up:
			b.WriteString(strings.ToUpper(string(r)))
			up = false
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
