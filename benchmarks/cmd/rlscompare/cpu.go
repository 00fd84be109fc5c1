package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat: USER_HZ, 100 a
// second on Linux whatever the kernel's own tick.
const userHZ = 100

// The processes whose CPU time a load run samples, as indexes of
// cpuSample.cpu.
const (
	procService = iota
	procRedis
	procGhz
	procCount
)

// cpuSampleInterval is the pause between two samples of the CPU times
// during a load run.
const cpuSampleInterval = 50 * time.Millisecond

// Edges of the window a load run's CPU per decision is measured over: it
// starts this long after ghz's first answer (connections, warm-up) and
// ends this long before its last (the calls in flight when ghz stops).
const (
	cpuWindowLead = 250 * time.Millisecond
	cpuWindowTail = 100 * time.Millisecond
)

// procCPU returns the CPU time, user and system, that a process has used
// (all its threads), from /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStat(string(b))
}

// parseStat reads utime and stime, fields 14 and 15, of a /proc/PID/stat
// line. The command name, field 2, is in parentheses and may hold spaces
// and parentheses, so the fields are counted from the last ')'.
func parseStat(line string) (time.Duration, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, errors.New("/proc stat: no command name")
	}
	f := strings.Fields(line[i+1:])
	// f[0] is field 3 (state): utime is f[11], stime f[12].
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command name, want 13 or more", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("/proc stat: CPU time %q", s)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// cpuSample is the CPU time of each watched process at one instant.
type cpuSample struct {
	at  time.Time
	cpu [procCount]time.Duration
}

// sampleCPU samples the CPU times of the processes every interval until
// stop is closed, and returns the samples. A pid of 0 is no process: its
// CPU time reads 0. A sample that fails to read one of them (the process
// has ended) is left out.
func sampleCPU(pids [procCount]int, interval time.Duration, stop <-chan struct{}) []cpuSample {
	var out []cpuSample
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s := cpuSample{at: time.Now()}
		ok := true
		for i, pid := range pids {
			if pid == 0 {
				continue
			}
			d, err := procCPU(pid)
			if err != nil {
				ok = false
				break
			}
			s.cpu[i] = d
		}
		if ok {
			out = append(out, s)
		}
		select {
		case <-stop:
			return out
		case <-t.C:
		}
	}
}

// cpuPerDecision returns the CPU time each process used per decision, in
// µs, over the window of steady load: from the first sample cpuWindowLead
// after the first answer to the last sample cpuWindowTail before the last
// one, divided by the calls answered (OK) within it. ends holds the end
// of every answered call. ok is false when the window holds fewer than
// two samples or no call.
func cpuPerDecision(samples []cpuSample, ends []time.Time) (us [procCount]float64, calls int, window time.Duration, ok bool) {
	if len(ends) == 0 || len(samples) < 2 {
		return us, 0, 0, false
	}
	first, last := ends[0], ends[0]
	for _, e := range ends {
		first, last = minTime(first, e), maxTime(last, e)
	}
	a, b := -1, -1
	for i, s := range samples {
		if a < 0 && !s.at.Before(first.Add(cpuWindowLead)) {
			a = i
		}
		if !s.at.After(last.Add(-cpuWindowTail)) {
			b = i
		}
	}
	if a < 0 || b <= a {
		return us, 0, 0, false
	}
	from, to := samples[a].at, samples[b].at
	for _, e := range ends {
		if e.After(from) && !e.After(to) {
			calls++
		}
	}
	if calls == 0 {
		return us, 0, 0, false
	}
	for i := range us {
		d := samples[b].cpu[i] - samples[a].cpu[i]
		us[i] = float64(d) / float64(time.Microsecond) / float64(calls)
	}
	return us, calls, to.Sub(from), true
}
