package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Machine describes where the figures were taken.
type Machine struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model,omitempty"`
	MemoryMiB uint64 `json:"memory_mib"`
	LoadAvg   string `json:"loadavg,omitempty"`
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	Go        string `json:"go"`
	Shared    string `json:"shared"`
}

func (m Machine) String() string {
	s := fmt.Sprintf("%d CPUs", m.CPUs)
	if m.CPUModel != "" {
		s += " (" + m.CPUModel + ")"
	}
	s += fmt.Sprintf(", %d MiB RAM, %s/%s, %s", m.MemoryMiB, m.GOOS, m.GOARCH, m.Go)
	if m.LoadAvg != "" {
		s += ", load average at start " + m.LoadAvg
	}
	return s
}

func describeMachine() Machine {
	m := Machine{
		CPUs:   runtime.NumCPU(),
		GOOS:   runtime.GOOS,
		GOARCH: runtime.GOARCH,
		Go:     runtime.Version(),
		Shared: "shared 2-core machine: other jobs run concurrently; absolute times are noisy",
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		_ = f.Close() // read-only: nothing to lose
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "MemTotal:") {
				f := strings.Fields(line)
				if len(f) >= 2 {
					kb, _ := strconv.ParseUint(f[1], 10, 64)
					m.MemoryMiB = kb / 1024
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}
