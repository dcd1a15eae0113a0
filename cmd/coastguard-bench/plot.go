package main

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// writePlots renders bench/propagation.svg (CDF of the end-to-end
// propagation latency) and bench/sim.svg (simulated p99 versus mesh size,
// ours and naive per timing profile), each only when its data was measured.
func writePlots(dir string, rec *recorder) error {
	var errs []error
	if len(rec.e2eLatencies) > 0 {
		for _, ext := range []string{"svg", "png"} {
			errs = append(errs, plotCDF(filepath.Join(dir, "propagation."+ext), rec))
		}
	}
	if len(rec.simPoints) > 0 {
		for _, ext := range []string{"svg", "png"} {
			errs = append(errs, plotSim(filepath.Join(dir, "sim."+ext), rec))
		}
	}
	return errors.Join(errs...)
}

func plotCDF(path string, rec *recorder) error {
	s := sortDurations(rec.e2eLatencies)
	pts := make(plotter.XYs, len(s))
	for i, d := range s {
		pts[i].X = ms(d)
		pts[i].Y = float64(i+1) / float64(len(s))
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("End-to-end propagation, real apiservers (n=%d)", len(s))
	p.X.Label.Text = "pod status written in A -> IP in B's NetworkPolicy (ms)"
	p.Y.Label.Text = "fraction of changes"
	p.Y.Min, p.Y.Max = 0, 1
	p.X.Min = 0
	p.Add(plotter.NewGrid())
	line, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	line.Color = plotutil.Color(0)
	line.Width = vg.Points(1.5)
	p.Add(line)
	p.Legend.Add("coastguard", line)
	for _, t := range []struct {
		x     float64
		label string
	}{{150, "p50 target 150 ms"}, {500, "p99 target 500 ms"}} {
		v, err := plotter.NewLine(plotter.XYs{{X: t.x, Y: 0}, {X: t.x, Y: 1}})
		if err != nil {
			return err
		}
		v.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		v.Color = plotutil.Color(2)
		p.Add(v)
	}
	p.Legend.Top = false
	p.Legend.Left = false
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

func plotSim(path string, rec *recorder) error {
	p := plot.New()
	p.Title.Text = "Simulated propagation p99 vs mesh size (in-process, loopback)"
	p.X.Label.Text = "members N"
	p.Y.Label.Text = "p99 latency to the last member (ms)"
	p.Add(plotter.NewGrid())
	series := map[string]plotter.XYs{}
	for _, sp := range rec.simPoints {
		if math.IsInf(sp.P99ms, 0) || math.IsNaN(sp.P99ms) {
			continue
		}
		k := sp.Mode + " " + sp.Profile
		series[k] = append(series[k], plotter.XY{X: float64(sp.N), Y: sp.P99ms})
	}
	keys := make([]string, 0, len(series))
	for k := range series {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		pts := series[k]
		sort.Slice(pts, func(a, b int) bool { return pts[a].X < pts[b].X })
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		s.Color = plotutil.Color(i)
		s.Shape = plotutil.Shape(i)
		p.Add(l, s)
		p.Legend.Add(k, l, s)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Y.Min = 0
	p.X.Min = 0
	p.X.Max *= 1.05
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
