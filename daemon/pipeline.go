package daemon

import (
	"runtime"

	"github.com/coastguard-mcnp/coastguard/model"
)

// Overlap is the daemon's model.Pipeline for a cold start: with two Ps or
// more, pod batches are decoded on a second goroutine while the caller's
// applies the previous ones (docs/PERFORMANCE.md, cold start); with one,
// it is model.Sequential. Three buffers circulate: one being decoded, one
// being applied, one ready.
func Overlap(n int, decode func(i, buf int), apply func(buf int)) {
	if runtime.GOMAXPROCS(0) < 2 {
		model.Sequential(n, decode, apply)
		return
	}
	free, ready := make(chan int, model.PipelineBuffers), make(chan int, model.PipelineBuffers)
	for b := range model.PipelineBuffers {
		free <- b
	}
	go func() {
		defer close(ready)
		for i := range n {
			b := <-free
			decode(i, b)
			ready <- b
		}
	}()
	for b := range ready {
		apply(b)
		free <- b
	}
}

// newMirror is model.NewMirror with the daemon's load pipeline.
func newMirror(self string) *model.Mirror {
	m := model.NewMirror(self)
	m.SetPipeline(Overlap)
	return m
}
